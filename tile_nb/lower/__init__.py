"""tile_nb.lower"""
