"""Device code stored compressed (export_library(compress_code=...)): the format (1.1, its
flags), real OpenCL kernels run from a compressed library from Python and from C, CUDA images
decoded for the driver (the stub driver reads what it is given), weights untouched, inspect's
stored and raw sizes, extract's raw code, and every damaged frame refused with its reason."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, run

import modpack
from modpack.errors import ArgumentError, FormatError
from modpack.format.code_frames import decode_frame, frame_info
from modpack.runtime.binding import ffi, lib
from modpack.tools.inspection import inspect_library

# Long enough to compress: the kernels and a comment block the compiler skips.
KERNELS = r"""
__kernel void vadd(__global const float* a, __global const float* b, __global float* c, int n) {
  int i = get_global_id(0);
  if (i < n) c[i] = a[i] + b[i];
}
""" + "\n".join(f"// notes on the kernel above, line {i}: nothing the compiler reads"
                for i in range(200))
WEIGHTS = np.arange(1 << 14, dtype=np.float32)


def library(tmp, name, compress_code):
    host = modpack.csource_module("int placeholder;")
    host.import_module(modpack.opencl_module(KERNELS))
    host.import_module(modpack.const_module({"w": WEIGHTS}))
    return host.export_library(tmp / name, compress_code=compress_code)


def test_compressed_opencl_runs_and_weights_stay_in_place(tmp_path):
    plain, packed = library(tmp_path, "u.so", False), library(tmp_path, "c.so", True)
    p, c = inspect_library(plain), inspect_library(packed)
    assert p["format_version"] == "1.0" and c["format_version"] == "1.1"
    assert not p["modules"][1]["code_frames"] and c["modules"][1]["code_frames"]
    code = c["modules"][1]["code"]
    assert code["compressed"] and code["raw_bytes"] == len(KERNELS.encode())
    assert code["stored_bytes"] < code["raw_bytes"] // 4
    # The const payload is byte for byte the same, at an aligned offset.
    pw, cw = p["modules"][2], c["modules"][2]
    assert pw["checksum"] == cw["checksum"] and cw["offset"] % 64 == 0
    loaded = modpack.load_module(packed)
    w = loaded.imported_modules[1].arrays["w"]
    assert np.array_equal(w, WEIGHTS) and w.ctypes.data % 64 == 0 and not w.flags.writeable
    n = 1000
    a = modpack.array(np.arange(n, dtype=np.float32), device="opencl:0")
    b = modpack.array(np.full(n, 2, dtype=np.float32), device="opencl:0")
    out = modpack.empty(n, "float32", device="opencl:0")
    loaded.get_function("vadd", query_imports=True)(a, b, out, n, n, 1, 1, 0, 0, 0)
    assert np.array_equal(out.numpy(), np.arange(n, dtype=np.float32) + 2)


def test_export_option_is_checked(tmp_path):
    with pytest.raises(ArgumentError, match="compress_code"):
        library(tmp_path, "x.so", 40)
    assert library(tmp_path, "l3.so", 3).stat().st_size > 0


def test_extract_writes_the_raw_code(tmp_path):
    packed = library(tmp_path, "c.so", True)
    from modpack.tools.extraction import extract_library
    extract_library(packed, tmp_path / "out")
    (source,) = (tmp_path / "out" / "modules").glob("*.cl")
    assert source.read_text() == KERNELS


def test_compressed_library_loads_from_c(tmp_path, runtime_prefix):
    """The C runtime alone (no Python) loads a compressed library and runs its OpenCL kernel:
    the example's C program, against the example's pipeline exported compressed."""
    example = ROOT / "examples" / "opencl_vadd"
    build = tmp_path / "build"
    run("cmake", "-S", example, "-B", build, f"-DCMAKE_PREFIX_PATH={runtime_prefix}")
    run("cmake", "--build", build)
    sys.path.insert(0, str(example))
    try:
        import pipeline
    finally:
        sys.path.pop(0)
    host = modpack.csource_module(pipeline.HOST)
    host.import_module(modpack.opencl_module(pipeline.KERNELS))
    host.import_module(modpack.const_module({"scale": pipeline.SCALE}))
    deploy = host.export_library(tmp_path / "deploy.so", compress_code=True)
    assert inspect_library(deploy)["format_version"] == "1.1"
    out = run(build / "opencl_vadd", deploy)
    assert "opencl_vadd (C): OK, 4096 elements match" in out


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed (CUDA toolkit)")
def test_cuda_images_reach_the_driver_decoded(tmp_path, stub_driver):
    """Up to the launch without a GPU: the stub driver names each image it is given from its
    bytes (ELF header, PTX text), so a compressed variant must arrive decoded."""
    (tmp_path / "k.cu").write_text('extern "C" __global__ void noop(int n) {}\n')

    def nvcc(*args):
        out = tmp_path / "out.bin"
        subprocess.run(["nvcc", *args, "-o", str(out), str(tmp_path / "k.cu")], check=True,
                       capture_output=True)
        return out.read_bytes()

    bins = {"sm_80": nvcc("-cubin", "-arch=sm_80"), "sm_90": nvcc("-cubin", "-arch=sm_90"),
            "ptx": nvcc("-ptx", "-arch=compute_75")}
    logs = []
    for compress in (False, True):
        host = modpack.csource_module("int placeholder;")
        host.import_module(modpack.cuda_module(binaries=bins))
        path = host.export_library(tmp_path / f"k{int(compress)}.so", compress_code=compress)
        log = tmp_path / f"loads{int(compress)}.log"
        code = ("import sys, modpack\n"
                "noop = modpack.load_module(sys.argv[1]).imported_modules[0]['noop']\n"
                "try:\n    noop(1, 1, 1, 1, 1, 1, 1)\nexcept modpack.ModpackError as e:\n"
                "    print('error:', e)\n")
        env = {"MODPACK_CUDA_LIBRARY": str(stub_driver), "STUB_CUINIT_RESULT": "0",
               "STUB_LOG": str(log), "STUB_CC": "9.0"}
        proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                              text=True, env={**__import__("os").environ, **env})
        assert proc.returncode == 0, proc.stderr
        logs.append(log.read_text().splitlines())
    assert logs[0] == logs[1] and logs[1][0] == "cubin sm_90"


# ---- damaged frames -----------------------------------------------------------------------

def frame(data: bytes, level: int = 19) -> bytes:
    from modpack.format.code_frames import CodeFrames
    return CodeFrames(level)(data)


def test_frames_round_trip_and_refuse_damage():
    code = b"PTX " * 5000
    f = frame(code)
    assert frame_info(f) == ("zstd", len(code)) and decode_frame(f) == code
    stored = frame(b"\x01\x02\x03")  # smaller than any zstd frame of it: stored
    assert frame_info(stored) == ("stored", 3)
    lying = bytearray(f)
    struct.pack_into("<Q", lying, 8, len(code) + 1)  # raw size one more than the data holds
    with pytest.raises(FormatError, match="header says 20001 bytes of code, its Zstandard"):
        decode_frame(lying)
    bomb = bytearray(f)
    struct.pack_into("<Q", bomb, 8, 1 << 40)  # a terabyte from a few bytes: never allocated
    with pytest.raises(FormatError, match="claim to decode to 1099511627776"):
        frame_info(bomb)
    damaged = bytearray(f)
    damaged[80] ^= 0xFF
    with pytest.raises(FormatError):
        decode_frame(damaged)
    wrong_sum = bytearray(f)
    wrong_sum[16] ^= 1
    with pytest.raises(FormatError, match="checksum"):
        decode_frame(wrong_sum)
    for at, why in ((0, "bad magic"), (4, "version"), (40, "reserved")):
        bad = bytearray(f)
        bad[at] ^= 0x40
        with pytest.raises(FormatError, match=why):
            frame_info(bad)


def test_a_damaged_compressed_variant_is_refused_at_its_first_use(tmp_path):
    """The payload checksum catches damage to stored bytes at load; with checksums off, the
    frame's own checks catch it when a device first needs the code."""
    packed = library(tmp_path, "c.so", True)
    report = inspect_library(packed)
    start = report["blob"]["file_offset"] + report["modules"][1]["offset"]
    source = report["modules"][1]["contents"]["source_offset"]
    data = bytearray(packed.read_bytes())
    data[start + source + 64 + 20] ^= 0x55  # inside the zstd data
    bad = tmp_path / "bad.so"
    bad.write_bytes(data)
    with pytest.raises(FormatError, match="checksum"):
        modpack.load_module(bad)
    loaded = modpack.load_module(bad, verify_checksums=False)  # the frame's header holds
    n = 4
    a = modpack.array(np.ones(n, dtype=np.float32), device="opencl:0")
    with pytest.raises(FormatError, match=r"(?s)opencl module: its source.*code frame"):
        loaded.get_function("vadd", query_imports=True)(a, a, a, n, n, 1, 1, 0, 0, 0)


