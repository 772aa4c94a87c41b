"""Weight files (csrc/include/modpack/weights.h, docs/format.md "Weight files"), writer side:
every file written here is read back by a parser of this file's own, field by field at the
offsets the C header gives, and checked against the arrays it was written from with hashes
computed here (xxhash, hashlib), not with the writer's code. The seal is checked by the C
runtime.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
from dataclasses import FrozenInstanceError, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xxhash
from test_golden import xxd

from modpack.errors import ArgumentError, ModpackError
from modpack.runtime.binding import ffi, lib
from modpack.runtime.dtypes import dtype_from_dl
from modpack.runtime.subbyte import FLOAT4_E2M1FN_X2
from modpack.weights import (
    WrittenWeights,
    chunked_sha256,
    content_digest,
    save_weights,
    write_weight_file,
)
from modpack.weights import writer as weights_writer

DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "golden_weights_v1"
DOCS = DATA.parents[1] / "docs" / "format.md"

# The structs of weights.h and format.h, field by field: (name, offset, struct code). The
# offsets are written out here, and test_the_parser_reads_the_fields_where_c_puts_them checks
# them against the C structs, so this parser shares nothing with the writer.
HEADER_FIELDS = [
    ("magic", 0, "8s"), ("format_major", 8, "H"), ("format_minor", 10, "H"),
    ("header_size", 12, "I"), ("index_size", 16, "Q"), ("array_count", 24, "Q"),
    ("data_offset", 32, "Q"), ("data_size", 40, "Q"), ("alignment", 48, "I"),
    ("flags", 52, "I"), ("index_checksum", 56, "Q"),
]
RECORD_FIELDS = [
    ("name_offset", 0, "Q"), ("name_size", 8, "I"), ("dtype_code", 12, "B"),
    ("dtype_bits", 13, "B"), ("dtype_lanes", 14, "H"), ("ndim", 16, "I"), ("flags", 20, "I"),
    ("shape_offset", 24, "Q"), ("data_offset", 32, "Q"), ("data_size", 40, "Q"),
    ("checksum", 48, "Q"), ("digest", 56, "32s"), ("reserved", 88, "Q"),
]
SEAL_FIELDS = [
    ("file_size", 0, "Q"), ("blob_offset", 8, "Q"), ("blob_vaddr", 16, "Q"),
    ("blob_size", 24, "Q"), ("payloads_offset", 32, "Q"), ("payloads_size", 40, "Q"),
    ("digest_low", 48, "Q"), ("digest_high", 56, "Q"), ("version", 64, "I"), ("flags", 68, "I"),
    ("magic", 72, "8s"),
]
HEADER_SIZE, RECORD_SIZE, SEAL_SIZE = 64, 96, 80
MAGIC = b"\x89MPW\r\n\x1a\n"
CHUNK = 4 << 20  # MP_WEIGHTS_DIGEST_CHUNK


def reference_chunked_sha256(data: bytes) -> bytes:
    """weights.h's chunked SHA-256, written again from its definition."""
    digests = [hashlib.sha256(data[at : at + CHUNK]).digest()
               for at in range(0, len(data), CHUNK)]
    return hashlib.sha256(b"".join(digests)).digest()


def decode(fields: list[tuple[str, int, str]], data: bytes, base: int) -> dict[str, Any]:
    return {name: struct.unpack_from("<" + code, data, base + offset)[0]
            for name, offset, code in fields}


@dataclass
class Parsed:
    data: bytes
    header: dict[str, Any]
    records: list[dict[str, Any]]
    seal: dict[str, Any]

    def index(self) -> bytes:
        return self.data[: self.header["index_size"]]

    def array(self, i: int) -> np.ndarray:
        r = self.records[i]
        dtype = dtype_from_dl(r["dtype_code"], r["dtype_bits"], r["dtype_lanes"])
        return np.frombuffer(r["bytes"], dtype=dtype).reshape(r["shape"])


