"""ROCm device modules: real AMD GPU code objects built here by clang (OpenCL C, HIP with only
clang's builtins, and HIP as written: HIP's headers, ROCm's device libraries, C++ kernels by
name expression), their records and argument layouts read from the metadata notes, exported and
loaded back byte for byte; inspect, extract and verify; the selection rule by target ID (xnack,
sramecc, generic targets); the errors a machine without ROCm gives, for real; and, through a
stub HIP runtime (tests/data/stub_libamdhip64.c), which code object a launch loads, the kernel
symbol it asks for and the argument buffer it passes, bit for bit. No launch here runs on a GPU
(none is on this machine); the one test that would skips saying so."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, run

import modpack
from modpack.modules.rocm import read_code_object
from modpack.modules.rocm.toolchain import find_hip_toolchain
from modpack.runtime.binding import error_from_status, ffi, lib
from modpack.tools.extraction import extract_library
from modpack.tools.inspection import inspect_library
from modpack.tools.verification import verify_library

# OpenCL C without ROCm's device libraries: the work-item id from the builtins and the
# dispatch packet (workgroup_size_x is its u16 at byte 4).
OPENCL = r"""
static inline size_t gid0(void) {
  __constant unsigned short* packet = (__constant unsigned short*)__builtin_amdgcn_dispatch_ptr();
  return (size_t)__builtin_amdgcn_workgroup_id_x() * packet[2] + __builtin_amdgcn_workitem_id_x();
}
__kernel void vadd(__global const float* a, __global const float* b, __global float* c, int n) {
  size_t i = gid0();
  if (i < n) c[i] = a[i] + b[i];
}
__kernel void scale(__global double* x, double s, uint n, char flag) {
  size_t i = gid0();
  if (i < n && flag) x[i] *= s;
}
"""

HIP = r"""
extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
  int i = __builtin_amdgcn_workgroup_id_x() * 64 + __builtin_amdgcn_workitem_id_x();
  if (i < n) y[i] += a * x[i];
}
"""

TARGETS = ["gfx908", "gfx90a", "gfx90a:xnack-"]

needs_clang = pytest.mark.skipif(shutil.which("clang") is None and not os.environ.get("CLANG"),
                                 reason="clang is not installed (apt-get install clang lld)")


@pytest.fixture(scope="module")
def opencl_module() -> modpack.Module:
    if shutil.which("clang") is None:
        pytest.skip("clang is not installed (apt-get install clang lld)")
    return modpack.rocm_module(OPENCL, targets=TARGETS)


def export(tmp: Path, module: modpack.Module, name: str = "k.so") -> Path:
    host = modpack.csource_module("int placeholder;")
    host.import_module(module)
    return host.export_library(tmp / name)


@pytest.fixture(scope="module")
def library(tmp_path_factory, opencl_module) -> Path:
    return export(tmp_path_factory.mktemp("rocm"), opencl_module)


def child(code: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)


# ---- code objects, records, layouts --------------------------------------------------------------


def test_records_and_layouts_come_from_the_metadata(opencl_module):
    assert opencl_module.targets == TARGETS
    assert [f.signature() for f in opencl_module.functions] == [
        "vadd(float32*, float32*, float32*, int32)",
        "scale(float64*, float64, uint32, int8)",
    ]
    # Offsets and the explicit size as the compiler laid them out (char at 20: 21 bytes).
    assert [(lay.explicit_size, lay.offsets) for lay in opencl_module.layouts] == [
        (28, (0, 8, 16, 24)), (21, (0, 8, 16, 20))]
    first = opencl_module.code_objects[0]
    assert first.target == "gfx908" and first.data[:4] == b"\x7fELF"
    assert [k.name for k in first.kernels] == ["vadd", "scale"]


@needs_clang
def test_hip_source_takes_scalar_types_from_its_signatures():
    module = modpack.rocm_module(HIP, targets=["gfx90a:xnack-"], name="hip")
    assert [f.signature() for f in module.functions] == [
        "axpy(float32, float32*, float32*, int32)"]
    assert module.layouts[0].offsets == (0, 8, 16, 24)
    assert module.name == "hip"


@needs_clang
def test_hip_binaries_need_functions_which_are_checked(tmp):
    code = modpack.rocm_module(HIP, targets=["gfx90a"]).code_objects[0].data
    with pytest.raises(modpack.ModpackError, match="do not record scalar types: pass functions="):
        modpack.rocm_module(binaries={"gfx90a": code})
    good = modpack.rocm_module(binaries={"gfx90a": code}, functions={
        "axpy": ["float32", "float32*", "float32*", "int32"]})
    assert good.functions[0].signature() == "axpy(float32, float32*, float32*, int32)"
    with pytest.raises(modpack.ModpackError, match=r"argument 3 is int64 \(8 bytes\) in its "
                                                   r"record but by_value of 4 bytes"):
        modpack.rocm_module(binaries={"gfx90a": code}, functions={
            "axpy": ["float32", "float32*", "float32*", "int64"]})
    with pytest.raises(modpack.ModpackError, match="3 arguments in its record but 4"):
        modpack.rocm_module(binaries={"gfx90a": code}, functions={
            "axpy": ["float32", "float32*", "float32*"]})


def test_binaries_are_checked_against_their_keys(opencl_module):
    code = opencl_module.code_objects[1].data  # gfx90a
    with pytest.raises(modpack.ArgumentError, match=r"a code object for gfx90a, not gfx942; key it "
                                                    r"'gfx90a'"):
        modpack.rocm_module(binaries={"gfx942": code})
    with pytest.raises(modpack.ArgumentError, match="does not start with the ELF magic"):
        modpack.rocm_module(binaries={"gfx90a": b"MZ\x90\x00" * 20})
    with pytest.raises(modpack.ArgumentError, match="unknown feature 'xnack'"):
        modpack.rocm_module(binaries={"gfx90a:xnack": code})
    with pytest.raises(modpack.ArgumentError, match="not an AMD GPU target ID"):
        modpack.rocm_module(binaries={"sm_90": code})
    with pytest.raises(modpack.ArgumentError, match="exactly one"):
        modpack.rocm_module()
    with pytest.raises(modpack.ArgumentError, match="targets must be a non-empty list"):
        modpack.rocm_module(OPENCL, targets="gfx90a")
    cuda_elf = bytearray(code)
    cuda_elf[18:20] = struct.pack("<H", 190)
    with pytest.raises(modpack.ArgumentError, match="not an AMD GPU code object"):
        read_code_object(bytes(cuda_elf), "x")


@needs_clang
def test_compile_errors_carry_clang_s_log():
    with pytest.raises(modpack.CompileError, match=r"(?s)gfx90a.*undefined_name"):
        modpack.rocm_module("__kernel void f(__global int* x) { x[0] = undefined_name; }",
                            targets=["gfx90a"])


# ---- the library: round trip, inspect, extract, verify -------------------------------------------


def test_code_objects_survive_export_and_load_byte_for_byte(library, opencl_module, tmp):
    report = inspect_library(library)
    (entry,) = [m for m in report["modules"] if m["type_key"] == "rocm"]
    start = report["blob"]["file_offset"] + entry["offset"]
    payload = library.read_bytes()[start:start + entry["size"]]
    assert payload == opencl_module.save_to_binary()
    contents = entry["contents"]
    assert [(v["arch"], v["kind"], v["size"]) for v in contents["variants"]] == [
        (c.target, "hsaco", len(c.data)) for c in opencl_module.code_objects]
    for variant, code in zip(contents["variants"], opencl_module.code_objects):
        assert variant["offset"] % 64 == 0
        assert payload[variant["offset"]:variant["offset"] + variant["size"]] == code.data
    assert contents["layouts"][1] == {"kernel": "scale", "explicit_size": 21,
                                      "offsets": [0, 8, 16, 20]}
    assert contents["variants"][0]["kernel_facts"][0]["kernarg_segment_size"] == 28
    assert contents["kernels"][1]["args"] == ["float64*", "float64", "uint32", "int8"]
    assert modpack.load_module(library).imported_modules[0].type_key == "rocm"  # no GPU needed

    text = run(Path(sys.executable).parent / "modpack", "inspect", library)
    assert "module 1 (rocm)" in text
    assert f"variant gfx90a:xnack-: hsaco, {len(opencl_module.code_objects[2].data)} bytes" in text
    assert "kernel scale(float64*, float64, uint32, int8)  launch: blockIdx.x" in text

    manifest = extract_library(library, tmp / "out")
    (module,) = [m for m in manifest["modules"] if m["type_key"] == "rocm"]
    files = [tmp / "out" / f for f in module["code_files"]]
    assert [f.suffix for f in files] == [".hsaco"] * 3
    assert [f.read_bytes() for f in files] == [c.data for c in opencl_module.code_objects]
    assert read_code_object(files[2].read_bytes(), "extracted").target == "gfx90a:xnack-"

    verdict = verify_library(library)
    assert verdict["ok"], verdict


def test_verify_refuses_a_mislabelled_code_object(opencl_module, tmp):
    """The loader checks each code object's ELF header against its target ID, so verify does."""
    data = bytearray(opencl_module.code_objects[2].data)  # gfx90a:xnack-
    (flags,) = struct.unpack_from("<I", data, 48)
    struct.pack_into("<I", data, 48, (flags & ~0x300) | 0x300)  # now says xnack+
    co = opencl_module.code_objects[2]
    bad = modpack.modules.rocm.ROCmModule(
        [type(co)(co.target, bytes(data), co.kernels)], opencl_module.functions,
        opencl_module.layouts)
    path = export(tmp, bad)
    verdict = verify_library(path)
    assert not verdict["ok"]
    assert any("labelled gfx90a:xnack-, but its ELF header says xnack+" in (c["message"] or "")
               for c in verdict["checks"]), verdict


