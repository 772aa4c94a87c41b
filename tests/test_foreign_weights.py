"""Weights where users keep them: safetensors (one file, a sharded index, a folder) and GGUF
files read in place, written here by those formats' own writers (the ``safetensors`` and
``gguf`` packages). A library records each file's header digest and each array's checksum and
digest; a load finds the file beside the library, refuses another one naming the array that
differs, checks it as a modpack weight file is, and hands out zero-copy views of the user's
own file (a copy only for an array the file misaligns); a signed library vouches for its
weights; one mapping per file per process; swapped like modpack weight files."""

from __future__ import annotations

import gc
import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from racing import race, race_renames
from test_signing import write_key

import modpack
from modpack.format.signatures import sign_library
from modpack.tools.inspection import inspect_library

safetensors_numpy = pytest.importorskip("safetensors.numpy",
                                        reason="pip install safetensors (the test extra)")
gguf = pytest.importorskip("gguf", reason="pip install gguf (the test extra)")

HOST = r"""
#include "modpack/backend.h"
static double sum_of(const char* name) {
  const DLTensor* w;
  if (mp_backend_get_array(name, &w) != MP_OK) return -1;
  double sum = 0;
  int64_t n = 1;
  for (int32_t d = 0; d < w->ndim; ++d) n *= w->shape[d];
  if (w->dtype.code == kDLFloat && w->dtype.bits == 32)
    for (int64_t i = 0; i < n; ++i) sum += ((const float*)w->data)[i];
  else if (w->dtype.code == kDLUInt && w->dtype.bits == 8)
    for (int64_t i = 0; i < n; ++i) sum += ((const uint8_t*)w->data)[i];
  return sum;
}
static double sum_w(void) { return sum_of("w"); }
MP_EXPORT_FUNC0(sum_w, double)
static double sum_b(void) { return sum_of("b"); }
MP_EXPORT_FUNC0(sum_b, double)
"""

W = np.arange(4096, dtype=np.float32).reshape(64, 64)
B = np.linspace(-1, 1, 33).astype(np.float32)
H = np.arange(3, dtype=np.float16)  # 6 bytes: what follows it in a safetensors file is misaligned


@pytest.fixture(scope="module")
def key(tmp_path_factory) -> tuple[Path, Path]:
    return write_key(tmp_path_factory.mktemp("key"), "signer")


def save_safetensors(path: Path, arrays: dict[str, np.ndarray],
                     metadata: dict[str, str] | None = None) -> Path:
    safetensors_numpy.save_file(arrays, str(path), metadata=metadata)
    return path


def library_over(tmp: Path, weights: Path, name: str = "model.so") -> Path:
    host = modpack.csource_module(HOST)
    host.import_module(modpack.weights_module(weights))
    return host.export_library(tmp / name)


def mappings(path: Path) -> int:
    with open("/proc/self/maps") as maps:
        return sum(line.rstrip().endswith(str(path)) for line in maps)


# ---- safetensors ------------------------------------------------------------------------------


def test_a_safetensors_file_is_read_in_place(tmp_path):
    """The arrays are views of the user's own file (no conversion, no copy), as host code and
    Python see them; the library records the file's header digest and each array's checksum
    and digest; load_weights reads the file on its own, with its metadata."""
    path = save_safetensors(tmp_path / "model.safetensors", {"w": W, "b": B},
                            {"framework": "numpy", "purpose": "test"})
    library = library_over(tmp_path, path)
    root = modpack.load_module(library)
    assert root["sum_w"]() == float(W.sum()) and root["sum_b"]() == pytest.approx(B.sum())
    weights = root.imported_modules[0].arrays
    assert np.array_equal(weights["w"], W) and not weights["w"].flags.writeable
    assert mappings(path) == 1
    info = inspect_library(library)["modules"][1]["contents"]
    assert info["format"] == "safetensors" and info["file"] == "model.safetensors"
    alone = modpack.load_weights(path)
    assert alone.format == "safetensors" and alone.metadata == {"framework": "numpy",
                                                                "purpose": "test"}
    assert alone.info("w")["type"] == "F32" and alone.info("w")["copied"] is False
    assert mappings(path) == 1  # one mapping per file per process, whoever opened it
    del root, weights, alone
    gc.collect()
    assert mappings(path) == 0


