"""``modpack slim``: a library cut to the code a fleet needs — what preflight reports for each
kept device survives, everything else of CUDA goes, host code and weights come out byte for
byte, the output is sealed and reproducible, signatures are dropped with a note, and a module
without code for a kept device is refused by name. A copy a load takes whose section headers
are cut off or damaged is slimmed or refused with a FormatError, never a parser's traceback."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

import modpack
from modpack.errors import ArgumentError, FormatError, ModpackError
from modpack.tools.inspection import inspect_library
from modpack.tools.slim import slim_library

# Real CUDA code: the tests that compile it need nvcc (the damaged-copy tests below do not).
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None,
                                reason="nvcc is not installed (CUDA toolkit): real CUDA code")
KERNEL = 'extern "C" __global__ void scale(float* x, int n) { x[0] *= n; }\n'
WEIGHTS = np.arange(1 << 16, dtype=np.float32)


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed (CUDA toolkit): real CUDA code")
    tmp = tmp_path_factory.mktemp("slim")
    (tmp / "k.cu").write_text(KERNEL)

    def nvcc(*args):
        subprocess.run(["nvcc", *args, "-o", str(tmp / "o"), str(tmp / "k.cu")], check=True,
                       capture_output=True)
        return (tmp / "o").read_bytes()

    bins = {a: nvcc("-cubin", f"-arch={a}") for a in ("sm_75", "sm_80", "sm_90")}
    bins["ptx"] = nvcc("-ptx", "-arch=compute_75")
    out = {}
    for compress in (False, True):
        host = modpack.csource_module("int placeholder;")
        host.import_module(modpack.cuda_module(binaries=bins))
        host.import_module(modpack.opencl_module("__kernel void k(__global float* x) {}"))
        host.import_module(modpack.const_module({"w": WEIGHTS}))
        for suffix in (".so", ".tar"):
            out[compress, suffix] = host.export_library(tmp / f"k{int(compress)}{suffix}",
                                                        compress_code=compress)
        out[compress] = out[compress, ".so"]
    return out


def host_sections(path):
    """Every section the library loads but those slim rewrites: the blob, the seal note and
    .dynsym (the size of __dev_mblob); of a .tar, every member but the blob object and the
    seal."""
    from elftools.elf.elffile import ELFFile
    if path.suffix == ".tar":
        with tarfile.open(path) as tar:
            return {m.name: (m.get_info(), tar.extractfile(m).read())
                    for m in tar.getmembers() if m.name not in ("devc.o", "MODPACK-SEAL")}
    with open(path, "rb") as f:
        elf = ELFFile(f)
        return {s.name: s.data() for s in elf.iter_sections()
                if s["sh_flags"] & 2 and s.name not in (".modpack.blob", ".note.modpack", ".dynsym")
                and s["sh_type"] != "SHT_NOBITS"}


def arches(path):
    (cuda,) = [m for m in inspect_library(path)["modules"] if m["type_key"] == "cuda"]
    return [v["arch"] for v in cuda["contents"]["variants"]]


@pytest.mark.parametrize("suffix", [".so", ".tar"])
@pytest.mark.parametrize("compress", [False, True])
def test_slim_keeps_what_preflight_chooses(libraries, tmp_path, compress, suffix):
    source = libraries[compress, suffix]
    out = tmp_path / f"fleet{suffix}"
    report = slim_library(source, out, "sm_86,sm_90")
    assert arches(out) == ["sm_80", "sm_90", "compute_75"]
    assert report.modules[0]["dropped"] == ["sm_75"]
    for device in ("cuda:sm_86", "cuda:sm_90"):
        before, after = modpack.preflight(source, device), modpack.preflight(out, device)
        assert after["fits"]
        pick = [(m["answers"][0]["variant"], m["answers"][0].get("fallbacks"))
                for m in after["modules"] if m["type_key"] == "cuda"]
        assert pick == [(m["answers"][0]["variant"], m["answers"][0].get("fallbacks"))
                        for m in before["modules"] if m["type_key"] == "cuda"]
    loaded = modpack.load_module(out)  # sealed, checksums checked
    w = loaded.imported_modules[2].arrays["w"]
    assert np.array_equal(w, WEIGHTS) and w.ctypes.data % 64 == 0
    a, b = inspect_library(source), inspect_library(out)
    assert a["modules"][3]["checksum"] == b["modules"][3]["checksum"]  # weights, same bytes
    assert a["modules"][2]["checksum"] == b["modules"][2]["checksum"]  # OpenCL, as is
    assert a["format_version"] == b["format_version"]
    assert a["writer_version"] == b["writer_version"]
    assert host_sections(source) == host_sections(out)  # host code byte for byte
    again = tmp_path / f"again{suffix}"
    slim_library(source, again, ["sm_90", "sm_86"])
    assert again.read_bytes() == out.read_bytes()


@pytest.mark.parametrize("suffix", [".so", ".tar"])
def test_a_module_without_code_for_a_kept_device_is_named(libraries, tmp_path, suffix):
    source, out = libraries[False, suffix], tmp_path / f"x{suffix}"
    with pytest.raises(ModpackError, match=r"module\[1\] \(cuda\) has no variant for "
                                           r"cuda:sm_70"):
        slim_library(source, out, "sm_70")
    with pytest.raises(ModpackError, match=r"module\[1\] \(cuda\) would keep no variant"):
        slim_library(source, out, "gfx942")
    with pytest.raises(ArgumentError, match="--keep"):
        slim_library(source, out, "volta")
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == []


@needs_nvcc
def test_a_refused_module_is_named_by_its_own_name(tmp_path):
    """A device module given name= is refused by that name as well as by its place, so that an
    author of several CUDA modules knows which one lacks the code."""
    (tmp_path / "k.cu").write_text(KERNEL)
    subprocess.run(["nvcc", "-ptx", "-arch=compute_75", "-o", str(tmp_path / "k.ptx"),
                    str(tmp_path / "k.cu")], check=True, capture_output=True)
    ptx = (tmp_path / "k.ptx").read_bytes()
    host = modpack.csource_module("int placeholder;")
    host.import_module(modpack.cuda_module(binaries={"ptx": ptx}, name="attention"))
    source = host.export_library(tmp_path / "named.so")
    with pytest.raises(ModpackError, match=r"module\[1\] \(cuda 'attention'\) has no variant "
                                           r"for cuda:sm_70"):
        slim_library(source, tmp_path / "out.so", "sm_70")
    with pytest.raises(ModpackError, match=r"module\[1\] \(cuda 'attention'\) would keep no "
                                           r"variant"):
        slim_library(source, tmp_path / "out.so", "gfx942")


def test_cli_and_a_dropped_signature(libraries, tmp_path):
    key = tmp_path / "key.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(key)],
                   check=True, capture_output=True)
    signed = tmp_path / "signed.so"
    signed.write_bytes(libraries[True].read_bytes())
    subprocess.run([sys.executable, "-m", "modpack", "sign", str(signed), "--key", str(key)],
                   check=True, capture_output=True)
    proc = subprocess.run([sys.executable, "-m", "modpack", "slim", str(signed), "-o",
                           str(tmp_path / "out.so"), "--keep", "sm_80"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "kept sm_80, compute_75; dropped sm_75, sm_90" in proc.stdout
    assert "sign the slimmed library again" in proc.stderr
    assert "0 signatures" in subprocess.run(
        [sys.executable, "-m", "modpack", "verify", str(tmp_path / "out.so")],
        capture_output=True, text=True).stdout
    proc = subprocess.run([sys.executable, "-m", "modpack", "slim", str(signed), "-o",
                           str(tmp_path / "o2.so"), "--keep", "sm_70"], capture_output=True,
                          text=True)
    assert proc.returncode == 1 and "module[1] (cuda)" in proc.stderr


def test_a_tar_is_slimmed_into_a_sealed_tar(libraries, tmp_path):
    """A .tar comes out a .tar: members in the same order with the exporter's headers, the
    blob object written by the exporter's own packer (keeping every variant gives the input
    back byte for byte), the tar seal checked before anything is read and written anew."""
    from modpack.errors import FormatError
    from modpack.format.tar_blob import find_tar_blob
    from modpack.format.tar_seal import check_tar_seal

    source = libraries[True, ".tar"]
    whole = tmp_path / "whole.tar"
    slim_library(source, whole, "sm_75,sm_80,sm_90")
    assert whole.read_bytes() == source.read_bytes()
    out = tmp_path / "fleet.tar"
    proc = subprocess.run([sys.executable, "-m", "modpack", "slim", str(source), "-o",
                           str(out), "--keep", "sm_80"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "kept sm_80, compute_75; dropped sm_75, sm_90" in proc.stdout
    assert check_tar_seal(out) == check_tar_seal(source) == ["lib0.o", "devc.o"]
    blob = find_tar_blob(out)
    assert blob.size < find_tar_blob(source).size and blob.alignment == 64
    assert (blob.offset - blob.member.offset_data) % 64 == 0
    assert arches(out) == ["sm_80", "compute_75"]
    damaged = tmp_path / "damaged.tar"
    data = bytearray(source.read_bytes())
    data[find_tar_blob(source).offset + 100] ^= 1
    damaged.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="does not match its seal"):
        slim_library(damaged, tmp_path / "x.tar", "sm_80")
    assert not (tmp_path / "x.tar").exists()


def test_a_blob_of_a_newer_format_minor_is_not_slimmed(libraries, tmp_path):
    """A later minor may add fields and meanings this writer would drop: slim refuses it
    (the loader still reads it, as the compatibility rule says)."""
    import struct

    from blobtools import read_blob, reseal, write_blob

    from modpack.errors import IncompatibleError

    source = tmp_path / "newer.so"
    shutil.copy(libraries[False, ".so"], source)
    blob = read_blob(source)
    from modpack.runtime.binding import lib

    struct.pack_into("<H", blob, 10, lib.MP_FORMAT_MINOR + 1)  # format_minor
    write_blob(source, bytes(reseal(blob)))
    modpack.load_module(source)  # a newer minor loads
    out = tmp_path / "out.so"
    with pytest.raises(IncompatibleError, match=r"format 1\.\d+ blob; this modpack writes"):
        slim_library(source, out, "sm_90")
    assert not out.exists()


# ---- damaged copies, crafted archives ---------------------------------------------------------

def host_library(tmp) -> Path:
    """A library slim can cut for any CUDA device: host code, an OpenCL module, weights (no
    CUDA module, so no nvcc is needed)."""
    from conftest import VADD_C

    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.opencl_module("__kernel void k(__global float* x) {}"))
    host.import_module(modpack.const_module({"w": WEIGHTS}))
    return host.export_library(tmp / "host.so")


def slim_outcome(path: Path, out: Path) -> str:
    """"slimmed" (the output loads, calls and holds the weights) or "refused" (FormatError);
    any other exception fails the test."""
    try:
        slim_library(path, out, "sm_90")
    except FormatError:
        assert not out.exists()
        return "refused"
    loaded = modpack.load_module(out)
    assert loaded["add_int"](2, 3) == 5
    assert np.array_equal(loaded.imported_modules[1].arrays["w"], WEIGHTS)
    del loaded
    return "slimmed"


def section_header_damage(path: Path) -> dict[str, tuple[bytes, str]]:
    """Copies of |path| damaged where no load reads (section headers, .symtab, the seal's
    trailer), each with what slim must do with it."""
    import struct

    from modpack.format.elf64 import Elf64
    from modpack.format.seal import SEAL_SIZE, check_seal

    data = path.read_bytes()
    seal = check_seal(path)
    with open(path, "rb") as f:
        elf = Elf64(f, path)
    anchor, symtab, dynsym = (elf.section(n) for n in (".modpack.blob", ".symtab", ".dynsym"))

    def put(at: int, fmt: str, value: int, base: bytes = data) -> bytes:
        copy = bytearray(base)
        struct.pack_into(fmt, copy, at, value)
        return bytes(copy)

    def field(section, at: int) -> int:  # a field of |section|'s header
        return elf.shoff + section.index * elf.shentsize + at

    table = len(elf.sections) * elf.shentsize
    cases = {
        "cut just after the blob's segment": (data[:seal.blob_offset + seal.blob_size], "refused"),
        "cut inside .symtab": (data[:symtab.offset + symtab.size // 2], "refused"),
        "cut inside the section headers": (data[:elf.shoff + 100], "refused"),
        "the seal's trailer lost": (data[:-SEAL_SIZE], "slimmed"),
        "e_shoff past the end": (put(40, "<Q", len(data) + 4096), "refused"),
        "e_shoff near 2**64": (put(40, "<Q", 2**64 - 8), "refused"),
        "e_shnum garbage": (put(60, "<H", 0xFFFF), "refused"),
        "e_shentsize garbage": (put(58, "<H", 63), "refused"),
        "e_shstrndx garbage": (put(62, "<H", 0xFFF0), "refused"),
        "no section headers (sstrip)": (put(60, "<H", 0, put(40, "<Q", 0)), "refused"),
        "section headers zeroed": (data[:elf.shoff] + bytes(table) + data[elf.shoff + table:],
                                   "refused"),
        "the blob section's size": (put(field(anchor, 32), "<Q", anchor.size + 4096), "refused"),
        "the blob section's alignment 0": (put(field(anchor, 48), "<Q", 0), "refused"),
        "the blob section's alignment 2**40": (put(field(anchor, 48), "<Q", 2**40), "refused"),
        ".symtab past the end": (put(field(symtab, 24), "<Q", 2 * len(data)), "refused"),
        ".symtab aligned to 2**40": (put(field(symtab, 48), "<Q", 2**40), "refused"),
        ".symtab's string table garbage": (put(field(symtab, 40), "<I", 0xFFFF), "refused"),
        ".dynsym's name lost": (put(field(dynsym, 0), "<I", 0), "refused"),
    }
    if shutil.which("strip"):
        stripped = path.with_name("stripped.so")
        shutil.copyfile(path, stripped)
        subprocess.run(["strip", "--strip-unneeded", str(stripped)], check=True)
        cases["stripped (strip --strip-unneeded)"] = (stripped.read_bytes(), "slimmed")
    return cases


def test_slim_of_copies_whose_section_headers_are_cut_or_damaged(tmp_path):
    """A copy cut short or damaged where no load reads still loads; slim either writes a
    library that loads whole, or refuses it with a FormatError naming the damage — never a
    parser's traceback (the attack campaign found ELFParseError and ELFError here). A copy that
    only lost its seal's trailer, or was stripped, is slimmed."""
    original = host_library(tmp_path)
    outcomes = {}
    for name, (data, expected) in section_header_damage(original).items():
        copy = tmp_path / "copy.so"
        copy.write_bytes(data)
        assert modpack.load_module(copy)["add_int"](2, 3) == 5, name  # no load reads it
        outcomes[name] = slim_outcome(copy, tmp_path / "out.so")
        (tmp_path / "out.so").unlink(missing_ok=True)
        assert outcomes[name] == expected, (name, outcomes[name])
    with pytest.raises(FormatError,
                       match=r"its section headers .* lie past its end .*; slim rewrites"):
        copy.write_bytes(section_header_damage(original)["e_shoff past the end"][0])
        slim_library(copy, tmp_path / "out.so", "sm_90")


