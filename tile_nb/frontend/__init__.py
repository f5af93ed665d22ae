"""tile_nb.frontend"""
