"""``modpack slim``: a library cut to the code a fleet needs — what preflight reports for each
kept device survives, everything else of CUDA goes, host code and weights come out byte for
byte, the output is sealed and reproducible, signatures are dropped with a note, and a module
without code for a kept device is refused by name."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile

import numpy as np
import pytest

import modpack
from modpack.errors import ArgumentError, ModpackError
from modpack.inspection import inspect_library
from modpack.slim import slim_library

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None,
                                reason="nvcc is not installed (CUDA toolkit): real CUDA code")
KERNEL = 'extern "C" __global__ void scale(float* x, int n) { x[0] *= n; }\n'
WEIGHTS = np.arange(1 << 16, dtype=np.float32)


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
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
