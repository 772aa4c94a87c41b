"""Exports onto a file system that is really full: a small tmpfs mounted in a private mount
namespace (`unshare`, no root needed where user namespaces are allowed). The error names the
full file system, the earlier file stays intact and loadable, and nothing is left behind."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXPORTS = r"""
import json, os, sys
import numpy as np
import modpack

disk, results = sys.argv[1], {}
host = r'''
#include "modpack/backend.h"
static double first(void) {
  const DLTensor* w;
  if (mp_backend_get_array("w", &w) != MP_OK) return -1;
  return ((const float*)w->data)[0];
}
MP_EXPORT_FUNC0(first, double)
'''

def library(value, megabytes):
    root = modpack.csource_module(host)
    root.import_module(modpack.const_module(
        {"w": np.full(megabytes << 18, value, np.float32)}))
    return root

def attempt(name, path, **kwargs):
    try:
        library(2.0, 16).export_library(path, **kwargs)
        results[name] = "exported"
    except modpack.ModpackError as exc:
        results[name] = str(exc)

old = os.path.join(disk, "deploy.so")
library(1.0, 1).export_library(old)   # fits: 1 MiB on the 8 MiB disk
attempt("so", old)
attempt("tar", os.path.join(disk, "deploy.tar"))
results["old"] = modpack.load_module(old)["first"]()
results["left"] = sorted(os.listdir(disk))

# The workspace (intermediate files) on the full disk, the output elsewhere: fill it first.
with open(os.path.join(disk, "filler"), "wb") as f:
    try:
        while True:
            f.write(b"\0" * (1 << 20))
    except OSError:
        pass
os.makedirs(os.path.join(disk, "tmp"), exist_ok=True)
os.environ["TMPDIR"] = os.path.join(disk, "tmp")
import tempfile; tempfile.tempdir = None
try:
    modpack.csource_module(host).export_library(os.path.join(sys.argv[2], "elsewhere.so"))
    results["workspace"] = "exported"
except modpack.ModpackError as exc:
    results["workspace"] = str(exc)
results["workspace_left"] = sorted(os.listdir(os.path.join(disk, "tmp")))
print(json.dumps(results))
"""


def run_on_small_disk(tmp_path: Path) -> dict:
    disk = tmp_path / "disk"
    disk.mkdir()
    other = tmp_path / "other"
    other.mkdir()
    script = tmp_path / "exports.py"
    script.write_text(EXPORTS)
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"],
                           capture_output=True, text=True) if shutil.which("unshare") else None
    if probe is None or probe.returncode != 0:
        pytest.skip("cannot mount a small file system here: unshare --user --mount is not "
                    f"allowed ({probe.stderr.strip() if probe else 'no unshare'})")
    command = (f"mount -t tmpfs -o size=8m modpack-full {disk} && "
               f"exec {sys.executable} {script} {disk} {other}")
    proc = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                           command], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_really_full_disk(tmp_path):
    results = run_on_small_disk(tmp_path)
    disk = tmp_path / "disk"
    for kind in ("so", "tar"):
        message = results[kind]
        assert "no space left on device" in message, message
        assert f"the file system of {disk}" in message and "is intact" in message, message
        assert "Traceback" not in message and "LLVM" not in message, message
    assert results["old"] == 1.0  # the earlier library still loads, with its contents
    assert results["left"] == ["deploy.so"], results["left"]  # no scratch, no partial file
    message = results["workspace"]
    assert "no space left on device for the intermediate files in" in message, message
    assert str(disk / "tmp") in message and "TMPDIR" in message, message
    assert results["workspace_left"] == [], results["workspace_left"]
    assert not (tmp_path / "other" / "elsewhere.so").exists()