def test_a_file_open_already_is_found_again_only_while_its_path_names_it(tmp_path):
    """A weight file open already is found again by its path with one stat instead of being
    opened again (a library's files are checked before dlopen and bound by its tree after it;
    libraries share base weights). The stat must still tell a version renamed over the path
    from the open one, under a writer renaming versions over it all the while, and refuse one
    rewritten in place."""
    path = save_safetensors(tmp_path / "w.safetensors", {"w": W})
    other = save_safetensors(tmp_path / "other.safetensors", {"w": W + 1})
    first = modpack.load_weights(path)
    again = modpack.load_weights(path)
    assert again["w"].ctypes.data == first["w"].ctypes.data  # the same open file, one mapping
    assert mappings(path) == 1
    original = tmp_path / "original.safetensors"
    original.write_bytes(path.read_bytes())

    def load() -> str:
        w = modpack.load_weights(path)["w"]
        return "original" if np.array_equal(w, W) else "other" if np.array_equal(w, W + 1) \
            else "neither"

    outcomes = race_renames(path, (other, original), load)
    assert set(outcomes) <= {"original", "other"} and outcomes.get("other", 0) > 0, outcomes
    assert np.array_equal(first["w"], W)  # what was open stays the version it was
    held = modpack.load_weights(path)
    header = int.from_bytes(path.read_bytes()[:8], "little")
    before = os.stat(path)
    with open(path, "r+b") as f:  # same size, modification time put back: the change time moves
        f.seek(8 + header)
        f.write(np.float32(-5).tobytes())
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(modpack.ModpackOSError, match="rewritten in place while an earlier "
                       "version of it is in use"):
        modpack.load_weights(path)
    del held


def test_a_large_file_is_mapped_at_a_2_mib_boundary(tmp_path):
    """A file of 64 MiB or more is mapped at a 2 MiB-aligned address, so that the kernel can
    map the page cache's large folios whole: by one mmap where the kernel aligns large file
    mappings itself, else inside a reservation. (A sparse file: nothing is written.)"""
    size = 64 << 20
    text = json.dumps({"big": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}})
    text += " " * (-len(text) % 8)
    path = tmp_path / "big.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text.encode())
        f.truncate(8 + len(text) + size)
    weights = modpack.load_weights(path, verify_checksums=False)
    with open("/proc/self/maps") as maps:
        starts = [int(line.split("-")[0], 16) for line in maps if line.rstrip().endswith(str(path))]
    assert len(starts) == 1 and starts[0] % (2 << 20) == 0, [hex(a) for a in starts]
    assert weights["big"].shape == (size,) and weights["big"][-1] == 0


