"""The runtime's GGUF reader (csrc/src/weights/gguf.c, mp_gguf_read_index) against the format's
own package: files written by ``gguf.GGUFWriter`` are indexed as ``gguf.GGUFReader`` reads them
(every metadata value, every tensor's type, block, shape, offset and bytes, the data section),
for every ggml type the installed package knows; a file the reader refuses, the runtime
refuses too, naming the problem. The reader is called through a small C program that prints
its index as JSON, compiled here from the reader's own sources."""

from __future__ import annotations

import json
import math
import re
import struct
import subprocess
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from conftest import ROOT, run

gguf = pytest.importorskip("gguf", reason="pip install gguf (the test extra)")

FORMAT_ERROR, INCOMPATIBLE = 2, 4
DL_INT, DL_UINT, DL_FLOAT, DL_BFLOAT = 0, 1, 2, 4

# The reader and what it needs of the runtime (errors, bounded reads, JSON strings).
SOURCES = ["weights/gguf.c", "weights/foreign_index.c", "core/reader.c", "core/error.c",
           "core/thread_state.c", "core/json.c", "files/file.c"]

DUMP = r"""
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json.h"
#include "weights/foreign_index.h"

static void string(const char* s) {
  char text[1 << 14];
  mp_json_t j = {text, sizeof text, 0};
  mp_json_string(&j, s);
  fputs(text, stdout);
}

static void extents(const int64_t* shape, int32_t ndim) {
  printf("[");
  for (int32_t d = 0; d < ndim; ++d) printf("%s%" PRId64, d ? ", " : "", shape[d]);
  printf("]");
}

int main(int argc, char** argv) {
  int fd = open(argv[1], O_RDONLY);
  struct stat st;
  if (argc != 3 || fd < 0 || fstat(fd, &st) != 0) return 2;
  mp_foreign_index_t x;
  mp_status_t status = mp_gguf_read_index(fd, (uint64_t)st.st_size, argv[1],
                                          (mp_const_byte_span_t){NULL, 0}, &x);
  close(fd);
  if (status != MP_OK) {
    printf("{\"status\": %d, \"message\": ", (int)status);
    string(mp_error_message());
    printf("}\n");
    return 0;
  }
  printf("{\"status\": 0, \"format\": %d, \"version\": %" PRIu32 ", \"header_size\": %" PRIu64
         ", \"data_offset\": %" PRIu64 ", \"data_size\": %" PRIu64 ", \"alignment\": %" PRIu32
         ", \"metadata\": %s, \"tensors\": [",
         (int)x.format, x.version, x.header_size, x.data_offset, x.data_size, x.alignment,
         x.metadata_json);
  for (uint64_t i = 0; i < x.count; ++i) {
    const mp_foreign_array_t* a = &x.arrays[i];
    printf("%s{\"name\": ", i ? ", " : "");
    string(a->name);
    printf(", \"dtype\": [%d, %d, %d], \"shape\": ", a->dtype.code, a->dtype.bits,
           a->dtype.lanes);
    extents(a->shape, a->ndim);
    printf(", \"offset\": %" PRIu64 ", \"size\": %" PRIu64 ", \"type\": ", a->offset, a->size);
    string(a->type_name);
    printf(", \"type_id\": %" PRIu32 ", \"block\": [%" PRIu32 ", %" PRIu32 "], "
           "\"logical_shape\": ", a->type_id, a->block_elements, a->block_bytes);
    extents(a->logical_shape, a->logical_ndim);
    printf("}");
  }
  printf("]}\n");
  FILE* header = fopen(argv[2], "wb");
  if (!header || fwrite(x.header, 1, x.header_size, header) != x.header_size ||
      fclose(header) != 0)
    return 2;
  mp_foreign_index_free(&x);
  return 0;
}
"""


