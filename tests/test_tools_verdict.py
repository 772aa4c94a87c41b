"""The tools tell the truth: inspect, verify and extract give the loader's verdict on every file
(modpack/tools/verdict.py over the runtime's mp_library_check_file), say what was and was not
established, and refuse crafted input with a clear error, never a traceback — files sealed anew
over a lie (a seal note that hides the blob, code frames that never decode, hostile .tar
members) included."""

from __future__ import annotations

import io
import json
import os
import shutil
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
from modpack.format.signatures import sign_library
from modpack.format.tar_seal import seal_tar
from modpack.tools.extraction import extract_library
from modpack.tools.inspection import inspect_library
from modpack.tools.verdict import check_file

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


# ---- re-sealed and crafted files: every tool says what the loader says --------------------

def said(path: Path, tmp: Path) -> dict[str, str]:
    """What load_module, inspect, verify, extract and slim say of |path|: "accepted",
    "refused" (a FormatError, or a report that says no), "refused: <class>" (another modpack
    error), or the name of anything else raised (which fails the tests)."""
    from modpack.tools.slim import slim_library

    out = tmp / "said"

    def extract() -> bool:
        shutil.rmtree(out, ignore_errors=True)
        return bool(extract_library(path, out))

    def slim() -> bool:
        slimmed = tmp / f"slimmed{path.suffix}"
        slim_library(path, slimmed, "sm_90")
        slimmed.unlink()
        return True

    runs = {"load": lambda: bool(modpack.load_module(path)),
            "inspect": lambda: inspect_library(path)["loads"]["ok"],
            "verify": lambda: modpack.verify_library(path)["ok"],
            "extract": extract, "slim": slim}
    result = {}
    for name, run in runs.items():
        try:
            result[name] = "accepted" if run() else "refused"
        except modpack.FormatError:
            result[name] = "refused"
        except modpack.ModpackError as exc:
            result[name] = f"refused: {type(exc).__name__}"
        except Exception as exc:  # what the tests fail on, named
            result[name] = type(exc).__name__
    shutil.rmtree(out, ignore_errors=True)
    return result


def resealed(library: Path, out: Path, **fields: int) -> Path:
    """A copy of |library| whose seal says other things of its blob (file offset, address,
    size, payloads' offset and size), sealed anew over them as anyone can."""
    import struct

    from modpack.format.seal import SEAL_SIZE, reseal_library

    data = bytearray(library.read_bytes())
    names = ("blob_offset", "blob_vaddr", "blob_size", "payloads_offset", "payloads_size")
    at = len(data) - SEAL_SIZE + 8
    values = dict(zip(names, struct.unpack_from("<5Q", data, at)))
    values.update(fields)
    struct.pack_into("<5Q", data, at, *(values[n] for n in names))
    out.write_bytes(bytes(data))
    reseal_library(out)
    return out


def test_a_seal_that_says_no_blob_is_refused_by_every_tool(library, tmp_path):
    """A library sealed anew with a seal note that says it has no blob while __dev_mblob is
    defined: the loader refuses it after dlopen, and verify said "intact" and inspect "host code
    only". Now every tool refuses it, before anything of it runs, with the loader's words (and
    so does a seal whose blob is shorter than the symbol says)."""
    bare = resealed(library, tmp_path / "no-blob.so", blob_offset=0, blob_vaddr=0,
                    blob_size=0, payloads_offset=0, payloads_size=0)
    with pytest.raises(modpack.FormatError, match="its seal says it has no blob, but "
                                                  "__dev_mblob is defined"):
        modpack.load_module(bare)
    assert said(bare, tmp_path) == dict.fromkeys(
        ("load", "inspect", "verify", "extract", "slim"), "refused")
    report = inspect_library(bare)
    assert report["loads"]["stage"] == "seal" and "no blob" in report["loads"]["message"]
    shown = cli("inspect", bare)
    assert shown.returncode == 1 and "host code only" not in shown.stdout
    rows = {c["check"]: c for c in modpack.verify_library(bare)["checks"]}
    assert rows["seal"]["ok"] is False and "__dev_mblob is defined" in rows["seal"]["message"]
    blob = inspect_library(library)["blob"]
    short = resealed(library, tmp_path / "short.so", blob_size=blob["size"] - 64,
                     payloads_size=inspect_library(library)["blob"]["size"] - 64
                     - blob["index_size"])
    assert set(said(short, tmp_path).values()) == {"refused"}


