"""Differential tests of tile_nb: kernels generated from a grammar of the tile language, run on the CPU
interpreter against a torch model, compiled for sm_90a and sm_80 (ptxas), and (on a GPU) compared with the
interpreter. README.md says what is compared and within which tolerance; FINDINGS.md lists what it found."""
from .case import Case
from .choose import Chooser, HypothesisChooser, RandomChooser
from .families import FAMILIES, render

__all__ = ["Case", "Chooser", "HypothesisChooser", "RandomChooser", "FAMILIES", "render"]