def test_slim_of_a_damage_campaign_raises_nothing_but_format_errors(tmp_path):
    """test_damage's campaign, its copies that a load takes: bits flipped, ranges zeroed and
    cuts in every region of a library and of its stripped copy. Slim writes a library that
    loads whole or refuses with a FormatError, every time."""
    import random

    from test_damage import damage, elf_regions

    from modpack.tools.verdict import check_file

    original = host_library(tmp_path)
    stripped = tmp_path / "stripped.so"
    shutil.copyfile(original, stripped)
    if shutil.which("strip"):
        subprocess.run(["strip", "--strip-unneeded", str(stripped)], check=True)
    rng = random.Random(7)
    counts = {"slimmed": 0, "refused": 0}
    for source in (original, stripped):
        data = source.read_bytes()
        folder = tmp_path / f"damaged-{source.stem}"
        folder.mkdir()
        for d in damage(source, elf_regions(source), folder, rng, 2, 10):
            d.path.write_bytes(d.content(data))
            if check_file(d.path).ok:  # a copy a load takes
                counts[slim_outcome(d.path, tmp_path / "out.so")] += 1
                (tmp_path / "out.so").unlink(missing_ok=True)
            d.path.unlink()
    assert counts["slimmed"] > 20 and counts["refused"] > 5, counts


