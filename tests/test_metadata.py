"""Provenance inside the artifact: ``export_library(..., metadata={...})`` stores the user's
JSON and modpack's own record of the export in the blob's index (format 1.2), where the index
checksum, the seal and signatures cover it; every reader finds it (``LoadedModule.metadata``,
``mp_module_metadata`` and ``mp_blob_metadata`` through cffi, ``inspect``, ``extract``); bad
metadata is refused before any work; runtimes that predate it load such libraries."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from blobtools import blob_extent, parse, read_blob, reseal, write_blob
from conftest import VADD_C
from test_signing import write_key

import modpack
from modpack.format.signatures import sign_library
from modpack.runtime.binding import ffi, lib
from modpack.tools.inspection import inspect_library

METADATA = {
    "producer": "acme-compiler 3.1",
    "source": {"revision": "4f2a9c1", "dirty": False},
    "drivers": ["cuda 12.4", "pocl 5.0"],
    "license": "Apache-2.0",
    "notes": "température ✓",
    "batch": 8,
    "scale": 0.125,
    "nothing": None,
}
WEIGHTS = np.arange(1024, dtype=np.float32)


def tree() -> modpack.Module:
    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.const_module({"w": WEIGHTS}))
    host.import_module(modpack.opencl_module("__kernel void k(__global float* x) { x[0] = 1; }"))
    return host


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    return tree().export_library(tmp_path_factory.mktemp("meta") / "deploy.so",
                                 metadata=METADATA)


def canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode()


def test_round_trip_in_python_and_through_the_c_api(library):
    """Every module of the tree gives the metadata: the user's keys as given, modpack's own
    under "modpack" (its version, the C compiler and target); C sees the same canonical bytes,
    from the loaded tree and from a blob parsed without loading anything."""
    root = modpack.load_module(library)
    got = root.metadata
    assert {k: v for k, v in got.items() if k != "modpack"} == METADATA
    assert got["modpack"]["version"] == modpack.__version__
    assert got["modpack"]["target"].startswith(("x86_64", "aarch64"))
    assert got["modpack"]["compiler"]  # `cc --version`'s first line
    assert all(m.metadata == got for m in root.imported_modules)
    assert root.metadata is not got  # a new dict each time: the caller may change it
    assert modpack.load_module_from_bytes(library.read_bytes()).metadata == got  # a memfd copy

    span = ffi.new("mp_const_byte_span_t*")
    lib.mp_module_metadata(root._handle, span)
    stored = bytes(ffi.buffer(span.data, span.size))
    assert stored == canonical(got)
    lib.mp_module_selftests(root._handle, span)
    assert span.size == 0 and span.data == ffi.NULL  # no self-tests were exported

    blob = bytes(read_blob(library))
    data = ffi.from_buffer(blob)
    out = ffi.new("mp_blob_t**")
    bytes_span = ffi.new("mp_const_byte_span_t*", {"data": data, "size": len(blob)})
    assert lib.mp_blob_parse(bytes_span[0], 0, out) == 0
    lib.mp_blob_metadata(out[0], span)
    assert bytes(ffi.buffer(span.data, span.size)) == stored
    lib.mp_blob_free(out[0])
    assert struct.unpack_from("<HHI", blob, 8) == (1, 2, 96)  # format 1.2, 96-byte header


def test_a_module_of_no_library_has_none():
    """A module loaded from a payload alone belongs to no library: no metadata, no crash."""
    payload = bytes(read_blob_of_const())
    data = ffi.from_buffer(payload)
    out = ffi.new("mp_module_t**")
    span = ffi.new("mp_const_byte_span_t*", {"data": data, "size": len(payload)})
    assert lib.mp_module_load_from_payload(b"const", span[0], out) == 0
    span = ffi.new("mp_const_byte_span_t*")
    lib.mp_module_metadata(out[0], span)
    assert span.size == 0
    lib.mp_module_release(out[0])


def read_blob_of_const() -> bytes:
    module = modpack.const_module({"w": WEIGHTS})
    return b"".join(bytes(memoryview(c).cast("B")) for c in module.payload_chunks())


def test_inspect_and_extract_show_it(library, tmp_path):
    """inspect's report and text, and extract's metadata.json, hold the metadata as stored."""
    report = inspect_library(library)
    assert report["metadata"] == modpack.load_module(library).metadata
    assert report["format_version"] == "1.2" and report["selftests"] is None
    blob = report["blob"]
    assert blob["metadata_size"] == len(canonical(report["metadata"]))
    assert blob["metadata_offset"] % 64 == 0 and blob["selftests_size"] == 0
    text = subprocess.run([sys.executable, "-m", "modpack", "inspect", str(library)],
                          capture_output=True, text=True, check=True).stdout
    assert "\nmetadata\n" in text and '  license: "Apache-2.0"' in text
    assert '  source: {"dirty": false, "revision": "4f2a9c1"}' in text
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "modpack", "extract", str(library), str(out)],
                   check=True, capture_output=True)
    assert json.loads((out / "metadata.json").read_text()) == report["metadata"]
    assert json.loads((out / "manifest.json").read_text())["metadata_file"] == "metadata.json"


def test_without_metadata_the_blob_is_as_before(tmp_path):
    """No metadata, no change: format 1.0 and a 64-byte header, byte for byte what exports
    wrote before; metadata={} records modpack's part alone (format 1.2)."""
    plain = tree().export_library(tmp_path / "plain.so")
    assert struct.unpack_from("<HHI", read_blob(plain), 8) == (1, 0, 64)
    assert modpack.load_module(plain).metadata is None
    assert inspect_library(plain)["metadata"] is None
    empty = tree().export_library(tmp_path / "empty.so", metadata={})
    assert list(modpack.load_module(empty).metadata) == ["modpack"]