def test_entry_flags_need_the_header_flag():
    """Frames are a format 1.1 feature: an entry flag in a blob without the header flag, or on
    a kind that does not read frames, is refused."""
    payload = b"\0" * 16
    span = ffi.new("mp_const_byte_span_t*", {"data": ffi.from_buffer(payload), "size": 16})
    out = ffi.new("mp_module_t**")
    assert lib.mp_module_load_from_entry(b"const", span[0], 1, out) != 0


def test_plain_inspect_shows_stored_and_raw_code_sizes(tmp_path):
    """The text of ``modpack inspect`` (not only --json) gives per device module its code as
    stored and once decoded, and per piece of code the same."""
    from modpack.cli.main import format_inspection

    packed = format_inspection(inspect_library(library(tmp_path, "c.so", True)))
    code = inspect_library(tmp_path / "c.so")["modules"][1]["code"]
    raw = len(KERNELS.encode())
    assert (f"  code: {code['stored_bytes']} bytes stored, {raw} bytes raw, compressed (zstd "
            "code frames)") in packed
    assert f"source: {raw} bytes (stored {code['stored_bytes']} bytes, raw {raw} bytes, " \
           "zstd)" in packed
    plain = format_inspection(inspect_library(library(tmp_path, "u.so", False)))
    assert f"  code: {raw} bytes stored, {raw} bytes raw, uncompressed" in plain
    assert f"(stored {raw} bytes, raw {raw} bytes, no frame)" in plain
    proc = subprocess.run([sys.executable, "-m", "modpack", "inspect", str(tmp_path / "c.so")],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and "bytes raw, compressed (zstd code frames)" in proc.stdout


def test_the_code_frames_flag_needs_format_1_1(tmp_path):
    """A blob that sets the code-frames header flag but says format 1.0 is damaged (no
    writer makes it): a FormatError naming both, before any entry is read."""
    from blobtools import parse, read_blob, reseal

    blob = read_blob(library(tmp_path, "c.so", True))
    assert struct.unpack_from("<HH", blob, 8) == (1, 1) and parse(bytes(blob)) is None
    struct.pack_into("<H", blob, 10, 0)
    error = parse(bytes(reseal(blob)))
    assert isinstance(error, FormatError)
    assert "code frames" in str(error) and "format 1.1" in str(error) \
        and "format 1.0" in str(error)
    struct.pack_into("<H", blob, 10, 2)  # a later minor with the flag reads as before
    assert parse(bytes(reseal(blob))) is None