def parse(path: Path) -> Parsed:
    """Read the weight file at |path| field by field (bounds checked as a reader would)."""
    data = path.read_bytes()
    assert len(data) >= HEADER_SIZE + SEAL_SIZE
    header = decode(HEADER_FIELDS, data, 0)
    index_size = header["index_size"]
    assert header["header_size"] <= index_size <= len(data) - SEAL_SIZE
    records = []
    for i in range(header["array_count"]):
        base = header["header_size"] + RECORD_SIZE * i
        assert base + RECORD_SIZE <= index_size
        r = decode(RECORD_FIELDS, data, base)
        assert r["name_offset"] + r["name_size"] <= index_size
        assert r["shape_offset"] + 8 * r["ndim"] <= index_size
        r["name"] = data[r["name_offset"] : r["name_offset"] + r["name_size"]].decode()
        r["shape"] = struct.unpack_from(f"<{r['ndim']}Q", data, r["shape_offset"])
        end = header["data_offset"] + header["data_size"]
        assert header["data_offset"] <= r["data_offset"] <= r["data_offset"] + r["data_size"] \
            <= end
        r["bytes"] = data[r["data_offset"] : r["data_offset"] + r["data_size"]]
        records.append(r)
    seal = decode(SEAL_FIELDS, data, len(data) - SEAL_SIZE)
    return Parsed(data, header, records, seal)


def seal_status(path: Path) -> int:
    return lib.mp_seal_check_file(os.fsencode(path), ffi.new("mp_seal_v1_t*"))


def check_file(path: Path, items: list[tuple[str, Any]], alignment: int = 64,
               written: WrittenWeights | None = None) -> Parsed:
    """Everything weights.h and docs/format.md say about the file at |path|, written from
    |items| with |alignment|."""
    p = parse(path)
    h, data = p.header, p.data
    arrays = [(name, np.asarray(value)) for name, value in items]

    # Header.
    assert h["magic"] == MAGIC
    assert (h["format_major"], h["format_minor"]) == (1, 0)
    assert h["header_size"] == HEADER_SIZE
    assert h["index_size"] % 64 == 0
    assert h["array_count"] == len(arrays)
    assert h["alignment"] == alignment and h["flags"] == 0
    assert h["data_offset"] % alignment == 0 and h["data_offset"] >= h["index_size"]
    index = bytearray(p.index())
    index[56:64] = bytes(8)
    assert xxhash.xxh3_64_intdigest(bytes(index)) == h["index_checksum"]

    # Records, shapes, names, in that order, then zeros to index_size and to data_offset.
    cursor = HEADER_SIZE + RECORD_SIZE * len(arrays)
    for r in p.records:
        assert r["shape_offset"] == cursor
        cursor += 8 * r["ndim"]
    for r in p.records:
        assert r["name_offset"] == cursor
        cursor += r["name_size"]
    assert h["index_size"] == (cursor + 63) // 64 * 64
    assert data[cursor : h["data_offset"]] == bytes(h["data_offset"] - cursor)

    # Every record against its array.
    for (name, array), r in zip(arrays, p.records, strict=True):
        raw = np.ascontiguousarray(array).tobytes()
        assert r["name"] == name
        assert dtype_from_dl(r["dtype_code"], r["dtype_bits"], r["dtype_lanes"]) == array.dtype
        lanes = 2 if array.dtype == FLOAT4_E2M1FN_X2 else 1  # two float4 values a byte
        assert r["dtype_lanes"] == lanes and r["flags"] == 0 and r["reserved"] == 0
        assert r["shape"] == array.shape and r["ndim"] == array.ndim
        assert r["data_offset"] % alignment == 0
        assert r["data_size"] == len(raw) and r["bytes"] == raw
        assert r["checksum"] == xxhash.xxh3_64_intdigest(raw)
        assert r["digest"] == reference_chunked_sha256(raw)
        assert np.array_equal(p.array(p.records.index(r)), array, equal_nan=array.dtype.kind
                              in "fc")

    # Data ranges: identical bytes share one range; the others are laid out in record order,
    # aligned, zero padding between, the data region running exactly over them.
    ranges: list[tuple[int, int]] = []
    for i, r in enumerate(p.records):
        key = (r["data_offset"], r["data_size"])
        for earlier in p.records[:i]:
            if earlier["bytes"] == r["bytes"]:
                assert (earlier["data_offset"], earlier["data_size"], earlier["checksum"],
                        earlier["digest"]) == (*key, r["checksum"], r["digest"])
                break
        else:
            ranges.append(key)
    end = h["data_offset"]
    for offset, size in ranges:
        assert offset >= end and offset % alignment == 0
        assert data[end:offset] == bytes(offset - end)
        end = offset + size
    assert end == h["data_offset"] + h["data_size"]

    # The seal, right after the data.
    s = p.seal
    assert len(data) == end + SEAL_SIZE == s["file_size"]
    assert (s["blob_offset"], s["blob_vaddr"], s["blob_size"]) == (0, 0, end)
    assert (s["payloads_offset"], s["payloads_size"]) == (h["data_offset"], h["data_size"])
    assert (s["version"], s["flags"], s["magic"]) == (1, 0, b"MPKSEAL\n")
    assert seal_status(path) == 0

    digest = hashlib.sha256(p.index()).digest()
    assert content_digest(p.index()) == digest == content_digest(data)
    if written is not None:
        assert written.path == path.resolve()
        assert written.digest == digest
        assert written.digest_hex == "sha256:" + digest.hex()
        assert written.arrays == {n: (a.dtype, a.shape) for n, a in arrays}
        assert list(written.arrays) == [n for n, _ in arrays]
    return p


