"""Lifetimes and reloads: what host code and Python keep (function handles in statics, array
views, functions of the host-code node) stays valid when the tree is dropped and the library
loaded again."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from conftest import VADD_C, consts

import modpack

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