def test_host_code_alone_gets_a_blob_for_it(tmp_path):
    """A tree of host code alone has no blob, unless it carries metadata: then a blob of one
    "_lib" entry holds it."""
    host = modpack.csource_module(VADD_C)
    path = host.export_library(tmp_path / "host.so", metadata={"k": 1})
    root = modpack.load_module(path)
    assert root.metadata["k"] == 1 and root["add_int"](2, 3) == 5
    report = inspect_library(path)
    assert [m["type_key"] for m in report["modules"]] == ["_lib"]


def test_with_compressed_code(tmp_path):
    """Code frames (format 1.1's flag) and metadata together: format 1.2, frames flagged, the
    kernels decoded at their first use as before."""
    path = tree().export_library(tmp_path / "z.so", metadata={"k": 1}, compress_code=True)
    report = inspect_library(path)
    assert report["format_version"] == "1.2" and report["metadata"]["k"] == 1
    assert [m.get("code_frames") for m in report["modules"]] == [None, None, True]
    root = modpack.load_module(path)
    assert root.metadata["k"] == 1 and root["add_int"](1, 2) == 3


@pytest.mark.parametrize("suffix", [".tar", ".o"])
def test_tar_and_system_library_exports_carry_it(tmp_path, suffix):
    """The other forms of export hold the same blob: a .tar loads with it, and inspect reads
    it from a system library's object."""
    options = {"system_lib": "meta"} if suffix == ".o" else {}
    path = tree().export_library(tmp_path / f"deploy{suffix}", metadata={"form": suffix},
                                 **options)
    assert inspect_library(path)["metadata"]["form"] == suffix
    if suffix == ".tar":
        assert modpack.load_module(path).metadata["form"] == ".tar"


def test_the_same_tree_and_metadata_give_the_same_bytes(tmp_path):
    """Reproducible: no time or path is added, and keys are sorted, so the order a dict was
    built in does not matter; other metadata gives other bytes."""
    a = tree().export_library(tmp_path / "a.so", metadata=METADATA)
    b = tree().export_library(tmp_path / "b.so", metadata=dict(reversed(METADATA.items())))
    c = tree().export_library(tmp_path / "c.so", metadata={**METADATA, "batch": 16})
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


BIG = "x" * (1 << 20)


