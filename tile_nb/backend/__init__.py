"""tile_nb.backend"""
