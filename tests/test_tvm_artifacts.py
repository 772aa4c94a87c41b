"""TVM's libraries read by modpack's tools without running them: `inspect` shows the blob's
modules, tree and decoded device modules (`"producer": "tvm"`), `extract` writes them out.
The artifact in tests/data/tvm was made by TVM 0.27 itself (make_artifact.py there); the
older layout is built here byte for byte as TVM wrote it."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import run

import modpack
from modpack.tools.extraction import extract_library
from modpack.tools.inspection import inspect_library

TVM_SO = Path(__file__).parent / "data" / "tvm" / "opencl_add_tvm0.27.so"


def test_inspect_a_tvm_027_library():
    report = inspect_library(TVM_SO)
    assert report["producer"] == "tvm"
    assert report["blob"]["symbol"] == "__tvm_ffi__library_bin"
    assert [m["type_key"] for m in report["modules"]] == ["relax.VMExecutable", "_lib", "opencl"]
    assert report["import_tree"] == {"row_ptr": [0, 1, 2, 2], "child_indices": [1, 2]}
    opencl = report["modules"][2]["contents"]
    assert opencl["format"] == "cl" and opencl["code_bytes"] > 100
    (kernel,) = opencl["functions"]
    assert kernel["name"] == "add_kernel" and kernel["launch_tags"] == ["blockIdx.x",
                                                                          "threadIdx.x"]
    assert "main" in report["functions"]
    text = subprocess.run([sys.executable, "-m", "modpack", "inspect", str(TVM_SO)],
                          capture_output=True, text=True)
    assert text.returncode == 0, text.stderr
    assert "producer           TVM" in text.stdout and "[2] opencl, 554 bytes" in text.stdout
    assert "function add_kernel(handle64, handle64, handle64)" in text.stdout
    as_json = json.loads(subprocess.run(
        [sys.executable, "-m", "modpack", "inspect", str(TVM_SO), "--json"],
        capture_output=True, text=True, check=True).stdout)
    assert as_json["producer"] == "tvm"


def test_modpack_libraries_say_modpack(tmp_path):
    path = modpack.csource_module("int x;").export_library(tmp_path / "m.so")
    assert inspect_library(path)["producer"] == "modpack"


def test_extract_a_tvm_library(tmp_path):
    manifest = extract_library(TVM_SO, tmp_path / "out")
    assert manifest["producer"] == "tvm"
    files = {m["type_key"]: m for m in manifest["modules"]}
    source = (tmp_path / "out" / files["opencl"]["code_file"]).read_text()
    assert "__kernel void add_kernel" in source
    assert (tmp_path / "out" / files["relax.VMExecutable"]["payload_file"]).stat().st_size == 1290
    assert json.loads((tmp_path / "out" / "manifest.json").read_text()) == {
        "schema_version": 1, **manifest}


def test_extract_a_modpack_library_and_its_arrays(tmp_path):
    weights = np.arange(12, dtype=np.float64).reshape(3, 4)
    host = modpack.csource_module("int x;")
    host.import_module(modpack.const_module({"weights": weights, "odd/name": np.ones(2, np.int8)}))
    host.import_module(modpack.opencl_module("__kernel void k(__global float* x) { x[0] = 1; }"))
    for suffix in (".so", ".tar"):
        path = host.export_library(tmp_path / f"m{suffix}")
        out = tmp_path / f"out{suffix}"
        cli = subprocess.run([sys.executable, "-m", "modpack", "extract", str(path), str(out)],
                             capture_output=True, text=True)
        assert cli.returncode == 0 and "3 modules" in cli.stdout, cli.stdout + cli.stderr
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["producer"] == "modpack"
        const = next(m for m in manifest["modules"] if m["type_key"] == "const")
        saved = {a["name"]: np.load(out / a["file"]) for a in const["arrays"]}
        assert np.array_equal(saved["weights"], weights) and saved["odd/name"].dtype == np.int8
        opencl = next(m for m in manifest["modules"] if m["type_key"] == "opencl")
        assert [k["name"] for k in opencl["contents"]["kernels"]] == ["k"]
        assert (out / opencl["payload_file"]).stat().st_size == opencl["size"]
    with pytest.raises(modpack.ArgumentError, match="not an empty folder"):
        extract_library(path, tmp_path / "out.so")


def _s(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def _cuda_payload() -> bytes:
    info = (_s(b"vadd") + _s(b"vadd") + struct.pack("<Q", 2) + struct.pack("<BBH", 2, 32, 1) * 2
            + struct.pack("<Q", 1) + _s(b"threadIdx.x") + struct.pack("<Q", 0))
    return _s(b"ptx") + struct.pack("<Q", 1) + info + _s(b".version 7.0\n// ptx text\n")


def _legacy_library(tmp_path: Path, body: bytes) -> Path:
    """A shared library with __tvm_dev_mblob as TVM 0.20 linked it (no seal of ours)."""
    blob = struct.pack("<Q", len(body)) + body
    source = tmp_path / "devc.c"
    source.write_text("const unsigned char __tvm_dev_mblob[] = {"
                      + ",".join(str(b) for b in blob) + "};\n"
                      "int legacy_entry(void) { return 0; }\n")
    path = tmp_path / "legacy.so"
    run("cc", "-shared", "-fPIC", source, "-o", path)
    return path


def test_inspect_the_earlier_tvm_layout(tmp_path):
    body = (struct.pack("<Q", 3) + _s(b"_lib") + _s(b"cuda") + _cuda_payload()
            + _s(b"_import_tree") + struct.pack("<QQQQ", 3, 0, 1, 1) + struct.pack("<QQ", 1, 1))
    report = inspect_library(_legacy_library(tmp_path, body))
    assert report["producer"] == "tvm" and report["format_version"] == "TVM 0.21 or earlier"
    assert [m["type_key"] for m in report["modules"]] == ["_lib", "cuda"]
    assert report["modules"][0]["children"] == [1]
    cuda = report["modules"][1]["contents"]
    assert cuda["format"] == "ptx" and cuda["functions"][0]["arg_types"] == ["float32", "float32"]
    manifest = extract_library(tmp_path / "legacy.so", tmp_path / "out")
    cuda_module = manifest["modules"][1]
    assert (tmp_path / "out" / cuda_module["code_file"]).read_text().startswith(".version 7.0")


def test_an_unknown_kind_in_the_earlier_layout_stops_the_reading_saying_why(tmp_path):
    body = struct.pack("<Q", 3) + _s(b"_lib") + _s(b"vulkan.somethingnew") + b"\x01\x02\x03"
    report = inspect_library(_legacy_library(tmp_path, body))
    assert report["producer"] == "tvm"
    assert "'vulkan.somethingnew'" in report["note"] and "cannot be read" in report["note"]


def test_a_damaged_tvm_blob_is_an_error_not_a_crash(tmp_path):
    body = struct.pack("<Q", 3) + _s(b"_lib") + _s(b"cuda") + struct.pack("<Q", 1 << 40)
    with pytest.raises(modpack.FormatError, match="TVM blob"):
        inspect_library(_legacy_library(tmp_path, body))


def test_verify_a_tvm_library_says_what_it_could_not_check():
    report = modpack.verify_library(TVM_SO)
    checks = {c["check"]: c["ok"] for c in report["checks"]}
    assert checks == {"blob": True, "seal": None, "payloads": None} and report["ok"]
    text = subprocess.run([sys.executable, "-m", "modpack", "verify", str(TVM_SO)],
                          capture_output=True, text=True)
    assert text.returncode == 0 and "TVM writes no seal" in text.stdout
    assert "2 could not be made" in text.stdout


def test_damaged_tvm_blobs_are_errors_or_reports_never_crashes(tmp_path):
    """100 copies of the TVM library with a byte of its blob changed: each is either read
    (the byte was in a payload or a name) or refused with a FormatError; nothing else."""
    import random

    good = TVM_SO.read_bytes()
    blob = inspect_library(TVM_SO)["blob"]
    rng = random.Random(13)
    path = tmp_path / "damaged.so"
    outcomes = {"read": 0, "refused": 0}
    for _ in range(100):
        bad = bytearray(good)
        bad[blob["file_offset"] + rng.randrange(blob["size"])] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(bad))
        try:
            inspect_library(path)
            outcomes["read"] += 1
        except modpack.FormatError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0 and sum(outcomes.values()) == 100, outcomes


def test_extract_refuses_what_is_not_a_library(tmp_path):
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"not a library")
    with pytest.raises(modpack.FormatError, match="not an ELF file"):
        extract_library(junk, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing half-written left behind
    with pytest.raises(modpack.FormatError, match="is not a library file"):
        extract_library(tmp_path, tmp_path / "out2")