def test_the_parser_reads_the_fields_where_c_puts_them():
    for fields, c_type, size in ((HEADER_FIELDS, "mp_weights_header_v1_t", HEADER_SIZE),
                                 (RECORD_FIELDS, "mp_weights_record_v1_t", RECORD_SIZE),
                                 (SEAL_FIELDS, "mp_seal_v1_t", SEAL_SIZE)):
        c_fields = ffi.typeof(c_type).fields
        assert [name for name, _, _ in fields] == [name for name, _ in c_fields]
        for (name, offset, code), (_, field) in zip(fields, c_fields, strict=True):
            assert (offset, struct.calcsize("<" + code)) == (field.offset,
                                                              ffi.sizeof(field.type)), name
        assert ffi.sizeof(c_type) == size
    assert (lib.MP_WEIGHTS_HEADER_SIZE, lib.MP_WEIGHTS_RECORD_SIZE) == (HEADER_SIZE, RECORD_SIZE)
    assert ffi.string(lib.MP_WEIGHTS_MAGIC) == MAGIC
    assert lib.MP_WEIGHTS_DIGEST_CHUNK == CHUNK


def test_chunked_sha256_is_the_one_weights_h_defines():
    assert chunked_sha256(b"") == hashlib.sha256(b"").digest()
    assert chunked_sha256(b"abc") == hashlib.sha256(hashlib.sha256(b"abc").digest()).digest()
    data = np.random.default_rng(1).integers(0, 256, 2 * CHUNK + 7, dtype=np.uint8)
    assert chunked_sha256(data) == reference_chunked_sha256(data.tobytes())
    assert chunked_sha256(np.float32(2.5)) == reference_chunked_sha256(np.float32(2.5).tobytes())


def test_a_file_field_by_field(tmp_path):
    items = [
        ("weight", np.arange(12, dtype=np.float32).reshape(3, 4)),
        ("bias", np.array([-1, 0, 7], dtype=np.int64)),
        ("scalar", np.float64(2.5)),  # 0-d
        ("mask", np.array([[True, False]])),
        ("empty", np.zeros((0, 3), dtype=np.int16)),
        ("z", np.array([1 + 2j, -3j], dtype=np.complex64)),
        ("half", np.array([0.5, 65504], dtype=np.float16)),
        ("u", np.array([2**64 - 1], dtype=np.uint64)),
        ("transposed", np.arange(6, dtype=np.int32).reshape(2, 3).T),  # not C-contiguous
        ("list", [[1.0, 2.0], [3.0, 4.0]]),  # anything np.asarray takes
        ("größe/層.0", np.ones((1, 1, 2, 1), dtype=np.uint8)),
    ]
    path = tmp_path / "w.mpw"
    written = write_weight_file(items, path, 64)
    p = check_file(path, items, 64, written)
    assert p.records[8]["shape"] == (3, 2) and p.array(8).tolist() == [[0, 3], [1, 4], [2, 5]]
    assert p.records[9]["dtype_code"] == 2 and p.records[9]["dtype_bits"] == 64


