"""ROCm device modules: real AMD GPU code objects built here by clang (OpenCL C and HIP, no ROCm
install), their records and argument layouts read from the metadata notes, exported and loaded
back byte for byte; inspect, extract and verify; the selection rule by target ID (xnack,
sramecc, generic targets); the errors a machine without ROCm gives, for real; and, through a
stub HIP runtime (tests/data/stub_libamdhip64.c), which code object a launch loads and the
argument buffer it passes, bit for bit. No launch here runs on a GPU (none is on this machine)."""

from __future__ import annotations

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
from modpack.extraction import extract_library
from modpack.inspection import inspect_library
from modpack.modules.rocm import read_code_object
from modpack.runtime.binding import error_from_status, ffi, lib
from modpack.verification import verify_library

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


def test_default_runtime_name_is_libamdhip64(library):
    if "MODPACK_ROCM_LIBRARY" in os.environ or Path("/opt/rocm").exists():
        pytest.skip("this machine may have ROCm")
    proc = child(NO_GPU_PROGRAM, str(library))
    assert "kernel -> no ROCm runtime: libamdhip64.so not found" in proc.stdout, proc.stdout


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
        assert "rocm_vadd: cannot launch here: no ROCm runtime" in proc.stdout, proc.stdout
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
