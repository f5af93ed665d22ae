"""What the lowering decides: functions from a phase-2 PrimFunc, its LoweringOptions and earlier results to
typed results, ending in the frozen KernelPlan (plan.py). Imports nothing of emit/;
tile_nb/lower/__init__.py draws the map."""
