"""tile_nb kernels in PyTorch programs: custom ops, fake implementations, torch.compile, autograd pairing.

```python
import tile_nb.torch

y = scaled_mul(x, w)                        # a @tile_nb.jit kernel works inside torch.compile(fullgraph=True)
op = tile_nb.torch.op(scaled_mul)           # the kernel as torch.ops.tile_nb.* (fake impl, FakeTensorMode,
                                            # make_fx)
f = tile_nb.torch.autograd(scaled_mul, backward=scaled_mul_bwd, save=("X", "W"))   # differentiable
```
See docs/torch.md. Importing this package imports nothing from torch; the ops register on first use.
"""
from .autograd import Differentiable, NoBackwardError, autograd
from .dynamo import install_dynamo_hook
from .ops import KernelOp, OpEntry, TorchOpError, op

__all__ = ["op", "autograd", "KernelOp", "OpEntry", "Differentiable", "TorchOpError", "NoBackwardError",
           "install_dynamo_hook"]
