"""The tools tell the truth: inspect, verify and extract give the loader's verdict on every file
(modpack/verdict.py over the runtime's mp_library_check_file), say what was and was not
established, and refuse crafted input with a clear error, never a traceback."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
from blobtools import note_offset
from conftest import VADD_C
from test_signing import write_key

import modpack
from modpack.extraction import extract_library
from modpack.format.signatures import sign_library
from modpack.format.tar_seal import seal_tar
from modpack.inspection import inspect_library

TVM_SO = Path(__file__).parent / "data" / "tvm" / "opencl_add_tvm0.27.so"


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "modpack", *map(str, args)],
                          capture_output=True, text=True)


@pytest.fixture
def library(tmp_path) -> Path:
    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.const_module({"w": np.arange(64, dtype=np.float32)}))
    return host.export_library(tmp_path / "deploy.so")


@pytest.fixture
def archive(tmp_path) -> Path:
    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.const_module({"w": np.arange(64, dtype=np.float32)}))
    return host.export_library(tmp_path / "deploy.tar")


def test_verify_without_a_key_says_nothing_was_authenticated(library):
    shown = cli("verify", library)
    assert shown.returncode == 0
    assert "signature: not checked" in shown.stdout
    assert "detect damage, not tampering" in shown.stdout
    assert shown.stdout.rstrip().endswith("without --key nothing tells a tampered file from a "
                                          "good one")
    rows = {c["check"]: c for c in modpack.verify_library(library)["checks"]}
    assert rows["signature"]["ok"] is None and rows["seal"]["ok"] is True


def test_an_intact_tar_verifies_and_a_cut_one_does_not(archive, tmp_path):
    report = modpack.verify_library(archive)
    assert report["ok"], report
    assert {c["check"]: c["ok"] for c in report["checks"]}["seal"] is True
    # Cut the blob object short inside the archive (its member keeps its header).
    with tarfile.open(archive) as tar:
        member = next(m for m in tar.getmembers() if m.name == "devc.o")
    data = bytearray(archive.read_bytes())
    data[member.offset_data + member.size // 2:member.offset_data + member.size] = bytes(
        member.size - member.size // 2)
    cut = tmp_path / "cut.tar"
    cut.write_bytes(bytes(data))
    report = modpack.verify_library(cut)
    rows = {c["check"]: c for c in report["checks"]}
    assert not report["ok"] and rows["seal"]["ok"] is False
    assert rows["payloads"]["ok"] is None and "not checked" in rows["payloads"]["message"]
    with pytest.raises(modpack.FormatError):
        modpack.load_module(cut)


@pytest.mark.parametrize("damage", ["seal removed", "seal flipped", "payload flipped"])
def test_inspect_and_extract_refuse_what_the_loader_refuses(library, tmp_path, damage):
    data = bytearray(library.read_bytes())
    note = note_offset(library)
    if damage == "seal removed":  # the seal note's header: the note is not found
        data[note:note + 20] = bytes(20)
    elif damage == "seal flipped":  # the seal's digest
        data[note + 20 + 48] ^= 1
    else:
        report = inspect_library(library)
        data[report["blob"]["file_offset"] + report["modules"][1]["offset"] + 100] ^= 1
    bad = tmp_path / "bad.so"
    bad.write_bytes(bytes(data))
    with pytest.raises(modpack.FormatError):
        modpack.load_module(bad)
    shown = cli("inspect", bad)
    assert shown.returncode == 1 and "Traceback" not in shown.stderr, shown.stderr
    assert cli("verify", bad).returncode == 1
    out = tmp_path / "out"
    out.mkdir()  # the user's empty folder: kept after a refused extract
    extracted = cli("extract", bad, out)
    assert extracted.returncode == 1 and "Traceback" not in extracted.stderr
    assert out.is_dir() and not any(out.iterdir())


def test_what_no_loader_reads_is_free_to_change_and_every_tool_agrees(library, tmp_path):
    """The trailer (which only tells older readers the seal's version), the section headers'
    place and .symtab: nothing a load reads, so changing them changes no verdict."""
    data = bytearray(library.read_bytes())
    data[-40] ^= 1
    data[40] ^= 0x80  # e_shoff
    bad = tmp_path / "harmless.so"
    bad.write_bytes(bytes(data))
    assert modpack.load_module(bad).imported_modules
    assert cli("inspect", bad).returncode == 0
    assert cli("verify", bad).returncode == 0


def test_inspect_of_a_sparse_file_claiming_gigabytes_is_bounded(library, tmp_path):
    """A copy whose seal is gone, grown sparse to 8 GiB: inspect refuses it as fast as a load
    does (no payload hashing where a load would not hash)."""
    sparse = tmp_path / "sparse.so"
    data = bytearray(library.read_bytes())
    note = note_offset(library)
    data[note:note + 20] = bytes(20)
    sparse.write_bytes(bytes(data[:-80]))
    with open(sparse, "r+b") as f:
        f.truncate(8 << 30)
    start = time.monotonic()
    assert cli("inspect", sparse).returncode == 1
    assert time.monotonic() - start < 10


def test_extract_writes_device_code_and_survives_long_names(tmp_path):
    host = modpack.csource_module("int placeholder;")
    host.import_module(modpack.opencl_module(
        "__kernel void k(__global float* a) { a[0] = 1; }", binaries={"p/d/v": b"\x01\x02"}))
    ptx = (b".version 8.0\n.target sm_80\n.address_size 64\n"
           b".visible .entry vadd(.param .u64 a)\n{\n  ret;\n}\n")
    host.import_module(modpack.cuda_module(binaries={"ptx": ptx}))
    host.import_module(modpack.const_module({"n" * 1000: np.ones(3)}))
    path = host.export_library(tmp_path / "k.so")
    manifest = extract_library(path, tmp_path / "out")
    files = {f for m in manifest["modules"] for f in m.get("code_files", [])}
    assert any(f.endswith(".cl") for f in files) and any(f.endswith(".ptx") for f in files)
    cl = next(f for f in files if f.endswith(".cl"))
    assert (tmp_path / "out" / cl).read_text().startswith("__kernel void k")
    assert (tmp_path / "out" / next(f for f in files if f.endswith(".ptx"))).read_bytes() == ptx
    arrays = [a for m in manifest["modules"] for a in m.get("arrays", [])]
    assert len(Path(arrays[0]["file"]).name) < 200


def test_crafted_archives_get_clear_errors(tmp_path):
    def archive(name: str, members: dict[str, bytes], sealed: bool = True) -> Path:
        path = tmp_path / name
        with tarfile.open(path, "w") as tar:
            for member, data in members.items():
                info = tarfile.TarInfo(member)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        if sealed:
            seal_tar(path)
        return path

    outside = archive("outside.tar", {"../evil.o": b"x"})
    no_objects = archive("empty.tar", {"readme.txt": b"hello"})
    for path in (outside, no_objects):
        for run in (lambda p: modpack.load_module(p),
                    lambda p: extract_library(p, tmp_path / f"x-{p.stem}")):
            with pytest.raises(modpack.ModpackError):
                run(path)
    # A member the seal lists, turned into a link (the seal member copied as it was).
    good = modpack.csource_module(VADD_C).export_library(tmp_path / "good.tar")
    linked = tmp_path / "link.tar"
    with tarfile.open(good) as source, tarfile.open(linked, "w") as tar:
        for member in source.getmembers():
            if member.name == "lib0.o":
                info = tarfile.TarInfo("lib0.o")
                info.type = tarfile.SYMTYPE
                info.linkname = "/etc/passwd"
                tar.addfile(info)
            else:
                tar.addfile(member, source.extractfile(member))
    with pytest.raises(modpack.FormatError, match=r"member lib0\.o is a link to '/etc/passwd', "
                       "not a regular file"):
        modpack.load_module(linked)


def test_bytes_of_a_tar_are_named_as_such(archive):
    with pytest.raises(modpack.ArgumentError, match="bytes of a tar archive"):
        modpack.load_module_from_bytes(archive.read_bytes())


def test_a_tvm_library_is_named_for_what_it_is():
    with pytest.raises(modpack.IncompatibleError, match=r"made by Apache TVM .* `modpack inspect`"):
        modpack.load_module(TVM_SO)
    assert cli("inspect", TVM_SO).returncode == 0


def test_a_tvm_library_loaded_unsealed_is_named_before_dlopen():
    """allow_unsealed=True skipped the check that names a TVM library, and dlopen failed on
    "undefined symbol: TVMFFIError..."; the runtime names it whichever way it is loaded, from
    C alike (a FormatError: IncompatibleError)."""
    from modpack.runtime.binding import ffi, lib

    with pytest.raises(modpack.FormatError, match=r"is a library made by Apache TVM \(it "
                       r"defines __tvm_ffi__library_bin\).* modpack does not load TVM's "
                       r"libraries, but `modpack inspect` and `modpack extract` read them"):
        modpack.load_module(TVM_SO, allow_unsealed=True)
    with pytest.raises(modpack.IncompatibleError, match="made by Apache TVM"):
        modpack.load_module_from_bytes(TVM_SO.read_bytes(), allow_unsealed=True)
    out = ffi.new("mp_module_t**")
    assert lib.mp_module_load_from_file(str(TVM_SO).encode(), lib.MP_LOAD_ALLOW_UNSEALED,
                                        out) == lib.MP_ERR_INCOMPATIBLE
    assert "made by Apache TVM" in ffi.string(lib.mp_error_message()).decode()


def test_signing_through_a_link_signs_the_file(library, tmp_path):
    private, public = write_key(tmp_path, "k")
    link = tmp_path / "current.so"
    link.symlink_to(library)
    sign_library(link, private)
    assert link.is_symlink() and os.readlink(link) == str(library)
    assert modpack.load_module(library, trusted_keys=[public])["add_int"](2, 3) == 5


def test_inspect_json_says_whether_it_loads(library):
    report = json.loads(cli("inspect", library, "--json").stdout)
    assert report["loads"] == {"ok": True, "stage": None, "message": None}
