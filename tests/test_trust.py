"""What a signed load guarantees (docs/trust.md), each statement tested.

A signed load reads the file once: code, headers, the blob's index and device code go into a
private verified copy as they are hashed; the weights are hashed through a read-only mapping of
the file and stay mapped from it, shared between processes. So after the load a writer to the
file cannot change the code the process runs, and can change the weights it reads, unless the
load asked for a private copy of everything (``private_copy=True``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_signing import write_key

import modpack
from modpack.format.signatures import sign_library
from modpack.inspection import inspect_library

HOST = r"""
#include "modpack/backend.h"
static double weight_at(int64_t i) {
  const DLTensor* w;
  if (mp_backend_get_array("w", &w) != MP_OK) return -1;
  return ((const float*)w->data)[i];
}
MP_EXPORT_FUNC(weight_at, double, int64_t)
static int64_t answer(void) { return 42; }
MP_EXPORT_FUNC0(answer, int64_t)
"""
WEIGHTS = np.arange(1 << 20, dtype=np.float32)  # 4 MiB: mapped from the file when signed


@pytest.fixture(scope="module")
def key(tmp_path_factory) -> tuple[Path, Path]:
    return write_key(tmp_path_factory.mktemp("key"), "signer")


@pytest.fixture
def signed(key, tmp_path) -> Path:
    host = modpack.csource_module(HOST)
    host.import_module(modpack.const_module({"w": WEIGHTS}))
    path = host.export_library(tmp_path / "deploy.so")
    sign_library(path, key[0])
    return path


def weights_range(path: Path) -> tuple[int, int]:
    """The file offsets of the const array's data."""
    report = inspect_library(path)
    start = report["blob"]["file_offset"] + report["modules"][1]["offset"]
    size = report["modules"][1]["size"]
    return start + size - WEIGHTS.nbytes, start + size


def mappings_of(path: Path) -> list[str]:
    with open("/proc/self/maps") as maps:
        return [line for line in maps if line.rstrip().endswith(str(path))]


def rewrite_in_place(path: Path, begin: int, end: int, value: int) -> None:
    """Overwrite bytes [begin, end) of the file itself (same inode), as a writer with write
    access to it could."""
    with open(path, "r+b") as f:
        f.seek(begin)
        f.write(bytes([value]) * (end - begin))


def test_the_weights_stay_mapped_from_the_file(signed, key):
    shmem_before = _status("RssShmem")
    root = modpack.load_module(signed, trusted_keys=[key[1]])
    w = root.imported_modules[0].arrays["w"]
    assert np.array_equal(w, WEIGHTS) and root["weight_at"](12345) == 12345.0
    maps = mappings_of(signed)
    assert len(maps) == 1 and maps[0].split()[1] == "r--s", maps  # shared, read-only
    low, high = (int(x, 16) for x in maps[0].split()[0].split("-"))
    page = os.sysconf("SC_PAGESIZE")  # all of it but the partial pages at its ends
    assert 0 <= low - w.ctypes.data < page and 0 <= w.ctypes.data + w.nbytes - high < page
    assert _status("RssShmem") - shmem_before < 1024  # KiB: the copy holds the code only


def test_a_private_copy_holds_everything(signed, key):
    root = modpack.load_module(signed, trusted_keys=[key[1]], private_copy=True)
    assert np.array_equal(root.imported_modules[0].arrays["w"], WEIGHTS)
    assert mappings_of(signed) == []


def test_private_copy_is_for_signed_loads(signed):
    with pytest.raises(modpack.ArgumentError, match="give trusted_keys"):
        modpack.load_module(signed, private_copy=True)


