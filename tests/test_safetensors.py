"""The runtime's safetensors reader (csrc/src/weights/safetensors.c) against the safetensors
library: files written by the library's own writer (numpy arrays of every dtype it takes,
bfloat16 and float8 from ml_dtypes, packed float4, metadata) are read into an index that says
what the library says of them (names, dtypes, shapes, ranges, metadata), and each range holds
the bytes that were saved; files the library refuses are refused, and where modpack is stricter
than the library (two tensors of one name, fields the format does not define, float4 rows that
share a byte) the test says so. The refusals one by one, with their messages, are the C test's
(csrc/tests/test_safetensors_index.c).

The reader is internal until the weights API reaches it, so a small C program linked with the
static runtime prints the index as JSON."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ROOT, build_c_program

safetensors = pytest.importorskip("safetensors", reason="pip install safetensors (the test extra)")
ml_dtypes = pytest.importorskip("ml_dtypes", reason="pip install ml_dtypes (the test extra)")
from safetensors import SafetensorError, TensorSpec, safe_open, serialize_file  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

# Prints each file's index as one JSON line: its fields and arrays, or its refusal.
DUMP_C = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "weights/foreign_index.h"

static void string(const char* s) {
  putchar('"');
  for (; *s; ++s) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') printf("\\%c", c);
    else if (c < 0x20) printf("\\u%04x", c);
    else putchar(c);
  }
  putchar('"');
}

static void shape(const int64_t* extents, int32_t ndim) {
  putchar('[');
  for (int32_t d = 0; d < ndim; ++d) printf("%s%" PRId64, d ? ", " : "", extents[d]);
  putchar(']');
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    int fd = open(argv[i], O_RDONLY);
    if (fd < 0) return 2;
    uint64_t size = (uint64_t)lseek(fd, 0, SEEK_END);
    uint8_t head[4096]; /* the first page, read ahead as the loader reads it */
    ssize_t got = pread(fd, head, sizeof head, 0);
    mp_const_byte_span_t first = {head, got > 0 ? (uint64_t)got : 0};
    mp_foreign_index_t index;
    mp_status_t status = mp_safetensors_read_index(fd, size, argv[i], first, &index);
    close(fd);
    if (status != MP_OK) {
      printf("{\"status\": %d, \"message\": ", (int)status);
      string(mp_error_message());
      printf("}\n");
      continue;
    }
    printf("{\"status\": 0, \"format\": %d, \"version\": %u, \"header_size\": %" PRIu64
           ", \"data_offset\": %" PRIu64 ", \"data_size\": %" PRIu64 ", \"alignment\": %u, "
           "\"header_matches\": %d, \"metadata\": %s, \"arrays\": [",
           (int)index.format, index.version, index.header_size, index.data_offset,
           index.data_size, index.alignment,
           index.header != NULL, index.metadata_json);
    for (uint64_t a = 0; a < index.count; ++a) {
      const mp_foreign_array_t* t = &index.arrays[a];
      printf("%s{\"name\": ", a ? ", " : "");
      string(t->name);
      printf(", \"dtype\": [%u, %u, %u], \"shape\": ", t->dtype.code, t->dtype.bits,
             t->dtype.lanes);
      shape(t->shape, t->ndim);
      printf(", \"offset\": %" PRIu64 ", \"size\": %" PRIu64 ", \"type_name\": ", t->offset,
             t->size);
      string(t->type_name);
      printf(", \"type_id\": %u, \"block\": [%u, %u], \"logical_shape\": ", t->type_id,
             t->block_elements, t->block_bytes);
      shape(t->logical_shape, t->logical_ndim);
      putchar('}');
    }
    printf("]}\n");
    mp_foreign_index_free(&index);
  }
  return 0;
}
"""

