"""Exports killed midway (SIGKILL while the payload is being written) leave nothing behind: no
file of theirs beside the output, no workspace in the temp folder once another export has run,
nothing in /dev/shm, and the output either absent or a complete library."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import modpack

EXPORTER = r"""
import sys, numpy as np, modpack
out, size = sys.argv[1], int(sys.argv[2])
weights = np.ones(size // 4, dtype=np.float32)
host = modpack.csource_module('#include "modpack/backend.h"\nint f(void) { return 1; }\n')
host.import_module(modpack.const_module({"w": weights}))
print("exporting", flush=True)
host.export_library(out)
print("done", flush=True)
"""


def shm_files() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def export_and_kill(out: Path, tmpdir: Path, size: int, rng: random.Random) -> None:
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    proc = subprocess.Popen([sys.executable, "-c", EXPORTER, str(out), str(size)],
                            stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "exporting"
    time.sleep(rng.uniform(0.0, 0.6))
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def campaign(tmp_path: Path, kills: int, size: int) -> None:
    folder, tmpdir = tmp_path / "out", tmp_path / "tmp"
    folder.mkdir()
    tmpdir.mkdir()
    out = folder / "deploy.so"
    shm_before = shm_files()
    rng = random.Random(kills)
    for _ in range(kills):
        export_and_kill(out, tmpdir, size, rng)
        assert shm_files() <= shm_before, "an export left files in /dev/shm"
        left = [p.name for p in folder.iterdir() if p.name != out.name]
        assert not [n for n in left if not n.endswith(".tmp")], left
        if out.exists():  # the export finished before the kill: a whole library
            modpack.load_module(out, verify_checksums=True)
    # The next export sweeps what the killed ones may have left (named scratch, workspaces).
    subprocess.run([sys.executable, "-c", EXPORTER, str(out), str(1 << 20)], check=True,
                   env={**os.environ, "TMPDIR": str(tmpdir)}, capture_output=True)
    assert [p.name for p in folder.iterdir()] == [out.name]
    assert list(tmpdir.iterdir()) == []
    assert modpack.load_module(out).imported_modules[0].arrays["w"].size == (1 << 20) // 4


def test_killed_exports_leave_nothing_behind(tmp_path):
    campaign(tmp_path, kills=3, size=64 << 20)


@pytest.mark.slow
def test_ten_killed_200_mib_exports_leave_nothing_behind(tmp_path):
    campaign(tmp_path, kills=10, size=200 << 20)
