"""The generated CUDA of a fixed corpus of kernels (tests/kernels/corpus.py) is byte-identical to what is
stored in tests/golden/cuda_sha256.json: a refactoring of the front end or the lowering must not change a
kernel by accident. A deliberate change is accepted with `python tests/kernels/corpus.py --write-hashes` after
reviewing the diff of `--dump` at the two commits."""
from __future__ import annotations

import json

import pytest

from tile_nb.backend import toolchain

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build the corpus"),
]

corpus = pytest.importorskip("kernels.corpus")
STORED = json.loads(corpus.HASHES.read_text())


def test_the_stored_hashes_cover_the_corpus():
    assert sorted(STORED) == sorted(corpus.CORPUS)


@pytest.mark.parametrize("name", sorted(corpus.CORPUS))
def test_generated_cuda_is_unchanged(name):
    assert corpus.sha256(corpus.cuda_source(name)) == STORED[name], (
        f"the CUDA of corpus kernel {name} changed; see the diff with "
        f"`python tests/kernels/corpus.py --dump DIR` here and at the previous commit")