def test_a_writer_cannot_change_the_code_after_the_load(signed, key):
    """Everything but the weights is rewritten in place after the load: the loaded tree runs
    as verified; a new load refuses the file."""
    root = modpack.load_module(signed, trusted_keys=[key[1]])
    begin, end = weights_range(signed)
    page = os.sysconf("SC_PAGESIZE")
    rewrite_in_place(signed, 0, begin // page * page, 0xCC)
    rewrite_in_place(signed, -(-end // page) * page, signed.stat().st_size, 0xCC)
    assert root["answer"]() == 42 and root["weight_at"](7) == 7.0
    with pytest.raises(modpack.FormatError):
        modpack.load_module(signed, trusted_keys=[key[1]])


def test_a_writer_can_change_the_weights_unless_they_were_copied(signed, key):
    """The documented limit of the zero-copy load: weights are the file's pages."""
    shared = modpack.load_module(signed, trusted_keys=[key[1]])
    private = modpack.load_module(signed, trusted_keys=[key[1]], private_copy=True)
    begin, _ = weights_range(signed)
    middle = 1 << 19  # an element in the middle of the array, whose page is mapped
    rewrite_in_place(signed, begin + 4 * middle, begin + 4 * middle + 4, 0)
    assert shared["weight_at"](middle) == 0.0  # seen: the weights are the file's pages
    assert private["weight_at"](middle) == float(middle)  # not seen: copied at load
    assert private["answer"]() == 42


def test_replacing_the_file_changes_nothing_loaded(signed, key, tmp_path):
    root = modpack.load_module(signed, trusted_keys=[key[1]])
    other = tmp_path / "other.so"
    other.write_bytes(b"\0" * signed.stat().st_size)
    os.replace(other, signed)  # how files are updated: a new file renamed over the old
    assert root["weight_at"](99) == 99.0 and root["answer"]() == 42


TRUNCATE = r"""
import sys, modpack
root = modpack.load_module(sys.argv[1], trusted_keys=[sys.argv[2]],
                           private_copy=sys.argv[3] == "private")
open(sys.argv[1], "r+b").truncate(4096)
print(root["weight_at"](1 << 19), flush=True)
"""


@pytest.mark.parametrize("mode", ["shared", "private"])
def test_truncating_the_file_after_the_load(signed, key, mode):
    """A mapped file cut short faults on the next read of what is gone (SIGBUS), as any mapped
    file does; a private copy is immune."""
    proc = subprocess.run([sys.executable, "-c", TRUNCATE, str(signed), str(key[1]), mode],
                          capture_output=True, text=True)
    if mode == "private":
        assert proc.returncode == 0 and proc.stdout.strip() == str(float(1 << 19)), proc.stderr
    else:
        assert proc.returncode == -signal.SIGBUS, (proc.returncode, proc.stderr)


def test_a_changed_weight_byte_is_refused(signed, key):
    """The weights are hashed through the mapping itself: a change there fails the signature."""
    begin, _ = weights_range(signed)
    rewrite_in_place(signed, begin + (1 << 20), begin + (1 << 20) + 1, 0x7F)
    with pytest.raises(modpack.SignatureError, match="changed after it was signed"):
        modpack.load_module(signed, trusted_keys=[key[1]])


def _status(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(field)


SCALE = r"""
__kernel void scale(__global const float* x, __global float* y, int n) {
  int i = get_global_id(0);
  if (i < n) y[i] = x[i] * 2.0f;
}
"""


def test_device_code_comes_from_the_verified_copy(key, tmp_path):
    """An OpenCL kernel is built at its first call, long after the load: rewriting its source
    in the file in between changes nothing (device code is in the verified copy)."""
    host = modpack.csource_module("int placeholder;")
    padding = "/* " + "padding " * (1 << 18) + "*/\n"  # 2 MiB: as large as a window would be
    host.import_module(modpack.opencl_module(padding + SCALE))
    host.import_module(modpack.const_module({"w": WEIGHTS}))
    path = host.export_library(tmp_path / "kernels.so")
    sign_library(path, key[0])
    root = modpack.load_module(path, trusted_keys=[key[1]])
    data = path.read_bytes()
    at = data.index(b"* 2.0f")
    rewrite_in_place(path, at + 2, at + 3, ord("9"))  # the file's kernel now multiplies by 9
    assert b"* 9.0f" in path.read_bytes()
    x = modpack.array(np.arange(8, dtype=np.float32), device="opencl:0")
    y = modpack.empty((8,), "float32", device="opencl:0")
    root.imported_modules[0]["scale"](x, y, 8, 8, 1, 1, 0, 0, 0)
    assert np.array_equal(y.numpy(), np.arange(8, dtype=np.float32) * 2)
