"""Line alignment of the phase-1 template and the phase-2 specialized IR.

Specialization replaces symbolic consts by integers, so most lines of the two TVMScript texts correspond
one to one and a few change (shapes, loop extents, grid sizes) or disappear (the `M = T.int32()`
declarations). `align` pairs them for the side-by-side table; `changed_lines` lists the specialized
lines that differ from the template.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass

__all__ = ["Row", "align", "changed_lines"]


@dataclass(frozen=True)
class Row:
    """One row of the side-by-side table. Line numbers are 1-based; None where that side has no line."""

    left_no: int | None
    right_no: int | None
    tag: str  # "equal", "replace", "delete" (left only) or "insert" (right only)


def align(left: list[str], right: list[str]) -> list[Row]:
    """Pair the lines of `left` (template) and `right` (specialized) into table rows.

    Within a replaced block, similar lines share a row; the others get rows of their own.

    >>> [r.tag for r in align(["a", "b", "c"], ["a", "B", "c"])]
    ['equal', 'replace', 'equal']
    """
    rows: list[Row] = []
    matcher = difflib.SequenceMatcher(None, left, right, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            rows += [Row(i1 + k + 1, j1 + k + 1, "equal") for k in range(i2 - i1)]
            continue
        for left_no, right_no in _pair_block(left, right, range(i1, i2), range(j1, j2)):
            if left_no is not None and right_no is not None:
                rows.append(Row(left_no + 1, right_no + 1, "replace"))
            elif left_no is not None:
                rows.append(Row(left_no + 1, None, "delete"))
            else:
                rows.append(Row(None, right_no + 1, "insert"))
    return rows


_SIMILAR = 0.5  # lines at least this similar (difflib ratio) are shown as one changed line
_MAX_CELLS = 40_000  # beyond this block size, pair top to bottom instead of searching


def _pair_block(left, right, lrange: range, rrange: range):
    """Pair the lines of a replaced block so that similar lines share a row, keeping both orders.

    A small dynamic program maximizes the summed similarity of the pairs (only pairs at least `_SIMILAR` alike
    count); unpaired lines get rows of their own, placed where they fall. Yields (left index, right index),
    either of which may be None.
    """
    n, m = len(lrange), len(rrange)
    if n * m > _MAX_CELLS:
        for k in range(max(n, m)):
            yield (lrange[k] if k < n else None), (rrange[k] if k < m else None)
        return
    score = [[0.0] * (m + 1) for _ in range(n + 1)]
    for a in range(n - 1, -1, -1):
        for b in range(m - 1, -1, -1):
            ratio = difflib.SequenceMatcher(None, left[lrange[a]], right[rrange[b]], autojunk=False).ratio()
            paired = score[a + 1][b + 1] + ratio if ratio >= _SIMILAR else -1.0
            score[a][b] = max(paired, score[a + 1][b], score[a][b + 1])
    a = b = 0
    while a < n or b < m:
        if a < n and b < m:
            ratio = difflib.SequenceMatcher(None, left[lrange[a]], right[rrange[b]], autojunk=False).ratio()
            if ratio >= _SIMILAR and score[a][b] == score[a + 1][b + 1] + ratio:
                yield lrange[a], rrange[b]
                a, b = a + 1, b + 1
                continue
            if score[a][b] == score[a + 1][b]:
                yield lrange[a], None
                a += 1
                continue
            yield None, rrange[b]
            b += 1
        elif a < n:
            yield lrange[a], None
            a += 1
        else:
            yield None, rrange[b]
            b += 1


def changed_lines(left: list[str], right: list[str]) -> list[int]:
    """1-based numbers of the lines of `right` that are not unchanged lines of `left`.

    >>> changed_lines(["a", "M = T.int32()", "x[M]"], ["a", "x[64]"])
    [2]
    """
    return [row.right_no for row in align(left, right) if row.right_no is not None and row.tag != "equal"]