@pytest.fixture(scope="module")
def dump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The index printer, compiled with the reader's sources (warnings as errors)."""
    folder = tmp_path_factory.mktemp("gguf-dump")
    source = folder / "dump.c"
    source.write_text(DUMP)
    exe = folder / "dump"
    src = ROOT / "csrc" / "src"
    run("cc", "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'csrc' / 'include'}",
        f"-I{src}", source, *(src / s for s in SOURCES), "-o", exe)
    return exe


def index_of(dump: Path, path: Path) -> dict[str, Any]:
    """The runtime's index of |path| (with "header": the header bytes it kept), or its refusal
    ({"status", "message"})."""
    header = path.with_suffix(".header")
    proc = subprocess.run([dump, path, header], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    index = json.loads(proc.stdout)
    if index["status"] == 0:
        index["header"] = header.read_bytes()
    return index


def write_gguf(path: Path, fill: Callable[[Any], None], arch: str = "llama") -> Path:
    """A GGUF file written by the format's own writer; |fill| adds metadata and tensors."""
    writer = gguf.GGUFWriter(str(path), arch)
    fill(writer)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def blocks(qtype: Any, rows: int, blocks_per_row: int, seed: int = 0) -> np.ndarray:
    """Random bytes of |rows| rows of |blocks_per_row| blocks of |qtype| (uint8, as the writer
    takes raw quantized data)."""
    _, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(rows, blocks_per_row * block_bytes), dtype=np.uint8)


