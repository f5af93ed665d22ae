"""tile_nb.language"""
