"""A library over 4 GiB exports, loads and reads back correctly: 64-bit offsets throughout,
the x86-64 large section, zero-copy views. Slow (tens of seconds, ~10 GB of disk and tmpfs);
CI runs it."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from conftest import VADD_C

import modpack

pytestmark = pytest.mark.slow

BIG = (4 << 30) + (256 << 20) + 12345  # past 4 GiB, deliberately not a round size
CHUNK = 64 << 20


def pattern(start: int, n: int) -> np.ndarray:
    """Position-dependent bytes, so a misplaced or truncated chunk cannot go unnoticed."""
    i = np.arange(start, start + n, dtype=np.uint64)
    return ((i * 2654435761) >> 13).astype(np.uint8)


def test_library_over_4_gib(tmp_path):
    free = shutil.disk_usage(tmp_path).free
    if free < 3 * BIG:
        pytest.skip(f"needs {3 * BIG >> 30} GiB of free disk, {free >> 30} GiB available")
    source = np.lib.format.open_memmap(tmp_path / "big.npy", mode="w+", dtype=np.uint8,
                                       shape=(BIG,))
    for start in range(0, BIG, CHUNK):
        n = min(CHUNK, BIG - start)
        source[start:start + n] = pattern(start, n)
    source.flush()
    tail = np.arange(1000, dtype=np.float64)

    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.const_module({"big": source, "tail": tail}))
    path = host.export_library(tmp_path / "huge.so")
    del source
    assert path.stat().st_size > BIG

    from modpack.tools.inspection import inspect_library

    report = inspect_library(path)  # verifies every checksum
    assert report["blob"]["size"] > 4 << 30
    (const,) = [m for m in report["modules"] if m["type_key"] == "const"]
    assert const["contents"]["arrays"][0] == {"name": "big", "dtype": "uint8", "shape": [BIG]}

    root = modpack.load_module(path)  # payload checksums on
    arrays = root.imported_modules[0].arrays
    big = arrays["big"]
    assert big.shape == (BIG,) and not big.flags.writeable
    for start in range(0, BIG, CHUNK):
        n = min(CHUNK, BIG - start)
        assert np.array_equal(big[start:start + n], pattern(start, n)), f"bytes at {start}"
    assert np.array_equal(arrays["tail"], tail)  # data beyond the 4 GiB mark
    assert arrays["tail"].ctypes.data - big.ctypes.data > 4 << 30
    assert root["add_int"](2, 3) == 5