@pytest.mark.parametrize("metadata, message", [
    (["a"], "metadata must be a dict"),
    ({1: "a"}, "the key 1 is not a str; metadata keys are str"),
    ({"when": datetime(2024, 1, 1)}, r"metadata\['when'\] is a datetime, which JSON cannot"),
    ({"x": {"y": [1, np.float32(2)]}}, r"metadata\['x'\]\['y'\]\[1\] is a float32 \(a numpy"),
    ({"loss": math.nan}, r"metadata\['loss'\] = nan: JSON has no NaN"),
    ({"id": 1 << 64}, "does not fit in 64 bits"),
    ({"modpack": {}}, "metadata key 'modpack' is reserved"),
    ({"text": "\ud800"}, "lone surrogate"),
    ({"small": 1, "blob": BIG}, r"more than the 1048576 a library holds; the largest is 'blob'"),
    ({"deep": json.loads("[" * 70 + "]" * 70)}, "64 levels deep at most"),
    ({"tags": {"a", "b"}}, r"metadata\['tags'\] is a set"),
])
def test_bad_metadata_is_refused_before_any_work(tmp_path, metadata, message):
    """ArgumentError naming the key and what to do, and no file written."""
    out = tmp_path / "bad.so"
    with pytest.raises(modpack.ArgumentError, match=message):
        tree().export_library(out, metadata=metadata)
    assert not out.exists() and not any(tmp_path.iterdir())


def metadata_offset(path: Path) -> int:
    """The file offset of the metadata's first byte."""
    return blob_extent(path)[0] + inspect_library(path)["blob"]["metadata_offset"]


def changed_metadata(library: Path, folder: Path, fix_checksum: bool) -> Path:
    """A copy whose metadata says "Apache-3.0" for "Apache-2.0" (same length), its library
    sealed anew over the change (as anyone can), its index checksum computed anew or not."""
    path = folder / f"changed{int(fix_checksum)}.so"
    shutil.copyfile(library, path)
    blob = read_blob(path)
    at = bytes(blob).index(b'"Apache-2.0"')
    blob[at:at + 12] = b'"Apache-3.0"'
    write_blob(path, bytes(reseal(blob) if fix_checksum else blob))
    return path


def test_a_changed_byte_of_the_metadata_is_refused(library, tmp_path):
    """The seal covers the index: one changed byte of the metadata is damage to a plain load;
    sealed anew, the index checksum catches it; with that computed anew too the file loads
    (the seal and checksums catch damage, not tampering) and says what it now says, but a
    signed load refuses it: the signature covers the metadata."""
    flipped = tmp_path / "flipped.so"
    shutil.copyfile(library, flipped)
    data = bytearray(flipped.read_bytes())
    data[metadata_offset(library) + 5] ^= 0x01
    flipped.write_bytes(bytes(data))
    with pytest.raises(modpack.FormatError, match="do not match its seal"):
        modpack.load_module(flipped)
    with pytest.raises(modpack.FormatError, match="index checksum mismatch"):
        modpack.load_module(changed_metadata(library, tmp_path, fix_checksum=False))
    forged = changed_metadata(library, tmp_path, fix_checksum=True)
    assert modpack.load_module(forged).metadata["license"] == "Apache-3.0"

    private, public = write_key(tmp_path, "signer")
    signed = tmp_path / "signed.so"
    shutil.copyfile(library, signed)
    sign_library(signed, private)
    assert modpack.load_module(signed, trusted_keys=[public]).metadata == METADATA | {
        "modpack": modpack.load_module(library).metadata["modpack"]}
    forged_signed = changed_metadata(signed, tmp_path, fix_checksum=True)
    with pytest.raises(modpack.SignatureError, match="changed after it was signed"):
        modpack.load_module(forged_signed, trusted_keys=[public])


def test_metadata_that_is_not_json_is_damage(library, tmp_path):
    """A file re-sealed over metadata that is not a JSON object (no modpack writes it) loads,
    but reading the metadata is a FormatError saying so, as inspect is."""
    path = tmp_path / "garbled.so"
    shutil.copyfile(library, path)
    blob = read_blob(path)
    start = inspect_library(library)["blob"]["metadata_offset"]
    blob[start] = ord("[")
    write_blob(path, bytes(reseal(blob)))
    root = modpack.load_module(path)
    with pytest.raises(modpack.FormatError, match="its metadata is not UTF-8 JSON"):
        _ = root.metadata
    with pytest.raises(modpack.FormatError, match="its metadata is not UTF-8 JSON"):
        inspect_library(path)


