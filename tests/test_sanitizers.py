"""The runtime under the sanitizers: its C tests and a many-threaded load/call/drop program
under ASan+UBSan and under TSan, and the Python suite's load and call tests with the runtime
extension built with ASan+UBSan. Any report fails the test (the sanitizers abort on the
first)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, run
from elftools.elf.elffile import ELFFile

import modpack

pytestmark = pytest.mark.skipif(
    shutil.which("cmake") is None or shutil.which("gcc") is None,
    reason="the sanitizer builds need cmake and gcc (scripts/dev.sh installs them)",
)

ASAN_OPTIONS = "detect_leaks=0:abort_on_error=1:halt_on_error=1"
UBSAN_OPTIONS = "halt_on_error=1:print_stacktrace=1"
TSAN_OPTIONS = "halt_on_error=1:exitcode=66"

WEIGHTS_SUM = r"""
#include "modpack/backend.h"
static int64_t weights_sum(void) {
  const DLTensor* w;
  if (mp_backend_get_array("weights", &w) != MP_OK) return 0;
  int64_t total = 0;
  for (int64_t i = 0; i < w->shape[0]; ++i) total += ((const int64_t*)w->data)[i];
  return total;
}
MP_EXPORT_FUNC0(weights_sum, int64_t)
"""


def sanitizer_runtime(name: str) -> str:
    """gcc's shared runtime of one sanitizer, or a skip saying what to install."""
    path = subprocess.run(["gcc", f"-print-file-name=lib{name}.so"], capture_output=True,
                          text=True).stdout.strip()
    if not os.path.isabs(path) or not os.path.exists(path):
        pytest.skip(f"gcc has no lib{name} (Debian: apt-get install lib{name}8 or gcc's "
                    "libgcc-*-dev, which scripts/dev.sh brings)")
    return path


def build_runtime(build: Path, sanitize: str) -> Path:
    run("cmake", "-S", ROOT, "-B", build, "-DCMAKE_C_COMPILER=gcc", "-DCMAKE_BUILD_TYPE=Debug",
        f"-DMODPACK_SANITIZE={sanitize}", "-DMODPACK_WERROR=ON", "-DMODPACK_BUILD_TESTS=ON")
    run("cmake", "--build", build, "-j2")
    return build


@pytest.fixture(scope="module")
def asan_build(tmp_path_factory) -> Path:
    sanitizer_runtime("asan")
    return build_runtime(tmp_path_factory.mktemp("asan"), "address,undefined")


@pytest.fixture(scope="module")
def tsan_build(tmp_path_factory) -> Path:
    sanitizer_runtime("tsan")
    return build_runtime(tmp_path_factory.mktemp("tsan"), "thread")


@pytest.fixture(scope="module")
def libraries(tmp_path_factory) -> list[str]:
    """Two libraries for the threaded program: PATH, EXPECTED SUM, PATH, EXPECTED SUM."""
    tmp = tmp_path_factory.mktemp("concurrent")
    args = []
    for i, n in enumerate((1000, 3000)):
        host = modpack.csource_module(WEIGHTS_SUM)
        weights = np.arange(n, dtype=np.int64)
        host.import_module(modpack.const_module({"weights": weights}))
        args += [str(host.export_library(tmp / f"lib{i}.so")), str(int(weights.sum()))]
    return args


def run_sanitized(cmd: list[str | Path], **env: str) -> str:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **env})
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report
    assert "Sanitizer" not in report and "runtime error" not in report, report
    return proc.stdout


def test_c_tests_under_asan_and_ubsan(asan_build):
    run_sanitized(["ctest", "--test-dir", asan_build, "--output-on-failure"],
                  ASAN_OPTIONS=ASAN_OPTIONS, UBSAN_OPTIONS=UBSAN_OPTIONS)


def test_threads_loading_calling_and_dropping_under_asan_and_ubsan(asan_build, libraries):
    out = run_sanitized([asan_build / "modpack_test_concurrent_loads", "300", *libraries],
                        ASAN_OPTIONS=ASAN_OPTIONS, UBSAN_OPTIONS=UBSAN_OPTIONS)
    assert "8 threads x 300 rounds x 2 libraries: 0 failures" in out