# ---- the selection rule --------------------------------------------------------------------------


def select(targets: list[str], device: str) -> str:
    names = [ffi.new("char[]", t.encode()) for t in targets]
    out = ffi.new("int32_t*")
    status = lib.mp_rocm_select_variant(ffi.new("const char*[]", names), len(targets),
                                        device.encode(), out)
    if status != 0:
        raise error_from_status(status)
    return targets[out[0]]


@pytest.mark.parametrize(("device", "targets", "expected"), [
    ("gfx90a:sramecc+:xnack-", ["gfx908", "gfx90a", "gfx90a:xnack-"], "gfx90a:xnack-"),
    ("gfx90a:sramecc+:xnack+", ["gfx90a:xnack-", "gfx90a"], "gfx90a"),
    ("gfx90a:sramecc-:xnack+", ["gfx90a:sramecc+", "gfx90a:xnack+"], "gfx90a:xnack+"),
    ("gfx1101", ["gfx11-generic", "gfx1100"], "gfx11-generic"),
    ("gfx1100", ["gfx11-generic", "gfx1100"], "gfx1100"),
    ("gfx942:sramecc+:xnack-", ["gfx9-4-generic", "gfx942:sramecc+"], "gfx942:sramecc+"),
    ("gfx906", ["gfx9-generic"], "gfx9-generic"),
])
def test_selection_rule(device, targets, expected):
    assert select(targets, device) == expected


