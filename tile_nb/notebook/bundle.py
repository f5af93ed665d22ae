"""Mime bundles of the notebook's display objects: the `include` / `exclude` selection IPython asks for, and
`LiveBundle`, the display of a widget that keeps static forms of its current state under a display id (so that
renderers without the widget's state show the choice last made, and each change updates them)."""
from __future__ import annotations

import uuid

__all__ = ["LiveBundle", "select"]


def select(bundle: dict, include=None, exclude=None) -> dict:
    """The mime types of `bundle` that IPython's `_repr_mimebundle_(include, exclude)` asks for."""
    if include:
        bundle = {k: v for k, v in bundle.items() if k in include}
    if exclude:
        bundle = {k: v for k, v in bundle.items() if k not in exclude}
    return bundle


class LiveBundle:
    """Mixin: a subclass defines `bundle()` (its widget view and static forms) and calls
    `_init_display(prefix)`; it is shown under a display id, and `_refresh()` after a change updates what was
    shown."""

    def _init_display(self, prefix: str) -> None:
        self.display_id = f"{prefix}-{uuid.uuid4().hex}"
        self.displayed = False

    def bundle(self) -> dict:
        raise NotImplementedError

    def _refresh(self) -> None:
        if self.displayed:
            from IPython.display import update_display

            update_display(self.bundle(), raw=True, display_id=self.display_id)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return select(self.bundle(), include, exclude)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.bundle(), raw=True, display_id=self.display_id)
        self.displayed = True
