"""Loading a library from bytes (load_module_from_bytes, mp_module_load_from_memory): the same
checks as a file, payloads zero-copy from the private copy, the caller's buffer free to go at
once, two loads two trees, nothing left mapped or open after the drop."""

from __future__ import annotations

import gc
import mmap
import os

import numpy as np
import pytest
from blobtools import covered
from conftest import VADD_C, build_c_program, run

import modpack

HOST = r"""
#include "modpack/backend.h"
static double weight(int64_t i) {
  const DLTensor* w;
  if (mp_backend_get_array("w", &w) != MP_OK || i < 0 || i >= w->shape[0]) return -1;
  return ((const float*)w->data)[i];
}
MP_EXPORT_FUNC(weight, double, int64_t)
"""

WEIGHTS = np.arange(4096, dtype=np.float32) / 8


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    host = modpack.csource_module(HOST)
    host.import_module(modpack.const_module({"w": WEIGHTS}))
    return host.export_library(tmp_path_factory.mktemp("memory") / "deploy.so")


def memory_mappings() -> int:
    with open("/proc/self/maps") as maps:
        return sum("memfd:modpack-library" in line for line in maps)


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview", "mmap", "numpy"])
def test_every_kind_of_buffer_loads(library, kind):
    data = library.read_bytes()
    with open(library, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    source = {"bytes": data, "bytearray": bytearray(data), "memoryview": memoryview(data),
              "mmap": mapped, "numpy": np.frombuffer(data, np.uint8)}[kind]
    root = modpack.load_module_from_bytes(source)
    mapped.close()
    assert root["weight"](3) == WEIGHTS[3]
    assert np.array_equal(root.imported_modules[0].arrays["w"], WEIGHTS)


def test_the_callers_buffer_may_go_at_once_and_payloads_are_views_of_the_copy(library):
    buffer = bytearray(library.read_bytes())
    root = modpack.load_module_from_bytes(buffer)
    buffer[:] = bytes(len(buffer))  # overwritten, then freed
    del buffer
    gc.collect()
    weights = root.imported_modules[0].arrays["w"]
    assert np.array_equal(weights, WEIGHTS) and root["weight"](4095) == WEIGHTS[4095]
    assert not weights.flags.owndata and not weights.flags.writeable  # a view, read-only
    address = weights.__array_interface__["data"][0]
    with open("/proc/self/maps") as maps:  # ... into the memfd's mapping
        spans = [line.split()[0].split("-") for line in maps if "memfd:modpack-library" in line]
    assert any(int(lo, 16) <= address < int(hi, 16) for lo, hi in spans), spans


def test_two_loads_of_the_same_bytes_are_two_trees(library):
    data = library.read_bytes()
    first, second = modpack.load_module_from_bytes(data), modpack.load_module_from_bytes(data)
    assert first is not second
    a, b = first.imported_modules[0].arrays["w"], second.imported_modules[0].arrays["w"]
    assert a.__array_interface__["data"][0] != b.__array_interface__["data"][0]
    del first
    gc.collect()
    assert second["weight"](1) == WEIGHTS[1]  # the other tree is untouched


def test_a_dropped_tree_leaves_nothing_mapped_or_open(library):
    data = library.read_bytes()
    gc.collect()  # the trees of earlier tests
    before_maps, before_fds = memory_mappings(), len(os.listdir("/proc/self/fd"))
    root = modpack.load_module_from_bytes(data)
    arrays = root.imported_modules[0].arrays["w"]
    assert memory_mappings() > before_maps
    del root, arrays
    gc.collect()
    assert memory_mappings() == before_maps
    assert len(os.listdir("/proc/self/fd")) == before_fds


def test_validation_is_the_same_as_for_a_file(library, tmp_path):
    """Damage anywhere is refused from memory as from the file, with the same error class and
    message but for the name."""
    good = library.read_bytes()
    size = len(good)
    sealed = covered(library)  # the bytes a load reads: damage elsewhere is harmless
    offsets = [0, 18, 64, size // 7, size // 3, size // 2, size - 100, size - 1]
    offsets = [int(np.flatnonzero(sealed[o:])[0]) + o for o in offsets if sealed[o:].any()]
    assert len(set(offsets)) >= 5
    for offset in offsets:
        bad = bytearray(good)
        bad[offset] ^= 0x10
        path = tmp_path / f"bad{offset}.so"
        path.write_bytes(bad)
        with pytest.raises(modpack.FormatError) as from_file:
            modpack.load_module(path)
        with pytest.raises(modpack.FormatError) as from_memory:
            modpack.load_module_from_bytes(bad)
        assert type(from_file.value) is type(from_memory.value), offset
        assert (str(from_file.value).split(str(path), 1)[-1][:60]
                in str(from_memory.value)), (offset, from_file.value, from_memory.value)
    with pytest.raises(modpack.FormatError, match=r"<library in memory: 0 bytes.*carries no"):
        modpack.load_module_from_bytes(b"")


def test_wrong_arguments(library):
    with pytest.raises(modpack.ArgumentError, match="not a str; for a path, use load_module"):
        modpack.load_module_from_bytes(str(library))
    with pytest.raises(modpack.ArgumentError, match="one contiguous buffer"):
        modpack.load_module_from_bytes(np.frombuffer(library.read_bytes(), np.uint8)[::2])
    with pytest.raises(modpack.ArgumentError, match="not int"):
        modpack.load_module_from_bytes(42)


def test_from_c(library, runtime_prefix, tmp_path):
    """A C program reads the file into malloc'd memory, loads it from there, frees the buffer
    at once, and calls into the library."""
    exe = build_c_program(runtime_prefix, r"""
#include <stdio.h>
#include <stdlib.h>
#include "modpack/modpack.h"
int main(int argc, char** argv) {
  (void)argc;
  FILE* f = fopen(argv[1], "rb");
  if (!f) return 2;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char* data = malloc((size_t)size);
  if (!data || fread(data, 1, (size_t)size, f) != (size_t)size) return 2;
  fclose(f);
  mp_module_t *a = NULL, *b = NULL;
  if (mp_module_load_from_memory(data, (uint64_t)size, 0, &a) != MP_OK ||
      mp_module_load_from_memory(data, (uint64_t)size, 0, &b) != MP_OK) {
    printf("load failed: %s\n", mp_error_message());
    return 1;
  }
  free(data);
  mp_function_t* weight = NULL;
  if (mp_module_get_function(a, "weight", 0, &weight) != MP_OK) return 1;
  mp_value_t args[1] = {mp_int(16)}, ret;
  if (mp_function_call(weight, args, 1, &ret) != MP_OK) return 1;
  printf("weight(16) = %g, two trees: %s\n", ret.v_float64, a != b ? "yes" : "no");
  unsigned char junk[64] = {0};
  mp_status_t s = mp_module_load_from_memory(junk, sizeof junk, 0, &b);
  printf("junk: %d %s\n", (int)s, mp_error_message());
  mp_function_release(weight);
  mp_module_release(a);
  mp_module_release(b);
  return 0;
}
""", tmp_path / "from_memory")
    out = run(exe, library)
    assert f"weight(16) = {WEIGHTS[16]:g}, two trees: yes" in out, out
    assert "junk: 2 '<library in memory: 64 bytes" in out and "carries no modpack seal" in out


def test_a_host_only_library_from_memory(tmp_path):
    path = modpack.csource_module(VADD_C).export_library(tmp_path / "host.so")
    assert modpack.load_module_from_bytes(path.read_bytes())["add_int"](2, 5) == 7


def test_processes_loading_one_library_share_its_payload_pages():
    """The short version of benchmarks/shared_pages.py: the payload is mapped file-backed,
    read-only and clean in every process, so three processes hold one copy between them."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from shared_pages import measure

    payload, _, measured = measure(processes=3, payload_mib=16)
    for _pid, _rollup, mapping in measured:
        assert mapping["perms"] == "r--p" and str(mapping["file"]).endswith("shared.so"), mapping
        assert mapping["Private_Dirty"] == 0 and mapping["Anonymous"] == 0, mapping
        assert mapping["Rss"] >= payload, mapping  # every page was read
    copies = sum(mapping["Pss"] for _, _, mapping in measured) / payload
    assert 0.95 <= copies <= 1.1, copies
