"""`explore`: sliders re-render the kernel view."""
from __future__ import annotations

import pytest

pytest.importorskip("ipywidgets")


def test_explore_rerenders_on_change():
    from kernels.notebook_fakes import FakeGemm

    from tile_nb.notebook.widgets import explore

    ex = explore(FakeGemm(), M=[64, 128], N=[64], K=32, block_M=[32, 64])
    assert set(ex.controls) == {"M", "N", "block_M"}
    assert ex.view.consts == {"M": 64, "K": 32, "N": 64}
    ex.controls["M"].value = 128
    assert ex.view.consts["M"] == 128
    # the view lives in the Output widget's state (one display), not in messages only a browser would keep
    (shown,) = ex.output.outputs
    assert shown["output_type"] == "display_data" and "KernelView" in shown["data"]["text/plain"]
    ex.controls["block_M"].value = 64
    assert any(p.name == "block_M" and p.annotation == "= 64" for p in ex.view.params)
    assert repr(ex) == "Explorer(gemm: M, N, block_M)"
    assert "application/vnd.jupyter.widget-view+json" in ex._repr_mimebundle_()


def test_explore_shows_errors_in_place():
    from kernels.notebook_fakes import FakeGemm

    from tile_nb.notebook.widgets import explore

    ex = explore(FakeGemm(), M=[64], N=[64])  # no K: the fake cannot specialize
    assert ex.view is None and ex.error == "KeyError: 'K'"
    assert ex.output.outputs == ({"output_type": "stream", "name": "stdout", "text": "KeyError: 'K'\n"},)


def test_explore_needs_values():
    from kernels.notebook_fakes import FakeGemm

    from tile_nb.notebook.widgets import explore

    with pytest.raises(ValueError, match="no values"):
        explore(FakeGemm(), M=[])
