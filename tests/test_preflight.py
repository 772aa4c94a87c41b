"""modpack preflight: which code a device would get from each module of a library, answered from
the blob index and each device module's variant table (never code, never running anything), for
all four device kinds; the JSON shape; the exit codes; clear errors for bad DEVICE strings; the
same choice as the loader (through the stub HIP runtime); and a 4 GiB library answered with at
most 64 KiB read, counted by the runtime and by the kernel (/proc/self/io)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xxhash
from elftools.elf.elffile import ELFFile

import modpack
from modpack.format.seal import check_seal, reseal_library
from modpack.modules.cuda import CUDAModule, CUDAVariant
from modpack.runtime.binding import ffi, lib

PTX = """.version 7.0
.target sm_75
.address_size 64
.visible .entry vadd(.param .u64 a, .param .u64 b, .param .u32 n)
{
  ret;
}
"""
OPENCL = "__kernel void twice(__global float* x) { x[get_global_id(0)] *= 2; }"
VULKAN = """#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer X { float x[]; };
void main() { x[gl_GlobalInvocationID.x] *= 2.0; }
"""
ROCM = """__kernel void scale(__global float* x, float s) {
  x[__builtin_amdgcn_workitem_id_x()] *= s;
}"""
FAKE_CUBIN = b"\x7fELF" + bytes(60)  # the cuda parser checks the ELF magic only

needs_tools = pytest.mark.skipif(
    shutil.which("clang") is None or shutil.which("glslangValidator") is None,
    reason="clang and glslangValidator build the ROCm and Vulkan modules (scripts/dev.sh installs "
           "them)")


def four_kinds(tail: np.ndarray | None = None) -> modpack.Module:
    """Host code importing a module of each device kind, then a const module (last, so that its
    payload ends the blob)."""
    functions = {"vadd": ["void*", "void*", "uint32"]}
    ptx = modpack.cuda_module(binaries={"ptx": PTX}, functions=functions)
    cuda = CUDAModule([CUDAVariant("cubin", ("sm_80",), FAKE_CUBIN),
                       CUDAVariant("cubin", ("sm_90a",), FAKE_CUBIN), *ptx.variants],
                      ptx.functions)
    host = modpack.csource_module("int placeholder;")
    host.import_module(cuda)
    host.import_module(modpack.rocm_module(ROCM, targets=["gfx90a:xnack-", "gfx906"]))
    host.import_module(modpack.opencl_module(OPENCL))
    host.import_module(modpack.vulkan_module(VULKAN))
    host.import_module(modpack.const_module({"w": np.arange(4.0) if tail is None else tail}))
    return host


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    if shutil.which("clang") is None or shutil.which("glslangValidator") is None:
        pytest.skip("clang and glslangValidator build the ROCm and Vulkan modules")
    return four_kinds().export_library(tmp_path_factory.mktemp("pf") / "four.so")


def answers(report: dict, type_key: str) -> list[dict]:
    (module,) = [m for m in report["modules"] if m["type_key"] == type_key]
    return module["answers"]


# ---- per kind ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("device", "variant", "kind", "reason"), [
    ("cuda:sm_90", "sm_90a", "cubin", "SASS for exactly this compute capability"),
    ("cuda:sm_86", "sm_80", "cubin", "same major and an older minor"),
    ("cuda:sm_75", "compute_75", "ptx", "PTX, compiled for it by the driver's JIT"),
    ("cuda:sm_120", "compute_75", "ptx", "JIT"),
])
def test_cuda_answers(library, device, variant, kind, reason):
    report = modpack.preflight(library, device)
    (a,) = answers(report, "cuda")
    assert (a["fits"], a["variant"], a["kind"]) == (True, variant, kind)
    assert reason in a["reason"]
    assert a["variants"] == ["sm_80", "sm_90a", "compute_75"]
    assert report["fits"] is True


def test_cuda_without_code_for_the_device(library):
    report = modpack.preflight(library, "cuda:sm_70")
    (a,) = answers(report, "cuda")
    assert a["fits"] is False and a["variant"] is None
    assert "no variant runs on compute capability 7.0" in a["reason"]
    assert report["fits"] is False
    (cuda,) = [m for m in report["modules"] if m["type_key"] == "cuda"]
    assert cuda["status"] == "no-code"


def test_rocm_answers(library):
    report = modpack.preflight(library, "rocm:gfx90a:sramecc+:xnack-")
    (a,) = answers(report, "rocm")
    assert (a["fits"], a["variant"], a["kind"]) == (True, "gfx90a:xnack-", "hsaco")
    assert a["reason"] == "built for this processor, xnack as on the device"
    assert [(v["variant"], v["runs"]) for v in a["variants"]] == [("gfx90a:xnack-", True),
                                                                 ("gfx906", False)]
    on = modpack.preflight(library, "rocm:gfx90a:xnack+")
    (a,) = answers(on, "rocm")
    assert not a["fits"] and not on["fits"]
    assert a["variants"][0]["why"] == "built for xnack-, and the device runs with xnack+"
    assert a["variants"][1]["why"] == "built for gfx906, not gfx90a"
    (a,) = answers(modpack.preflight(library, "rocm:gfx906:sramecc-:xnack-"), "rocm")
    assert a["variant"] == "gfx906"


def test_opencl_and_vulkan_answers(library):
    (a,) = answers(modpack.preflight(library, "opencl"), "opencl")
    assert (a["fits"], a["variant"]) == (True, "source")
    assert "built for the device by its driver at the first launch" in a["reason"]
    (a,) = answers(modpack.preflight(library, "vulkan"), "vulkan")
    assert (a["fits"], a["variant"], a["kind"]) == (True, "spirv", "spirv")
    assert "SPIR-V (1 shader)" in a["reason"]


@pytest.mark.parametrize("compress", [False, True])
def test_opencl_prebuilt_binaries(tmp_path, compress):
    """A module carrying prebuilt program binaries (as opencl_binaries builds them) is answered,
    compressed or not, for any OpenCL device and for this machine's (where the binary built here
    is the one chosen); the answer reads each binary's key and never crashes (it once freed the
    binaries' array it had never made)."""
    keys = {"Vendor/device-a/1.0": b"\x7fELF" + bytes(60), "Vendor/device-b/2.0": bytes(100)}
    if modpack.device_count("opencl"):
        keys.update(modpack.opencl_binaries(OPENCL))
    host = modpack.csource_module("int placeholder;")
    host.import_module(modpack.opencl_module(OPENCL, binaries=keys))
    path = host.export_library(tmp_path / "binaries.so", compress_code=compress)
    (a,) = answers(modpack.preflight(path, "opencl"), "opencl")
    assert (a["fits"], a["variant"]) == (True, "source")
    assert "Vendor/device-a/1.0; Vendor/device-b/2.0" in a["reason"]
    proc = subprocess.run([sys.executable, "-m", "modpack", "preflight", str(path), "--device",
                           "host", "--json"], capture_output=True, text=True)
    assert proc.returncode in (0, 1) and proc.stderr == "", proc.stderr
    if modpack.device_count("opencl"):  # PoCL here: its own binary is chosen
        (a,) = answers(json.loads(proc.stdout), "opencl")
        assert a["variant"] == "binary" and modpack.device_name("opencl:0") in a["reason"]


