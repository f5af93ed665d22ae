"""tile_nb.interp"""