def test_a_resealed_gnu_hash_table_with_a_bloom_shift_past_31_is_refused(library, tmp_path):
    """The GNU hash table's bloom shift is what a 32-bit hash is shifted right by when the
    tools and the load look __dev_mblob up as the dynamic loader would: 32 or more (which the
    tools fuzzer once reached, undefined behaviour) is refused as damage, naming the table, by
    every tool, in a file sealed anew over it as anyone can."""
    import struct

    from elftools.elf.elffile import ELFFile

    from modpack.format.seal import reseal_library

    data = bytearray(library.read_bytes())
    with open(library, "rb") as f:
        at = ELFFile(f).get_section_by_name(".gnu.hash")["sh_offset"]
    struct.pack_into("<I", data, at + 12, 40)  # nbuckets, symoffset, bloom size, bloom shift
    bad = tmp_path / "bloom.so"
    bad.write_bytes(bytes(data))
    reseal_library(bad)
    assert said(bad, tmp_path) == dict.fromkeys(
        ("load", "inspect", "verify", "extract", "slim"), "refused")
    rows = {c["check"]: c for c in modpack.verify_library(bad)["checks"]}
    assert "its GNU hash table's bloom shift is 32 or more" in rows["seal"]["message"]


def frames_library(tmp: Path) -> Path:
    from test_compressed_code import library as compressed

    return compressed(tmp, "frames.so", True)


def frame_damage(packed: Path, out: Path, where: str) -> Path:
    """A copy of the compressed library |packed| whose OpenCL source frame is damaged at
    |where|, with the payload checksum, the index checksum and the seal computed anew over the
    damage (as a careless tool or an attacker can): every load check holds."""
    import struct

    import xxhash
    from blobtools import read_blob, reseal, write_blob

    report = inspect_library(packed)
    module = report["modules"][1]
    frame = module["offset"] + module["contents"]["source_offset"]
    blob = read_blob(packed)
    if where == "zstd data":
        blob[frame + 64 + 20] ^= 0x55
    elif where == "zstd data end":
        stored = module["contents"]["source_code"]["stored_bytes"]
        blob[frame + stored - 3] ^= 0xFF
    elif where == "raw size":
        struct.pack_into("<Q", blob, frame + 8, struct.unpack_from("<Q", blob, frame + 8)[0] - 1)
    elif where == "raw checksum":
        blob[frame + 16] ^= 1
    payload = bytes(blob[module["offset"]:module["offset"] + module["size"]])
    struct.pack_into("<Q", blob, 64 + 48 * 1 + 16, xxhash.xxh3_64_intdigest(payload))
    shutil.copyfile(packed, out)
    write_blob(out, bytes(reseal(blob)))
    return out


@pytest.mark.parametrize("where", ["zstd data", "zstd data end", "raw size", "raw checksum"])
def test_a_code_frame_that_never_decodes_fails_verify(tmp_path, where):
    """A code frame damaged, its checksums computed anew: the load takes it (it decodes frames
    when a device first needs the code) and that first use fails. verify decodes every frame
    and fails (exit 1, its "code" check FAILED), inspect says the load's first use would fail,
    extract and slim refuse; never "intact"."""
    bad = frame_damage(frames_library(tmp_path), tmp_path / "bad.so", where)
    loaded = modpack.load_module(bad)  # every load check holds
    n = 4
    a = modpack.array(np.ones(n, dtype=np.float32), device="opencl:0")
    with pytest.raises(modpack.FormatError, match="code frame"):
        loaded.get_function("vadd", query_imports=True)(a, a, a, n, n, 1, 1, 0, 0, 0)
    del loaded
    report = modpack.verify_library(bad)
    rows = {c["check"]: c for c in report["checks"]}
    assert not report["ok"] and rows["code"]["ok"] is False and rows["payloads"]["ok"] is True
    assert "module[1] (opencl): its source does not decode" in rows["code"]["message"]
    shown = cli("verify", bad)
    assert shown.returncode == 1 and "Traceback" not in shown.stderr
    loads = inspect_library(bad)["loads"]
    assert loads["stage"] == "code" and not loads["ok"]
    inspected = cli("inspect", bad)
    assert inspected.returncode == 1 and "first use of its device code would fail" in \
        inspected.stderr
    assert said(bad, tmp_path) == {"load": "accepted", "inspect": "refused",
                                   "verify": "refused", "extract": "refused",
                                   "slim": "refused"}


def test_intact_code_frames_verify(tmp_path):
    """The "code" check holds for frames that decode, and shows in verify's report."""
    report = modpack.verify_library(frames_library(tmp_path))
    rows = {c["check"]: c for c in report["checks"]}
    assert report["ok"] and rows["code"]["ok"] is True


