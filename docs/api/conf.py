"""Sphinx configuration of the API reference, built from the package's docstrings:

    scripts/dev.sh docs                  # or, once set up:
    .venv/bin/python -m sphinx -E -W --keep-going -q -b html docs/api build/api

(-E: every docstring read anew; -W: a warning fails the build; tests/test_docs.py runs the
same.) The reference documents
what ``modpack`` exports (``modpack.__all__``), grouped in index.rst, and beside it the C API
(c.rst) and the C++ API (cpp.rst), rendered from the headers by headers.py, and the command
line (cli.rst), rendered from its parser by sphinx-argparse."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import modpack

sys.path.insert(0, str(Path(__file__).parent))  # headers.py: the C and C++ pages

project = "modpack"
release = version = modpack.__version__
copyright = "the modpack authors"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinxarg.ext", "headers"]
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path: list[str] = []
# No typographic quotes or dashes: "--json" in a help text and "" in a header's comment are
# what a user types.
smartquotes = False
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
napoleon_numpy_docstring = True
napoleon_google_docstring = False
# The docstrings' own reading aids: |name| names a parameter (shown as code here, not taken
# for a reST substitution).
_PARAMETER = re.compile(r"(?<![|\w])\|([A-Za-z_][A-Za-z0-9_.]*)\|(?![|\w])")


def _parameters_as_code(app: Any, what: str, name: str, obj: Any, options: Any,
                        lines: list[str]) -> None:
    lines[:] = [_PARAMETER.sub(r"``\1``", line) for line in lines]


def _directive(name: str) -> str:
    obj = getattr(modpack, name)
    if isinstance(obj, type):
        kind = "autoexception" if issubclass(obj, BaseException) else "autoclass"
        return f".. {kind}:: modpack.{name}\n   :members:\n"
    if callable(obj):
        return f".. autofunction:: modpack.{name}\n"
    return f".. autodata:: modpack.{name}\n"


def _the_rest_of_the_api(app: Any, docname: str, source: list[str]) -> None:
    """index.rst groups the API by task; a name of ``modpack.__all__`` it does not list yet
    is documented at its end, so the reference always covers the whole public API."""
    if docname != "index":
        return
    listed = set(re.findall(r"modpack\.(\w+)", source[0]))
    listed |= set(re.findall(r":: (\w+)\n   :module: modpack\n", source[0]))
    rest = [name for name in modpack.__all__ if name not in listed]
    if rest:
        source[0] += "\nMore\n----\n\n" + "".join(_directive(name) for name in rest)


def setup(app: Any) -> None:
    app.connect("autodoc-process-docstring", _parameters_as_code)
    app.connect("source-read", _the_rest_of_the_api)