def test_threads_loading_calling_and_dropping_under_tsan(tsan_build, libraries):
    """Drops race with loads of the same file here: each library is unmapped and mapped again
    while other threads load it (this found loads refused, and the wrong file's code returned
    by a reused descriptor name, before unmapping moved under the library lock)."""
    out = run_sanitized([tsan_build / "modpack_test_concurrent_loads", "300", *libraries],
                        TSAN_OPTIONS=TSAN_OPTIONS)
    assert "8 threads x 300 rounds x 2 libraries: 0 failures" in out


# The suite's tests that load libraries and call into them (host code, device arrays and
# OpenCL kernels on PoCL, inspect), for the ASan+UBSan run. Tests naming mold are left out:
# mold crashes with the ASan runtime preloaded into it.
PYTHON_TESTS = ["test_roundtrip.py", "test_lifetimes.py", "test_bad_input.py",
                "test_host_code.py", "test_signatures.py", "test_loaders.py",
                "test_module_graph.py", "test_errors.py", "test_opencl.py", "test_device_api.py",
                "test_api.py", "test_cli.py", "test_kernel_records.py", "test_golden.py",
                "test_signing.py", "test_memory_loads.py", "test_kernel_cache.py"]


@pytest.fixture(scope="module")
def asan_package(tmp_path_factory) -> Path:
    """The package built from a copy of this tree (no objects of a normal build reused) with
    the runtime extensions compiled with ASan+UBSan, unpacked for PYTHONPATH."""
    sanitizer_runtime("asan")
    tmp = tmp_path_factory.mktemp("asan-python")
    source = tmp / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "*.so", "_rt.c",
        "include", ".pytest_cache", ".ruff_cache", "benchmarks", "tests", "examples"))
    shutil.copytree(ROOT / "csrc" / "include", source / "csrc" / "include")
    flags = "-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g"
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp / "wheel", source,
        env={**os.environ, "CFLAGS": flags, "LDFLAGS": "-fsanitize=address,undefined"})
    (wheel,) = (tmp / "wheel").glob("modpack-*.whl")
    shutil.unpack_archive(wheel, tmp / "package", format="zip")
    for extension in (tmp / "package" / "modpack").rglob("*.so"):  # built as asked
        with open(extension, "rb") as f:
            needed = [tag.needed for tag in ELFFile(f).get_section_by_name(".dynamic").iter_tags()
                      if tag.entry.d_tag == "DT_NEEDED"]
        assert any(n.startswith("libasan") for n in needed), (extension, needed)
    return tmp / "package"


def test_python_load_and_call_tests_under_asan_and_ubsan(asan_package, tmp_path):
    preload = ":".join(sanitizer_runtime(name) for name in ("asan", "ubsan"))
    env = {**os.environ, "PYTHONPATH": str(asan_package), "LD_PRELOAD": preload,
           "ASAN_OPTIONS": ASAN_OPTIONS, "UBSAN_OPTIONS": UBSAN_OPTIONS}
    # -P: the package under test is the sanitized one, never the source tree's.
    where = subprocess.run([sys.executable, "-P", "-c", "import modpack; print(modpack.__file__)"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
    assert where.stdout.startswith(str(asan_package)), where.stdout
    proc = subprocess.run(
        [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow",
         "-k", "not mold", f"--basetemp={tmp_path / 'inner'}", f"--rootdir={ROOT}",
         *[str(ROOT / "tests" / name) for name in PYTHON_TESTS]],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=1500)
    report = proc.stdout[-6000:] + proc.stderr[-6000:]
    assert proc.returncode == 0, report
    assert "Sanitizer" not in proc.stderr, report
    passed = re.search(r"(\d+) passed", proc.stdout)
    assert passed and int(passed.group(1)) >= 150, report  # the tests ran, not just collected
