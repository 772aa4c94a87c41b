"""The API reference builds from the docstrings with no warning (docs/api, Sphinx with
autodoc: the README's command), and covers every name ``modpack`` exports."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

import modpack


def test_the_api_reference_builds_without_warnings(tmp_path: Path) -> None:
    pytest.importorskip("sphinx", reason="the docs extra: pip install -e '.[docs]'")
    # -E: read every docstring anew (no cache), -W: a warning fails the build.
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html",
         str(ROOT / "docs" / "api"), str(tmp_path / "api")],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stdout + proc.stderr
    page = (tmp_path / "api" / "index.html").read_text()
    for name in modpack.__all__:
        assert f'id="modpack.{name}"' in page, f"modpack.{name} is not in the API reference"


def test_the_readme_names_the_docs_command() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "scripts/dev.sh docs" in readme
    conf = (ROOT / "docs" / "api" / "conf.py").read_text()
    command = re.search(r"(\.venv/bin/python -m sphinx .*)", conf)
    assert command is not None and command[1] in readme