def test_json_shape_and_statuses(library):
    report = modpack.preflight(library, "cuda:sm_90")
    assert set(report) == {"path", "device", "devices", "unavailable", "modules", "fits",
                           "reason", "read"}
    assert report["devices"] == [{"device": "cuda:sm_90", "type": "cuda", "arch": "sm_90"}]
    statuses = {m["type_key"]: m["status"] for m in report["modules"]}
    assert statuses == {"_lib": "no-device-code", "cuda": "fits", "rocm": "other-device",
                        "opencl": "other-device", "vulkan": "other-device",
                        "const": "no-device-code"}
    for m in report["modules"]:
        assert set(m) == {"index", "type_key", "size", "status", "reason", "answers"}
    (a,) = answers(report, "cuda")
    assert set(a) == {"device", "fits", "variant", "kind", "reason", "fallbacks", "variants"}
    assert a["fallbacks"] == ["compute_75"]
    assert report["read"]["bytes"] < 16 << 10 and report["read"]["reads"] <= 8


def test_host_lists_this_machine_s_devices_and_what_is_missing(library):
    env = {**os.environ, "MODPACK_CUDA_LIBRARY": "/nonexistent/libcuda.so.1",
           "MODPACK_ROCM_LIBRARY": "/nonexistent/libamdhip64.so"}
    proc = subprocess.run([sys.executable, "-m", "modpack", "preflight", str(library), "--device",
                           "host", "--json"], capture_output=True, text=True, env=env)
    report = json.loads(proc.stdout)
    missing = {d["type"]: d["message"] for d in report["unavailable"]}
    assert "no NVIDIA driver" in missing["cuda"] and "no ROCm runtime" in missing["rocm"]
    statuses = {m["type_key"]: m["status"] for m in report["modules"]}
    assert statuses["cuda"] == statuses["rocm"] == "other-device"
    if modpack.device_count("opencl"):  # PoCL here
        assert statuses["opencl"] == "fits"
        assert proc.returncode == 0 and report["fits"], proc.stdout
    if modpack.device_count("vulkan"):  # lavapipe here: named by its index, once
        (a,) = answers(report, "vulkan")
        assert a["device"] == "vulkan:0" and a["fits"] and "SPIR-V (1 shader)" in a["reason"]


