"""The C embedding story end to end, exactly as examples/c_embed/README.md tells it: build and
install the runtime with CMake (warnings as errors), build the example against the installed
package, export a deploy.so from Python and run the C program on it with no Python involved;
then the same example built with a plain `cc ... $(pkg-config ...)`."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from conftest import ROOT, run

EXAMPLE = ROOT / "examples" / "c_embed"

pytestmark = pytest.mark.skipif(
    shutil.which("cmake") is None,
    reason="cmake is not installed (apt-get install cmake); the C embedding example needs it",
)


def check_output(stdout: str) -> None:
    assert "c_embed: OK" in stdout, stdout
    assert "- library" in stdout and "- const" in stdout, stdout  # the module tree
    # The signature refused a short output array before the code ran, naming it.
    assert "refused: affine: argument 1 (out) must be float32[n] cpu" in stdout, stdout


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("c_embed")


@pytest.fixture(scope="module")
def prefix(runtime_prefix: Path) -> Path:
    return runtime_prefix


@pytest.fixture(scope="module")
def deploy_so(work: Path) -> Path:
    out = work / "deploy.so"
    run(sys.executable, EXAMPLE / "make_deploy.py", out)
    assert out.is_file()
    return out


def libdir(prefix: Path) -> Path:
    """<prefix>/lib, or lib64 on distributions that use it."""
    found = sorted(prefix.glob("lib*/pkgconfig/modpack.pc"))
    assert found, f"no modpack.pc installed under {prefix}"
    return found[0].parent.parent


def test_installed_layout(prefix: Path) -> None:
    lib = libdir(prefix)
    assert (lib / "libmodpack_runtime.so").exists()
    assert (lib / "libmodpack_runtime.a").is_file()
    assert (prefix / "include" / "modpack" / "modpack.h").is_file()
    cmake_dir = lib / "cmake" / "modpack"
    for name in ("modpackConfig.cmake", "modpackConfigVersion.cmake", "modpackTargets.cmake"):
        assert (cmake_dir / name).is_file(), name
    # Only the public API is exported from the shared library.
    if shutil.which("nm"):
        symbols = run("nm", "-D", "--defined-only", lib / "libmodpack_runtime.so").split()
        exported = {s for s in symbols if s.startswith("mp_")}
        assert {"mp_module_load_from_file", "mp_function_call", "mp_error_message"} <= exported
        assert "mp_errorf" not in exported  # internal helpers stay hidden


def test_cmake_example(work: Path, prefix: Path, deploy_so: Path) -> None:
    build = work / "example-build"
    run("cmake", "-S", EXAMPLE, "-B", build, f"-DCMAKE_PREFIX_PATH={prefix}")
    run("cmake", "--build", build, "-j2")
    check_output(run(build / "c_embed", deploy_so))


def test_pkg_config_example(work: Path, prefix: Path, deploy_so: Path) -> None:
    assert shutil.which("pkg-config"), "pkg-config is missing (apt-get install pkg-config)"
    lib = libdir(prefix)
    env = {**os.environ, "PKG_CONFIG_PATH": str(lib / "pkgconfig")}
    flags = run("pkg-config", "--cflags", "--libs", "modpack", env=env).split()
    assert "-lmodpack_runtime" in flags, flags
    assert any(f.startswith("-I") for f in flags), flags

    exe = work / "c_embed_pc"
    cc = os.environ.get("CC", "cc")
    run(cc, "-std=c11", "-Wall", "-Wextra", "-Werror", EXAMPLE / "main.c", *flags, "-o", exe)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(lib), os.environ.get("LD_LIBRARY_PATH", "")) if p
    )
    check_output(run(exe, deploy_so, env=env))