def crafted_tar(tmp: Path, name: str, good: Path, edit: str) -> Path:
    """A copy of the .tar export |good| with one hostile change, sealed anew with the tar
    seal (which anyone can compute) so that only the rule for members stands in the way."""
    from modpack.format.tar_seal import seal_tar

    with tarfile.open(good) as source:
        members = [(m, source.extractfile(m).read()) for m in source.getmembers()[:-1]]
    host, blob = members[0][1], members[1][1]

    def regular(member: str, data: bytes) -> tuple[tarfile.TarInfo, bytes | None]:
        info = tarfile.TarInfo(member)
        info.size = len(data)
        return info, data

    def special(member: str, kind: bytes, link: str = "") -> tuple[tarfile.TarInfo, None]:
        info = tarfile.TarInfo(member)
        info.type, info.linkname = kind, link
        return info, None

    entries = {
        "absolute host name": [regular("/tmp/lib0.o", host), regular("devc.o", blob)],
        "absolute root name": [regular("/lib0.o", host), regular("devc.o", blob)],
        "absolute blob name": [regular("lib0.o", host), regular("/devc.o", blob)],
        "dot-dot name": [regular("../lib0.o", host), regular("devc.o", blob)],
        "name in a folder": [regular("sub/lib0.o", host), regular("devc.o", blob)],
        "dot-slash name": [regular("./lib0.o", host), regular("devc.o", blob)],
        "symlink out": [regular("lib0.o", host), regular("devc.o", blob),
                        special("x.o", tarfile.SYMTYPE, "/etc/passwd")],
        "hardlink": [regular("lib0.o", host), regular("devc.o", blob),
                     special("x.o", tarfile.LNKTYPE, "lib0.o")],
        "character device": [regular("lib0.o", host), regular("devc.o", blob),
                             special("x.o", tarfile.CHRTYPE)],
        "fifo": [regular("lib0.o", host), regular("devc.o", blob),
                 special("x.o", tarfile.FIFOTYPE)],
        "directory": [regular("lib0.o", host), regular("devc.o", blob),
                      special("d", tarfile.DIRTYPE)],
        "duplicate name": [regular("lib0.o", host), regular("devc.o", blob),
                           regular("lib0.o", host)],
        "name too long": [regular("h" * 150 + ".o", host), regular("devc.o", blob)],
        "control character": [regular("lib0.o", host), regular("devc.o", blob),
                              regular("x\n.o", host)],
        "object that is no ELF": [regular("lib0.o", host), regular("devc.o", blob),
                                  regular("x.o", b"not an object")],
        "shared library as object": [regular("lib0.o", host), regular("devc.o", blob),
                                     regular("x.o", (tmp / "lib.so").read_bytes())],
        "two blobs": [regular("lib0.o", host), regular("devc.o", blob),
                      regular("devc2.o", blob)],
        "object for another machine": [regular("lib0.o", host[:18] + b"\xb7\x00" + host[20:]),
                                       regular("devc.o", blob)],
    }[edit]
    path = tmp / name
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    seal_tar(path)
    return path


HOSTILE_TARS = ["absolute host name", "absolute root name", "absolute blob name", "dot-dot name",
                "name in a folder", "dot-slash name", "symlink out", "hardlink",
                "character device", "fifo", "directory", "duplicate name", "name too long",
                "control character", "object that is no ELF", "shared library as object",
                "two blobs", "object for another machine"]


@pytest.mark.parametrize("edit", HOSTILE_TARS)
def test_a_hostile_resealed_tar_is_refused_by_every_path(archive, library, tmp_path, edit):
    """A .tar sealed anew over hostile members (absolute names, ``..``, links, devices, names
    twice or too long, objects that are none, two blobs, another machine's object): load_module
    and every tool refuse it with a FormatError (IncompatibleError for the other machine),
    before anything is extracted or linked. An absolute host member's name once made the load
    link the library without its host code, while the tools disagreed among themselves."""
    shutil.copyfile(library, tmp_path / "lib.so")
    crafted = crafted_tar(tmp_path, "crafted.tar", archive, edit)
    with pytest.raises(modpack.FormatError):
        modpack.load_module(crafted)
    assert said(crafted, tmp_path) == dict.fromkeys(
        ("load", "inspect", "verify", "extract", "slim"), "refused")
    if edit != "object for another machine":  # which a preflight may be asked about
        with pytest.raises(modpack.FormatError):
            modpack.preflight(crafted, "cuda:sm_90")
    assert not any(p.name.endswith(".o") for p in tmp_path.iterdir())  # nothing extracted here