def header_fields(blob: bytearray) -> dict[str, int]:
    names = ("metadata_offset", "metadata_size", "selftests_offset", "selftests_size")
    return dict(zip(names, struct.unpack_from("<QQQQ", blob, 64)))


@pytest.mark.parametrize("field, value, message", [
    ("metadata_size", 0, r"metadata of 0 bytes at offset \d+; a blob holds 1 to 1048576"),
    ("metadata_offset", 0, r"metadata at \[0, \+\d+\) is not at a multiple of 64 inside"),
    ("metadata_offset", 64 * 100000, r"is not at a multiple of 64 inside the string table"),
    ("metadata_offset", "+8", "is not at a multiple of 64"),
    ("metadata_size", "index", "is not at a multiple of 64 inside the string table's area"),
    ("metadata_size", 1048577, "a blob holds 1 to 1048576 bytes of metadata, or none"),
    ("selftests_offset", "metadata", r"metadata at \[\d+, \+\d+\) and self-tests at .* overlap"),
    ("selftests_offset", 128, "self-tests of 0 bytes at offset 128"),
])
def test_the_reader_checks_where_they_lie(library, field, value, message):
    """Each of the reader's checks of format 1.2's header fields, tripped on a blob whose index
    checksum is computed anew (so that the field check, not the checksum, answers)."""
    blob = read_blob(library)
    fields = header_fields(blob)
    if value == "+8":
        value = fields[field] + 8
    elif value == "index":
        value = struct.unpack_from("<Q", blob, 48)[0]  # the whole index: runs past its end
    elif value == "metadata":
        fields["selftests_size"] = fields["metadata_size"]
        value = fields["metadata_offset"]
    fields[field] = value
    struct.pack_into("<QQQQ", blob, 64, *fields.values())
    error = parse(bytes(reseal(blob)))
    assert isinstance(error, modpack.FormatError) and error is not None
    assert re.search(message, str(error)), str(error)


def test_a_reader_that_ignores_the_new_header_bytes_reads_the_same_tree(library, tmp_path):
    """What a runtime of format 1.0 or 1.1 does with a 1.2 blob: it starts the entries at
    header_size and reads the string table only where type keys are. The same blob told it is
    1.1 (so this reader, too, skips the new fields) parses to the same modules and tree, holds
    no metadata, and the library sealed over it loads and runs."""
    blob = read_blob(library)
    as_older = bytearray(blob)
    struct.pack_into("<H", as_older, 10, 1)
    as_older = reseal(as_older)
    assert parse(bytes(as_older)) is None
    older = tmp_path / "older.so"
    shutil.copyfile(library, older)
    write_blob(older, bytes(as_older))
    old, new = inspect_library(older), inspect_library(library)
    assert old["modules"] == new["modules"] and old["import_tree"] == new["import_tree"]
    assert old["metadata"] is None and old["format_version"] == "1.1"
    root = modpack.load_module(older)
    assert root["add_int"](2, 3) == 5 and root.metadata is None
    assert np.array_equal(root.imported_modules[0].arrays["w"], WEIGHTS)


OLD_RUNTIME = os.environ.get("MODPACK_TEST_OLD_PYTHON")


@pytest.mark.skipif(not OLD_RUNTIME, reason="set MODPACK_TEST_OLD_PYTHON to the python of a "
                    "modpack install that predates format 1.2")
def test_a_runtime_that_predates_format_1_2_loads_it(library):
    """Checked by hand against an older install: it loads the library, calls its host code and
    reads its weights, knowing nothing of the metadata."""
    code = ("import sys, modpack\nroot = modpack.load_module(sys.argv[1])\n"
            "print(root['add_int'](2, 3), root.imported_modules[0].arrays['w'][5])")
    out = subprocess.run([OLD_RUNTIME, "-c", code, str(library)], capture_output=True,
                         text=True, cwd="/", check=True).stdout
    assert out.split() == ["5", "5.0"]
