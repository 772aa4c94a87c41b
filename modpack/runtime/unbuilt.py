"""The message for a ``modpack`` whose C extensions (``modpack._rt``, the runtime;
``modpack.runtime._calls``, the call path) are not built, raised by ``modpack.runtime``'s
import before anything else needs them."""

from __future__ import annotations

import importlib.machinery
import sys
from pathlib import Path

__all__ = ["unbuilt_message"]


def unbuilt_message() -> str:
    """Why ``modpack._rt`` is missing, and the fix: most often a source checkout's ``modpack``
    folder found before the installed package (Python run from the repository's root puts
    that folder first on ``sys.path``), which then shadows it; else a checkout never built."""
    here = Path(__file__).resolve().parents[1]  # the modpack folder imported
    installed = None
    for finder in sys.meta_path:  # where `import modpack` would go without this folder
        try:
            if finder is importlib.machinery.PathFinder:
                spec = finder.find_spec("modpack", [
                    p for p in sys.path if Path(p or ".").resolve() != here.parent])
            else:
                spec = finder.find_spec("modpack", None)
        except Exception:  # a third-party finder's failure: no answer
            continue
        origin = Path(spec.origin).parent if spec is not None and spec.origin else None
        if origin is not None and origin.resolve() != here and any(origin.glob("_rt*")):
            installed = origin
            break
    if installed is None:
        return (f"modpack's C runtime (modpack._rt) is not built in {here}: install the "
                f"package with `pip install -e .` (or `pip install .`) from {here.parent}")
    first = "the current folder" if here.parent == Path.cwd().resolve() else str(here.parent)
    return (f"modpack was imported from {here}, a source folder whose C runtime "
            f"(modpack._rt) is not built; it shadows the modpack installed in {installed}, "
            f"because Python looks in {first} first. Run from another folder (or take "
            f"{here.parent} off PYTHONPATH), or build this checkout into the environment: "
            f"`pip install -e .` in {here.parent}")
