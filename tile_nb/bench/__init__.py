"""tile_nb.bench"""
