"""`tilelang.carver.roller.rasterization` on tile_nb: the block-order plans a hint names. tile_nb's lowering
chooses its own block order (its persistent and stream-K schedules; `T.use_swizzle` is recorded, not
applied), so tile_nb's hints always carry `NoRasterization()`; the other plans exist to be named."""
from __future__ import annotations

__all__ = ["Rasterization", "NoRasterization", "Rasterization2DRow", "Rasterization2DColumn"]


class Rasterization:
    """A block order: `panel_width` blocks per panel (None for none)."""

    panel_width: int | None = None

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and self.panel_width == other.panel_width

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.panel_width))


class NoRasterization(Rasterization):
    def __repr__(self) -> str:
        return "<NoRasterization>"


class Rasterization2DRow(Rasterization):
    """Blocks walked row by row in panels `panel_width` rows high (for L2 reuse)."""

    def __init__(self, panel_width: int = 4):
        self.panel_width = int(panel_width)

    def __repr__(self) -> str:
        return f"<Rasterization2DRow({self.panel_width})>"


class Rasterization2DColumn(Rasterization):
    """Blocks walked column by column in panels `panel_width` columns wide."""

    def __init__(self, panel_width: int = 4):
        self.panel_width = int(panel_width)

    def __repr__(self) -> str:
        return f"<Rasterization2DColumn({self.panel_width})>"