def test_slim_of_a_tar_with_long_member_names(tmp_path):
    """A sealed .tar whose object has a name longer than a tar header's name field (which
    modpack's export never writes; another tool's PAX header can): slim refuses it with a
    FormatError as every reader does (it raised ValueError: name is too long), load_module
    too; an export from a static archive whose member names are that long names them short."""
    import io

    from conftest import VADD_C

    from modpack.format.tar_seal import seal_tar

    good = modpack.csource_module(VADD_C).export_library(tmp_path / "good.tar")
    crafted = tmp_path / "long.tar"
    with tarfile.open(good) as source, tarfile.open(crafted, "w",
                                                     format=tarfile.PAX_FORMAT) as tar:
        for member in source.getmembers()[:-1]:
            info = tarfile.TarInfo("h" * 150 + ".o" if member.name == "lib0.o" else member.name)
            info.size = member.size
            tar.addfile(info, io.BytesIO(source.extractfile(member).read()))
    seal_tar(crafted)
    for run in (lambda: slim_library(crafted, tmp_path / "out.tar", "sm_90"),
                lambda: modpack.load_module(crafted),
                lambda: inspect_library(crafted)):
        with pytest.raises(FormatError, match="its name has 152 bytes, more than the 100"):
            run()
    assert not (tmp_path / "out.tar").exists()
    assert not modpack.verify_library(crafted)["ok"]
    # An export of a static archive whose member's name is that long.
    folder = tmp_path / "ar"
    folder.mkdir()
    (folder / "a.c").write_text("int lib_answer(void) { return 42; }\n")
    long_object = folder / ("o" * 120 + ".o")
    subprocess.run(["cc", "-c", "-fPIC", str(folder / "a.c"), "-o", str(long_object)],
                   check=True)
    subprocess.run(["ar", "rc", str(folder / "liblong.a"), str(long_object)], check=True)
    exported = modpack.object_module(folder / "liblong.a").export_library(tmp_path / "a.tar")
    with tarfile.open(exported) as tar:
        assert all(len(name) <= 100 for name in tar.getnames())
    assert modpack.load_module(exported) is not None
