"""Weights outside the code: libraries that refer to weight files (export_library(weights=...),
weights_module), found beside the library or where the load says, refused before any code runs
when they are not the files the library was exported with, shared between libraries, checked by
signatures (whole or per array on first use), and swapped live."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_signing import write_key

import modpack
from modpack.format.signatures import sign_library

# A constructor marks the file when the library's code first runs (dlopen runs it).
HOST = r"""
#include <stdio.h>
#include <stdlib.h>
#include "modpack/backend.h"
__attribute__((constructor)) static void mark(void) {
  const char* path = getenv("MODPACK_TEST_MARKER");
  FILE* f = path ? fopen(path, "w") : NULL;
  if (f) { fputs("constructor ran\n", f); fclose(f); }
}
static double weight_at(int64_t i) {
  const DLTensor* w;
  if (mp_backend_get_array("w", &w) != MP_OK) return -1;
  return ((const float*)w->data)[i];
}
MP_EXPORT_FUNC(weight_at, double, int64_t)
static double bias_at(int64_t i) {
  const DLTensor* b;
  if (mp_backend_get_array("b", &b) != MP_OK) return -1;
  return ((const double*)b->data)[i];
}
MP_EXPORT_FUNC(bias_at, double, int64_t)
"""
W = np.arange(1 << 20, dtype=np.float32)  # 4 MiB
B = np.linspace(0, 1, 16)


def export(folder: Path, w: np.ndarray = W, b: np.ndarray = B, name: str = "model") -> Path:
    host = modpack.csource_module(HOST)
    host.import_module(modpack.const_module({"w": w, "b": b}))
    return host.export_library(folder / f"{name}.so", weights=folder / f"{name}.mpw")


def test_export_with_weights_keeps_them_out_of_the_library(tmp_path):
    library = export(tmp_path)
    weights = tmp_path / "model.mpw"
    assert library.stat().st_size < 256 << 10 < W.nbytes <= weights.stat().st_size
    root = modpack.load_module(library)
    assert root["weight_at"](12345) == 12345.0 and root["bias_at"](15) == 1.0
    module = root.imported_modules[0]
    assert module.type_key == "weights"
    assert np.array_equal(module.arrays["w"], W) and np.array_equal(module.arrays["b"], B)
    with pytest.raises(ValueError, match="read-only"):
        module.arrays["w"][0] = 1
    # Reproducible: the same tree gives the same two files.
    first = library.read_bytes(), weights.read_bytes()
    export(tmp_path)
    assert (library.read_bytes(), weights.read_bytes()) == first


def test_load_weights_and_weights_module(tmp_path):
    modpack.save_weights({"w": W, "b": B}, tmp_path / "shared.mpw")
    file = modpack.load_weights(tmp_path / "shared.mpw")
    assert list(file) == ["w", "b"] and np.array_equal(file["w"], W)
    assert file.digest.startswith("sha256:") and len(file.digest) == 71
    host = modpack.csource_module(HOST)
    host.import_module(modpack.weights_module(tmp_path / "shared.mpw"))
    root = modpack.load_module(host.export_library(tmp_path / "lib.so"))
    assert root["weight_at"](7) == 7.0


def test_two_libraries_share_one_mapping(tmp_path):
    """Two variants of a model (different code) refer to one weight file: one mapping of it
    in the process, and their arrays are the same memory."""
    modpack.save_weights({"w": W, "b": B}, tmp_path / "shared.mpw")
    roots = []
    for variant in ("a", "b"):
        host = modpack.csource_module(HOST + f"int variant_{variant};")
        host.import_module(modpack.weights_module(tmp_path / "shared.mpw"))
        roots.append(modpack.load_module(host.export_library(tmp_path / f"{variant}.so")))
    assert roots[0]["weight_at"](3) == roots[1]["weight_at"](3) == 3.0
    a, b = (r.imported_modules[0].arrays["w"] for r in roots)
    assert a.ctypes.data == b.ctypes.data
    with open("/proc/self/maps") as maps:
        mapped = [line for line in maps if line.rstrip().endswith(str(tmp_path / "shared.mpw"))]
    assert len(mapped) == 1, mapped
    assert mapped[0].split()[1] == "r--s"  # read-only, shared: one page-cache copy


def test_where_the_weight_file_is(tmp_path):
    library = export(tmp_path)
    elsewhere = tmp_path / "data"
    elsewhere.mkdir()
    os.replace(tmp_path / "model.mpw", elsewhere / "model.mpw")
    with pytest.raises(modpack.NotFoundError, match=r"refers to the weight file 'model.mpw', "
                       r"looked for at '.*/model.mpw'"):
        modpack.load_module(library)
    assert modpack.load_module(library, weights=elsewhere / "model.mpw")["weight_at"](5) == 5.0
    assert modpack.load_module(library, weights=elsewhere)["weight_at"](5) == 5.0  # a folder
    assert modpack.load_module(library, weights={"model.mpw": str(elsewhere / "model.mpw")}
                               )["weight_at"](5) == 5.0
    with pytest.raises(modpack.ArgumentError, match="maps each weight file's name"):
        modpack.load_module(library, weights={"model.mpw": 3})


def test_a_weight_file_name_the_library_does_not_record_is_refused(tmp_path, monkeypatch):
    """weights={name: path} with a name the library does not record (a typo) was ignored,
    the file it was meant for then looked for beside the library: now ArgumentError naming
    it, listing the names the library has and the closest; before any code runs (sealed),
    for a live tree, for a library loaded unsealed, from C alike (the runtime decides)."""
    from modpack.runtime.binding import ffi, lib
    from modpack.runtime.weight_files import load_options

    library = export(tmp_path)
    elsewhere = tmp_path / "data"
    elsewhere.mkdir()
    os.replace(tmp_path / "model.mpw", elsewhere / "model.mpw")
    marker = tmp_path / "marker"
    monkeypatch.setenv("MODPACK_TEST_MARKER", str(marker))
    with pytest.raises(modpack.ArgumentError, match=(
            r"the load names the weight file 'modle.mpw' .*, which '.*model.so' does not "
            r"refer to \(did you mean 'model.mpw'\?\): it refers to 'model.mpw'")):
        modpack.load_module(library, weights={"modle.mpw": elsewhere / "model.mpw"})
    with pytest.raises(modpack.ArgumentError, match=r"'params.bin' .* does not refer to: "
                                                    r"it refers to 'model.mpw'; name each"):
        modpack.load_module(library, weights={"params.bin": elsewhere / "model.mpw"})
    options = load_options(0, None, {"modle.mpw": elsewhere / "model.mpw"})
    out = ffi.new("mp_module_t**")
    assert lib.mp_module_load(str(library).encode(), options.pointer, out) == \
        lib.MP_ERR_INVALID_ARGUMENT
    assert "did you mean 'model.mpw'?" in ffi.string(lib.mp_error_message()).decode()
    assert not marker.exists()  # refused before dlopen ran the library's constructor
    root = modpack.load_module(library, weights={"model.mpw": elsewhere / "model.mpw"})
    assert marker.exists()  # the name the library records: loaded, its constructor ran
    with pytest.raises(modpack.ArgumentError, match=r"did you mean 'model\.mpw'"):  # live tree
        modpack.load_module(library, weights={"modle.mpw": elsewhere / "model.mpw"})
    assert root["weight_at"](5) == 5.0
    plain = modpack.csource_module("int x;").export_library(tmp_path / "plain.so")
    with pytest.raises(modpack.ArgumentError, match=r"'model.mpw' .*, but '.*plain.so' refers "
                                                    r"to no weight file: drop it"):
        modpack.load_module(plain, weights={"model.mpw": elsewhere / "model.mpw"})


def test_a_misspelt_weight_file_name_is_refused_for_a_library_loaded_unsealed(tmp_path):
    """A library without a seal (linked by hand from an fcompile's object) has its weight
    files bound after dlopen; a name it does not record is refused there, and the library
    loads afterwards."""
    host = modpack.csource_module(HOST)
    host.import_module(modpack.const_module({"w": W, "b": B}))

    def ld_r(output, objects, options):
        subprocess.run(["ld", "-r", "-o", output, *objects], check=True)

    made = host.export_library(tmp_path / "model.o", weights=tmp_path / "model.mpw",
                               fcompile=ld_r)
    library = tmp_path / "model.so"
    subprocess.run(["cc", "-shared", "-o", library, made], check=True)
    with pytest.raises(modpack.ArgumentError, match=r"'mdl\.mpw'.*did you mean 'model\.mpw'"):
        modpack.load_module(library, allow_unsealed=True,
                            weights={"mdl.mpw": tmp_path / "model.mpw"})
    gc.collect()
    assert modpack.load_module(library, allow_unsealed=True)["weight_at"](4) == 4.0


LOAD = r"""
import sys
import modpack
try:
    root = modpack.load_module(sys.argv[1], weights=sys.argv[2])
    print("loaded", root["weight_at"](1))
except modpack.ModpackError as exc:
    print("refused:", type(exc).__name__, exc)
"""


@pytest.mark.parametrize("case", ["other values", "another dtype", "another shape",
                                  "an array missing"])
def test_another_file_is_refused_before_any_code_runs(tmp_path, case):
    library = export(tmp_path)
    arrays = {"other values": {"w": W + 1, "b": B},
              "another dtype": {"w": W.astype(np.float64), "b": B},
              "another shape": {"w": W.reshape(1024, 1024), "b": B},
              "an array missing": {"w": W}}[case]
    other = modpack.save_weights(arrays, tmp_path / "other.mpw")
    marker = tmp_path / "marker"
    proc = subprocess.run([sys.executable, "-c", LOAD, str(library), str(other)],
                          capture_output=True, text=True,
                          env={**os.environ, "MODPACK_TEST_MARKER": str(marker)})
    out = proc.stdout.strip()
    assert out.startswith("refused: WeightsMismatchError"), (out, proc.stderr)
    assert str(other) in out
    expected = {"other values": "with other contents",
                "another dtype": "array 'w' is float64[1048576] in",
                "another shape": "array 'w' is float32[1024, 1024] in",
                "an array missing": "has no array 'b'"}[case]
    assert expected in out, out
    assert not marker.exists(), "the library's constructor ran"
    proc = subprocess.run([sys.executable, "-c", LOAD, str(library), str(tmp_path / "model.mpw")],
                          capture_output=True, text=True,
                          env={**os.environ, "MODPACK_TEST_MARKER": str(marker)})
    assert proc.stdout.strip() == "loaded 1.0" and marker.exists()  # the marker works


def test_a_damaged_weight_file_is_refused(tmp_path):
    library = export(tmp_path)
    data = bytearray((tmp_path / "model.mpw").read_bytes())
    data[len(data) // 2] ^= 1  # in the middle of w's data
    (tmp_path / "model.mpw").write_bytes(bytes(data))
    with pytest.raises(modpack.FormatError, match="array 'w' does not match its checksum"):
        modpack.load_module(library)


def test_export_refuses_what_a_weight_file_cannot_hold(tmp_path):
    host = modpack.csource_module(HOST)
    host.import_module(modpack.const_module({"w": W}))
    host.import_module(modpack.const_module({"w": W + 1}))
    with pytest.raises(modpack.ArgumentError, match="two const modules hold different arrays "
                       "named 'w'"):
        host.export_library(tmp_path / "x.so", weights=tmp_path / "x.mpw")
    bare = modpack.csource_module(HOST)
    with pytest.raises(modpack.ArgumentError, match="holds no const module"):
        bare.export_library(tmp_path / "x.so", weights=tmp_path / "x.mpw")
    assert sorted(os.listdir(tmp_path)) == []  # nothing written


def test_a_failed_export_leaves_the_earlier_pair_intact(tmp_path):
    library = export(tmp_path)
    before = library.read_bytes(), (tmp_path / "model.mpw").read_bytes()
    broken = modpack.csource_module(HOST + "this is not C;")
    broken.import_module(modpack.const_module({"w": W + 1, "b": B}))
    with pytest.raises(modpack.ModpackError):
        broken.export_library(library, weights=tmp_path / "model.mpw")
    assert (library.read_bytes(), (tmp_path / "model.mpw").read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.mpw", "model.so"]


# ---- signed ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def key(tmp_path_factory) -> tuple[Path, Path]:
    return write_key(tmp_path_factory.mktemp("key"), "signer")


def tamper(path: Path, offset_from_end: int) -> None:
    with open(path, "r+b") as f:
        f.seek(-offset_from_end, os.SEEK_END)
        byte = f.read(1)
        f.seek(-offset_from_end, os.SEEK_END)
        f.write(bytes([byte[0] ^ 1]))


def test_a_signed_library_binds_its_weight_file(tmp_path, key):
    library = export(tmp_path)
    sign_library(library, key[0])
    root = modpack.load_module(library, trusted_keys=[key[1]])
    assert root["weight_at"](9) == 9.0
    del root
    tamper(tmp_path / "model.mpw", 80 + 16 * 8 + 1000)  # in w's data, far from b's
    # The checksum of w no longer matches either, but the signature is checked as a signature.
    with pytest.raises(modpack.ModpackError, match="array 'w'"):
        modpack.load_module(library, trusted_keys=[key[1]])


def test_verification_on_first_use(tmp_path, key):
    """Only the arrays a call reads are checked, when it first reads them."""
    library = export(tmp_path)
    sign_library(library, key[0])
    tamper(tmp_path / "model.mpw", 80 + 16 * 8 + 1000)
    root = modpack.load_module(library, trusted_keys=[key[1]], verify_on_first_use=True,
                               verify_checksums=False)
    assert root["bias_at"](15) == 1.0  # b is intact: checked, and read
    with pytest.raises(modpack.SignatureError, match=r"array 'w' of '.*model\.mpw' does not "
                       "match its SHA-256 digest"):
        root["weight_at"](0)
    with pytest.raises(modpack.ArgumentError, match="verify_on_first_use=True is for signed"):
        modpack.load_module(library, verify_on_first_use=True)


def test_weight_files_are_signed_and_loaded_on_their_own(tmp_path, key):
    path = modpack.save_weights({"w": W, "b": B}, tmp_path / "w.mpw")
    with pytest.raises(modpack.SignatureError, match="is not signed"):
        modpack.load_weights(path, trusted_keys=[key[1]])
    sign_library(path, key[0])
    file = modpack.load_weights(path, trusted_keys=[key[1]])
    assert np.array_equal(file["w"], W)
    assert np.array_equal(modpack.load_weights(path)["b"], B)  # signatures ignored unless asked
    with pytest.raises(modpack.ModpackOSError, match="rewritten in place while an earlier "
                       "version of it is in use"):
        tamper(path, 80 + 128 + 32 + 16 * 8 + 1000)  # w's data, before the seal and the block
        modpack.load_weights(path)
    del file
    gc.collect()
    with pytest.raises(modpack.ModpackError, match="array 'w'"):
        modpack.load_weights(path, trusted_keys=[key[1]], verify_checksums=False)


# ---- the tools -------------------------------------------------------------------------------


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "modpack", *map(str, args)],
                          capture_output=True, text=True)


def test_inspect_verify_extract_and_sign_weight_files(tmp_path, key):
    path = modpack.save_weights({"w": W, "b": B, "tied": W}, tmp_path / "w.mpw")
    shown = cli("inspect", path)
    assert shown.returncode == 0, shown.stderr
    digest = modpack.load_weights(path).digest
    assert "weight file" in shown.stdout and digest in shown.stdout
    report = json.loads(cli("inspect", path, "--json").stdout)
    arrays = {a["name"]: a for a in report["arrays"]}
    assert report["kind"] == "weight file" and report["digest"] == digest
    assert arrays["w"]["dtype"] == "float32" and arrays["w"]["shape"] == [1 << 20]
    assert arrays["tied"]["offset"] == arrays["w"]["offset"]  # stored once
    verified = cli("verify", path)
    assert verified.returncode == 0 and "digests: ok" in verified.stdout, verified.stdout
    out = tmp_path / "out"
    assert cli("extract", path, out).returncode == 0
    manifest = json.loads((out / "manifest.json").read_text())
    for entry in manifest["arrays"]:
        assert np.array_equal(np.load(out / entry["file"]), {"w": W, "b": B, "tied": W}[
            entry["name"]])
    assert cli("sign", path, "--key", key[0]).returncode == 0
    assert cli("verify", path, "--key", key[1]).returncode == 0
    tamper(path, 80 + 128 + 32 + 16 * 8 + 1000)
    failed = cli("verify", path, "--key", key[1])
    assert failed.returncode == 1 and "array 'w'" in failed.stdout, failed.stdout
    assert cli("inspect", path).returncode == 1  # a load would refuse it: so does inspect


def test_inspect_shows_what_a_library_refers_to(tmp_path):
    library = export(tmp_path)
    report = json.loads(cli("inspect", library, "--json").stdout)
    weights = [m for m in report["modules"] if m["type_key"] == "weights"]
    assert len(weights) == 1
    assert weights[0]["contents"]["file"] == "model.mpw"
    assert weights[0]["contents"]["digest"] == modpack.load_weights(tmp_path / "model.mpw").digest


def test_the_runtime_reads_the_golden_weight_file():
    """The C reader loads tests/data/golden_weights_v1 as expected.json says (the writer's
    side of the golden file is tests/test_weight_files.py)."""
    folder = Path(__file__).parent / "data" / "golden_weights_v1"
    expected = json.loads((folder / "expected.json").read_text())
    file = modpack.load_weights(folder / "weights.mpw")
    assert file.digest == expected["content_digest"]
    assert list(file) == [a["name"] for a in expected["arrays"]]
    for a in expected["arrays"]:
        assert np.array_equal(file[a["name"]], np.array(a["values"], dtype=a["dtype"]))
        assert file[a["name"]].dtype == np.dtype(a["dtype"])
    assert file["w2"].ctypes.data == file["w"].ctypes.data  # stored once


def test_a_tar_export_refers_to_its_weight_file(tmp_path):
    host = modpack.csource_module(HOST)
    host.import_module(modpack.const_module({"w": W[:64], "b": B}))
    archive = host.export_library(tmp_path / "model.tar", weights=tmp_path / "model.mpw")
    assert modpack.load_module(archive)["weight_at"](63) == 63.0  # found beside the .tar


LOW_PRECISION_HOST = r"""
#include "modpack/backend.h"
/* The 4-bit code of value i of the weights "fp4" (float4_e2m1fn_x2: pairs, low nibble first),
 * and byte i of "f8" (float8_e4m3fn); -1 when an array is missing or not of that dtype. */
static int64_t fp4_code(int64_t i) {
  const DLTensor* w;
  if (mp_backend_get_array("fp4", &w) != MP_OK || w->dtype.code != kDLFloat4_e2m1fn ||
      w->dtype.bits != 4 || w->dtype.lanes != 2)
    return -1;
  return (((const uint8_t*)w->data)[i / 2] >> (4 * (i % 2))) & 15;
}
MP_EXPORT_FUNC(fp4_code, int64_t, int64_t)
static int64_t f8_byte(int64_t i) {
  const DLTensor* w;
  if (mp_backend_get_array("f8", &w) != MP_OK || w->dtype.code != kDLFloat8_e4m3fn) return -1;
  return ((const uint8_t*)w->data)[i];
}
MP_EXPORT_FUNC(f8_byte, int64_t, int64_t)
"""


@pytest.mark.parametrize("outside", [False, True], ids=["const", "weight_file"])
def test_host_code_reads_float4_pairs_and_float8_weights(tmp_path, outside):
    """float4 pairs and float8 weights reach host code with DLPack 1.1's dtypes, from a const
    module and from a weight file the library refers to alike, the first value of a pair in the
    low nibble."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    values = np.array([[0.5, -6.0, 1.5, 3.0], [0.0, 4.0, -1.0, 2.0]], ml_dtypes.float4_e2m1fn)
    f8 = np.array([0.5, -448.0, 3.0], ml_dtypes.float8_e4m3fn)
    host = modpack.csource_module(LOW_PRECISION_HOST)
    host.import_module(modpack.const_module({"fp4": modpack.pack_float4(values), "f8": f8}))
    weights = tmp_path / "lowp.mpw" if outside else None
    library = host.export_library(tmp_path / "lowp.so", weights=weights)
    root = modpack.load_module(library)
    assert [root["fp4_code"](i) for i in range(8)] == values.view(np.uint8).reshape(-1).tolist()
    assert [root["f8_byte"](i) for i in range(3)] == f8.view(np.uint8).tolist()
    if outside:
        assert modpack.load_weights(weights)["fp4"].dtype == modpack.float4_e2m1fn_x2
