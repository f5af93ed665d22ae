"""tile_nb.runtime"""