# What the reader hands out for each safetensors dtype: DLPack (code, bits, lanes), and the
# values per element with their bytes.
DLPACK = {
    "BOOL": ((6, 8, 1), (1, 1)), "U8": ((1, 8, 1), (1, 1)), "I8": ((0, 8, 1), (1, 1)),
    "U16": ((1, 16, 1), (1, 2)), "I16": ((0, 16, 1), (1, 2)), "U32": ((1, 32, 1), (1, 4)),
    "I32": ((0, 32, 1), (1, 4)), "U64": ((1, 64, 1), (1, 8)), "I64": ((0, 64, 1), (1, 8)),
    "F16": ((2, 16, 1), (1, 2)), "BF16": ((4, 16, 1), (1, 2)), "F32": ((2, 32, 1), (1, 4)),
    "F64": ((2, 64, 1), (1, 8)), "C64": ((5, 64, 1), (1, 8)),
    "F8_E4M3": ((10, 8, 1), (1, 1)), "F8_E4M3FNUZ": ((11, 8, 1), (1, 1)),
    "F8_E5M2": ((12, 8, 1), (1, 1)), "F8_E5M2FNUZ": ((13, 8, 1), (1, 1)),
    "F8_E8M0": ((14, 8, 1), (1, 1)),
    "F6_E2M3": ((15, 6, 4), (4, 3)), "F6_E3M2": ((16, 6, 4), (4, 3)),
    "F4": ((17, 4, 2), (2, 1)),
}