# ---- the CLI: text, exit codes, bad devices ----------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "modpack", "preflight", *map(str, args)],
                          capture_output=True, text=True)


def test_exit_codes_and_text(library):
    ok = cli(library, "--device", "rocm:gfx90a:sramecc+:xnack-")
    assert ok.returncode == 0, ok.stderr
    assert (f"{library} on rocm:gfx90a:sramecc+:xnack-: fits") in ok.stdout
    assert ("module 2 (rocm) on rocm:gfx90a:sramecc+:xnack-: gfx90a:xnack- (hsaco): built for "
            "this processor, xnack as on the device") in ok.stdout
    assert "module 1 (cuda): other-device: a cuda module: it runs on CUDA devices only" in ok.stdout
    none = cli(library, "--device", "rocm:gfx1030")
    assert none.returncode == 1
    assert "DOES NOT FIT" in none.stdout
    assert "NO CODE: no code object runs on gfx1030" in none.stdout
    assert "(the file has: gfx90a:xnack-, gfx906)" in none.stdout
    as_json = cli(library, "--device", "cuda:sm_90", "--json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout)["fits"] is True


@pytest.mark.parametrize(("device", "message"), [
    ("gpu", "unknown DEVICE 'gpu'"),
    ("", "no DEVICE given"),
    ("cuda", "cuda:sm_XY"),
    ("cuda:compute_90", "not cuda:compute_90"),
    ("cuda:sm_90a", "not cuda:sm_90a"),
    ("rocm", "not 'rocm' alone"),
    ("rocm:gfx90a:xnack", "unknown feature 'xnack'"),
    ("rocm:gfx11-generic", "a generic target, not a device"),
    ("rocm:sm_90", "not an AMD GPU target ID"),
    ("opencl:0", "'opencl:0' names nothing more"),
    ("vulkan:lavapipe", "'vulkan:lavapipe' names nothing"),
    ("vulkan:16", "'vulkan:N' (this machine's device N, from 0 to 15"),
])
def test_bad_devices_are_named(library, device, message):
    with pytest.raises(modpack.ArgumentError, match=message.replace("(", r"\(")):
        modpack.preflight(library, device)
    proc = cli(library, "--device", device)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_files_that_are_not_libraries(tmp_path):
    with pytest.raises(modpack.MissingFileError):
        modpack.preflight(tmp_path / "absent.so", "vulkan")
    (tmp_path / "junk.so").write_bytes(b"not a library" * 10)
    with pytest.raises(modpack.FormatError, match="preflight reads a library through its seal"):
        modpack.preflight(tmp_path / "junk.so", "vulkan")


@pytest.mark.parametrize("device", ["cuda:sm_86", "cuda:sm_70", "rocm:gfx90a:xnack-", "opencl",
                                    "vulkan"])
def test_a_tar_export_is_answered_as_its_so(library, tmp_path, device):
    """A .tar export's blob is read in place (its blob object's __dev_mblob): the answers are
    the .so's; a tar without its seal member is refused as a .so without a seal is."""
    import tarfile

    tar = four_kinds().export_library(tmp_path / "four.tar")
    so, answer = modpack.preflight(library, device), modpack.preflight(tar, device)
    assert answer["modules"] == so["modules"] and answer["fits"] == so["fits"]
    assert answer["read"]["bytes"] < 64 << 10
    unsealed = tmp_path / "unsealed.tar"
    with tarfile.open(tar) as src, tarfile.open(unsealed, "w") as dst:
        for member in src.getmembers()[:-1]:
            dst.addfile(member, src.extractfile(member))
    with pytest.raises(modpack.FormatError, match="preflight reads a library through its seal"):
        modpack.preflight(unsealed, device)


# ---- the loader's choice -----------------------------------------------------------------------


LAUNCH = r"""
import sys, json, modpack
report = modpack.preflight(sys.argv[1], "host")
(rocm,) = [m for m in report["modules"] if m["type_key"] == "rocm"]
print(json.dumps([(a["device"], a["variant"]) for a in rocm["answers"]]))
scale = modpack.load_module(sys.argv[1]).get_function("scale", query_imports=True)
scale(modpack.empty(64, "float32", device="rocm:0"), 2.0, 1, 1, 1, 64, 1, 1)
"""


@pytest.mark.parametrize(("device", "expected"), [("gfx90a:sramecc+:xnack-", "gfx90a:xnack-"),
                                                  ("gfx906:sramecc-:xnack-", "gfx906")])
def test_preflight_names_the_code_object_the_loader_loads(library, stub_hip, tmp_path, device,
                                                          expected):
    log = tmp_path / "hip.log"
    proc = subprocess.run([sys.executable, "-c", LAUNCH, str(library)], capture_output=True,
                          text=True, env={**os.environ, "MODPACK_ROCM_LIBRARY": str(stub_hip),
                                          "STUB_HIPINIT_RESULT": "0", "STUB_TARGETS": device,
                                          "STUB_LOG": str(log)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [[f"rocm:0 ({device})", expected]]
    assert [line for line in log.read_text().splitlines() if line.startswith("load")] == [
        f"load {expected}"]


# ---- a 4 GiB library ---------------------------------------------------------------------------


def stretch(path: Path, extra: int) -> None:
    """Grow the blob's last payload (the const module's) by |extra| bytes of hole: the index (its
    entry, blob_size, checksum), the blob's segment and symbol and the seal (its sizes, digest)
    are rewritten to match, so the seal holds; the payload's checksum is not (nothing that reads
    the index alone can tell). What follows the blob (nothing loads it) moves after the hole."""
    data = bytearray(path.read_bytes())
    seal = check_seal(path)
    blob_offset, blob_size = seal.blob_offset, seal.blob_size
    blob_end = blob_offset + blob_size
    header_size, = struct.unpack_from("<I", data, blob_offset + 12)
    count, = struct.unpack_from("<Q", data, blob_offset + 32)
    index_size, = struct.unpack_from("<Q", data, blob_offset + 48)
    entries = [blob_offset + header_size + 48 * i for i in range(count)]
    last = max(entries, key=lambda e: struct.unpack_from("<Q", data, e)[0])
    offset, size = struct.unpack_from("<QQ", data, last)
    assert offset + size == blob_size
    struct.pack_into("<Q", data, last + 8, size + extra)
    struct.pack_into("<Q", data, blob_offset + 16, blob_size + extra)
    struct.pack_into("<Q", data, blob_offset + 56, 0)
    index = bytes(data[blob_offset:blob_offset + index_size])
    struct.pack_into("<Q", data, blob_offset + 56, xxhash.xxh3_64_intdigest(index))
    with open(path, "rb") as f:
        elf = ELFFile(f)
        segments = list(elf.iter_segments())
        (load,) = [i for i, s in enumerate(segments) if s["p_type"] == "PT_LOAD"
                   and s["p_offset"] <= blob_offset < s["p_offset"] + s["p_filesz"]]
        symbols = [table["sh_offset"] + i * table["sh_entsize"]
                   for table in (elf.get_section_by_name(n) for n in (".dynsym", ".symtab"))
                   if table is not None
                   for i, sym in enumerate(table.iter_symbols()) if sym.name == "__dev_mblob"]
        shoff = elf["e_shoff"]
        moved = [i for i, sec in enumerate(elf.iter_sections())
                 if sec["sh_offset"] >= blob_end and sec["sh_type"] != "SHT_NOBITS"]
        anchor = elf.get_section_index(".modpack.blob")
    at = elf["e_phoff"] + load * 56 + 32  # p_filesz, p_memsz
    struct.pack_into("<QQ", data, at, segments[load]["p_filesz"] + extra,
                     segments[load]["p_memsz"] + extra)
    for entry in symbols:
        struct.pack_into("<Q", data, entry + 16, blob_size + extra)
    struct.pack_into("<Q", data, shoff + anchor * 64 + 32, blob_size + extra)
    for i in moved:
        sh_offset, = struct.unpack_from("<Q", data, shoff + i * 64 + 24)
        struct.pack_into("<Q", data, shoff + i * 64 + 24, sh_offset + extra)
    struct.pack_into("<Q", data, 40, shoff + extra)
    trailer = bytearray(data[-80:])
    struct.pack_into("<Q", trailer, 24, blob_size + extra)
    struct.pack_into("<Q", trailer, 40, seal.payloads_size + extra)
    with open(path, "r+b") as f:
        f.write(data[:blob_end])
        f.truncate(blob_end + extra)  # the hole
        f.seek(blob_end + extra)
        f.write(data[blob_end:-80] + trailer)
    reseal_library(path)


def rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


@needs_tools
def test_a_4_gib_library_is_answered_from_64_kib(tmp_path):
    path = four_kinds().export_library(tmp_path / "big.so")
    stretch(path, 4 << 30)
    assert path.stat().st_size > 4 << 30
    seal = ffi.new("mp_seal_v1_t*")
    assert lib.mp_seal_check_file(str(path).encode(), seal) == 0  # a whole, sealed library
    result = ffi.new("mp_preflight_result_t*")
    result.struct_size = ffi.sizeof("mp_preflight_result_t")
    buffer = ffi.new("char[]", 1 << 16)
    needed = ffi.new("uint64_t*")

    def ask(device: bytes) -> float:
        start = time.perf_counter()
        assert lib.mp_preflight(str(path).encode(), device, buffer, 1 << 16, needed, result) == 0
        return time.perf_counter() - start

    for device in (b"cuda:sm_90", b"rocm:gfx90a:sramecc+:xnack-", b"opencl", b"vulkan"):
        ask(device)  # warm
        own = -(rchar() - rchar())  # what reading /proc/self/io itself adds
        before = rchar()
        ask(device)
        kernel_counted = rchar() - before - own
        assert result.fits == 1
        assert result.bytes_read <= 64 << 10, (device, result.bytes_read)
        assert kernel_counted <= 64 << 10, (device, kernel_counted)
        assert kernel_counted == result.bytes_read, (kernel_counted, result.bytes_read)
        times = sorted(ask(device) for _ in range(21))
        assert times[10] < 1e-3, (device, times[10])  # the median, warm
    report = json.loads(ffi.string(buffer).decode())
    (const,) = [m for m in report["modules"] if m["type_key"] == "const"]
    assert const["size"] > 4 << 30
