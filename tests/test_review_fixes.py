"""Regressions found in review: host-code function handles across reloads, reused library
nodes, const dtype widths, array size overflow, read-only arrays, deep and diamond-heavy
import graphs."""

from __future__ import annotations

import gc
import itertools
import struct
import time

import numpy as np
import pytest
import xxhash
from blobtools import layout, read_blob, reseal, write_blob
from conftest import VADD_C, consts

import modpack
from modpack.runtime.binding import ffi, lib

COUNTING_HOST = r"""
#include "modpack/backend.h"
/* The handle is kept in a static, as backend.h allows, across reloads of the library. */
static int64_t run(int64_t x) {
  static void* count;
  mp_value_t ret;
  if (!count && mp_backend_get_function("blobby_count", &count) != MP_OK) return -1;
  mp_value_t args[1] = {mp_int(x)};
  if (mp_backend_call(count, args, 1, &ret) != MP_OK) return -2;
  return ret.v_int64;
}
MP_EXPORT_FUNC(run, int64_t, int64_t)
"""


class Counter(modpack.BinaryModule):
    type_key = "test.counter"

    def save_to_binary(self) -> bytes:
        return b"c"

    def get_function(self, name, query_imports=False):
        if name == "blobby_count":
            return lambda x: x * 10
        raise KeyError(name)


@pytest.fixture(scope="module", autouse=True)
def counter_loader():
    modpack.register_loader("test.counter")(lambda payload: Counter())
    yield
    modpack.unregister_loader("test.counter")


def test_host_function_handles_survive_reloads(tmp_path):
    host = modpack.csource_module(COUNTING_HOST)
    host.import_module(Counter())
    host.import_module(modpack.const_module({"w": np.arange(4.0)}))
    path = host.export_library(tmp_path / "stale.so")
    lib1 = modpack.load_module(path)
    assert lib1["run"](2) == 20
    weights = lib1.imported_modules[1].arrays["w"]  # keeps the library mapped
    del lib1
    gc.collect()
    lib2 = modpack.load_module(path)  # a new tree over the same mapping
    assert lib2["run"](3) == 30  # the static handle is resolved against the new tree
    assert weights.sum() == 6.0


def test_a_reused_library_node_keeps_its_imports(tmp_path):
    root = consts(1)
    host = modpack.csource_module(VADD_C)
    root.import_module(host)
    host.import_module(consts(2))
    path = root.export_library(tmp_path / "reuse.so")
    counts = []
    for _ in range(4):
        tree = modpack.load_module(path)
        node = tree.imported_modules[0]
        counts.append(len(node.imported_modules))
        keep = node["add_int"]  # keeps the library node alive across the reload
        del tree, node
        gc.collect()
    assert counts == [1, 1, 1, 1]
    assert keep(1, 1) == 2


def test_const_records_must_have_a_valid_width(tmp_path):
    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.const_module({"h": np.zeros(32, np.float16)}))
    path = host.export_library(tmp_path / "bits.so")
    blob = read_blob(path)
    entry = layout(blob)["entries"] + 48
    offset, size = struct.unpack_from("<QQ", blob, entry)
    record = offset + 16
    blob[record + 12] = 4  # code: bfloat, keeping 16 bits -> valid; now claim 8 bits
    blob[record + 13] = 8
    digest = xxhash.xxh3_64_intdigest(bytes(blob[offset : offset + size]))
    struct.pack_into("<Q", blob, entry + 16, digest)
    write_blob(path, reseal(blob))
    with pytest.raises(modpack.FormatError, match="invalid dtype"):
        modpack.load_module(path)


def test_huge_arrays_are_refused():
    with pytest.raises(modpack.ArgumentError, match="too large"):
        modpack.empty((2**63 - 1,), "int16")


def test_read_only_arrays_only_reach_const_parameters(tmp_path):
    host = modpack.csource_module(r"""
#include "modpack/backend.h"
static void fill(DLTensor* x) { ((int64_t*)x->data)[0] = 42; }
MP_EXPORT_VOID_FUNC(fill, DLTensor*)
static int64_t first(const DLTensor* x) { return ((const int64_t*)x->data)[0]; }
MP_EXPORT_FUNC(first, int64_t, const DLTensor*)
""")
    host.import_module(modpack.const_module({"w": np.arange(4, dtype=np.int64) + 7}))
    root = modpack.load_module(host.export_library(tmp_path / "ro.so"))
    weights = root.imported_modules[0].arrays["w"]
    frozen = np.zeros(4, np.int64)
    frozen.flags.writeable = False
    for array in (weights, frozen, frozen[::2]):
        with pytest.raises(modpack.ArgumentError, match="read-only array"):
            root["fill"](array)
        assert root["first"](array) == array[0]
    assert weights[0] == 7 and frozen[0] == 0
    writable = np.zeros(4, np.int64)
    root["fill"](writable)
    assert writable[0] == 42


def probe_modules(n: int) -> list:
    modules = []
    for _ in range(n):
        out = ffi.new("mp_module_t**")
        assert lib.modpack_probe_module(out) == 0
        modules.append(out[0])
    return modules


def test_deep_chains_neither_overflow_nor_crawl():
    n = 300_000
    chain = probe_modules(n)
    for parent, child in itertools.pairwise(chain):
        assert lib.mp_module_import(parent, child) == 0  # child has no imports yet: O(1)
    for module in chain[1:]:
        lib.mp_module_release(module)  # the chain now owns them
    out = ffi.new("DLTensor**")
    assert lib.mp_module_get_array(chain[0], b"nowhere", 1, out) == lib.MP_ERR_NOT_FOUND
    lib.mp_module_release(chain[0])  # frees 300k modules without recursion


def test_diamond_chains_are_walked_once_per_module():
    layers = 40  # 2**40 paths; each module must be visited once
    top = probe_modules(1)[0]
    current = top
    owned = [top]
    for _ in range(layers):
        left, right, bottom = probe_modules(3)
        for parent, child in ((current, left), (current, right), (left, bottom),
                              (right, bottom)):
            assert lib.mp_module_import(parent, child) == 0
        owned += [left, right, bottom]
        current = bottom
    out = ffi.new("DLTensor**")
    started = time.perf_counter()
    assert lib.mp_module_get_array(top, b"nowhere", 1, out) == lib.MP_ERR_NOT_FOUND
    assert time.perf_counter() - started < 1.0
    for module in owned:
        lib.mp_module_release(module)