@pytest.mark.parametrize(("device", "targets"), [
    ("gfx90a:sramecc+:xnack+", ["gfx90a:xnack-"]),
    ("gfx90a", ["gfx90a:xnack+"]),        # the device's xnack setting is not known
    ("gfx90a:xnack-", ["gfx9-generic"]),   # gfx90a is not one of gfx9-generic's processors
    ("gfx1030", ["gfx1100", "gfx11-generic"]),
])
def test_selection_refusals_name_the_device_and_every_code_object(device, targets):
    with pytest.raises(modpack.UnavailableError) as info:
        select(targets, device)
    assert "no code object for this GPU" in str(info.value)
    for t in targets:
        assert t in str(info.value)


# ---- without ROCm, for real; then the stub runtime -----------------------------------------------


NO_GPU_PROGRAM = r"""
import sys, numpy as np, modpack
rocm = modpack.load_module(sys.argv[1]).imported_modules[0]  # loading never needs HIP
a = np.ones(4, np.float32)
for name, attempt in {
    "array": lambda: modpack.array(a, device="rocm:0"),
    "kernel": lambda: rocm["vadd"](a, a, a, 4, 1, 1, 1, 4, 1, 1),
}.items():
    try:
        attempt()
        print(name, "-> no error")
    except modpack.UnavailableError as e:
        print(name, "->", e)
print("count", modpack.device_count("rocm"))
"""


def test_no_runtime_names_what_is_missing(library):
    proc = child(NO_GPU_PROGRAM, str(library), MODPACK_ROCM_LIBRARY="/nonexistent/libamdhip64.so")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines.pop() == "count 0"
    for line in lines:
        assert "-> no ROCm runtime: /nonexistent/libamdhip64.so not found" in line, line
        assert "install ROCm's HIP runtime" in line and "libhsa-runtime64.so" in line


def installed_runtime() -> str | None:
    """The first of the names the runtime loads HIP by that this machine has (Debian's
    libamdhip64-dev, which scripts/dev.sh installs for its headers, brings libamdhip64.so)."""
    for name in ("libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"):
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return name
    return None


def test_default_runtime_name_is_libamdhip64(library):
    """Without MODPACK_ROCM_LIBRARY the runtime loads libamdhip64.so (or .so.7, .6, .5); with
    none installed it says so, and a HIP runtime installed on a machine without an AMD GPU
    (Debian's, here) fails its hipInit, which the message names."""
    if "MODPACK_ROCM_LIBRARY" in os.environ or Path("/dev/kfd").exists():
        pytest.skip("this machine may have an AMD GPU")
    proc = child(NO_GPU_PROGRAM, str(library))
    installed = installed_runtime()
    if installed is None:
        assert "kernel -> no ROCm runtime: libamdhip64.so not found" in proc.stdout, proc.stdout
    else:
        assert (f"kernel -> the ROCm runtime ({installed}) failed to initialise: hipInit "
                "returned") in proc.stdout, proc.stdout
    assert proc.stdout.endswith("count 0\n")


def test_runtime_without_a_device(library, stub_hip):
    proc = child(NO_GPU_PROGRAM, str(library), MODPACK_ROCM_LIBRARY=str(stub_hip))
    assert proc.returncode == 0, proc.stderr
    assert "kernel -> ROCm runtime present but no ROCm device" in proc.stdout
    assert "hipErrorNoDevice" in proc.stdout and proc.stdout.endswith("count 0\n")


LAUNCH_PROGRAM = r"""
import sys, numpy as np, modpack
rocm = modpack.load_module(sys.argv[1]).imported_modules[0]
print(modpack.device_count("rocm"), modpack.device_name("rocm:0"))
a = modpack.array(np.arange(4, dtype=np.float32), device="rocm:0")
b = modpack.array(np.full(4, 2, np.float32), device="rocm:0")
out = modpack.empty(4, "float32", device="rocm:0")
print("dlpack", a.__dlpack_device__(), a.device)
print("round trip", a.numpy().tolist())
try:
    rocm["vadd"](a, b, out, 4, 1, 1, 1, 64, 1, 1)
    x = modpack.array(np.ones(3), device="rocm:0")
    rocm["scale"](x, 0.5, 3, -2, 2, 1, 1, 64, 1, 1)
    print("launched")
except modpack.UnavailableError as e:
    print("Unavailable:", e)
"""