def quantized(qtype: Any, values: np.ndarray) -> np.ndarray:
    """|values| quantized by the package where it can (gguf.quants), else random blocks."""
    try:
        return np.asarray(gguf.quants.quantize(values, qtype))
    except (AttributeError, NotImplementedError):
        block_elements, _ = gguf.GGML_QUANT_SIZES[qtype]
        rows, columns = values.shape
        return blocks(qtype, rows, columns // block_elements)


# ---- metadata ----------------------------------------------------------------------------------


TOKENS = [f"tok{i}" for i in range(1000)] + ['"quoted"', "back\\slash", "new\nline", "é€😀", "\x01"]


def fill_metadata(writer: Any) -> None:
    writer.add_uint8("t.u8", 255)
    writer.add_int8("t.i8", -128)
    writer.add_uint16("t.u16", 65535)
    writer.add_int16("t.i16", -32768)
    writer.add_uint32("llama.context_length", 4096)
    writer.add_int32("t.i32", -2**31)
    writer.add_uint64("t.u64", 2**64 - 1)
    writer.add_int64("t.i64", -2**63)
    writer.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    writer.add_float32("t.f32.third", 1 / 3)
    writer.add_float32("t.f32.nan", float("nan"))
    writer.add_float32("t.f32.inf", float("-inf"))
    writer.add_float64("t.f64", math.pi)
    writer.add_float64("t.f64.tiny", 5e-324)
    writer.add_bool("t.yes", True)
    writer.add_bool("t.no", False)
    writer.add_string("general.name", 'a "tiny" model: é\t\\')
    writer.add_array("t.ints", [1, -2, 3])
    writer.add_array("t.floats", [0.5, 0.1, 1e30])
    writer.add_array("t.words", ["a", "b"])
    writer.add_token_list(TOKENS)
    writer.add_array("t.long_ints", list(range(100)))
    writer.add_key_value("t.nested", [[1, 2], [3]], gguf.GGUFValueType.ARRAY)


def same_value(ours: Any, theirs: Any, types: list[Any]) -> bool:
    """Whether the runtime's JSON value is the reader's: float32 values read back as float32,
    NaN and infinities as strings."""
    scalar = types[-1]
    if scalar in (gguf.GGUFValueType.FLOAT32, gguf.GGUFValueType.FLOAT64):
        cast = np.float32 if scalar == gguf.GGUFValueType.FLOAT32 else np.float64
        if isinstance(theirs, list):
            return len(ours) == len(theirs) and all(
                same_value(o, t, types[-1:]) for o, t in zip(ours, theirs))
        if math.isnan(theirs):
            return ours == "nan"
        if math.isinf(theirs):
            return ours == ("inf" if theirs > 0 else "-inf")
        return isinstance(ours, float) and cast(ours) == cast(theirs)
    return ours == theirs and type(ours) is type(theirs)


def test_metadata_is_the_readers(dump: Path, tmp_path: Path):
    """Every key-value pair the writer wrote is in the metadata JSON, in the file's order, with
    the reader's value: integers exact to 64 bits, floats reading back to the same float32 or
    float64, NaN and infinities as strings, bools, escaped strings; arrays of up to 64 elements
    whole, a vocabulary of 1005 strings summarized with its type, count and first 64; arrays of
    arrays nested."""
    path = write_gguf(tmp_path / "meta.gguf", fill_metadata)
    index = index_of(dump, path)
    assert index["status"] == 0, index
    reader = gguf.GGUFReader(str(path))
    fields = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    metadata = index["metadata"]
    assert list(metadata) == list(fields)
    summarized = {"tokenizer.ggml.tokens", "t.long_ints"}
    for key, field in fields.items():
        theirs = field.contents()
        if key in summarized:
            assert metadata[key]["count"] == len(theirs), key
            assert metadata[key]["first"] == theirs[:64], key
            continue
        if key == "t.nested":  # the reader flattens arrays of arrays
            assert metadata[key] == [[1, 2], [3]]
            assert theirs == [1, 2, 3]
            continue
        assert same_value(metadata[key], theirs, field.types), (key, metadata[key], theirs)
    assert metadata["tokenizer.ggml.tokens"]["type"] == "string"
    assert metadata["t.long_ints"]["type"] == "int32"
    # What a person reads: the shortest decimal that reads back.
    assert metadata["llama.attention.layer_norm_rms_epsilon"] == 1e-05
    text = json.dumps(metadata["t.f32.third"])
    assert text == "0.33333334", text
    assert metadata["t.f64"] == math.pi and metadata["t.f64.tiny"] == 5e-324
    assert metadata["general.name"] == 'a "tiny" model: é\t\\'


def test_the_vocabulary_is_summarized_even_when_the_header_is_large(dump: Path, tmp_path: Path):
    """A 60,000-token vocabulary (a header of over 3 MiB, longer than the reader's first read)
    is read whole: the header kept is the file's, the tensor after it where the reader
    puts it."""
    tokens = [f"token-{i:06d}-" + "x" * (24 + i % 17) for i in range(60_000)]

    def fill(writer: Any) -> None:
        writer.add_token_list(tokens)
        writer.add_tensor("output.weight", np.ones((8, 32), np.float32))

    path = write_gguf(tmp_path / "vocab.gguf", fill)
    index = index_of(dump, path)
    assert index["status"] == 0, index
    reader = gguf.GGUFReader(str(path))
    assert index["header_size"] == index["data_offset"] == reader.data_offset > 3 << 20
    assert index["header"] == path.read_bytes()[:reader.data_offset]
    vocabulary = index["metadata"]["tokenizer.ggml.tokens"]
    assert vocabulary["count"] == 60_000 and vocabulary["first"] == tokens[:64]
    (tensor,) = index["tensors"]
    assert tensor["offset"] == reader.tensors[0].data_offset


# ---- tensors -----------------------------------------------------------------------------------


UNBLOCKED = {  # ggml type: the DLPack dtype modpack hands it out as
    "F32": [DL_FLOAT, 32, 1], "F16": [DL_FLOAT, 16, 1], "F64": [DL_FLOAT, 64, 1],
    "BF16": [DL_BFLOAT, 16, 1], "I8": [DL_INT, 8, 1], "I16": [DL_INT, 16, 1],
    "I32": [DL_INT, 32, 1], "I64": [DL_INT, 64, 1],
}


def check_tensors(index: dict[str, Any], path: Path) -> gguf.GGUFReader:
    """The index's tensors are the reader's, each one's bytes the reader's view of it."""
    reader = gguf.GGUFReader(str(path))
    data = path.read_bytes()
    assert index["format"] == 2 and index["version"] == 3
    assert index["header_size"] == index["data_offset"] == reader.data_offset
    assert index["data_size"] == len(data) - reader.data_offset
    assert index["alignment"] == reader.alignment
    assert index["header"] == data[:reader.data_offset]
    ours = {t["name"]: t for t in index["tensors"]}
    assert sorted(ours) == sorted(t.name for t in reader.tensors)
    offsets = [t["offset"] for t in index["tensors"]]
    assert offsets == sorted(offsets)
    for theirs in reader.tensors:
        t = ours[theirs.name]
        qtype = theirs.tensor_type
        assert (t["type"], t["type_id"]) == (qtype.name, int(qtype)), theirs.name
        assert t["block"] == list(gguf.GGML_QUANT_SIZES[qtype]), theirs.name
        assert t["logical_shape"] == [int(n) for n in reversed(theirs.shape.tolist())]
        assert (t["offset"], t["size"]) == (theirs.data_offset, theirs.n_bytes), theirs.name
        assert t["offset"] % reader.alignment == 0
        assert data[t["offset"]:t["offset"] + t["size"]] == theirs.data.tobytes(), theirs.name
        if qtype.name in UNBLOCKED:
            assert t["dtype"] == UNBLOCKED[qtype.name], theirs.name
            assert t["shape"] == t["logical_shape"], theirs.name
        else:  # uint8 [rows..., blocks per row, block bytes]; the reader: [rows..., row bytes]
            block_elements, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
            assert t["dtype"] == [DL_UINT, 8, 1], theirs.name
            assert t["shape"] == [*t["logical_shape"][:-1],
                                  t["logical_shape"][-1] // block_elements, block_bytes]
            assert list(theirs.data.shape) == [*t["shape"][:-2], t["shape"][-2] * block_bytes]
    return reader


def test_tensors_are_the_readers(dump: Path, tmp_path: Path):
    """Tensors of the unblocked types are handed out as their dtype with the row-major shape
    (ggml's dims reversed), block-quantized ones (Q8_0 and Q4_0 quantized by the package,
    Q4_K and Q6_K as blocks of bytes) as uint8 [rows..., blocks, block bytes]; every offset,
    size and byte range is the reader's, in the order of the offsets, and the header kept is
    the file's."""
    rng = np.random.default_rng(1)
    values = rng.standard_normal((4, 64)).astype(np.float32)

    def fill(writer: Any) -> None:
        writer.add_tensor("w32", rng.standard_normal((3, 5)).astype(np.float32))
        writer.add_tensor("w16", np.arange(7, dtype=np.float16))
        writer.add_tensor("w64", np.linspace(0, 1, 6).reshape(2, 3))
        for dtype in (np.int8, np.int16, np.int32, np.int64):
            writer.add_tensor(f"i{np.dtype(dtype).itemsize * 8}",
                              np.arange(24, dtype=dtype).reshape(2, 3, 4))
        bf16 = (values[:1].view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
        writer.add_tensor("bf16", bf16, raw_dtype=gguf.GGMLQuantizationType.BF16)
        for name in ("Q8_0", "Q4_0"):
            qtype = gguf.GGMLQuantizationType[name]
            writer.add_tensor(name.lower(), quantized(qtype, values), raw_dtype=qtype)
        for name, rows in (("Q4_K", 2), ("Q6_K", 3)):
            qtype = gguf.GGMLQuantizationType[name]
            writer.add_tensor(name.lower(), blocks(qtype, rows, 2), raw_dtype=qtype)

    path = write_gguf(tmp_path / "tensors.gguf", fill)
    index = index_of(dump, path)
    assert index["status"] == 0, index
    check_tensors(index, path)
    shapes = {t["name"]: (t["shape"], t["logical_shape"]) for t in index["tensors"]}
    assert shapes["w32"] == ([3, 5], [3, 5])
    assert shapes["i8"] == ([2, 3, 4], [2, 3, 4])
    assert shapes["bf16"] == ([1, 64], [1, 64])
    assert shapes["q8_0"] == ([4, 2, 34], [4, 64])
    assert shapes["q4_0"] == ([4, 2, 18], [4, 64])
    assert shapes["q4_k"] == ([2, 2, 144], [2, 512])
    assert shapes["q6_k"] == ([3, 2, 210], [3, 512])


def test_a_custom_alignment_is_followed(dump: Path, tmp_path: Path):
    """general.alignment (here 256) places the data section and every tensor; the index says
    it, and agrees with the reader."""
    def fill(writer: Any) -> None:
        writer.add_custom_alignment(256)
        writer.add_tensor("a", np.ones(3, np.float32))
        writer.add_tensor("b", np.ones((2, 2), np.float16))

    path = write_gguf(tmp_path / "aligned.gguf", fill)
    index = index_of(dump, path)
    assert index["status"] == 0, index
    assert index["alignment"] == 256 and index["metadata"]["general.alignment"] == 256
    check_tensors(index, path)
    assert all(t["offset"] % 256 == 0 for t in index["tensors"])


def test_every_type_the_package_knows(dump: Path, tmp_path: Path):
    """Each ggml type in the installed package's GGML_QUANT_SIZES, in a file of its own: the
    runtime's table agrees on its number, name and block (so the shapes and sizes it hands out
    are right), or (a type newer than the runtime) the file is refused as incompatible, naming
    the tensor and the type's number. The types of the issue are all known."""
    known = set()
    for qtype, (block_elements, block_bytes) in gguf.GGML_QUANT_SIZES.items():
        path = tmp_path / f"{qtype.name}.gguf"
        write_gguf(path, lambda w, q=qtype: w.add_tensor("t", blocks(q, 2, 3), raw_dtype=q))
        index = index_of(dump, path)
        if index["status"] != 0:
            assert index["status"] == INCOMPATIBLE, index
            assert f"tensor 't' has ggml type {int(qtype)}," in index["message"], index
            continue
        known.add(qtype.name)
        check_tensors(index, path)
        (t,) = index["tensors"]
        assert t["logical_shape"] == [2, 3 * block_elements]
        assert t["size"] == 2 * 3 * block_bytes
    expected = {"F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64", "Q4_0", "Q4_1", "Q5_0",
                "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS",
                "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "IQ1_M",
                "TQ1_0", "TQ2_0", "MXFP4"}
    assert expected & {q.name for q in gguf.GGML_QUANT_SIZES} <= known


def test_the_documented_type_table_is_ggmls():
    """docs/format.md's table of ggml types gives each type's number and block as the installed
    package does, and lists every type the runtime reads."""
    text = (ROOT / "docs" / "format.md").read_text()
    section = text[text.index("## GGUF files, as modpack reads them"):]
    section = section[:section.index("\n## ", 1)]
    documented = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != 3 or not re.fullmatch(r"\d+, [\d /]+", cells[1]):
            continue
        elements, sizes = cells[1].split(", ")
        named = re.findall(r"(\w+) \((\d+)\)", cells[0])
        sizes = [int(b) for b in sizes.split(" / ")]
        assert len(named) == len(sizes), line
        for (name, number), size in zip(named, sizes):
            documented[name] = (int(number), int(elements), size)
    assert len(documented) == 34, sorted(documented)
    for qtype, (block_elements, block_bytes) in gguf.GGML_QUANT_SIZES.items():
        if qtype.name in documented:
            assert documented[qtype.name] == (int(qtype), block_elements, block_bytes), qtype.name


# ---- refusals ----------------------------------------------------------------------------------


def small_file(tmp_path: Path) -> Path:
    def fill(writer: Any) -> None:
        writer.add_uint32("llama.context_length", 2048)
        writer.add_string("general.name", "tiny")
        writer.add_tensor("a", np.ones(8, np.float32))
        writer.add_tensor("b", np.ones(8, np.float32))

    return write_gguf(tmp_path / "small.gguf", fill)


def edited(path: Path, edit: Callable[[bytearray], None]) -> Path:
    data = bytearray(path.read_bytes())
    edit(data)
    out = path.with_name("edited.gguf")
    out.write_bytes(bytes(data))
    return out


def reader_refuses(path: Path) -> bool:
    try:
        reader = gguf.GGUFReader(str(path))
        for tensor in reader.tensors:  # the reader checks a tensor's bytes only when it views them
            tensor.data.tobytes()
    except (ValueError, KeyError, IndexError, struct.error):
        return True
    return False


def tensor_info_at(data: bytearray, name: bytes) -> int:
    """Where the tensor info of |name| starts (its name's length)."""
    return data.index(struct.pack("<Q", len(name)) + name)


def set_offset(name: bytes, offset: int) -> Callable[[bytearray], None]:
    def edit(data: bytearray) -> None:
        at = tensor_info_at(data, name) + 8 + len(name)
        n_dims = struct.unpack_from("<I", data, at)[0]
        struct.pack_into("<Q", data, at + 4 + 8 * n_dims + 4, offset)
    return edit


def rename(old: bytes, new: bytes) -> Callable[[bytearray], None]:
    def edit(data: bytearray) -> None:
        at = data.index(old)
        data[at:at + len(old)] = new
    return edit


# Each edit of a valid file; whether gguf-py's reader refuses it too (it does not check where
# tensors lie: ggml does, requiring each to follow the one before); the runtime's refusal.
@pytest.mark.parametrize(("edit", "theirs", "status", "message"), [
    (rename(b"GGUF", b"GGML"), True, FORMAT_ERROR, "is not a GGUF file"),
    (lambda d: struct.pack_into("<I", d, 4, 1), True, INCOMPATIBLE, "GGUF version 1 file"),
    (lambda d: struct.pack_into("<I", d, 4, 4), True, INCOMPATIBLE, "GGUF version 4 file"),
    (lambda d: d.__delitem__(slice(100, None)), True, FORMAT_ERROR,
     "metadata key 'llama.context_length': its value type (4 bytes at byte 97) runs past the "
     "end of the 100-byte file"),
    (lambda d: d.__delitem__(slice(len(d) - 20, None)), True, FORMAT_ERROR,
     "tensor 'b' lies at [32, +32) of the data section, past its end (44 bytes)"),
    (rename(b"llama.context_length", b"general.architecture"), True, FORMAT_ERROR,
     "the metadata key 'general.architecture' appears twice"),
    (lambda d: d.__setitem__(slice(tensor_info_at(d, b"b") + 8, tensor_info_at(d, b"b") + 9),
                             b"a"), True, FORMAT_ERROR, "two tensors are named 'a'"),
    (lambda d: struct.pack_into("<I", d, tensor_info_at(d, b"a") + 8 + 1 + 4 + 8, 99), True,
     INCOMPATIBLE, "tensor 'a' has ggml type 99, which this runtime does not know"),
    (set_offset(b"b", 16), False, FORMAT_ERROR,
     "tensor 'b': it starts at byte 16 of the data section, not a multiple of the file's "
     "alignment (32)"),
    (set_offset(b"b", 0), False, FORMAT_ERROR, "tensors 'a' and 'b' overlap"),
])
def test_a_damaged_file_is_refused(dump: Path, tmp_path: Path, edit, theirs, status, message):
    """Damage to a file the writer wrote is refused with a status and a message naming the
    file and the problem, wherever gguf-py's reader refuses it too."""
    path = edited(small_file(tmp_path), edit)
    assert reader_refuses(path) == theirs
    index = index_of(dump, path)
    assert index["status"] == status, index
    assert message in index["message"] and str(path) in index["message"], index["message"]
