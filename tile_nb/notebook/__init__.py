"""tile_nb.notebook"""
