"""The front end: source capture, AST rewrite, parameter classes, and the two elaboration phases."""
from .elaborate import BufferParam, Elaboration, ScalarParam, Stop, elaborate
from .kernel import KernelDefinition
from .params import KernelSignature, Param
from .source import get_source, register_source, run_source

__all__ = [
    "KernelDefinition",
    "KernelSignature",
    "Param",
    "Elaboration",
    "BufferParam",
    "ScalarParam",
    "Stop",
    "elaborate",
    "get_source",
    "register_source",
    "run_source",
]