def raw_safetensors(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    """A safetensors file with |arrays| back to back in the order given, as the format allows
    (the safetensors package itself orders them by alignment, so it never writes this)."""
    names = {np.dtype(np.float16): "F16", np.dtype(np.float32): "F32"}
    header, data = {}, b""
    for name, array in arrays.items():
        raw = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": names[array.dtype], "shape": list(array.shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def test_a_misaligned_array_is_copied_once_and_says_so(tmp_path):
    """safetensors places arrays back to back: a float32 array after 6 bytes of float16 is not
    4-aligned in the file, so it is handed out as an aligned copy, made once, and the file's
    description says which."""
    path = raw_safetensors(tmp_path / "odd.safetensors", {"a_half": H, "b": B})
    alone = modpack.load_weights(path)
    assert np.array_equal(alone["b"], B) and alone["b"].ctypes.data % 4 == 0
    assert alone.info("b")["copied"] is True and alone.info("a_half")["copied"] is False


def test_another_file_under_the_same_name_is_refused_naming_the_array(tmp_path):
    """A file with the same names, types and shapes but other bytes is not the file the
    library was exported with: refused before any host code runs, naming the array."""
    path = save_safetensors(tmp_path / "model.safetensors", {"w": W, "b": B})
    library = library_over(tmp_path, path)
    save_safetensors(path, {"w": W, "b": B + 1})
    with pytest.raises(modpack.WeightsMismatchError, match="array 'b' holds other bytes"):
        modpack.load_module(library)
    save_safetensors(path, {"w": W, "b": B[:32]})
    with pytest.raises(modpack.WeightsMismatchError, match="array 'b' is float32"):
        modpack.load_module(library)


def test_a_sharded_index_and_a_folder(tmp_path):
    """A model sharded as Hugging Face shards it (model.safetensors.index.json and its shards)
    is one module over three files: arrays from each, each shard swapped on its own."""
    shards = {"model-00001-of-00003.safetensors": {"w": W},
              "model-00002-of-00003.safetensors": {"b": B},
              "model-00003-of-00003.safetensors": {"h": H}}
    weight_map = {}
    for name, arrays in shards.items():
        save_safetensors(tmp_path / name, arrays)
        weight_map.update(dict.fromkeys(arrays, name))
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    for source in (index, tmp_path):
        module = modpack.weights_module(source)
        assert [f.name for f in module.files] == sorted(shards)
        assert {r.name: module.files[r.file].name for r in module.records} == weight_map
    library = library_over(tmp_path, index)
    root = modpack.load_module(library)
    assert root["sum_w"]() == float(W.sum()) and root["sum_b"]() == pytest.approx(B.sum())
    arrays = root.imported_modules[0].arrays
    assert np.array_equal(arrays["h"], H) and len(arrays.version) == 3
    save_safetensors(tmp_path / "other.safetensors", {"b": B * 2})
    root.swap_weights(tmp_path / "other.safetensors", file_name="model-00002-of-00003.safetensors")
    assert root["sum_b"]() == pytest.approx(2 * B.sum()) and root["sum_w"]() == float(W.sum())


def test_a_shard_missing_from_its_index_is_named(tmp_path):
    save_safetensors(tmp_path / "a.safetensors", {"w": W})
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"w": "a.safetensors", "b": "b.safetensors"}}))
    with pytest.raises(modpack.MissingFileError, match=r"lists the shard 'b\.safetensors'"):
        modpack.weights_module(index)
    index.write_text(json.dumps({"weight_map": {"w": "a.safetensors", "b": "a.safetensors"}}))
    with pytest.raises(modpack.FormatError, match=r"places the tensor 'b' in 'a\.safetensors', "
                                                  r"which does not hold it"):
        modpack.weights_module(index)
    index.write_text("{not json")
    with pytest.raises(modpack.FormatError, match="is not a safetensors index"):
        modpack.weights_module(index)


# ---- trust ------------------------------------------------------------------------------------


def test_a_signed_library_vouches_for_its_safetensors(tmp_path, key):
    """A signed library binds its safetensors file by the digests it recorded: the signed load
    checks every array (or each on first use) against them, without a private copy; a file
    changed since is refused naming the array; the file alone carries no signature."""
    path = save_safetensors(tmp_path / "model.safetensors", {"w": W, "b": B})
    library = library_over(tmp_path, path)
    sign_library(library, key[0])
    root = modpack.load_module(library, trusted_keys=[key[1]])
    assert root["sum_w"]() == float(W.sum()) and mappings(path) == 1
    del root
    gc.collect()
    b = modpack.load_weights(path).info("b")
    gc.collect()
    data = bytearray(path.read_bytes())
    data[b["offset"] + b["size"] - 1] ^= 0x01  # the last byte of b's data
    path.write_bytes(bytes(data))
    with pytest.raises(modpack.SignatureError, match=r"array 'b' of .* does not match the SHA-256 "
                                                     r"digest the library recorded"):
        modpack.load_module(library, trusted_keys=[key[1]], verify_checksums=False)
    root = modpack.load_module(library, trusted_keys=[key[1]], verify_on_first_use=True,
                               verify_checksums=False)
    assert root["sum_w"]() == float(W.sum())  # w is intact: checked, and read
    with pytest.raises(modpack.SignatureError, match="array 'b'"):
        root["sum_b"]()
    with pytest.raises(modpack.SignatureError, match="carries no signature"):
        modpack.load_weights(path, trusted_keys=[key[1]])


# ---- GGUF -------------------------------------------------------------------------------------


