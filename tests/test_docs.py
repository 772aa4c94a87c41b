"""The API reference builds with no warning (docs/api, Sphinx: the README's command), and
covers every name ``modpack`` exports, every function and host-code helper of the C headers,
every public class of the C++ header, and every command and flag of the command line."""

from __future__ import annotations

import argparse
import html
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
    _check_the_c_and_cpp_pages(tmp_path / "api")
    _check_the_cli_page(tmp_path / "api")


def _check_the_c_and_cpp_pages(built: Path) -> None:
    """Beside the Python reference, pages rendered from the C headers and the C++ header
    (docs/api/headers.py): every function the C API exports and every host-code helper has
    its entry (a declaration Sphinx's C parser refused would be shown as code only, and fail
    here), and every public class of modpack.hpp its own."""
    c_page = (built / "c.html").read_text()
    functions = set()
    for header in (ROOT / "csrc" / "include" / "modpack").glob("*.h"):
        text = header.read_text()
        functions |= set(re.findall(r"^MP_API\s+[^;{]*?\b(mp_\w+)\s*\(", text, re.M))
        functions |= {name for name in re.findall(r"^static inline [^;{(]*?\b(mp_backend_\w+)\(",
                                                  text, re.M) if "__" not in name}
    assert len(functions) > 90
    missing = sorted(f for f in functions if f'id="c.{f}"' not in c_page)
    assert not missing, f"not in the C reference: {missing}"
    cpp_page = (built / "cpp.html").read_text()
    hpp = (ROOT / "csrc" / "include" / "modpack" / "modpack.hpp").read_text()
    public = re.sub(r"namespace detail \{.*?\n\}  // namespace detail", "", hpp, flags=re.S)
    classes = set(re.findall(r"^(?:class|struct) (\w+) (?:\{|:)", public, re.M))
    assert {"Module", "Function", "Array", "Error"} <= classes
    for name in classes:
        assert f"N7modpack{len(name)}{name}E" in cpp_page, f"modpack::{name}: no entry"


def _commands(parser: argparse.ArgumentParser, path: str = "modpack"):
    """(the command's path, "modpack-cache-list", its parser) for |parser| and every command
    under it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, f"{path}-{name}")


def _check_the_cli_page(built: Path) -> None:
    """The command-line page (sphinx-argparse over the parser ``modpack`` runs) has a section
    for every command and sub-command, and in it every argument of that command: an option
    by each of its flags, a positional by its name."""
    from modpack.cli.main import build_parser

    page = (built / "cli.html").read_text()
    commands = dict(_commands(build_parser()))
    assert {"modpack-inspect", "modpack-verify", "modpack-cache-list"} <= set(commands)
    starts = {}
    for path in commands:
        at = page.find(f'id="{path}"')
        assert at >= 0, f"`{path.replace('-', ' ')}` has no section in the CLI reference"
        starts[path] = at
    ends = [*sorted(starts.values()), len(page)]
    for path, parser in commands.items():
        section = page[starts[path]:ends[ends.index(starts[path]) + 1]]
        shown = {name for entry in re.findall(r"<kbd>([^<]*)</kbd>", section)
                 for name in html.unescape(entry).split(", ")}
        for action in parser._actions:
            if isinstance(action, (argparse._SubParsersAction, argparse._HelpAction)):
                continue
            for name in action.option_strings or [action.metavar or action.dest]:
                assert name in shown, \
                    f"`{path.replace('-', ' ')}`: {name} is not in the CLI reference"


def test_the_readme_names_the_docs_command() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "scripts/dev.sh docs" in readme
    conf = (ROOT / "docs" / "api" / "conf.py").read_text()
    command = re.search(r"(\.venv/bin/python -m sphinx .*)", conf)
    assert command is not None and command[1] in readme
