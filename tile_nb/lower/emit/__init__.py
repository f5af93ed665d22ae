"""What the plan becomes: the emitter (emitter.py) and its rules, listed in rules.py in the order they run,
over the intrinsics they emit (intrin.py, mbarrier.py). tile_nb/lower/__init__.py draws the map."""