def q8_0_blocks(values: np.ndarray) -> np.ndarray:
    """|values| (a multiple of 32 float32) as GGUF's Q8_0 blocks: per 32 values a float16
    scale and 32 int8, 34 bytes (the gguf package's own quantizer where it has one)."""
    quantize = getattr(getattr(gguf, "quants", None), "quantize", None)
    if quantize is not None:
        return np.asarray(quantize(values.reshape(-1, 32), gguf.GGMLQuantizationType.Q8_0))
    blocks = values.reshape(-1, 32)
    scale = np.abs(blocks).max(axis=1, keepdims=True) / 127
    q = np.round(blocks / np.where(scale == 0, 1, scale)).astype(np.int8)
    return np.concatenate([scale.astype(np.float16).view(np.uint8), q.view(np.uint8)], axis=1)


def write_gguf(path: Path, quantized: np.ndarray) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("llama.context_length", 2048)
    writer.add_string("general.name", "tiny")
    writer.add_tensor("b", B)
    writer.add_tensor("q", quantized, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_gguf_file_is_read_in_place_with_its_quantized_blocks(tmp_path):
    """GGUF tensors are read in place: float32 ones as arrays, Q8_0 ones as their blocks (uint8
    [rows, blocks, 34]) whose type and block size the file's description gives, and the file's
    metadata readable from Python."""
    values = np.linspace(-4, 4, 2 * 64).astype(np.float32).reshape(2, 64)
    blocks = q8_0_blocks(values).reshape(values.shape[0], -1)  # rows of blocks
    path = write_gguf(tmp_path / "tiny.gguf", blocks)
    alone = modpack.load_weights(path)
    assert alone.format == "gguf" and alone.metadata["general.architecture"] == "llama"
    assert alone.metadata["llama.context_length"] == 2048
    assert np.array_equal(alone["b"], B)
    q = alone.info("q")
    assert (q["type"], q["block"], q["logical_shape"]) == ("Q8_0", [32, 34], [2, 64])
    assert alone["q"].dtype == np.uint8 and alone["q"].shape == (2, 2, 34)
    assert bytes(alone["q"]) == bytes(np.ascontiguousarray(blocks).view(np.uint8))
    library = library_over(tmp_path, path)
    root = modpack.load_module(library)
    assert root["sum_b"]() == pytest.approx(B.sum())
    reader = gguf.GGUFReader(str(path))  # the format's own reader agrees on where q lies
    (tensor,) = [t for t in reader.tensors if t.name == "q"]
    assert alone.info("q")["offset"] == tensor.data_offset


# ---- bad files --------------------------------------------------------------------------------


@pytest.mark.parametrize(("edit", "message"), [
    ("header longer than the file", "header"),
    ("header bomb", "header"),
    ("not JSON", "JSON"),
])
def test_a_bad_safetensors_file_is_a_format_error_naming_it(tmp_path, edit, message):
    path = save_safetensors(tmp_path / "bad.safetensors", {"w": W})
    data = bytearray(path.read_bytes())
    if edit == "header longer than the file":
        struct.pack_into("<Q", data, 0, len(data))
    elif edit == "header bomb":
        struct.pack_into("<Q", data, 0, 200_000_000)
    else:
        data[8] = ord("[")
    path.write_bytes(bytes(data))
    with pytest.raises(modpack.FormatError, match=message) as raised:
        modpack.load_weights(path)
    assert "bad.safetensors" in str(raised.value)


def test_a_header_flipping_writer_never_gets_an_unsigned_extent(tmp_path, key):
    """Another process flips the safetensors file's header between the one the library signed
    and one that stretches w over the whole data, while this one makes 200 signed loads: each
    load either holds w as signed (its shape, its values) or is refused with a modpack error.
    The header is parsed from a private copy and hashed from that copy, never read twice."""
    path = save_safetensors(tmp_path / "model.safetensors", {"w": W, "b": B})
    library = library_over(tmp_path, path)
    sign_library(library, key[0])
    data = path.read_bytes()
    size = struct.unpack_from("<Q", data, 0)[0]
    header = json.loads(data[8:8 + size])
    total = header["b"]["data_offsets"][1] - header["b"]["data_offsets"][0] + \
        header["w"]["data_offsets"][1] - header["w"]["data_offsets"][0]
    stretched = dict(header, w={"dtype": "F32", "shape": [total // 4],
                                "data_offsets": [0, total]})
    stretched.pop("b")
    shown = json.dumps(stretched).encode()
    shown += b" " * (size - len(shown))
    assert len(shown) == size  # the same length: the flip rewrites the header in place
    signed = data[:8 + size]
    shown = data[:8] + shown

    def load() -> str:
        root = modpack.load_module(library, trusted_keys=[key[1]])
        w = root.imported_modules[0].arrays["w"]
        assert w.shape == W.shape and np.array_equal(w, W)
        del root, w
        gc.collect()
        return "loaded"

    outcomes = race(path, 0, (signed, shown), load)
    assert outcomes.get("loaded", 0) > 0 and len(outcomes) > 1, outcomes


C_PROGRAM = r"""
#include <stdio.h>
#include <string.h>
#include "modpack/modpack.h"

static int fail(const char* what) {
  fprintf(stderr, "%s: %s\n", what, mp_error_message());
  return 1;
}

int main(int argc, char** argv) {
  /* argv: library, adapter, gguf file */
  const char* overlays[] = {argv[2]};
  mp_load_options_t options = {.struct_size = sizeof options, .overlays = overlays,
                               .num_overlays = 1};
  mp_module_t* root;
  if (mp_module_load(argv[1], &options, &root) != MP_OK) return fail("load");
  mp_function_t* sum_b;
  if (mp_module_get_function(root, "sum_b", 1, &sum_b) != MP_OK) return fail("lookup");
  mp_value_t ret;
  if (mp_function_call(sum_b, NULL, 0, &ret) != MP_OK) return fail("call");
  printf("sum_b %g\n", ret.v_float64);
  const char* none[] = {NULL};
  if (mp_module_swap_overlays(root, none, 0) != MP_OK) return fail("swap");
  if (mp_function_call(sum_b, NULL, 0, &ret) != MP_OK) return fail("call");
  printf("base sum_b %g\n", ret.v_float64);
  mp_function_release(sum_b);
  mp_module_release(root);
  mp_module_t* gguf;
  mp_load_options_t plain = {.struct_size = sizeof plain};
  if (mp_weights_load(argv[3], &plain, &gguf) != MP_OK) return fail("gguf");
  const DLTensor* q;
  if (mp_module_get_array(gguf, "q", 0, &q) != MP_OK) return fail("array");
  printf("q uint8 %d [%lld, %lld, %lld]\n", q->dtype.code == kDLUInt && q->dtype.bits == 8,
         (long long)q->shape[0], (long long)q->shape[1], (long long)q->shape[2]);
  mp_module_release(gguf);
  return 0;
}
"""


def test_from_c_a_library_over_safetensors_with_an_adapter_and_a_gguf_file(
        tmp_path, runtime_prefix):
    """The same from a C program, no Python: a library bound to safetensors loads with an
    adapter that replaces b (mp_load_options_t.overlays), swaps it out
    (mp_module_swap_overlays), and a GGUF file's Q8_0 tensor is read as its blocks."""
    from conftest import build_c_program, run

    path = save_safetensors(tmp_path / "model.safetensors", {"w": W, "b": B})
    library = library_over(tmp_path, path)
    adapter = save_safetensors(tmp_path / "adapter.safetensors", {"b": B * 3})
    values = np.linspace(-4, 4, 2 * 64).astype(np.float32).reshape(2, 64)
    gguf_file = write_gguf(tmp_path / "tiny.gguf", q8_0_blocks(values).reshape(2, -1))
    program = build_c_program(runtime_prefix, C_PROGRAM, tmp_path / "foreign")
    out = run(program, library, adapter, gguf_file)
    lines = dict(line.rsplit(" ", 1) if line.startswith(("sum_b", "base")) else (line, "")
                 for line in out.splitlines())
    assert float(lines["sum_b"]) == pytest.approx(3 * B.sum(), rel=1e-6)
    assert float(lines["base sum_b"]) == pytest.approx(B.sum(), rel=1e-6)
    assert "q uint8 1 [2, 2, 34]" in out, out