def crafted_files(tmp: Path, library: Path, archive: Path) -> dict[str, Path]:
    """Files the tools and the loader must agree on: exports as they are, and crafted or
    re-sealed copies."""
    from blobtools import read_blob, reseal, write_blob

    shutil.copyfile(library, tmp / "lib.so")
    blob = inspect_library(library)["blob"]
    files = {"library": library, "archive": archive,
             "no blob in the seal": resealed(library, tmp / "no-blob.so", blob_offset=0,
                                            blob_vaddr=0, blob_size=0, payloads_offset=0,
                                            payloads_size=0),
             "blob moved in the seal": resealed(library, tmp / "moved.so",
                                                blob_vaddr=blob["file_offset"] + 4096)}
    newer = tmp / "newer.so"  # a later format minor: loads
    shutil.copyfile(library, newer)
    index = read_blob(newer)
    index[10] += 1
    write_blob(newer, bytes(reseal(index)))
    files["newer format minor"] = newer
    unknown = tmp / "unknown.so"  # a module of a kind nobody registered
    shutil.copyfile(library, unknown)
    index = read_blob(unknown)
    key = bytes(index).index(b"const")
    index[key:key + 5] = b"cnst_"
    write_blob(unknown, bytes(reseal(index)))
    files["unknown kind"] = unknown
    for edit in ("absolute host name", "name in a folder", "two blobs", "symlink out"):
        files[edit] = crafted_tar(tmp, edit.replace(" ", "-") + ".tar", archive, edit)
    return files


@pytest.mark.parametrize("case", ["library", "archive", "no blob in the seal",
                                  "blob moved in the seal", "newer format minor",
                                  "absolute host name", "name in a folder", "two blobs",
                                  "symlink out"])
def test_every_tool_agrees_with_load_module(library, archive, tmp_path, case):
    """Over exports and crafted files, inspect, verify and extract accept exactly what
    load_module accepts, and raise nothing but modpack's errors."""
    path = crafted_files(tmp_path, library, archive)[case]
    verdicts = {tool: answer.split(":")[0] for tool, answer in said(path, tmp_path).items()}
    slim = verdicts.pop("slim")  # slim has no CUDA code to cut here: it agrees or refuses
    assert set(verdicts.values()) in ({"accepted"}, {"refused"}), verdicts
    assert slim in ("accepted", "refused")
    if verdicts["load"] == "refused":
        assert slim == "refused"


def test_a_kind_this_process_has_no_loader_for_is_said_not_refused(library, archive, tmp_path):
    """A module of a kind nobody registered in this process: the load refuses it (its
    NotFoundError, naming the kind and how to register it), and every tool says so with the
    load's words, but as what it is, a sound file this process cannot load: inspect reports
    it and exits 0 (its exit 1 is for damage), verify holds with a "loaders" row not checked,
    extract takes it apart, slim cuts it. The tools once either passed it over or called it
    damaged."""
    path = crafted_files(tmp_path, library, archive)["unknown kind"]
    with pytest.raises(modpack.NotFoundError, match="no loader registered for type key "
                                                    "'cnst_'"):
        modpack.load_module(path)
    loads = inspect_library(path)["loads"]
    assert (loads["ok"], loads["stage"]) == (False, "loaders")
    assert "no loader registered for type key 'cnst_'" in loads["message"]
    shown = cli("inspect", path)
    assert shown.returncode == 0 and "is sound, but would not load in this process" in \
        shown.stderr, shown.stderr
    report = modpack.verify_library(path)
    rows = {c["check"]: c for c in report["checks"]}
    assert report["ok"] and rows["payloads"]["ok"] and rows["loaders"]["ok"] is None
    assert "not here" in rows["loaders"]["message"]
    assert cli("verify", path).returncode == 0
    assert extract_library(path, tmp_path / "out")
    assert (tmp_path / "out" / "manifest.json").is_file()


@pytest.mark.parametrize("style", ["gnu", "sysv", "both"])
def test_the_blob_symbol_is_found_as_dlsym_finds_it(tmp_path, style):
    """The check reads __dev_mblob as the dynamic loader does (the dynamic segment, its GNU or
    System V hash table, the symbol's version), not through the section headers, which no load
    reads: a library linked with either hash table passes, stripped too, and a seal that
    hides its blob is refused through either table."""
    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.const_module({"w": np.arange(64, dtype=np.float32)}))
    path = host.export_library(tmp_path / f"{style}.so", options=[f"-Wl,--hash-style={style}"])
    stripped = tmp_path / "stripped.so"
    shutil.copyfile(path, stripped)
    if shutil.which("strip"):
        subprocess.run(["strip", "--strip-all", str(stripped)], check=True)
    for good in (path, stripped):
        assert check_file(good).ok and modpack.load_module(good)["add_int"](2, 3) == 5
    bare = resealed(path, tmp_path / "bare.so", blob_offset=0, blob_vaddr=0, blob_size=0,
                    payloads_offset=0, payloads_size=0)
    verdict = check_file(bare)
    assert verdict.stage == "seal" and "__dev_mblob is defined" in verdict.message
