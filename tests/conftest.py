"""Shared helpers: small host programs and tree builders used across the tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import modpack

# The suite runs Vulkan under Khronos' validation layer where it is installed (scripts/dev.sh
# installs vulkan-validationlayers): the runtime turns each error the layer reports into a failed
# call (MODPACK_VULKAN_VALIDATION=1), so invalid use of Vulkan fails the tests, as a stricter
# driver than lavapipe would fail it. Set MODPACK_VULKAN_VALIDATION=0 to run without it.
VULKAN_VALIDATION_LAYER = next(
    (d / "VkLayer_khronos_validation.json"
     for d in map(Path, (*filter(None, os.environ.get("VK_LAYER_PATH", "").split(":")),
                         "/usr/share/vulkan/explicit_layer.d", "/etc/vulkan/explicit_layer.d",
                         "/usr/local/share/vulkan/explicit_layer.d"))
     if (d / "VkLayer_khronos_validation.json").exists()), None)
if VULKAN_VALIDATION_LAYER is not None:
    os.environ.setdefault("MODPACK_VULKAN_VALIDATION", "1")

VADD_C = r"""
#include "modpack/backend.h"
static void vadd(DLTensor* a, DLTensor* b, DLTensor* c) {
  const float* x = a->data; const float* y = b->data; float* z = c->data;
  for (int64_t i = 0; i < a->shape[0]; ++i) z[i] = x[i] + y[i];
}
MP_EXPORT_VOID_FUNC(vadd, DLTensor*, DLTensor*, DLTensor*)
static int64_t add_int(int64_t a, int64_t b) { return a + b; }
MP_EXPORT_FUNC(add_int, int64_t, int64_t, int64_t)
"""


@pytest.fixture
def host() -> modpack.Module:
    return modpack.csource_module(VADD_C)


def consts(tag: int) -> modpack.Module:
    return modpack.const_module({f"c{tag}": np.full(4, tag, dtype=np.int32)})


def run_python(code: str, *args: str) -> str:
    """Run |code| in a fresh interpreter; return its stdout (fails the test on error)."""
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture(scope="session", autouse=True)
def session_kernel_cache(tmp_path_factory: pytest.TempPathFactory):
    """The kernel cache of the test session's processes (and of the processes they start): a
    folder of the session's, on as by default, never the user's own. Tests of the cache give
    their processes a folder each."""
    saved = os.environ.get("MODPACK_KERNEL_CACHE")
    os.environ["MODPACK_KERNEL_CACHE"] = str(tmp_path_factory.mktemp("kernel_cache") / "kernels")
    yield
    if saved is None:
        os.environ.pop("MODPACK_KERNEL_CACHE", None)
    else:
        os.environ["MODPACK_KERNEL_CACHE"] = saved


ROOT = Path(__file__).resolve().parents[1]


def run(*cmd: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    """Run |cmd|; fail the test with its output unless it exits 0. Returns stdout."""
    proc = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )
    assert proc.returncode == 0, (
        f"`{' '.join(map(str, cmd))}` exited {proc.returncode}\n"
        f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
    )
    return proc.stdout


@pytest.fixture(scope="session")
def runtime_prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The C runtime configured, built with warnings as errors, tested with ctest and installed
    to a prefix, once per test session (C examples build against it)."""
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed (apt-get install cmake); the C examples need it")
    work = tmp_path_factory.mktemp("runtime")
    build, prefix = work / "build", work / "prefix"
    run("cmake", "-S", ROOT, "-B", build, f"-DCMAKE_INSTALL_PREFIX={prefix}", "-DMODPACK_WERROR=ON")
    run("cmake", "--build", build, "-j2")
    run("ctest", "--test-dir", build, "--output-on-failure")
    run("cmake", "--install", build)
    return prefix


def build_c_program(prefix: Path, source_text: str, exe: Path, *inputs: str | Path,
                    static: bool = False) -> Path:
    """Compile |source_text| (C11, warnings as errors) with |inputs| into |exe| against the
    runtime installed at |prefix|: the shared library (found through an rpath), or with
    |static| the static one."""
    source = exe.with_suffix(".c")
    source.write_text(source_text)
    if static:
        runtime = [prefix / "lib" / "libmodpack_runtime.a", "-lpthread", "-ldl", "-lm"]
    else:
        runtime = [f"-L{prefix}/lib", "-lmodpack_runtime", f"-Wl,-rpath,{prefix}/lib"]
    run("cc", "-std=c11", "-Wall", "-Werror", source, *inputs, f"-I{prefix}/include", *runtime,
        "-o", exe)
    return exe


@pytest.fixture(scope="session")
def stub_driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stand-in CUDA driver (tests/data/stub_libcuda.c) for MODPACK_CUDA_LIBRARY."""
    out = tmp_path_factory.mktemp("stub") / "libcuda.so.1"
    run(os.environ.get("CC", "cc"), "-shared", "-fPIC", "-Wall", "-Werror", "-o", out,
        ROOT / "tests" / "data" / "stub_libcuda.c")
    return out


@pytest.fixture(scope="session")
def stub_hip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stand-in HIP runtime (tests/data/stub_libamdhip64.c) for MODPACK_ROCM_LIBRARY."""
    out = tmp_path_factory.mktemp("stub_hip") / "libamdhip64.so"
    run(os.environ.get("CC", "cc"), "-shared", "-fPIC", "-Wall", "-Werror", "-o", out,
        ROOT / "tests" / "data" / "stub_libamdhip64.c")
    return out