@pytest.mark.parametrize("alignment", [64, 128, 4096, 1 << 21])
def test_every_array_starts_at_a_multiple_of_the_alignment(tmp_path, alignment):
    items = [(f"a{i}", np.full(i * 37 + 1, i, dtype=np.uint8)) for i in range(4)]
    path = save_weights(dict(items), tmp_path / "w.mpw", alignment=alignment)
    p = check_file(path, items, alignment)
    assert [r["data_offset"] % alignment for r in p.records] == [0] * 4
    assert p.header["data_offset"] == max(alignment, p.header["index_size"])


def test_identical_arrays_are_stored_once(tmp_path):
    shared = np.arange(1000, dtype=np.float32)
    items = [
        ("a", shared),
        ("b", np.ones(1000, dtype=np.float32)),
        ("a_again", shared),  # the same array
        ("a_copy", shared.copy()),  # the same bytes elsewhere
        ("a_as_ints", shared.view(np.int32).reshape(10, 100)),  # same bytes, other dtype, shape
        ("a_but_one", np.where(np.arange(1000) == 999, -1, shared).astype(np.float32)),
        ("e1", np.zeros(0, dtype=np.float32)),
        ("e2", np.zeros((3, 0), dtype=np.int8)),
    ]
    path = tmp_path / "w.mpw"
    p = check_file(path, items, 64, write_weight_file(items, path, 64))
    offsets = [r["data_offset"] for r in p.records]
    assert offsets[0] == offsets[2] == offsets[3] == offsets[4]
    assert len({offsets[0], offsets[1], offsets[5]}) == 3
    assert offsets[6] == offsets[7] and p.records[6]["digest"] == hashlib.sha256(b"").digest()
    # Three ranges of 4000 bytes (a, b, a_but_one), each at a multiple of 64, then the empty
    # one at the next multiple of 64: nothing more.
    assert p.header["data_size"] == 3 * 4032
    assert sorted(set(offsets)) == [*offsets[:2], offsets[5], offsets[6]]


def test_the_same_arrays_give_the_same_bytes(tmp_path):
    rng = np.random.default_rng(7)
    arrays = {"x": rng.standard_normal((64, 33)).astype(np.float32), "y": np.arange(5),
              "x2": None}
    arrays["x2"] = arrays["x"].copy()
    first = save_weights(arrays, tmp_path / "one.mpw", alignment=256)
    second = save_weights({k: np.array(v) for k, v in arrays.items()}, tmp_path / "two.mpw",
                          alignment=256)
    assert first.read_bytes() == second.read_bytes()
    assert save_weights(arrays, tmp_path / "three.mpw").read_bytes() != first.read_bytes()


def test_the_seal_verifies_and_one_flipped_index_byte_fails_it(tmp_path):
    items = [("w", np.arange(100, dtype=np.int32)), ("b", np.ones(3, dtype=np.float32))]
    path = save_weights(dict(items), tmp_path / "w.mpw")
    p = check_file(path, items)
    out = ffi.new("mp_seal_v1_t*")
    assert lib.mp_seal_check_file(os.fsencode(path), out) == 0
    assert (out.blob_size, out.payloads_offset) == (len(p.data) - SEAL_SIZE,
                                                    p.header["data_offset"])
    for at in (0, 20, HEADER_SIZE + 40, p.records[1]["name_offset"], p.header["index_size"] - 1):
        damaged = bytearray(p.data)
        damaged[at] ^= 0x01
        bad = tmp_path / f"bad{at}.mpw"
        bad.write_bytes(bytes(damaged))
        assert seal_status(bad) == lib.MP_ERR_FORMAT, at
        index = bytearray(damaged[: p.header["index_size"]])
        index[56:64] = bytes(8)  # (no flip falls in the checksum field itself)
        assert xxhash.xxh3_64_intdigest(bytes(index)) != p.header["index_checksum"], at


