"""The libFuzzer target over the trust boundary (csrc/tests/fuzz_payloads.c: the blob reader and
each built-in kind's payload loader, under AddressSanitizer and UBSan) runs for a short, fixed
time from its seed corpus and finds nothing. A longer run: csrc/tests/README.md."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, run

SECONDS = int(os.environ.get("MODPACK_FUZZ_SECONDS", "20"))

pytestmark = pytest.mark.skipif(
    shutil.which("clang") is None or shutil.which("cmake") is None,
    reason="the fuzzer needs clang with libFuzzer and cmake: apt-get install clang "
    "libclang-rt-dev cmake (scripts/dev.sh installs them)",
)


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    build = tmp_path_factory.mktemp("fuzz-build")
    env = {**os.environ, "CC": "clang"}
    run("cmake", "-S", ROOT, "-B", build, "-DMODPACK_BUILD_FUZZERS=ON", "-DMODPACK_BUILD_TESTS=OFF",
        "-DMODPACK_WERROR=ON", "-DCMAKE_BUILD_TYPE=RelWithDebInfo", env=env)
    run("cmake", "--build", build, "-j2", "--target", "modpack_fuzz_payloads", env=env)
    return build / "modpack_fuzz_payloads"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    run(sys.executable, ROOT / "csrc" / "tests" / "make_fuzz_corpus.py", folder)
    seeds = sorted(p.name for p in folder.iterdir())
    assert {"blob-golden", "const-writer", "opencl-writer", "cuda-writer"} <= set(seeds), seeds
    return folder


def test_the_seeds_load(fuzzer: Path, corpus: Path):
    """Every seed runs through the target without a finding (and reaches the loaders: the
    target prints nothing on success, so check libFuzzer's own summary)."""
    proc = subprocess.run([fuzzer, "-runs=0", corpus], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "INITED" in proc.stderr, proc.stderr[-2000:]


def test_a_short_fuzzing_run_finds_nothing(fuzzer: Path, corpus: Path, tmp_path: Path):
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    proc = subprocess.run(
        [fuzzer, f"-max_total_time={SECONDS}", "-seed=1", "-timeout=10", "-rss_limit_mb=2048",
         f"-artifact_prefix={artifacts}/", corpus],
        capture_output=True, text=True, timeout=SECONDS + 120,
    )
    found = sorted(p.name for p in artifacts.iterdir())
    assert proc.returncode == 0 and not found, (
        f"the fuzzer found {found} (kept in {artifacts}):\n{proc.stderr[-6000:]}"
    )
    assert "Done" in proc.stderr, proc.stderr[-2000:]