def launch(library: Path, stub: Path, log: Path, **env: str) -> str:
    proc = child(LAUNCH_PROGRAM, str(library), MODPACK_ROCM_LIBRARY=str(stub),
                 STUB_HIPINIT_RESULT="0", STUB_LOG=str(log), **env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_launch_loads_the_device_s_code_object_and_passes_the_arguments_bit_for_bit(
        library, stub_hip, tmp):
    log = tmp / "hip.log"
    out = launch(library, stub_hip, log, STUB_TARGETS="gfx90a:sramecc+:xnack-")
    assert out.splitlines()[:3] == [
        "1 ROCm 0: gfx90a:sramecc+:xnack- (HIP runtime 60241134)",
        "dlpack (10, 0) rocm:0", "round trip [0.0, 1.0, 2.0, 3.0]"]
    assert out.splitlines()[3] == "launched", out
    lines = log.read_text().splitlines()
    mallocs = [int(line.split()[1], 16) for line in lines if line.startswith("malloc")]
    a, b, c, x = mallocs
    rest = [line for line in lines if not line.startswith("malloc")]
    # The xnack- code object for this xnack-off device, loaded once for both kernels.
    assert rest[:2] == ["load gfx90a:xnack-", "function vadd"]
    vadd = struct.pack("<QQQi", a, b, c, 4)  # offsets 0, 8, 16, 24; 28 bytes
    assert rest[2] == ("launch grid 1 1 1 block 64 1 1 shared 0 stream (nil) params none "
                       f"buffer 28 {vadd.hex()}")
    assert rest[3] == "function scale"
    # x at 0, the double at 8, the uint at 16, the char at 20 (-2 as a byte): 21 bytes.
    scale = struct.pack("<QdIb", x, 0.5, 3, -2)
    assert rest[4] == ("launch grid 2 1 1 block 64 1 1 shared 0 stream (nil) params none "
                       f"buffer 21 {scale.hex()}")
    assert len(rest) == 5


def test_an_xnack_on_device_gets_the_code_object_built_for_either(library, stub_hip, tmp):
    log = tmp / "hip.log"
    launch(library, stub_hip, log, STUB_TARGETS="gfx90a:sramecc+:xnack+")
    assert [line for line in log.read_text().splitlines() if line.startswith("load")] == [
        "load gfx90a"]


def test_a_refused_code_object_falls_back_to_the_next_that_fits(library, stub_hip, tmp):
    log = tmp / "hip.log"
    out = launch(library, stub_hip, log, STUB_TARGETS="gfx90a:sramecc+:xnack-",
                 STUB_REFUSE="gfx90a:xnack-")
    assert "launched" in out
    assert [line for line in log.read_text().splitlines() if line.startswith("load")] == [
        "load gfx90a:xnack-", "load gfx90a"]
    out = launch(library, stub_hip, tmp / "again.log", STUB_TARGETS="gfx90a:sramecc+:xnack-",
                 STUB_REFUSE="gfx90a:xnack-,gfx90a")
    assert ("Unavailable: no code object for this GPU: ROCm device 0 (gfx90a:sramecc+:xnack-) "
            "refused the gfx90a:xnack- code object and every other that fits: "
            "hipErrorNoBinaryForGpu") in out


def test_no_code_object_for_the_device_is_refused_before_hip_sees_one(library, stub_hip, tmp):
    log = tmp / "hip.log"
    out = launch(library, stub_hip, log, STUB_TARGETS="gfx1030")
    assert not any(line.startswith("load") for line in log.read_text().splitlines())
    assert ("Unavailable: no code object for this GPU: ROCm device 0 is gfx1030 and no code "
            "object of this ROCm module runs on it (code objects: gfx908, gfx90a, "
            "gfx90a:xnack-") in out


def test_argument_errors_need_no_runtime(library):
    vadd = modpack.load_module(library).imported_modules[0]["vadd"]
    a = np.ones(8, np.float32)
    with pytest.raises(modpack.ArgumentError, match=r"expected 10 arguments \(4 kernel "
                                                    r"arguments \+ 6 launch dimensions\), got 4"):
        vadd(a, a, a, 8)
    with pytest.raises(modpack.ArgumentError, match="block dimensions"):
        vadd(a, a, a, 8, 1, 1, 1, 0, 1, 1)
    with pytest.raises(modpack.ArgumentError, match="argument 1 must have dtype float32"):
        vadd(a, a.astype(np.float64), a, 8, 1, 1, 1, 8, 1, 1)
# ---- the example ---------------------------------------------------------------------------------


@needs_clang
def test_example_exports_inspects_and_preflights(tmp):
    proc = subprocess.run([sys.executable, ROOT / "examples" / "rocm_vadd" / "build.py",
                           tmp / "deploy.so"], capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert "variant gfx90a:xnack-: hsaco" in proc.stdout
    assert "NO CODE: no code object runs on gfx1100" in proc.stdout
    if proc.returncode == 77:  # no ROCm runtime or no AMD GPU: the launch says why
        assert ("rocm_vadd: cannot launch here: no ROCm runtime" in proc.stdout
                or "rocm_vadd: cannot launch here: the ROCm runtime" in proc.stdout), proc.stdout
    else:
        assert proc.returncode == 0 and "rocm_vadd: OK" in proc.stdout, proc.stdout
    report = json.loads((tmp / "preflight.json").read_text())
    (rocm,) = [m for m in report["modules"] if m["type_key"] == "rocm"]
    assert rocm["answers"][0]["variant"] == "gfx90a:xnack-"


@needs_clang
def test_example_preflight_from_c(tmp, runtime_prefix):
    example = ROOT / "examples" / "rocm_vadd"
    subprocess.run([sys.executable, example / "build.py", tmp / "deploy.so"],
                   capture_output=True, text=True, timeout=300)
    build = tmp / "build"
    run("cmake", "-S", example, "-B", build, f"-DCMAKE_PREFIX_PATH={runtime_prefix}")
    run("cmake", "--build", build)
    proc = subprocess.run([build / "rocm_vadd_preflight", tmp / "deploy.so",
                           "rocm:gfx90a:sramecc+:xnack-", "rocm:gfx1100"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # gfx1100 gets nothing
    first = json.loads(proc.stdout.splitlines()[0])
    (rocm,) = [m for m in first["modules"] if m["type_key"] == "rocm"]
    assert rocm["answers"][0]["variant"] == "gfx90a:xnack-"
    assert first == modpack.preflight(tmp / "deploy.so", "rocm:gfx90a:sramecc+:xnack-") | {
        "path": str(tmp / "deploy.so")}
    assert "rocm:gfx90a:sramecc+:xnack-: fits (read " in proc.stdout
    assert "rocm:gfx1100: does not fit" in proc.stdout
    bad = subprocess.run([build / "rocm_vadd_preflight", tmp / "deploy.so", "rocm:gfx90a:xnack"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown feature 'xnack'" in bad.stderr


# ---- HIP as written: HIP's headers, ROCm's device libraries, C++ kernels ----------------------

# Kernels in the style of the HIP samples (written for these tests): C++ linkage throughout, a
# template over the tile size, HIP's own index names beside CUDA's, LDS, a barrier, a math
# function from the device libraries, an overloaded pair and one extern "C" kernel.
HIP_SAMPLE = r"""
#include <hip/hip_runtime.h>

namespace {
constexpr float kSqrt2OverPi = 0.7978845608f;
}

// Each block stages a TILE x TILE tile in LDS (one column of padding against bank conflicts)
// and writes it back transposed.
template <unsigned TILE>
__global__ void transpose(const float* in, float* out, unsigned width) {
  __shared__ float tile[TILE][TILE + 1];
  unsigned x = hipBlockIdx_x * TILE + hipThreadIdx_x;
  unsigned y = hipBlockIdx_y * TILE + hipThreadIdx_y;
  if (x < width && y < width) tile[threadIdx.y][threadIdx.x] = in[y * width + x];
  __syncthreads();
  x = blockIdx.y * TILE + threadIdx.x;
  y = blockIdx.x * TILE + threadIdx.y;
  if (x < width && y < width) out[y * width + x] = tile[threadIdx.x][threadIdx.y];
}

__global__ void bias_gelu(float* x, const float* bias, int cols, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i] + bias[i % cols];
  x[i] = 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
}

__global__ void fill(float* x, float value, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = value;
}

__global__ void fill(double* x, double value, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = value;
}

__device__ float twice(float v) { return v + v; }

extern "C" __global__ void histogram(const unsigned char* data, unsigned* bins, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&bins[data[i]], 1u);
}
"""
HIP_TARGETS = ["gfx90a", "gfx908"]
TRANSPOSE = "_Z9transposeILj16EEvPKfPfj"


def hip_toolchain_reason() -> str | None:
    """Why HIP as written cannot be compiled here, or None."""
    found = find_hip_toolchain()
    if found.rocm_path is None or found.device_libs is None:
        return (f"HIP's headers or device libraries are not usable here ({found.note}): "
                "scripts/dev.sh installs them (apt-get install libamdhip64-dev "
                "rocm-device-libs clang-15 lld-15)")
    return None


needs_hip = pytest.mark.skipif(hip_toolchain_reason() is not None,
                               reason=hip_toolchain_reason() or "")


@pytest.fixture(scope="module")
def hip_module() -> modpack.Module:
    reason = hip_toolchain_reason()
    if reason is not None:
        pytest.skip(reason)
    return modpack.rocm_module(HIP_SAMPLE, targets=HIP_TARGETS,
                               name_expressions=["transpose<16>"], name="samples")


def records(module: modpack.Module) -> list[tuple[str, str | None, str, int, tuple[int, ...]]]:
    return [(f.name, f.symbol, f.signature(), lay.explicit_size, lay.offsets)
            for f, lay in zip(module.functions, module.layouts)]


def test_hip_source_as_written_is_packaged_with_its_c_plus_plus_kernels(hip_module):
    """A HIP file with C++ kernels compiles as written (HIP's headers and device libraries
    found; tanhf comes from ocml): the template by its expression, the plain C++ kernel by its
    name, the overloads by their signatures, the extern "C" kernel as before; each record's
    arguments come from the compiled signature and its layout from the metadata."""
    assert records(hip_module) == [
        ("transpose<16>", TRANSPOSE, "transpose<16>(float32*, float32*, uint32)", 20,
         (0, 8, 16)),
        ("bias_gelu", "_Z9bias_geluPfPKfii", "bias_gelu(float32*, float32*, int32, int32)", 24,
         (0, 8, 16, 20)),
        ("fill(float*, float, unsigned int)", "_Z4fillPffj",
         "fill(float*, float, unsigned int)(float32*, float32, uint32)", 16, (0, 8, 12)),
        ("fill(double*, double, unsigned int)", "_Z4fillPddj",
         "fill(double*, double, unsigned int)(float64*, float64, uint32)", 20, (0, 8, 16)),
        ("histogram", None, "histogram(uint8*, uint32*, int64)", 24, (0, 8, 16)),
    ]
    assert hip_module.targets == HIP_TARGETS
    for code in hip_module.code_objects:
        kernels = {k.name: k for k in code.kernels}
        assert set(kernels) == {TRANSPOSE, "_Z9bias_geluPfPKfii", "_Z4fillPffj", "_Z4fillPddj",
                                "histogram"}
        assert kernels[TRANSPOSE].facts[1] == 16 * 17 * 4  # the LDS tile, in bytes
        # The device function was inlined, and the probe compile added nothing.
        assert b"twice" not in code.data and b"modpack_name_expression" not in code.data


@needs_hip
def test_name_expressions_pick_instantiations_and_overloads():
    """Expressions are resolved by clang as written, through a typedef (``half_t`` is
    ``_Float16``, whose record says float16) and any spelling of a template argument; an
    overload is named by its signature; listing one leaves its sibling named by its own
    signature."""
    source = HIP_SAMPLE + """
typedef unsigned tile_t;
constexpr tile_t kTile = 32;
using half_t = _Float16;
template <typename T>
__global__ void axpby(T* y, const T* x, T a) { y[threadIdx.x] = a * x[threadIdx.x]; }
"""
    module = modpack.rocm_module(source, targets=["gfx90a"], name_expressions=[
        "transpose<kTile>", "transpose<8u>", "fill(double*, double, unsigned)", "axpby<half_t>"])
    named = {f.name: f.symbol for f in module.functions}
    axpby = module.functions[3]
    assert (axpby.signature(), module.layouts[3].offsets) == (
        "axpby<half_t>(float16*, float16*, float16)", (0, 8, 16))
    assert named == {
        "transpose<kTile>": "_Z9transposeILj32EEvPKfPfj",
        "transpose<8u>": "_Z9transposeILj8EEvPKfPfj",
        "fill(double*, double, unsigned)": "_Z4fillPddj",
        "axpby<half_t>": "_Z5axpbyIDF16_EvPT_PKS0_S0_",
        "bias_gelu": "_Z9bias_geluPfPKfii",
        "fill(float*, float, unsigned int)": "_Z4fillPffj",
        "histogram": None,
    }


@needs_hip
def test_name_expressions_that_name_no_kernel_are_refused():
    with pytest.raises(modpack.CompileError, match="no_such_kernel"):
        modpack.rocm_module(HIP_SAMPLE, targets=["gfx90a"], name_expressions=["no_such_kernel"])
    with pytest.raises(modpack.CompileError, match=r"(?s)overloaded function 'fill'.*must pick "
                                                   r"one by its signature"):
        modpack.rocm_module(HIP_SAMPLE, targets=["gfx90a"], name_expressions=["fill"])
    with pytest.raises(modpack.ModpackError, match=r"'twice' names twice\(float\), which is not "
                                                   r"a kernel clang compiled"):
        modpack.rocm_module(HIP_SAMPLE, targets=["gfx90a"], name_expressions=["twice"])
    with pytest.raises(modpack.ArgumentError, match="name_expressions= are for HIP"):
        modpack.rocm_module(OPENCL, targets=["gfx90a"], name_expressions=["vadd"])
    with pytest.raises(modpack.ArgumentError, match="duplicates"):
        modpack.rocm_module(HIP_SAMPLE, targets=["gfx90a"], name_expressions=["a<1>", " a<1>"])


# A HIP sample's whole file: a local header, the host program that launches the kernels, and a
# template instantiated only by that launch.
SAMPLE_HEADER = """#pragma once
#include <hip/hip_runtime.h>
#define HIP_CHECK(call) do { if ((call) != hipSuccess) std::exit(1); } while (0)
"""
SAMPLE_PROGRAM = r"""
#include <cstdlib>
#include <vector>
#include "check.h"

template <unsigned WIDTH>
__global__ void reverse_rows(float* out, const float* in) {
  __shared__ float row[WIDTH];
  row[threadIdx.x] = in[blockIdx.x * WIDTH + threadIdx.x];
  __syncthreads();
  out[blockIdx.x * WIDTH + threadIdx.x] = row[WIDTH - 1 - threadIdx.x];
}

int main() {
  std::vector<float> host(64 * 32, 1.0f);
  float *in = nullptr, *out = nullptr;
  HIP_CHECK(hipMalloc(&in, host.size() * sizeof(float)));
  HIP_CHECK(hipMalloc(&out, host.size() * sizeof(float)));
  reverse_rows<64><<<dim3(32), dim3(64)>>>(out, in);
  HIP_CHECK(hipDeviceSynchronize());
  return 0;
}
"""


@needs_hip
def test_a_hip_sample_file_with_its_host_program_is_taken_as_it_is(tmp):
    """The file is given by path (its folder searched for "check.h"); the device build parses
    the host program (HIP's headers declare its API) and builds only the kernels, and the
    instantiation its launch makes is recorded as the demangler spells it, or by an
    expression."""
    (tmp / "check.h").write_text(SAMPLE_HEADER)
    (tmp / "reverse.hip").write_text(SAMPLE_PROGRAM)
    module = modpack.rocm_module(tmp / "reverse.hip", targets=["gfx90a"])
    assert records(module) == [("reverse_rows<64u>", "_Z12reverse_rowsILj64EEvPfPKf",
                                "reverse_rows<64u>(float32*, float32*)", 16, (0, 8))]
    named = modpack.rocm_module(tmp / "reverse.hip", targets=["gfx90a"],
                                name_expressions=["reverse_rows<64>"])
    assert [f.name for f in named.functions] == ["reverse_rows<64>"]


def test_hip_code_objects_with_c_plus_plus_kernels_need_no_functions(hip_module):
    """A code object built elsewhere: its C++ kernels' symbols carry their types, so only the
    extern "C" kernel needs functions=; expressions match the demangled names as they are
    spelled (``16u``), and a hand-written record finds its C++ kernel by its short name."""
    code = hip_module.code_objects[0].data
    module = modpack.rocm_module(binaries={"gfx90a": code}, name_expressions=["transpose<16u>"],
                                 functions={"transpose<16u>": ["float32*", "float32*", "uint32"],
                                            "bias_gelu": ["float32*", "float32*", "int32",
                                                          "int32"]})
    assert [(f.name, f.symbol) for f in module.functions] == [
        ("transpose<16u>", TRANSPOSE), ("bias_gelu", "_Z9bias_geluPfPKfii")]
    with pytest.raises(modpack.ModpackError, match=r"histogram argument 2.*do not record scalar "
                                                   r"types: pass functions="):
        modpack.rocm_module(binaries={"gfx90a": code})
    with pytest.raises(modpack.ModpackError, match=r"'transpose<16>' matches no kernel in the "
                                                   r"code objects .*transpose<16u>\(float const\*"):
        modpack.rocm_module(binaries={"gfx90a": code}, name_expressions=["transpose<16>"])
    with pytest.raises(modpack.ModpackError, match=r"'fill' matches 2 kernels .*name one by its "
                                                   r"signature"):
        modpack.rocm_module(binaries={"gfx90a": code}, name_expressions=["fill"])


def test_empty_or_misshapen_binaries_are_refused_saying_so():
    with pytest.raises(modpack.ArgumentError, match=r"binaries is empty: give at least one code "
                                                    r"object.* or leave binaries out"):
        modpack.rocm_module(binaries={})
    with pytest.raises(modpack.ArgumentError, match=r"binaries must map target IDs .* not list"):
        modpack.rocm_module(binaries=[b"\x7fELF"])


HIP_LAUNCH_PROGRAM = r"""
import sys, numpy as np, modpack
mod = modpack.load_module(sys.argv[1])
def k(name):
    return mod.get_function(name, query_imports=True)
a = modpack.array(np.arange(256, dtype=np.float32), device="rocm:0")
out = modpack.empty(256, "float32", device="rocm:0")
k("transpose<16>")(a, out, 16, 1, 1, 1, 16, 16, 1)
k("samples/fill(double*, double, unsigned int)")(
    modpack.empty(8, "float64", device="rocm:0"), -1.5, 8, 1, 1, 1, 64, 1, 1)
k("bias_gelu")(out, a, 16, 256, 4, 1, 1, 64, 1, 1)
k("histogram")(modpack.empty(9, "uint8", device="rocm:0"), modpack.empty(256, "uint32",
               device="rocm:0"), -9, 1, 1, 1, 64, 1, 1)
print("launched")
"""


def test_c_plus_plus_kernels_launch_by_their_symbols_with_their_layouts(hip_module, stub_hip,
                                                                        tmp):
    """Exported and loaded back, each kernel is found by the name its record has (and as
    "samples/name"), HIP is asked for its mangled symbol, and the argument buffer is laid out
    as the metadata says, bit for bit."""
    library = export(tmp, hip_module)
    log = tmp / "hip.log"
    proc = child(HIP_LAUNCH_PROGRAM, str(library), MODPACK_ROCM_LIBRARY=str(stub_hip),
                 STUB_HIPINIT_RESULT="0", STUB_LOG=str(log), STUB_TARGETS="gfx90a:sramecc+:xnack-")
    assert proc.returncode == 0 and proc.stdout == "launched\n", proc.stderr
    lines = log.read_text().splitlines()
    a, out, d, data, bins = [int(line.split()[1], 16) for line in lines
                             if line.startswith("malloc")]
    rest = [line for line in lines if not line.startswith("malloc")]
    assert rest == [
        "load gfx90a",
        f"function {TRANSPOSE}",
        "launch grid 1 1 1 block 16 16 1 shared 0 stream (nil) params none buffer 20 "
        + struct.pack("<QQI", a, out, 16).hex(),
        "function _Z4fillPddj",
        "launch grid 1 1 1 block 64 1 1 shared 0 stream (nil) params none buffer 20 "
        + struct.pack("<QdI", d, -1.5, 8).hex(),
        "function _Z9bias_geluPfPKfii",
        "launch grid 4 1 1 block 64 1 1 shared 0 stream (nil) params none buffer 24 "
        + struct.pack("<QQii", out, a, 16, 256).hex(),
        "function histogram",
        "launch grid 1 1 1 block 64 1 1 shared 0 stream (nil) params none buffer 24 "
        + struct.pack("<QQq", data, bins, -9).hex(),
    ]
    contents = next(m["contents"] for m in inspect_library(library)["modules"]
                    if m["type_key"] == "rocm")
    assert contents["kernels"][0]["symbol"] == TRANSPOSE
    assert contents["kernels"][0]["demangled"] == (
        "void transpose<16u>(float const*, float*, unsigned int)")
    assert verify_library(library)["ok"]


def test_hip_without_headers_falls_back_and_says_what_to_install(monkeypatch):
    """Where HIP's headers are not installed (ROCM_PATH names a folder without them), HIP
    source made of clang's builtins still compiles (-nogpuinc -nogpulib), and a source that
    includes hip/hip_runtime.h is refused with the packages to install."""
    if shutil.which("clang") is None:
        pytest.skip("clang is not installed (apt-get install clang lld)")
    monkeypatch.setenv("ROCM_PATH", "/nonexistent/rocm")
    assert find_hip_toolchain().rocm_path is None
    module = modpack.rocm_module(HIP, targets=["gfx90a"])
    assert module.functions[0].signature() == "axpy(float32, float32*, float32*, int32)"
    with pytest.raises(modpack.CompileError, match=r"includes HIP's headers \(#include <hip/\.\.\.>"
                                                   r"\), and no HIP headers \(hip/hip_runtime.h\) "
                                                   r"in /nonexistent/rocm/include: install them "
                                                   r"\(Debian 12: apt-get install libamdhip64-dev "
                                                   r"rocm-device-libs clang-15 lld-15"):
        modpack.rocm_module(HIP_SAMPLE, targets=["gfx90a"])


@needs_hip
def test_a_clang_older_than_the_device_libraries_is_named(monkeypatch):
    """The device libraries are bitcode of one LLVM release: a $CLANG older than it cannot read
    them, so they are left out, and a kernel that needs them fails saying which clang to
    install."""
    found = find_hip_toolchain()
    older = shutil.which(f"clang-{(found.libs_major or 0) - 1}")
    if older is None:
        pytest.skip(f"no clang-{(found.libs_major or 0) - 1} here to be the older clang")
    monkeypatch.setenv("CLANG", older)
    assert find_hip_toolchain().device_libs is None
    with pytest.raises(modpack.CompileError, match=rf"(?s)__ocml_tanh_f32.*built by LLVM "
                                                   rf"{found.libs_major}, which {older} .*install "
                                                   rf"clang-{found.libs_major}"):
        modpack.rocm_module(HIP_SAMPLE, targets=["gfx90a"])


def test_a_real_amd_gpu_transposes(hip_module, tmp):
    """On a machine with an AMD GPU and ROCm, the packaged template kernel runs and transposes
    a 48 x 48 matrix (3 x 3 blocks of 16 x 16)."""
    if not Path("/dev/kfd").exists() or installed_runtime() is None:
        pytest.skip("no AMD GPU with ROCm here (/dev/kfd and libamdhip64.so are needed)")
    library = export(tmp, hip_module)
    transpose = modpack.load_module(library).get_function("transpose<16>", query_imports=True)
    host = np.arange(48 * 48, dtype=np.float32).reshape(48, 48)
    a = modpack.array(host, device="rocm:0")
    out = modpack.empty((48, 48), "float32", device="rocm:0")
    transpose(a, out, 48, 3, 3, 1, 16, 16, 1)
    modpack.synchronize("rocm:0")
    assert np.array_equal(out.numpy(), host.T)