def test_a_file_of_no_arrays(tmp_path):
    path = tmp_path / "none.mpw"
    written = write_weight_file([], path, 64)
    p = check_file(path, [], 64, written)
    assert p.header["index_size"] == p.header["data_offset"] == 64
    assert p.header["data_size"] == 0 and len(p.data) == 64 + SEAL_SIZE
    assert written.arrays == {}
    assert save_weights({}, tmp_path / "none2.mpw").read_bytes() == p.data


@pytest.mark.parametrize("size", [2 * CHUNK + 1000, (64 << 20) + 12345],
                         ids=["three_chunks", "write_behind"])
def test_arrays_of_several_digest_chunks(tmp_path, size):
    big = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    items = [("small", np.arange(3, dtype=np.int8)), ("big", big), ("big_copy", big.copy())]
    path = tmp_path / "w.mpw"
    p = check_file(path, items, 64, write_weight_file(items, path, 64))
    digest = p.records[1]["digest"]
    assert digest != hashlib.sha256(big.tobytes()).digest()  # chunked, not plain
    assert digest == p.records[2]["digest"] and p.header["data_size"] == 64 + size


def test_bfloat16_and_float8_arrays(tmp_path):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    items = [("bf16", np.array([1.5, -2.0, 3.0e38], dtype=ml_dtypes.bfloat16)),
             ("f8", np.array([0.5, -448.0], dtype=ml_dtypes.float8_e4m3fn))]
    path = tmp_path / "w.mpw"
    p = check_file(path, items, 64, write_weight_file(items, path, 64))
    assert (p.records[0]["dtype_code"], p.records[0]["dtype_bits"]) == (4, 16)
    assert (p.records[1]["dtype_code"], p.records[1]["dtype_bits"]) == (10, 8)
    assert p.array(0).tolist() == items[0][1].tolist()


def test_float4_pairs_and_float8_arrays(tmp_path):
    """Packed float4 pairs (float4_e2m1fn_x2: code 17, 4 bits, 2 lanes, one byte each) and float8
    are stored as they are, named so by inspect, and read back by the runtime typed, byte for
    byte; from numpy and from PyTorch tensors alike (taken through DLPack, numpy having no such
    dtype)."""
    import modpack

    ml_dtypes = pytest.importorskip("ml_dtypes")
    values = np.array([[0.5, -6.0, 1.5, 3.0, 0.0, 4.0], [1.0, -1.0, 2.0, 6.0, -0.5, 0.0]],
                      ml_dtypes.float4_e2m1fn)
    pairs = modpack.pack_float4(values)
    items = [("fp4", pairs), ("f8", np.array([0.5, -448.0, 3.0], ml_dtypes.float8_e4m3fn)),
             ("e5m2", np.array([1.0, -57344.0], ml_dtypes.float8_e5m2))]
    path = tmp_path / "w.mpw"
    p = check_file(path, items, 64, write_weight_file(items, path, 64))
    assert [(r["dtype_code"], r["dtype_bits"], r["dtype_lanes"], r["data_size"])
            for r in p.records] == [(17, 4, 2, 6), (10, 8, 1, 3), (12, 8, 1, 2)]
    from modpack.tools.weight_reports import inspect_weight_file

    assert [(a["name"], a["dtype"], a["shape"]) for a in inspect_weight_file(path)["arrays"]] == \
        [("fp4", "float4_e2m1fn_x2", [2, 3]), ("f8", "float8_e4m3fn", [3]),
         ("e5m2", "float8_e5m2", [2])]
    loaded = modpack.load_weights(path)
    assert loaded["fp4"].dtype == modpack.float4_e2m1fn_x2 and loaded["fp4"].shape == (2, 3)
    assert np.array_equal(modpack.unpack_float4(loaded["fp4"]), values)
    assert loaded["f8"].dtype == items[1][1].dtype
    assert loaded["f8"].tobytes() == items[1][1].tobytes()
    assert loaded["e5m2"].tobytes() == items[2][1].tobytes()
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: pip install "
                                "torch==2.13.0")
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip(f"torch {torch.__version__} has no float4_e2m1fn_x2")
    tensors = {"fp4": torch.from_numpy(pairs.view(np.uint8)).view(torch.float4_e2m1fn_x2),
               "f8": torch.tensor([0.5, -448.0, 3.0]).to(torch.float8_e4m3fn)}
    from_torch = tmp_path / "torch.mpw"
    save_weights(tensors, from_torch)
    again = modpack.load_weights(from_torch)
    assert again["fp4"].dtype == modpack.float4_e2m1fn_x2
    assert again["fp4"].tobytes() == pairs.tobytes()
    assert again["f8"].tobytes() == items[1][1].tobytes()
    assert torch.from_dlpack(modpack.from_dlpack(again["fp4"])).dtype == torch.float4_e2m1fn_x2