@pytest.fixture(scope="module")
def dump(runtime_prefix: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The index printer, linked with the static runtime (the reader's symbols are internal)."""
    exe = tmp_path_factory.mktemp("safetensors-dump") / "dump"
    return build_c_program(runtime_prefix, DUMP_C, exe, f"-I{ROOT / 'csrc' / 'src'}", static=True)


def indexes(dump: Path, *paths: Path) -> list[dict[str, Any]]:
    out = subprocess.run([dump, *paths], capture_output=True, text=True, timeout=120, check=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def library_view(path: Path) -> tuple[dict[str, Any], int]:
    """The header as the library reads it (safe_open: names, dtypes, shapes, metadata), with the
    ranges from the raw JSON (the library does not hand them out), and the header's size."""
    with safe_open(path, framework="np") as f:
        tensors = {name: {"dtype": f.get_slice(name).get_dtype(),
                          "shape": f.get_slice(name).get_shape()} for name in f.keys()}
        metadata = f.metadata() or {}
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    for name, info in header.items():
        if name != "__metadata__":
            tensors[name]["data_offsets"] = info["data_offsets"]
    return {"tensors": tensors, "metadata": metadata}, n


def check_against_library(index: dict[str, Any], path: Path) -> None:
    """Every field of |index| is what the library reads of |path|."""
    view, n = library_view(path)
    assert index["status"] == 0, index
    assert (index["format"], index["version"], index["alignment"]) == (1, 0, 8)
    assert index["header_size"] == index["data_offset"] == 8 + n
    assert index["data_size"] == path.stat().st_size - 8 - n
    assert index["header_matches"]
    assert index["metadata"] == view["metadata"]
    arrays = index["arrays"]
    assert [a["name"] for a in arrays] == sorted(
        view["tensors"], key=lambda k: (*view["tensors"][k]["data_offsets"], k))
    assert {a["name"] for a in arrays} == set(view["tensors"])
    for a in arrays:
        info = view["tensors"][a["name"]]
        begin, end = info["data_offsets"]
        dlpack, (values, nbytes) = DLPACK[info["dtype"]]
        assert a["type_name"] == info["dtype"] and a["type_id"] == 0
        assert tuple(a["dtype"]) == dlpack and tuple(a["block"]) == (values, nbytes)
        assert a["logical_shape"] == info["shape"]
        handed = list(info["shape"])
        if values > 1:
            handed[-1] //= values
        assert a["shape"] == handed
        assert (a["offset"], a["size"]) == (8 + n + begin, end - begin)


def every_dtype() -> dict[str, np.ndarray]:
    """One array of each dtype the library's numpy writer takes (ml_dtypes' too)."""
    rng = np.random.default_rng(30)
    arrays: dict[str, np.ndarray] = {}
    for dtype in (np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32,
                  np.uint64, np.int64, np.float16, np.float32, np.float64, np.complex64):
        arrays[f"plain.{np.dtype(dtype).name}"] = (rng.integers(0, 2, (3, 5)) if dtype is np.bool_
                                                   else rng.random((3, 5)) * 100).astype(dtype)
    for name in ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                 "float8_e8m0fnu"):
        values = rng.random((2, 7)).astype(np.float32)
        arrays[f"ml.{name}"] = values.astype(getattr(ml_dtypes, name))
    arrays["scalar"] = np.array(2.5, dtype=np.float32)
    arrays["empty"] = np.zeros((0, 4), dtype=np.float32)
    arrays["layer.0/attn.é"] = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    return arrays


def test_files_the_library_writes_read_as_it_reads_them(dump: Path, tmp_path: Path):
    """A file of every dtype the library's writer takes, with metadata (quotes, a newline,
    non-ASCII), is read as the library reads it, field by field, and each array's range holds
    exactly the bytes that were saved."""
    arrays = every_dtype()
    metadata = {"format": "np", "quote \" and \\": "line\nbreak", "é": "ünïcödé 😀"}
    path = tmp_path / "every.safetensors"
    save_file(arrays, path, metadata=metadata)
    [index] = indexes(dump, path)
    check_against_library(index, path)
    assert index["metadata"] == metadata
    raw = path.read_bytes()
    by_name = {a["name"]: a for a in index["arrays"]}
    assert set(by_name) == set(arrays)
    for name, array in arrays.items():
        a = by_name[name]
        assert raw[a["offset"]:a["offset"] + a["size"]] == array.tobytes(), name
    assert {a["type_name"] for a in index["arrays"]} == set(DLPACK) - {"F4", "F6_E2M3", "F6_E3M2"}


def test_packed_float4_is_handed_out_in_pairs(dump: Path, tmp_path: Path):
    """An F4 tensor written by the library from PyTorch's storage form (float4_e2m1fn_x2, shape
    in bytes: the library doubles the last dimension into the header's shape in values) is
    handed out in that storage form again: float4_e2m1fn_x2 (DLPack 17, 4 bits, 2 lanes) over
    the same bytes, its shape in values kept as the logical shape."""
    packed = np.arange(12, dtype=np.uint8).reshape(3, 4)
    weight = np.ones((2, 2), dtype=np.float32)
    path = tmp_path / "fp4.safetensors"
    serialize_file({"q.weight": TensorSpec(dtype="float4_e2m1fn_x2", shape=[3, 4],
                                           data_ptr=packed.ctypes.data, data_len=packed.nbytes),
                    "q.scale": TensorSpec(dtype="float32", shape=[2, 2],
                                          data_ptr=weight.ctypes.data, data_len=weight.nbytes)},
                   path, metadata={"quant": "mxfp4"})
    [index] = indexes(dump, path)
    check_against_library(index, path)
    fp4 = next(a for a in index["arrays"] if a["name"] == "q.weight")
    assert fp4["dtype"] == [17, 4, 2] and fp4["shape"] == [3, 4]
    assert fp4["logical_shape"] == [3, 8] and fp4["block"] == [2, 1]
    assert path.read_bytes()[fp4["offset"]:fp4["offset"] + fp4["size"]] == packed.tobytes()


def write_raw(path: Path, header: bytes | dict[str, Any], data: bytes = b"") -> Path:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def test_float6_and_files_in_other_orders(dump: Path, tmp_path: Path):
    """Files the library reads but its numpy writer cannot make: float6 (no numpy dtype), in
    fours of 3 bytes; tensors listed out of the order of their offsets, as older writers
    sorted them by name; a header without padding; empty tensors sharing an offset."""
    header = {
        "z": {"dtype": "F6_E2M3", "shape": [2, 8], "data_offsets": [4, 16]},
        "a": {"dtype": "U16", "shape": [2], "data_offsets": [0, 4]},
        "e1": {"dtype": "F32", "shape": [0, 3], "data_offsets": [16, 16]},
        "e0": {"dtype": "F6_E3M2", "shape": [0], "data_offsets": [16, 16]},
        "__metadata__": None,
    }
    path = write_raw(tmp_path / "fp6.safetensors", header, bytes(range(16)))
    [index] = indexes(dump, path)
    check_against_library(index, path)
    assert [a["name"] for a in index["arrays"]] == ["a", "z", "e0", "e1"]
    z = index["arrays"][1]
    assert z["dtype"] == [15, 6, 4] and z["shape"] == [2, 2] and z["size"] == 12
    assert index["metadata"] == {}


def test_what_the_library_refuses_is_refused(dump: Path, tmp_path: Path):
    """Each file the library refuses (bad sizes, bad JSON, bad types and ranges) is refused by
    the runtime too, as a format error or, for a dtype it does not know, as incompatible."""
    one = {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}
    cases: dict[str, tuple[bytes | dict[str, Any], bytes]] = {
        "json": (b"{not json}", b""),
        "trailing": (b"{} x", b""),
        "utf8": (b'{"\xff": 1}', b""),
        "dtype": ({"a": {**one, "dtype": "Q4"}}, b"1234"),
        "float": ({"a": {**one, "shape": [4.0]}}, b"1234"),
        "negative": ({"a": {**one, "data_offsets": [0, -4]}}, b"1234"),
        "size": ({"a": {**one, "shape": [3]}}, b"1234"),
        "gap": ({"a": {**one, "data_offsets": [2, 6]}}, b"123456"),
        "overlap": ({"a": one, "b": {**one, "data_offsets": [2, 6]}}, b"123456"),
        "past": ({"a": one}, b"12"),
        "after": ({"a": one}, b"123456"),
        "overflow": ({"a": {**one, "shape": [2**62, 2**62]}}, b"1234"),
        "bits": ({"a": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}, b"12"),
        "three": ({"a": {**one, "data_offsets": [0, 4, 4]}}, b"1234"),
        "missing": ({"a": {"dtype": "U8", "shape": [4]}}, b"1234"),
        "twice": (b'{"__metadata__": {}, "__metadata__": {}}', b""),
        "metadata": ({"__metadata__": {"k": 1}}, b""),
        "surrogate": (b'{"\\ud800": 1}', b""),
    }
    paths = [write_raw(tmp_path / f"{name}.safetensors", header, data)
             for name, (header, data) in cases.items()]
    for path in paths:
        with pytest.raises(SafetensorError):
            with safe_open(path, framework="np") as f:
                list(f.keys())
    for name, index in zip(cases, indexes(dump, *paths)):
        assert index["status"] == (4 if name == "dtype" else 2), (name, index)
        assert index["message"].startswith(f"'{tmp_path / name}.safetensors'"), index


def test_where_modpack_is_stricter_than_the_library(dump: Path, tmp_path: Path):
    """Files the library reads that the runtime refuses, each for a reason its message gives:
    two tensors of one name (the library silently keeps the last, so two readers could see
    different tensors), a field the format does not define, a tensor name that is empty or
    holds NUL, and float4 rows that share a byte (no float4_e2m1fn_x2 form, as PyTorch's loader
    finds too)."""
    one = {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}
    cases = {
        "duplicate": (b'{"a": ' + json.dumps(one).encode() + b', "a": ' + json.dumps(one).encode()
                      + b"}", b"1234", 2, "two tensors are named 'a'"),
        "field": ({"a": {**one, "note": "x"}}, b"1234", 2, "has a field 'note'"),
        "empty-name": ({"": one}, b"1234", 2, "name is empty"),
        "nul-name": ({"a\0b": one}, b"1234", 2, "NUL character"),
        "fp4-rows": ({"a": {"dtype": "F4", "shape": [2, 3], "data_offsets": [0, 3]}}, b"123", 4,
                     "last dimension is not a multiple of 2"),
    }
    paths = [write_raw(tmp_path / f"{name}.safetensors", header, data)
             for name, (header, data, _, _) in cases.items()]
    for path in paths:
        with safe_open(path, framework="np") as f:
            assert list(f.keys())
    for (status, needle), index in zip([(c[2], c[3]) for c in cases.values()],
                                       indexes(dump, *paths)):
        assert index["status"] == status and needle in index["message"], index


def test_many_tensors(dump: Path, tmp_path: Path):
    """A file of 20000 tensors (a large model's shard has thousands) is read whole, in the
    order of its offsets, as the library reads it."""
    arrays = {f"model.layers.{i // 10}.w{i % 10}": np.full((i % 7 + 1,), i, dtype=np.float32)
              for i in range(20000)}
    path = tmp_path / "many.safetensors"
    save_file(arrays, path)
    [index] = indexes(dump, path)
    check_against_library(index, path)
    assert len(index["arrays"]) == 20000
