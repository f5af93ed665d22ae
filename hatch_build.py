"""Hatch build hook of the tile_nb package: the prebuilt JupyterLab extension inside the wheel.

JupyterLab 4 finds prebuilt extensions under `<prefix>/share/jupyter/labextensions/<name>/`, so the wheel carries
`extension/tile_nb_labextension/labextension/` there as shared data (`tile_nb.data/data/share/...`), with an
install.json that names tile_nb as the package to uninstall. `pip install tile_nb[lab]` then needs no node.

- Wheel and sdist ("standard" builds): `extension/labextension_build.py` builds the extension with npm when its
  sources changed (node >= 20.19 and npm needed then), else keeps the prebuilt one; the sdist carries the build and
  its source hash, so a wheel built from the sdist runs no npm.
- Editable installs (`pip install -e .`, what scripts/install.sh does): nothing is built or shipped; the
  development flow installs the extension on its own (scripts/install_extension.sh), and `pip install -e .` must
  keep working without node (scripts/test_pythons.sh runs it in fresh virtual environments).
Written as a hook of its own rather than with hatch-jupyter-builder, whose npm step runs `npm install` (which may
rewrite package-lock.json), decides staleness by file times, and runs for editable builds too (docs/packaging.md).
"""

from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

LABEXTENSION = "share/jupyter/labextensions/tile-nb-labextension"


def _builder(root: Path):
    spec = spec_from_file_location("labextension_build", root / "extension" / "labextension_build.py")
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TileNbBuildHook(BuildHookInterface):
    def initialize(self, version, build_data):
        if version != "standard":
            return
        root = Path(self.root)
        builder = _builder(root)
        builder.ensure_built(root / "extension", log=self.app.display_info)
        if self.target_name == "wheel":
            build_data["shared_data"].update({
                f"extension/{builder.OUTPUT}": LABEXTENSION,
                "extension/install-tile_nb.json": f"{LABEXTENSION}/install.json",
            })