BAD_ARRAYS = [
    ({"": np.zeros(1)}, "array name '' must be a str of 1 to 4096 bytes"),
    ({"a\0b": np.zeros(1)}, "without NUL: rename it"),
    ({"x" * 4097: np.zeros(1)}, "1 to 4096 bytes"),
    ({"\ud800": np.zeros(1)}, "of UTF-8"),
    ({3: np.zeros(1)}, "array name 3 must be a str"),
    ({"obj": np.array([object()])}, "array 'obj' cannot be saved: dtype object has no DLPack"),
    ({"be": np.arange(3, dtype=">i4")}, "array 'be' cannot be saved: dtype >i4 .*native-endian"),
    ({"text": np.array(["a", "b"])}, "array 'text' cannot be saved"),
    ({"when": np.array(["2024-01-01"], dtype="datetime64[D]")}, "array 'when' cannot be saved"),
    ({"deep": np.zeros((1,) * 33)}, "array 'deep' has 33 dimensions; .* up to 32: reshape it"),
    ({"ragged": [[1, 2], [3]]}, "array 'ragged' cannot be saved: numpy cannot make an array"),
]
try:
    import ml_dtypes

    BAD_ARRAYS += [  # one value per byte: not DLPack's packed float4/float6
        ({"fp4": np.zeros(4, ml_dtypes.float4_e2m1fn)},
         r"array 'fp4' cannot be saved: it is a numpy float4_e2m1fn array, which ml_dtypes holds "
         r"one value per byte, .*modpack.pack_float4\(x\)"),
        ({"fp6": np.zeros(4, ml_dtypes.float6_e3m2fn)},
         r"array 'fp6' cannot be saved: it is a numpy float6_e3m2fn array"),
    ]
except ImportError:
    pass


@pytest.mark.parametrize(("arrays", "message"), BAD_ARRAYS,
                         ids=[m.split(":")[0][:24] for _, m in BAD_ARRAYS])
def test_bad_arrays_are_refused_before_any_file_is_touched(tmp_path, arrays, message):
    path = tmp_path / "w.mpw"
    path.write_bytes(b"earlier")
    with pytest.raises(ArgumentError, match=message) as info:
        save_weights({"fine": np.ones(2), **arrays}, path)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)
    assert path.read_bytes() == b"earlier" and os.listdir(tmp_path) == ["w.mpw"]


@pytest.mark.parametrize("alignment", [32, 96, 1 << 22, 0, -64, True, 64.0, "64"])
def test_a_bad_alignment_is_refused(tmp_path, alignment):
    with pytest.raises(ArgumentError, match="alignment must be a power of two from 64 to 2097152"):
        save_weights({"w": np.ones(2)}, tmp_path / "w.mpw", alignment=alignment)
    assert os.listdir(tmp_path) == []


def test_bad_calls_are_refused(tmp_path):
    with pytest.raises(ArgumentError, match="mapping of name -> array"):
        save_weights([("w", np.ones(2))], tmp_path / "w.mpw")  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match=r"'w' is given twice: .* rename one"):
        write_weight_file([("w", np.ones(2)), ("w", np.zeros(2))], tmp_path / "w.mpw")
    with pytest.raises(ArgumentError, match=r"\(name, array\) pairs"):
        write_weight_file([np.ones(2)], tmp_path / "w.mpw")  # type: ignore[list-item]
    with pytest.raises(ArgumentError, match="is a directory; give a file path"):
        save_weights({"w": np.ones(2)}, tmp_path)
    with pytest.raises(ArgumentError, match="does not exist"):
        save_weights({"w": np.ones(2)}, tmp_path / "no" / "w.mpw")
    assert os.listdir(tmp_path) == []


