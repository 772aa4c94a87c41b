"""The package is typed for its users: it ships ``py.typed`` and stubs for its compiled modules,
``mypy --strict`` passes on it and on a user's script over the public API
(tests/data/typing/user_script.py, which states the types a user sees with ``assert_type``
and is run here too), and the stubs declare what the compiled modules define."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

import modpack
from modpack import _rt
from modpack.runtime import _calls

USER_SCRIPT = ROOT / "tests" / "data" / "typing" / "user_script.py"


def test_the_package_and_a_user_script_pass_mypy_strict(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e '.[test]'")
    # One run for both (the package's own modules are checked once); the configuration is
    # pyproject.toml's [tool.mypy], as for `mypy` run by hand in the repository.
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"),
         "modpack", str(USER_SCRIPT.relative_to(ROOT))],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_user_script_runs() -> None:
    proc = subprocess.run([sys.executable, str(USER_SCRIPT)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "18.0"


def test_the_package_says_it_is_typed() -> None:
    package = Path(modpack.__file__).parent
    assert (package / "py.typed").is_file()
    assert (package / "_rt.pyi").is_file()
    assert (package / "runtime" / "_calls.pyi").is_file()


def _stub_names(stub: Path) -> tuple[set[str], dict[str, set[str]]]:
    """The top-level names a stub declares, and each class's members."""
    names: set[str] = set()
    members: dict[str, set[str]] = {}
    for node in ast.parse(stub.read_text()).body:
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
            members[node.name] = (
                {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
                | {n.target.id for n in node.body
                   if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)})
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names, members


def test_the_stubs_declare_what_the_compiled_modules_define() -> None:
    """A name added to calls.c (or to the cffi module) is added to its stub too, or type
    checkers call it an error wherever the package uses it."""
    names, members = _stub_names(Path(_calls.__file__).parent / "_calls.pyi")
    defined = {n for n in dir(_calls) if not n.startswith("__")}
    assert defined - names == set(), "declare these in modpack/runtime/_calls.pyi"
    function = {n for n in vars(_calls.Function) if not n.startswith("__")}
    assert function - members["Function"] == set(), "declare these of Function in _calls.pyi"
    rt_names, _ = _stub_names(Path(modpack.__file__).parent / "_rt.pyi")
    assert {"ffi", "lib"} <= rt_names
    assert {n for n in dir(_rt) if not n.startswith("__")} <= rt_names