def test_what_write_weight_file_returns(tmp_path):
    items = [("b", np.ones((2, 3), dtype=np.float16)), ("a", np.int8(3))]
    written = write_weight_file(items, tmp_path / "w.mpw")
    assert written.arrays == {"b": (np.dtype(np.float16), (2, 3)), "a": (np.dtype(np.int8), ())}
    assert list(written.arrays) == ["b", "a"]
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", written.digest_hex)
    assert written.digest == content_digest((tmp_path / "w.mpw").read_bytes())
    with pytest.raises(FrozenInstanceError):
        written.digest = b""  # type: ignore[misc]
    assert save_weights(dict(items), str(tmp_path / "x.mpw")) == (tmp_path / "x.mpw").resolve()


def mutating_chunks(monkeypatch: pytest.MonkeyPatch, change: Any) -> None:
    """Make the writer's chunk iteration call |change| after each chunk it hands out, i.e.
    while the save is under way."""
    original = weights_writer._chunks

    def chunks(data: memoryview) -> Any:
        for chunk in original(data):
            yield chunk
            change()

    monkeypatch.setattr(weights_writer, "_chunks", chunks)


def test_an_array_changed_during_the_save_is_refused_naming_it(tmp_path, monkeypatch):
    path = tmp_path / "w.mpw"
    earlier = save_weights({"old": np.zeros(3)}, path).read_bytes()
    a, b = np.arange(1000, dtype=np.int64), np.ones(1000, dtype=np.float32)
    copy_of_a = a.copy()

    def change_b() -> None:  # after a's chunk went out: b is yet to be written
        b[0] = 5

    mutating_chunks(monkeypatch, change_b)
    with pytest.raises(ModpackError, match="array 'b' changed while it was being saved"):
        save_weights({"a": a, "b": b}, path)
    assert path.read_bytes() == earlier and os.listdir(tmp_path) == ["w.mpw"]

    # A stored-once copy is not written, but changing it is refused all the same.
    mutating_chunks(monkeypatch, lambda: copy_of_a.__setitem__(0, -1))
    with pytest.raises(ModpackError, match=r"array 'a2' changed .* save a copy"):
        save_weights({"a": a, "a2": copy_of_a}, path)
    assert path.read_bytes() == earlier and os.listdir(tmp_path) == ["w.mpw"]


def test_an_array_changed_between_its_own_chunks_is_refused(tmp_path, monkeypatch):
    big = np.zeros(2 * CHUNK + 100, dtype=np.uint8)
    mutating_chunks(monkeypatch, lambda: big.__setitem__(-1, big[-1] + 1))
    with pytest.raises(ModpackError, match="array 'big' changed"):
        save_weights({"big": big}, tmp_path / "w.mpw")
    assert os.listdir(tmp_path) == []


def test_a_full_disk_says_so_and_keeps_the_earlier_file(tmp_path, monkeypatch):
    path = tmp_path / "w.mpw"
    earlier = save_weights({"old": np.zeros(3)}, path).read_bytes()

    def no_room() -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    mutating_chunks(monkeypatch, no_room)
    with pytest.raises(ModpackError, match=f"cannot save to {path}: no space left on device "
                                           r"\(the file system of .*w.mpw is intact"):
        save_weights({"w": np.ones(10)}, path)
    assert path.read_bytes() == earlier and os.listdir(tmp_path) == ["w.mpw"]


FULL_DISK = r"""
import json, os, sys
import numpy as np
import modpack
from modpack.weights import save_weights

disk, out = sys.argv[1], {}
path = os.path.join(disk, "w.mpw")
save_weights({"w": np.full(1 << 18, 1.0, np.float32)}, path)   # 1 MiB on the 8 MiB disk
before = open(path, "rb").read()
try:
    save_weights({"w": np.full(4 << 20, 2.0, np.float32)}, path)   # 16 MiB
    out["result"] = "saved"
except modpack.ModpackError as exc:
    out["result"] = str(exc)
out["intact"] = open(path, "rb").read() == before
out["left"] = sorted(os.listdir(disk))
print(json.dumps(out))
"""


def test_a_really_full_disk(tmp_path):
    """On a small tmpfs in a private mount namespace (as tests/test_disk_full.py does)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"],
                           capture_output=True, text=True) if shutil.which("unshare") else None
    if probe is None or probe.returncode != 0:
        pytest.skip("cannot mount a small file system here: unshare --user --mount is not "
                    "allowed")
    script = tmp_path / "full.py"
    script.write_text(FULL_DISK)
    command = (f"mount -t tmpfs -o size=8m modpack-full {disk} && "
               f"exec {sys.executable} {script} {disk}")
    proc = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                           command], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    message = results["result"]
    assert "cannot save to" in message and "no space left on device" in message, message
    assert f"the file system of {disk}" in message and "is intact" in message, message
    assert results["intact"] and results["left"] == ["w.mpw"], results


KILLED = r"""
import os, signal, sys
import numpy as np
from modpack.weights import save_weights, writer

path = sys.argv[1]
original = writer._chunks

def chunks(data):
    for chunk in original(data):
        yield chunk
        os.kill(os.getpid(), signal.SIGKILL)   # killed with the file half written

writer._chunks = chunks
save_weights({"w": np.ones(3 << 20, np.float32)}, path)
"""


def test_a_killed_save_leaves_nothing_and_the_earlier_file_intact(tmp_path):
    path = tmp_path / "w.mpw"
    earlier = save_weights({"old": np.zeros(3)}, path).read_bytes()
    proc = subprocess.run([sys.executable, "-c", KILLED, str(path)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert os.listdir(tmp_path) == ["w.mpw"] and path.read_bytes() == earlier


def golden_items(expected: dict) -> list[tuple[str, np.ndarray]]:
    return [(a["name"], np.array(a["values"], dtype=np.dtype(a["dtype"])).reshape(a["shape"]))
            for a in expected["arrays"]]


def test_the_golden_file_is_what_the_writer_writes(tmp_path):
    """tests/data/golden_weights_v1 (made by its make_golden.py): the writer still writes
    exactly its bytes, and they hold what expected.json says."""
    expected = json.loads((GOLDEN / "expected.json").read_text())
    golden = GOLDEN / "weights.mpw"
    items = golden_items(expected)
    assert expected["format_version"] == [lib.MP_WEIGHTS_FORMAT_MAJOR,
                                          lib.MP_WEIGHTS_FORMAT_MINOR] == [1, 0]
    p = check_file(golden, items, expected["alignment"])
    assert "sha256:" + hashlib.sha256(p.index()).hexdigest() == expected["content_digest"]
    assert [p.array(i).tolist() for i in range(len(items))] == [a["values"] for a in
                                                                  expected["arrays"]]
    written = write_weight_file(items, tmp_path / "again.mpw", expected["alignment"])
    assert (tmp_path / "again.mpw").read_bytes() == golden.read_bytes()
    assert written.digest_hex == expected["content_digest"]


def weights_section() -> str:
    text = DOCS.read_text()
    start = text.index("## Weight files")
    return text[start : text.index("\n## ", start + 1)]


def test_the_example_in_the_format_docs_runs_as_written(tmp_path):
    """docs/format.md's weight file example: its script runs as printed and writes the dump
    printed there, byte for byte, which is the golden file's."""
    section = weights_section()
    script, check = re.findall(r"```python\n(.*?)```", section, re.S)
    dump = section[section.index("00000000: "):]
    dump = dump[: dump.index("```")]
    folder = tmp_path / "wtex"
    exec(script.replace("/tmp/wtex", str(folder)), {})
    exec(check.replace("/tmp/wtex", str(folder)), {})
    assert xxd((folder / "weights.mpw").read_bytes()) == dump
    assert xxd((GOLDEN / "weights.mpw").read_bytes()) == dump
    digest = json.loads((GOLDEN / "expected.json").read_text())["content_digest"]
    assert digest in section
