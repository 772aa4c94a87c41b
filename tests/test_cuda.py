"""CUDA device modules: real PTX, cubins and fatbins built here (nvcc, and NVRTC from PyPI when
installed), exported and loaded back byte for byte; the variant selection rule; the errors a
machine without a GPU gives, for real (no driver, and a driver without a device); launches
that run where a GPU exists and are skipped, with the reason, where none does."""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, run

import modpack
from modpack.modules.cuda import (
    CUDAVariant,
    cubin_arch,
    detect_kind,
    fatbin_arches,
    parse_cuda_signatures,
    ptx_entries,
    ptx_target,
)
from modpack.runtime.binding import error_from_status, ffi, lib
from modpack.tools.inspection import inspect_library

KERNELS = r"""
extern "C" __global__ void vadd(const float* __restrict__ a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
extern "C" __global__ void axpy(double alpha, const double* x, double* y, unsigned long long n) {
  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += alpha * x[i];
}
extern "C" __global__ void fill(void* p, unsigned char value, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) ((unsigned char*)p)[i] = value;
}
extern "C" __global__ void noop(int n) {}
"""

# Reverses a block through dynamic shared memory (which it sizes from the launch).
SHARED = r"""
extern "C" __global__ void reverse(const int* in, int* out, int n) {
  extern __shared__ int tile[];
  int i = threadIdx.x;
  if (i < n) tile[i] = in[i];
  __syncthreads();
  if (i < n) out[i] = tile[n - 1 - i];
}
"""
SHARED_FUNCTIONS = {"reverse": {"args": ["int32*", "int32*", "int32"],
                                "launch": ["blockIdx.x", "threadIdx.x", "dyn_shared_memory"]}}

HOST = r"""
#include "modpack/backend.h"
/* vadd_host(a, b, out): launches the CUDA kernel through the module context. */
MP_EXPORT_PACKED(vadd_host) {
  (void)self;
  void* vadd = 0;
  if (num_args != 3) return mp_backend_errorf(MP_ERR_INVALID_ARGUMENT, "vadd_host: 3 arrays");
  mp_status_t s = mp_backend_get_function("vadd", &vadd);
  if (s != MP_OK) return s;
  int64_t n = args[0].v_tensor->shape[0];
  mp_value_t k[] = {args[0], args[1], args[2], mp_int(n), mp_int((n + 127) / 128), mp_int(1),
                    mp_int(1), mp_int(128), mp_int(1), mp_int(1)};
  return mp_backend_call(vadd, k, 10, out_ret);
}
"""

# vadd as PTX text (from `nvcc -ptx -arch=compute_75`, ISA lowered to 7.0): a CUDA module that
# needs no compiler to build.
VADD_PTX = """\
// vadd, kept as text
.version 7.0
.target sm_75
.address_size 64
	// .globl	vadd
.visible .entry vadd(
	.param .u64 vadd_param_0,
	.param .u64 vadd_param_1,
	.param .u64 vadd_param_2,
	.param .u32 vadd_param_3
)
{
	.reg .pred 	%p<2>;
	.reg .f32 	%f<4>;
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<11>;
	ld.param.u64 	%rd1, [vadd_param_0];
	ld.param.u64 	%rd2, [vadd_param_1];
	ld.param.u64 	%rd3, [vadd_param_2];
	ld.param.u32 	%r2, [vadd_param_3];
	mov.u32 	%r3, %ctaid.x;
	mov.u32 	%r4, %ntid.x;
	mov.u32 	%r5, %tid.x;
	mad.lo.s32 	%r1, %r3, %r4, %r5;
	setp.ge.s32 	%p1, %r1, %r2;
	@%p1 bra 	$L__BB0_2;
	cvta.to.global.u64 	%rd4, %rd1;
	mul.wide.s32 	%rd5, %r1, 4;
	add.s64 	%rd6, %rd4, %rd5;
	cvta.to.global.u64 	%rd7, %rd2;
	add.s64 	%rd8, %rd7, %rd5;
	ld.global.f32 	%f1, [%rd8];
	ld.global.f32 	%f2, [%rd6];
	add.f32 	%f3, %f2, %f1;
	cvta.to.global.u64 	%rd9, %rd3;
	add.s64 	%rd10, %rd9, %rd5;
	st.global.f32 	[%rd10], %f3;
$L__BB0_2:
	ret;
}
"""

NO_GPU = "no CUDA GPU on this machine (launch needs a GPU)"


def _gpu_count() -> int:
    try:
        return modpack.device_count("cuda")
    except modpack.ModpackError:
        return 0


GPU_COUNT = _gpu_count()
needs_gpu = pytest.mark.skipif(GPU_COUNT == 0, reason=NO_GPU)
needs_nvcc = pytest.mark.skipif(
    shutil.which("nvcc") is None, reason="nvcc is not installed (CUDA toolkit); tests that "
    "build cubins and fatbins with it need it")


def _nvrtc_reason() -> str | None:
    try:
        from cuda.bindings import nvrtc

        nvrtc.nvrtcVersion()
    except Exception as exc:
        return f"NVRTC is not installed (pip install modpack[cuda]): {type(exc).__name__}"
    return None


needs_nvrtc = pytest.mark.skipif(_nvrtc_reason() is not None, reason=str(_nvrtc_reason()))


def nvcc(tmp: Path, *args: str) -> bytes:
    (tmp / "k.cu").write_text(KERNELS)
    out = tmp / "out.bin"
    subprocess.run(["nvcc", *args, "-o", str(out), str(tmp / "k.cu")], check=True,
                   capture_output=True)
    return out.read_bytes()


@pytest.fixture(scope="module")
def bins(tmp_path_factory) -> dict[str, bytes]:
    """Real binaries of KERNELS from nvcc: two cubins, PTX and a three-entry fatbin."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed (CUDA toolkit)")
    tmp = tmp_path_factory.mktemp("nvcc")
    return {
        "sm_80": nvcc(tmp, "-cubin", "-arch=sm_80"),
        "sm_90a": nvcc(tmp, "-cubin", "-arch=sm_90a"),
        "ptx": nvcc(tmp, "-ptx", "-arch=compute_80"),
        "fatbin": nvcc(tmp, "-fatbin", "-gencode", "arch=compute_80,code=sm_80",
                       "-gencode", "arch=compute_90,code=compute_90",
                       "-gencode", "arch=compute_90,code=sm_90"),
    }


def export(tmp: Path, module: modpack.Module, name: str = "k.so",
           host_code: str = "int placeholder;") -> Path:
    host = modpack.csource_module(host_code)
    host.import_module(module)
    return host.export_library(tmp / name)


def payload_of(path: Path) -> bytes:
    """The cuda module's payload bytes, read from the library file."""
    report = inspect_library(path)
    (module,) = [m for m in report["modules"] if m["type_key"] == "cuda"]
    start = report["blob"]["file_offset"] + module["offset"]
    return path.read_bytes()[start : start + module["size"]]


def load_payload(payload: bytes) -> dict:
    """Run the C loader on raw payload bytes (no library, no driver) and return its
    description, or raise its error."""
    data = ffi.from_buffer(payload)
    span = ffi.new("mp_const_byte_span_t*", {"data": data, "size": len(payload)})
    out = ffi.new("mp_module_t**")
    status = lib.mp_module_load_from_payload(b"cuda", span[0], out)
    if status != 0:
        raise error_from_status(status)
    try:
        buffer = ffi.new("char[]", 1 << 16)
        assert lib.mp_module_describe(out[0], buffer, 1 << 16, ffi.NULL) == 0
        return json.loads(ffi.string(buffer).decode())
    finally:
        lib.mp_module_release(out[0])


def child(code: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run |code| in a fresh interpreter with extra environment variables."""
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)


# ---- binaries: kinds, arches, round trip ---------------------------------------------------------


def test_binary_kinds_and_arches_are_read_from_the_bytes(bins):
    assert detect_kind(bins["sm_80"]) == "cubin" and cubin_arch(bins["sm_80"]) == 80
    assert cubin_arch(bins["sm_90a"]) == 90
    assert detect_kind(bins["ptx"]) == "ptx" and ptx_target(bins["ptx"]) == "compute_80"
    assert detect_kind(bins["fatbin"]) == "fatbin"
    assert fatbin_arches(bins["fatbin"]) == ["sm_80", "sm_90", "compute_90"]
    entries = ptx_entries(bins["ptx"])
    assert [p.type for p in entries["vadd"]] == ["u64", "u64", "u64", "u32"]
    assert [p.type for p in entries["axpy"]] == ["f64", "u64", "u64", "u64"]
    with pytest.raises(ValueError, match="not a CUDA binary"):
        detect_kind(b"\x00\x01garbage")


def test_multi_arch_binaries_survive_export_and_load_byte_for_byte(bins, tmp):
    functions = {"vadd": ["float32*", "float32*", "float32*", "int32"],
                 "axpy": ["float64", "float64*", "float64*", "uint64"],
                 "fill": ["void*", "uint8", "int64"]}
    module = modpack.cuda_module(binaries=bins, functions=functions)
    assert [(v.kind, v.arches) for v in module.variants] == [
        ("cubin", ("sm_80",)), ("cubin", ("sm_90a",)), ("ptx", ("compute_80",)),
        ("fatbin", ("sm_80", "sm_90", "compute_90")),
    ]
    path = export(tmp, module)
    payload = payload_of(path)
    assert payload == module.save_to_binary()
    # Each variant's exact bytes sit in the payload, 64-byte aligned, in order (PTX gains the
    # NUL the driver needs); the loader reads them there in place.
    at = 0
    for key, variant in zip(bins, module.variants, strict=True):
        expected = bins[key] + (b"\0" if variant.kind == "ptx" else b"")
        assert variant.data == expected
        at = payload.index(expected, at)
        assert at % 64 == 0
        at += len(expected)
    assert at == len(payload)

    loaded = modpack.load_module(path)  # no GPU needed to load
    (cuda,) = loaded.imported_modules
    assert cuda.type_key == "cuda"
    (contents,) = [m["contents"] for m in inspect_library(path)["modules"]
                   if m["type_key"] == "cuda"]
    assert contents["functions"] == ["vadd", "axpy", "fill"]
    assert [(v["arch"], v["kind"], v["size"]) for v in contents["variants"]] == [
        ("sm_80", "cubin", len(bins["sm_80"])),
        ("sm_90a", "cubin", len(bins["sm_90a"])),
        ("compute_80", "ptx", len(bins["ptx"]) + 1),
        ("sm_80+sm_90+compute_90", "fatbin", len(bins["fatbin"])),
    ]
    assert contents["variants"][2]["ptx_isa"] == re.search(rb"\.version (\S+)",
                                                           bins["ptx"])[1].decode()
    assert contents["variants"][3]["contains"] == ["sm_80", "sm_90", "compute_90"]
    assert contents["kernels"][2] == {
        "name": "fill", "args": ["void*", "uint8", "int64"],
        "launch": ["blockIdx.x", "blockIdx.y", "blockIdx.z",
                   "threadIdx.x", "threadIdx.y", "threadIdx.z"],
    }


def test_inspect_cli_shows_kernels_and_arch_variants(bins, tmp):
    path = export(tmp, modpack.cuda_module(binaries=bins))  # records derived from the PTX
    proc = subprocess.run([sys.executable, "-m", "modpack", "inspect", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "module 1 (cuda)" in out
    assert ("kernel vadd(void*, void*, void*, uint32)  launch: blockIdx.x, "
            "blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z") in out
    assert "kernel axpy(float64, void*, void*, void*)" in out
    assert f"variant sm_80: cubin, {len(bins['sm_80'])} bytes" in out
    assert f"variant sm_90a: cubin, {len(bins['sm_90a'])} bytes" in out
    assert f"variant compute_80: ptx, {len(bins['ptx']) + 1} bytes" in out
    assert f"variant sm_80+sm_90+compute_90: fatbin, {len(bins['fatbin'])} bytes" in out


def test_records_from_ptx_alone(bins):
    module = modpack.cuda_module(binaries={"compute_80": bins["ptx"].decode()})
    assert [f.signature() for f in module.functions] == [
        "vadd(void*, void*, void*, uint32)",
        "axpy(float64, void*, void*, void*)",  # a 64-bit integer scalar reads as a pointer
        "fill(void*, uint8, void*)",
        "noop(uint32)",
    ]


def test_binaries_are_checked_against_their_keys(bins):
    with pytest.raises(ValueError, match=r"built for sm_80, not sm_90"):
        modpack.cuda_module(binaries={"sm_90": bins["sm_80"]}, functions={"vadd": []})
    with pytest.raises(ValueError, match=r"is PTX for compute_80.*'ptx' or 'compute_80'"):
        modpack.cuda_module(binaries={"sm_80": bins["ptx"]})
    with pytest.raises(ValueError, match=r"fatbin holding .* not sm_75"):
        modpack.cuda_module(binaries={"sm_75": bins["fatbin"]}, functions={"vadd": []})
    with pytest.raises(ValueError, match="not a CUDA binary"):
        modpack.cuda_module(binaries={"sm_80": b"MZ\x90\x00"}, functions={"vadd": []})
    with pytest.raises(modpack.ModpackError, match="needs functions="):
        modpack.cuda_module(binaries={"sm_80": bins["sm_80"], "fatbin": bins["fatbin"]})
    with pytest.raises(TypeError, match="exactly one"):
        modpack.cuda_module()


def test_records_are_checked_against_carried_ptx(bins):
    bad = {"vadd": ["float32*", "float32*", "float32*", "int64"]}
    with pytest.raises(modpack.ModpackError, match=r"vadd parameter 3 is int64 \(8 bytes\).*"
                                                   r"\.u32 \(4 bytes\)"):
        modpack.cuda_module(binaries={"ptx": bins["ptx"]}, functions=bad)
    with pytest.raises(modpack.ModpackError, match="nope is not in the compiled PTX"):
        modpack.cuda_module(binaries={"ptx": bins["ptx"]}, functions={"nope": []})


def test_signatures_from_cuda_source():
    source = """
    extern "C" __global__ void vadd(const float*, const float*, float*, unsigned int);
    template <typename T> __global__ void generic(T* x) {}   // no single signature: skipped
    extern "C" __global__ void vadd(const float* __restrict__ a, const float* b, float* c,
                                    unsigned int n) {}
    extern "C" __global__ void __launch_bounds__(128) mixed(__half h, size_t n, void* raw,
                                                            const bool flag, long long k) {}
    """
    assert [i.signature() for i in parse_cuda_signatures(source)] == [
        "vadd(float32*, float32*, float32*, uint32)",
        "mixed(float16, uint64, void*, bool, int64)",
    ]
    for param, message in [("float& x", "reference"), ("float** x", "pointer to a pointer"),
                           ("struct Pair p", "cannot map parameter")]:
        with pytest.raises(ValueError, match=message):
            parse_cuda_signatures(f'extern "C" __global__ void f({param}) {{}}')


# ---- building from source ------------------------------------------------------------------------


@needs_nvcc
def test_build_from_source_with_nvcc(tmp):
    module = modpack.cuda_module(KERNELS, targets=["sm_80", "sm_90", "compute_80"],
                                 compiler="nvcc")
    assert [(v.kind, v.arch) for v in module.variants] == [
        ("cubin", "sm_80"), ("cubin", "sm_90"), ("ptx", "compute_80")]
    assert cubin_arch(module.variants[0].data) == 80 and cubin_arch(module.variants[1].data) == 90
    assert [f.signature() for f in module.functions] == [
        "vadd(float32*, float32*, float32*, int32)",
        "axpy(float64, float64*, float64*, uint64)",
        "fill(void*, uint8, int64)",
        "noop(int32)",
    ]
    contents = load_payload(payload_of(export(tmp, module)))
    assert [v["arch"] for v in contents["variants"]] == ["sm_80", "sm_90", "compute_80"]
    assert contents["kernels"][1]["args"] == ["float64", "float64*", "float64*", "uint64"]


@needs_nvcc
def test_nvcc_cubins_only_are_still_checked_against_ptx():
    bad = {"vadd": ["float32*", "float32*", "int32"]}
    with pytest.raises(modpack.ModpackError, match=r"3 parameters in its record .* 4 in the "
                                                   r"compiled PTX"):
        modpack.cuda_module(KERNELS, targets=["sm_80"], functions=bad, compiler="nvcc")


@needs_nvrtc
def test_build_from_source_with_nvrtc(tmp):
    module = modpack.cuda_module(KERNELS, targets=["sm_80", "sm_90a", "compute_75"])
    assert [(v.kind, v.arch) for v in module.variants] == [
        ("cubin", "sm_80"), ("cubin", "sm_90a"), ("ptx", "compute_75")]
    assert cubin_arch(module.variants[1].data) == 90
    assert module.variants[2].data.endswith(b"}\n\0") or module.variants[2].data.endswith(b"\0")
    path = export(tmp, module)
    assert payload_of(path) == module.save_to_binary()
    (contents,) = [m["contents"] for m in inspect_library(path)["modules"]
                   if m["type_key"] == "cuda"]
    assert [v["arch"] for v in contents["variants"]] == ["sm_80", "sm_90a", "compute_75"]


@needs_nvrtc
def test_nvrtc_compile_errors_carry_the_log():
    with pytest.raises(modpack.CompileError, match=r"(?s)sm_80.*undefined_name"):
        modpack.cuda_module('extern "C" __global__ void f(int* x) { x[0] = undefined_name; }',
                            targets=["sm_80"])


@needs_nvrtc
def test_mismatched_record_is_refused_at_export(tmp):
    with pytest.raises(modpack.ModpackError, match=r"parameter 3 is int64.*\.u32"):
        modpack.cuda_module(KERNELS, targets=["sm_80"],
                            functions={"vadd": ["float32*", "float32*", "float32*", "int64"]})
    module = modpack.cuda_module(KERNELS, targets=["sm_80"])
    module.functions[0] = modpack.KernelInfo("vadd", module.functions[0].args[:3],
                                             module.functions[0].launch_tags)
    with pytest.raises(modpack.ModpackError, match=r"vadd has 3 parameters in its record"):
        export(tmp, module)


@needs_nvrtc
def test_kernels_without_c_linkage_are_named():
    with pytest.raises(modpack.ModpackError, match=r'_Z.*vadd.*extern "C" or list it in '
                                                   r"name_expressions=\['vadd'\]"):
        modpack.cuda_module("__global__ void vadd(float* x) { x[0] = 1; }", targets=["sm_80"])


# A CUDA C++ library's style: templates over the element type and tile size, a namespace, and
# an extern "C" kernel beside them.
TEMPLATES = r"""
#include <cuda_fp16.h>
namespace ops {
template <typename T, int TILE>
__global__ void scale(T* __restrict__ out, const T* in, T alpha, unsigned int n) {
  unsigned int i = blockIdx.x * TILE + threadIdx.x;
  if (i < n) out[i] = alpha * in[i];
}
__global__ void zero(float* x, long long n) { if (threadIdx.x < n) x[threadIdx.x] = 0; }
}  // namespace ops
extern "C" __global__ void flat(int* x) { x[0] = 1; }
"""
EXPRESSIONS = ["ops::scale<float, 128>", "ops::scale<__half,64>", "ops::zero"]


@pytest.mark.parametrize("compiler", [
    pytest.param("nvrtc", marks=needs_nvrtc), pytest.param("nvcc", marks=needs_nvcc)])
def test_template_kernels_by_name_expression(compiler, tmp):
    module = modpack.cuda_module(TEMPLATES, targets=["sm_80", "compute_80"], compiler=compiler,
                                 name_expressions=EXPRESSIONS, name="ops")
    assert [(f.name, f.symbol, f.signature()) for f in module.functions] == [
        ("ops::scale<float, 128>", "_ZN3ops5scaleIfLi128EEEvPT_PKS1_S1_j",
         "ops::scale<float, 128>(float32*, float32*, float32, uint32)"),
        ("ops::scale<__half,64>", "_ZN3ops5scaleI6__halfLi64EEEvPT_PKS2_S2_j",
         "ops::scale<__half,64>(float16*, float16*, float16, uint32)"),
        ("ops::zero", "_ZN3ops4zeroEPfx", "ops::zero(float32*, int64)"),
        ("flat", None, "flat(int32*)"),
    ]
    path = export(tmp, module)
    mod = modpack.load_module(path)
    assert mod.imported_modules[0].name == "ops"
    for name in ("ops::scale<float, 128>", "ops/ops::zero", "ops/flat"):
        assert mod.get_function(name, query_imports=True) is not None
    contents = load_payload(payload_of(path))
    assert contents["kernels"][0]["symbol"] == "_ZN3ops5scaleIfLi128EEEvPT_PKS1_S1_j"
    assert "symbol" not in contents["kernels"][3]
    (inspected,) = [m["contents"] for m in inspect_library(path)["modules"]
                    if m["type_key"] == "cuda"]
    assert inspected["name"] == "ops"
    assert [k.get("demangled") for k in inspected["kernels"]] == [
        "void ops::scale<float, 128>(float*, float const*, float, unsigned int)",
        "void ops::scale<__half, 64>(__half*, __half const*, __half, unsigned int)",
        "ops::zero(float*, long long)", None]


# A CUDA-samples style file: kernels, a header beside it, and a host program that launches them.
SAMPLE_HEADER = """#pragma once
#define BLOCK 128
template <typename T> __device__ T twice(T x) { return x + x; }
"""
SAMPLE = r"""
#include <cstdio>
#include <cuda_runtime.h>
#include "helper.h"

template <int B>
__global__ void doubler(float* x, int n) {
  int i = blockIdx.x * B + threadIdx.x;
  if (i < n) x[i] = twice(x[i]);
}

int main() {
  float* d = nullptr;
  cudaMalloc(&d, 1024 * sizeof(float));
  doubler<BLOCK><<<8, BLOCK>>>(d, 1024);
  cudaDeviceSynchronize();
  std::printf("done\n");
  cudaFree(d);
  return 0;
}
"""


@needs_nvcc
def test_nvcc_takes_a_cu_file_with_host_code_and_local_headers(tmp):
    (tmp / "helper.h").write_text(SAMPLE_HEADER)
    (tmp / "sample.cu").write_text(SAMPLE)
    module = modpack.cuda_module(tmp / "sample.cu", targets=["sm_80"], compiler="nvcc",
                                 name_expressions=["doubler<128>"])
    assert [(f.name, f.symbol, f.signature()) for f in module.functions] == [
        ("doubler<128>", "_Z7doublerILi128EEvPfi", "doubler<128>(float32*, int32)")]
    with pytest.raises(modpack.MissingFileError, match=r"absent\.cu does not exist"):
        modpack.cuda_module(tmp / "absent.cu", compiler="nvcc")


@needs_nvrtc
def test_nvrtc_says_host_code_needs_nvcc(tmp):
    (tmp / "helper.h").write_text(SAMPLE_HEADER)
    (tmp / "sample.cu").write_text(SAMPLE)
    with pytest.raises(modpack.CompileError, match="holds host code, which NVRTC does not "
                                                   "compile: pass compiler='nvcc'"):
        modpack.cuda_module(tmp / "sample.cu", targets=["sm_80"],
                            name_expressions=["doubler<128>"])


# llm.c's style: the element type is a typedef chosen by a macro, and kernels are written over it
# (templates and plain C++ kernels alike); and an overloaded kernel pair.
FLOATX = r"""
#include <cuda_bf16.h>
#if defined(ENABLE_FP32)
typedef float floatX;
#else
using floatX = __nv_bfloat16;
#endif
template <typename T>
__global__ void copy(T* out, const T* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i];
}
__global__ void residual(floatX* out, const floatX* a, const floatX* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (floatX)((float)a[i] + (float)b[i]);
}
__global__ void scale(float* x, float s) { x[threadIdx.x] *= s; }
__global__ void scale(double* x, double s) { x[threadIdx.x] *= s; }
"""
FLOATX_EXPRESSIONS = ["copy<floatX>", "residual", "scale(double*, double)", "scale(float *, float)"]


@pytest.mark.parametrize("compiler", [
    pytest.param("nvrtc", marks=needs_nvrtc), pytest.param("nvcc", marks=needs_nvcc)])
def test_name_expressions_go_through_typedefs_and_pick_overloads(compiler):
    """An expression is resolved by the compiler, as written: ``copy<floatX>`` is the
    __nv_bfloat16 instantiation (or the float one when a macro makes floatX float), a C++
    kernel over floatX needs no dtype spelled in the source, and an overload is named by its
    signature. nvcc, with no lowering API, answers through modpack's probe compile."""
    module = modpack.cuda_module(FLOATX, targets=["sm_80"], compiler=compiler,
                                 name_expressions=FLOATX_EXPRESSIONS)
    assert [(f.name, f.symbol, f.signature()) for f in module.functions] == [
        ("copy<floatX>", "_Z4copyI13__nv_bfloat16EvPT_PKS1_i",
         "copy<floatX>(bfloat16*, bfloat16*, int32)"),
        ("residual", "_Z8residualP13__nv_bfloat16PKS_S2_i",
         "residual(bfloat16*, bfloat16*, bfloat16*, int32)"),
        ("scale(double*, double)", "_Z5scalePdd", "scale(double*, double)(float64*, float64)"),
        ("scale(float *, float)", "_Z5scalePff", "scale(float *, float)(float32*, float32)"),
    ]
    fp32 = modpack.cuda_module(FLOATX, targets=["sm_80"], compiler=compiler,
                               options=["-DENABLE_FP32"], name_expressions=["copy<floatX>"])
    assert [(f.symbol, f.signature()) for f in fp32.functions] == [
        ("_Z4copyIfEvPT_PKS0_i", "copy<floatX>(float32*, float32*, int32)")]


@needs_nvcc
def test_nvcc_resolves_any_spelling_of_an_expression():
    """``128u`` and ``128`` name the same instantiation: nvcc says so (it once matched the text
    against demangled names, where only ``128`` matched)."""
    module = modpack.cuda_module(TEMPLATES, targets=["sm_80"], compiler="nvcc",
                                 name_expressions=["ops::scale<float, 128>",
                                                   "ops::scale<float, 128u>", "ops::zero"])
    assert [f.symbol for f in module.functions] == [
        "_ZN3ops5scaleIfLi128EEEvPT_PKS1_S1_j", "_ZN3ops5scaleIfLi128EEEvPT_PKS1_S1_j",
        "_ZN3ops4zeroEPfx", None]


@needs_nvcc
def test_nvcc_refuses_an_expression_naming_nothing():
    with pytest.raises(modpack.CompileError, match="no_such_kernel"):
        modpack.cuda_module(TEMPLATES, targets=["sm_80"], compiler="nvcc",
                            name_expressions=["no_such_kernel<1>"])
    with pytest.raises(modpack.CompileError, match=r"(?s)overloaded function \"scale\".*must "
                                                   r"pick one by its signature"):
        modpack.cuda_module(FLOATX, targets=["sm_80"], compiler="nvcc",
                            name_expressions=["scale"])


@needs_nvcc
def test_binaries_name_expressions_match_demangled_names():
    """Binaries have no compiler to ask: an expression is matched by the demangled name as the
    demangler spells it (a typedef is no such name), and one of several overloads by its
    signature; the refusals say which."""
    from modpack.modules.cuda.compile import nvcc_compile
    from modpack.modules.cxx_names import instantiation_source

    ptx = nvcc_compile(instantiation_source(FLOATX, ["copy<floatX>"]), "compute_80", [])
    module = modpack.cuda_module(binaries={"ptx": ptx}, name_expressions=[
        "copy<__nv_bfloat16>", "scale(double*, double)", "residual"])
    assert [(f.name, f.symbol) for f in module.functions] == [
        ("copy<__nv_bfloat16>", "_Z4copyI13__nv_bfloat16EvPT_PKS1_i"),
        ("scale(double*, double)", "_Z5scalePdd"),
        ("residual", "_Z8residualP13__nv_bfloat16PKS_S2_i")]
    with pytest.raises(modpack.ModpackError, match=r"'copy<floatX>' matches no kernel in the PTX "
                                                   r".*copy<__nv_bfloat16>\(__nv_bfloat16\*"):
        modpack.cuda_module(binaries={"ptx": ptx}, name_expressions=["copy<floatX>"])
    with pytest.raises(modpack.ModpackError, match=r"'scale' matches 2 kernels in the PTX "
                                                   r".*name one by its signature"):
        modpack.cuda_module(binaries={"ptx": ptx}, name_expressions=["scale"])


def test_empty_or_misshapen_binaries_are_refused_saying_so():
    """binaries={} is not "no binaries" (binaries replace the source): the refusal says what to
    give, and not that a dict is not a mapping."""
    with pytest.raises(modpack.ArgumentError, match=r"binaries is empty: give at least one "
                                                    r"cubin, PTX or fatbin.* or leave binaries "
                                                    r"out and pass source"):
        modpack.cuda_module(binaries={})
    with pytest.raises(modpack.ArgumentError, match=r"binaries must map keys .* to bytes, not "
                                                    r"list"):
        modpack.cuda_module(binaries=[b"ptx"])


def test_name_expressions_are_checked(bins):
    with pytest.raises(TypeError, match="must be a list"):
        modpack.cuda_module(TEMPLATES, name_expressions="ops::zero")
    with pytest.raises(ValueError, match="duplicates"):
        modpack.cuda_module(TEMPLATES, name_expressions=["k<1>", " k<1>"])
    with pytest.raises(modpack.ModpackError, match="needs a PTX variant"):
        modpack.cuda_module(binaries={"sm_80": bins["sm_80"]}, name_expressions=["k<1>"])


@needs_nvrtc
def test_nvrtc_refuses_an_expression_naming_nothing():
    with pytest.raises(modpack.CompileError, match="no_such_kernel"):
        modpack.cuda_module(TEMPLATES, targets=["sm_80"], name_expressions=["no_such_kernel<1>"])
    with pytest.raises(modpack.CompileError, match=r"(?s)overloaded function \"scale\".*must "
                                                   r"pick one by its signature"):
        modpack.cuda_module(FLOATX, targets=["sm_80"], name_expressions=["scale"])


def test_missing_nvrtc_names_the_extra():
    proc = child(
        "import sys; sys.modules['cuda'] = None\n"  # as if cuda-python were not installed
        "import modpack\n"
        "try:\n    modpack.cuda_module('extern \"C\" __global__ void f() {}', ['sm_80'])\n"
        "except modpack.ModpackError as e:\n    print('Error:', e)\n")
    assert proc.returncode == 0, proc.stderr
    assert "pip install modpack[cuda]" in proc.stdout and "compiler='nvcc'" in proc.stdout


BF16 = r"""
#include <cuda_bf16.h>
extern "C" __global__ void scale(__nv_bfloat16* x, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __float2bfloat16(__bfloat162float(x[i]) * s);
}
"""


def test_bf16_kernels_take_ml_dtypes_without_an_earlier_import():
    """As llm.c's kernels: __nv_bfloat16* is a bfloat16 buffer. numpy knows "bfloat16" only
    once ml_dtypes is imported, which nothing had done (it was "needs the ml_dtypes
    package" with ml_dtypes installed); and the cuda extra installs it."""
    proc = child(
        "import sys\n"
        "from modpack.modules.cuda import parse_cuda_signatures\n"
        "assert 'ml_dtypes' not in sys.modules\n"
        f"print(parse_cuda_signatures({BF16!r})[0].signature())\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "scale(bfloat16*, float32, int32)"
    proc = child("import sys; sys.modules['ml_dtypes'] = None\n"  # as if it were not installed
                 "import modpack\n"
                 f"try:\n    modpack.modules.cuda.parse_cuda_signatures({BF16!r})\n"
                 "except modpack.ArgumentError as e:\n    print(e)\n")
    assert "needs the ml_dtypes package for its dtype: pip install ml_dtypes" in proc.stdout
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert any(re.match(r"ml_dtypes\b", r) for r in extras["cuda"])


@needs_nvrtc
def test_nvrtc_says_host_code_in_an_included_header_needs_nvcc(tmp):
    (tmp / "include").mkdir()
    (tmp / "include" / "launch.cuh").write_text(
        'extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2; }\n'
        "inline void run(float* x) { twice<<<1, 32>>>(x); }\n")
    with pytest.raises(modpack.CompileError,
                       match=r"\(the header .*launch\.cuh included by the source holds host code, "
                             r"which NVRTC does not compile: pass compiler='nvcc'"):
        modpack.cuda_module('#include "launch.cuh"\n', targets=["sm_80"],
                            options=[f"-I{tmp / 'include'}"])
    (tmp / "main.cu").write_text('#include "launch.cuh"\n')  # the file's folder is searched too
    (tmp / "launch.cuh").write_text((tmp / "include" / "launch.cuh").read_text())
    with pytest.raises(modpack.CompileError, match=r"launch\.cuh included by the source"):
        modpack.cuda_module(tmp / "main.cu", targets=["sm_80"])


@needs_nvrtc
def test_compiling_leaves_python_s_shared_bytes_alone(tmp):
    """NVRTC fills the buffers it is given (the log, PTX, cubin): they are modpack's own, never
    a bytes object. An empty log is one NUL byte, and written into ``b" " * 1`` (CPython's
    shared one-byte object) it made every ``b" "`` of the process a NUL: a safetensors header
    padded with spaces then read as damaged."""
    (tmp / "k.cu").write_text('extern "C" __global__ void k(float* x) { x[0] = 2 * x[0]; }\n')
    module = modpack.cuda_module(tmp / "k.cu", targets=["sm_80"])
    assert module.functions[0].name == "k"
    assert bytes([0x20])[0] == 0x20 and (b" " * 3) == bytes([0x20, 0x20, 0x20])
    assert bytes([0])[0] == 0


@needs_nvrtc
@pytest.mark.parametrize("header", ["assert.h", "cassert", "stdio.h"])
def test_nvrtc_says_it_has_no_c_library_headers(tmp, header):
    """NVRTC ships no C library headers: a standard header it cannot open, in the source or a
    user's header, gets a hint (remove it: NVRTC declares printf and assert; libcu++'s
    <cuda/std/...> where one exists; or compiler='nvcc'), and each way out compiles. A header
    that is not the C library's gets no such hint."""
    (tmp / "util.cuh").write_text(f"#pragma once\n#include <{header}>\n"
                                  "__device__ inline float twice(float x) { return 2 * x; }\n")
    (tmp / "k.cu").write_text('#include "util.cuh"\n'
                              'extern "C" __global__ void k(float* x) {\n'
                              '  assert(x != 0); printf("%f", x[0]); x[0] = twice(x[0]);\n}\n')
    with pytest.raises(modpack.CompileError) as refused:
        modpack.cuda_module(tmp / "k.cu", targets=["sm_80"])
    message = str(refused.value)
    assert f'util.cuh(2): catastrophic error: cannot open source file "{header}"' in message
    assert (f"(NVRTC has no C library headers, and the header {tmp / 'util.cuh'} includes "
            f"<{header}>: "
            "remove the include (NVRTC declares printf and assert itself; #ifndef "
            "__CUDACC_RTC__ keeps it for nvcc)") in message
    assert message.endswith("or compile with nvcc: cuda_module(..., compiler='nvcc'))")
    libcu = "<cuda/std/cassert>" if header != "stdio.h" else None
    assert (f"include {libcu} (libcu++" in message) if libcu else "libcu++" not in message
    guarded = f"#ifndef __CUDACC_RTC__\n#include <{header}>\n#endif\n"
    (tmp / "util.cuh").write_text(guarded + "__device__ inline float twice(float x) "
                                  "{ return 2 * x; }\n")
    assert modpack.cuda_module(tmp / "k.cu", targets=["sm_80"]).functions[0].name == "k"
    if libcu:
        assert modpack.cuda_module(f"#include {libcu}\n"
                                   'extern "C" __global__ void k(int* x) { assert(x); }\n',
                                   targets=["sm_80"]).functions[0].name == "k"
    (tmp / "util.cuh").write_text("#include <no_such_header.h>\n")
    with pytest.raises(modpack.CompileError) as other:
        modpack.cuda_module(tmp / "k.cu", targets=["sm_80"])
    assert "no_such_header.h" in str(other.value) and "C library" not in str(other.value)


@needs_nvcc
def test_nvcc_compiles_what_the_c_library_header_hint_sends_it(tmp):
    (tmp / "util.cuh").write_text("#include <assert.h>\n#include <stdio.h>\n")
    (tmp / "k.cu").write_text('#include "util.cuh"\n'
                              'extern "C" __global__ void k(float* x) { assert(x); }\n')
    assert modpack.cuda_module(tmp / "k.cu", targets=["sm_80"], compiler="nvcc").functions


def test_bad_targets_and_launch_tags():
    with pytest.raises(ValueError, match="not a CUDA architecture"):
        modpack.cuda_module("", targets=["sm_8"], compiler="nvcc")
    with pytest.raises(ValueError, match="dyn_shared_memory' must be the last"):
        modpack.cuda_module(binaries={"ptx": ".version 8.0\n.target sm_80\n"},
                            functions={"k": {"args": [], "launch": ["dyn_shared_memory",
                                                                    "threadIdx.x"]}})


# ---- the payload reader --------------------------------------------------------------------------


def test_damaged_payloads_are_refused(bins):
    module = modpack.cuda_module(binaries={"sm_80": bins["sm_80"], "ptx": bins["ptx"]})
    good = module.save_to_binary()
    assert [v["arch"] for v in load_payload(good)["variants"]] == ["sm_80", "compute_80"]

    def damaged(edit) -> Exception:
        data = bytearray(good)
        edit(data)
        with pytest.raises(modpack.FormatError) as info:
            load_payload(bytes(data))
        return info.value

    assert "version 9" in str(damaged(lambda d: struct.pack_into("<I", d, 0, 9)))
    assert "trailing" in str(damaged(lambda d: d.extend(b"\0" * 8)))
    assert "variant bytes" in str(damaged(lambda d: d.__delitem__(slice(-10, None))))
    assert "not NUL-terminated" in str(damaged(lambda d: d.__setitem__(-1, ord("x"))))
    arch_at = good.index(b"sm_80")
    assert "'sm_8x'" in str(damaged(lambda d: d.__setitem__(arch_at + 4, ord("x"))))
    elf_at = good.index(bins["sm_80"])
    assert "ELF magic" in str(damaged(lambda d: d.__setitem__(elf_at, 0)))
    assert "nonzero padding" in str(damaged(lambda d: d.__setitem__(elf_at - 1, 1)))
    tag_at = good.index(b"threadIdx.z")
    assert "unknown launch tag" in str(damaged(lambda d: d.__setitem__(tag_at, ord("T"))))
    kind_at = good.index(struct.pack("<II", 0, 1))  # the cubin's kind, arch count
    assert "labelled 'sm_80'" in str(damaged(lambda d: struct.pack_into("<I", d, kind_at, 1)))


# ---- the selection rule --------------------------------------------------------------------------

SELECTION = [
    # (device compute capability, variants, expected choice)
    ((8, 6), ["sm_80", "sm_86", "compute_80"], "sm_86"),            # exact SASS
    ((8, 9), ["sm_80", "sm_86"], "sm_86"),                          # highest compatible minor
    ((8, 6), ["sm_86", "sm_80"], "sm_86"),
    ((8, 0), ["compute_80", "sm_86", "sm_80"], "sm_80"),            # SASS before PTX
    ((9, 0), ["sm_90a"], "sm_90a"),                                 # 'a': exact only
    ((9, 0), ["sm_90", "sm_90a"], "sm_90a"),                        # 'a' preferred when exact
    ((9, 0), ["sm_80", "compute_80"], "compute_80"),                # PTX JIT across majors
    ((9, 0), ["compute_75", "compute_80", "sm_86"], "compute_80"),  # newest usable PTX
    ((8, 6), ["compute_86", "compute_90"], "compute_86"),
    ((10, 3), ["sm_100f", "sm_100"], "sm_100f"),                    # 'f': same major, minor <=
    ((10, 3), ["sm_100a", "compute_100"], "compute_100"),           # never across 'a'
    ((12, 1), ["sm_120", "sm_100"], "sm_120"),                      # three-digit arches
    ((7, 5), ["sm_75", "sm_80", "compute_75"], "sm_75"),
]
NO_MATCH = [
    ((9, 0), ["sm_80"]),                    # SASS never crosses a major
    ((8, 0), ["compute_90"]),               # PTX newer than the device
    ((8, 0), ["sm_86"]),                    # SASS of a higher minor
    ((9, 1), ["sm_90a", "compute_90a"]),    # 'a' runs on exactly 9.0
    ((12, 0), ["sm_100f", "compute_100f"]), # 'f' stays in its family
    ((8, 0), []),
]


def select_index(arches: list[str], major: int, minor: int) -> int:
    names = [ffi.new("char[]", a.encode()) for a in arches]
    out = ffi.new("int32_t*")
    status = lib.mp_cuda_select_variant(ffi.new("const char*[]", names) if names else ffi.NULL,
                                        len(arches), major, minor, out)
    if status != 0:
        raise error_from_status(status)
    return out[0]


def select(arches: list[str], major: int, minor: int) -> str:
    return arches[select_index(arches, major, minor)]


@pytest.mark.parametrize(("cc", "arches", "expected"), SELECTION)
def test_selection_rule(cc, arches, expected):
    assert select(arches, *cc) == expected


@pytest.mark.parametrize(("cc", "arches"), NO_MATCH)
def test_selection_rule_refusals_name_the_device_and_every_variant(cc, arches):
    with pytest.raises(modpack.UnavailableError) as info:
        select(arches, *cc)
    message = str(info.value)
    assert f"compute capability {cc[0]}.{cc[1]}" in message and "no binary for this GPU" in message
    for arch in arches:
        assert arch in message


def test_selection_rule_ties_keep_the_earlier_variant():
    assert select_index(["compute_80", "sm_80", "sm_86", "sm_80"], 8, 0) == 1
    assert select_index(["sm_80", "sm_86", "sm_86"], 8, 9) == 1


def test_selection_rule_refuses_bad_names():
    with pytest.raises(modpack.ArgumentError, match="'sm_8' is not a CUDA architecture"):
        select(["sm_80", "sm_8"], 8, 0)


# ---- errors without a GPU, for real --------------------------------------------------------------


NO_GPU_PROGRAM = r"""
import sys, numpy as np, modpack
lib = modpack.load_module(sys.argv[1])  # loading never needs the driver
cuda = lib.imported_modules[0]
a = np.ones(4, np.float32)
attempts = {
    "device_count": lambda: modpack.device_count("cuda"),
    "array": lambda: modpack.array(a, device="cuda:0"),
    "empty": lambda: modpack.empty(4, "float32", device="cuda:0"),
    "kernel": lambda: cuda["vadd"](a, a, a, 4, 1, 1, 1, 4, 1, 1),
    "host": lambda: lib["vadd_host"](a, a, a),
}
for name, attempt in attempts.items():
    try:
        attempt()
        print(name, "-> no error")
    except modpack.UnavailableError as e:
        print(name, "->", e)
print("count", modpack.device_count("cuda"))
"""


@pytest.fixture(scope="module")
def host_library(tmp_path_factory) -> Path:
    """Host code calling `vadd` through the module context; the kernel is PTX text."""
    functions = {"vadd": ["float32*", "float32*", "float32*", "int32"]}
    return export(tmp_path_factory.mktemp("host"),
                  modpack.cuda_module(binaries={"ptx": VADD_PTX}, functions=functions),
                  host_code=HOST)


def test_no_driver_errors_name_the_fix(host_library):
    proc = child(NO_GPU_PROGRAM, str(host_library),
                 MODPACK_CUDA_LIBRARY="/nonexistent/libcuda.so.1")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines.pop() == "count 0"  # no driver: 0 devices, as users count them
    assert [line.split(" ->")[0] for line in lines] == [
        "device_count", "array", "empty", "kernel", "host"]
    assert lines[0] == "device_count -> no error"
    for line in lines[1:]:  # every use, the host -> device call included, says the same
        assert "-> no NVIDIA driver: /nonexistent/libcuda.so.1 not found" in line
        assert "install the NVIDIA driver" in line


def _driver_installed() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_driver_installed() or "MODPACK_CUDA_LIBRARY" in os.environ,
                    reason="this machine has an NVIDIA driver (libcuda.so.1)")
def test_default_driver_path_is_libcuda_so_1():
    with pytest.raises(modpack.UnavailableError, match=r"no NVIDIA driver: libcuda\.so\.1 not "
                                                       r"found.*install the NVIDIA driver"):
        modpack.array(np.zeros(3, np.float32), device="cuda:0")


def test_driver_without_a_device(host_library, stub_driver):
    proc = child(NO_GPU_PROGRAM, str(host_library), MODPACK_CUDA_LIBRARY=str(stub_driver))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines.pop() == "count 0" and lines[0] == "device_count -> no error"
    assert len(lines) == 5
    for line in lines[1:]:
        assert "driver present but no CUDA device" in line
        assert "CUDA_ERROR_NO_DEVICE" in line and "driver for CUDA 12.4" in line


def test_stub_library_is_not_taken_for_a_driver(host_library, stub_driver):
    proc = child(NO_GPU_PROGRAM, str(host_library), MODPACK_CUDA_LIBRARY=str(stub_driver),
                 STUB_CUINIT_RESULT="34")
    assert proc.returncode == 0, proc.stderr
    assert "stub library, not the driver" in proc.stdout
    assert "CUDA_ERROR_STUB_LIBRARY" in proc.stdout


REFUSED_PROGRAM = r"""
import sys, modpack
print(modpack.device_count("cuda"), modpack.device_name("cuda:0"))
noop = modpack.load_module(sys.argv[1]).imported_modules[0]["noop"]
try:
    noop(1, 1, 1, 1, 1, 1, 1)  # scalars only: no device memory needed
except modpack.UnavailableError as e:
    print("Unavailable:", e)
"""


def refused(library: Path, stub: Path, log: Path, **env: str) -> str:
    proc = child(REFUSED_PROGRAM, str(library), MODPACK_CUDA_LIBRARY=str(stub),
                 STUB_CUINIT_RESULT="0", STUB_LOG=str(log), **env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_refused_images_fall_back_in_rule_order_then_name_the_fix(bins, stub_driver, tmp):
    path = export(tmp, modpack.cuda_module(binaries=bins))
    log = tmp / "loads.log"
    out = refused(path, stub_driver, log, STUB_CC="9.0")
    assert out.startswith("1 CUDA 0: Stub GPU (compute capability 9.0, driver for CUDA 12.4)")
    # 9.0: exact SASS (sm_90a, then the fatbin for its sm_90), then PTX compute_80; the sm_80
    # cubin never (SASS does not cross majors), the fatbin only once. The PTX goes to the
    # driver's linker (the kernel cache keeps the cubin it makes), which refuses it as
    # cuModuleLoadData would.
    assert log.read_text().splitlines() == ["cubin sm_90", "fatbin", "link ptx sm_80"]
    assert ("Unavailable: no binary for this GPU: CUDA device 0 (compute capability 9.0) cannot "
            "run the sm_90a cubin variant, CUDA_ERROR_NO_BINARY_FOR_GPU") in out
    assert ("variants: sm_80 (cubin), sm_90a (cubin), compute_80 (ptx, PTX ISA "
            in out and "sm_80+sm_90+compute_90 (fatbin)" in out)
    assert ("; then the sm_90 fatbin variant was refused too: CUDA_ERROR_NO_BINARY_FOR_GPU; "
            "then the compute_80 ptx variant was refused too: CUDA_ERROR_UNSUPPORTED_PTX_VERSION "
            "(PTX newer than the driver)") in out


def test_ptx_newer_than_the_driver(bins, stub_driver, tmp):
    path = export(tmp, modpack.cuda_module(binaries={"ptx": bins["ptx"]}))
    out = refused(path, stub_driver, tmp / "loads.log", STUB_CC="8.6")
    isa = re.search(rb"\.version (\S+)", bins["ptx"])[1].decode()
    assert (f"Unavailable: PTX newer than the driver: the compute_80 PTX variant (PTX ISA {isa}) "
            "was made by a newer CUDA toolkit than this driver (CUDA 12.4) can compile") in out
    assert "update the NVIDIA driver, or add SASS for this GPU (target sm_86)" in out


def test_no_usable_variant_is_refused_before_the_driver_sees_it(bins, stub_driver, tmp):
    path = export(tmp, modpack.cuda_module(binaries={"sm_80": bins["sm_80"],
                                                     "sm_90a": bins["sm_90a"]},
                                           functions={"noop": ["int32"]}))
    log = tmp / "loads.log"
    out = refused(path, stub_driver, log, STUB_CC="7.5")
    assert not log.exists()
    assert ("Unavailable: no binary for this GPU: CUDA device 0 has compute capability 7.5 and "
            "no variant of this CUDA module runs on it (variants: sm_80 (cubin), sm_90a (cubin)"
            ) in out


def test_argument_errors_need_no_driver(host_library):
    cuda = modpack.load_module(host_library).imported_modules[0]
    vadd = cuda["vadd"]
    a = np.ones(8, np.float32)
    with pytest.raises(modpack.ArgumentError, match=r"expected 10 arguments \(4 kernel "
                                                    r"arguments \+ 6 launch dimensions\), got 4"):
        vadd(a, a, a, 8)
    with pytest.raises(modpack.ArgumentError, match="argument 1 must have dtype float32, got "
                                                    "float64"):
        vadd(a, a.astype(np.float64), a, 8, 1, 1, 1, 8, 1, 1)
    with pytest.raises(modpack.ArgumentError, match="argument 3 must be an integer"):
        vadd(a, a, a, 8.5, 1, 1, 1, 8, 1, 1)
    with pytest.raises(modpack.ArgumentError, match="block dimensions"):
        vadd(a, a, a, 8, 1, 1, 1, 0, 1, 1)
    with pytest.raises(modpack.ArgumentError, match=r"launch argument 4 \(blockIdx.x\)"):
        vadd(a, a, a, 8, -1, 1, 1, 8, 1, 1)
    with pytest.raises(modpack.ArgumentError, match="not compact"):
        vadd(a[::2], a[::2], a[::2], 4, 1, 1, 1, 4, 1, 1)


LAUNCH_PROGRAM = r"""
import sys, modpack
step = modpack.load_module(sys.argv[1]).get_function("k/step<128>", query_imports=True)
step(7, 3)  # n, then grid x: the NULL pointer and the rest of the launch are in the record
"""


@needs_nvcc
def test_launch_passes_symbol_null_pointer_and_fixed_values(stub_driver, tmp):
    """What reaches the driver, recorded by the stub: the lowered symbol, NULL for the hidden
    pointer, the block size and shared memory the record fixes."""
    source = "template <int B> __global__ void step(int n, int* s) { if (s) s[0] = n * B; }"
    spec = {"args": ["int32", "null void*"], "launch": ["blockIdx.x"],
            "fixed": {"threadIdx.x": 128, "dyn_shared_memory": 4096}}
    module = modpack.cuda_module(source, targets=["sm_80"], compiler="nvcc", name="k",
                                 name_expressions=["step<128>"], functions={"step<128>": spec})
    log = tmp / "driver.log"
    proc = child(LAUNCH_PROGRAM, str(export(tmp, module)), MODPACK_CUDA_LIBRARY=str(stub_driver),
                 STUB_CUINIT_RESULT="0", STUB_CC="8.0", STUB_ACCEPT="1", STUB_PARAMS="2",
                 STUB_LOG=str(log))
    assert proc.returncode == 0, proc.stderr
    assert log.read_text().splitlines() == [
        "cubin sm_80", "function _Z4stepILi128EEviPi",
        "launch grid 3 1 1 block 128 1 1 shared 4096 params 7 0"]


# ---- the example ---------------------------------------------------------------------------------


def _example_compiler() -> str:
    return "nvrtc" if _nvrtc_reason() is None else "nvcc"


@pytest.fixture(scope="module")
def example_library(tmp_path_factory) -> Path:
    if _nvrtc_reason() is not None and shutil.which("nvcc") is None:
        pytest.skip("neither NVRTC (pip install modpack[cuda]) nor nvcc is installed")
    path = tmp_path_factory.mktemp("example") / "deploy.so"
    run(sys.executable, ROOT / "examples" / "cuda_vadd" / "build_and_run.py", "build",
        "--compiler", _example_compiler(), path)
    return path


def test_example_from_python(tmp):
    if _nvrtc_reason() is not None and shutil.which("nvcc") is None:
        pytest.skip("neither NVRTC (pip install modpack[cuda]) nor nvcc is installed")
    proc = subprocess.run(
        [sys.executable, ROOT / "examples" / "cuda_vadd" / "build_and_run.py", "--compiler",
         _example_compiler(), "--targets", "sm_80,sm_90,compute_75", tmp / "deploy.so"],
        capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert "loaded " in proc.stdout and "variant compute_75: ptx" in proc.stdout
    if GPU_COUNT:
        assert proc.returncode == 0 and "cuda_vadd (Python): OK" in proc.stdout, proc.stdout
    else:
        assert proc.returncode == 77, proc.stdout + proc.stderr
        assert "cuda_vadd (Python): cannot launch here: no NVIDIA driver" in proc.stdout


def test_example_from_c(tmp, runtime_prefix, example_library):
    example = ROOT / "examples" / "cuda_vadd"
    build = tmp / "build"
    run("cmake", "-S", example, "-B", build, f"-DCMAKE_PREFIX_PATH={runtime_prefix}")
    run("cmake", "--build", build)
    proc = subprocess.run([build / "cuda_vadd", example_library], capture_output=True,
                          text=True, timeout=120)
    assert '"variants": [{"arch": "sm_75", "kind": "cubin"' in proc.stdout, proc.stdout
    if GPU_COUNT:
        assert proc.returncode == 0 and "cuda_vadd (C): OK, 4096 elements match" in proc.stdout
    else:
        assert proc.returncode == 77, proc.stdout + proc.stderr
        assert "cuda_vadd (C): cannot launch here: no NVIDIA driver" in proc.stdout


# ---- launches (need a GPU) -----------------------------------------------------------------------


def device_arch() -> str:
    """sm_XY of cuda:0, from its name ("... (compute capability 8.6, ...)")."""
    m = re.search(r"compute capability (\d+)\.(\d+)", modpack.device_name("cuda:0"))
    assert m, modpack.device_name("cuda:0")
    return f"sm_{m[1]}{m[2]}"


@pytest.fixture(scope="module")
def gpu_library(tmp_path_factory) -> modpack.Module:
    """KERNELS with SASS for this GPU plus PTX, and the host code, loaded."""
    if GPU_COUNT == 0:
        pytest.skip(NO_GPU)
    if int(device_arch()[3:]) < 75:
        pytest.skip(f"{device_arch()} is older than CUDA 13 supports (sm_75)")
    compiler = _example_compiler()
    module = modpack.cuda_module(KERNELS, targets=[device_arch(), "compute_75"],
                                 compiler=compiler)
    return modpack.load_module(export(tmp_path_factory.mktemp("gpu"), module, host_code=HOST))


@needs_gpu
def test_launch_from_python(gpu_library):
    n = 1000
    a, b = np.arange(n, dtype=np.float32), np.full(n, 2, dtype=np.float32)
    da, db = modpack.array(a, device="cuda:0"), modpack.array(b, device="cuda:0")
    out = modpack.empty(n, "float32", device="cuda:0")
    assert out.device == "cuda:0" and out.__dlpack_device__() == (2, 0)
    cuda = gpu_library.imported_modules[0]
    cuda["vadd"](da, db, out, n, (n + 255) // 256, 1, 1, 256, 1, 1)
    assert np.array_equal(out.numpy(), a + b)
    x = modpack.array(np.ones(n), device="cuda:0")
    y = modpack.array(np.arange(n, dtype=np.float64), device="cuda:0")
    cuda["axpy"](0.5, x, y, n, 4, 1, 1, 256, 1, 1)
    assert np.array_equal(y.numpy(), np.arange(n) + 0.5)
    raw = modpack.empty(n, "int32", device="cuda:0")  # void*: any dtype
    cuda["fill"](raw, 1, n * 4, (n * 4 + 255) // 256, 1, 1, 256, 1, 1)
    assert (raw.numpy() == 0x01010101).all()


@needs_gpu
def test_launch_from_host_code(gpu_library):
    n = 4097
    a = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    da = modpack.array(a, device="cuda:0")
    out = modpack.empty(n, "float32", device="cuda:0")
    gpu_library["vadd_host"](da, da, out)
    assert np.array_equal(out.numpy(), 2 * a)
    with pytest.raises(modpack.ArgumentError, match="not on a CUDA device"):
        gpu_library["vadd_host"](a, a, a)


@needs_gpu
def test_cuda_arrays_through_dlpack(gpu_library):
    class Foreign:  # any DLPack producer of CUDA memory
        def __init__(self, array):
            self.array = array

        def __dlpack__(self, **kwargs):
            return self.array.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.array.__dlpack_device__()

    n = 64
    a = modpack.array(np.arange(n, dtype=np.float32), device="cuda:0")
    out = modpack.empty(n, "float32", device="cuda:0")
    gpu_library.imported_modules[0]["vadd"](Foreign(a), Foreign(a), Foreign(out), n,
                                            1, 1, 1, 64, 1, 1)
    assert np.array_equal(out.numpy(), 2 * np.arange(n, dtype=np.float32))


@needs_gpu
def test_ptx_only_module_runs_through_the_jit(tmp):
    module = modpack.cuda_module(KERNELS, targets=["compute_75"], compiler=_example_compiler())
    cuda = modpack.load_module(export(tmp, module)).imported_modules[0]
    n = 300
    a = modpack.array(np.ones(n, np.float32), device="cuda:0")
    out = modpack.empty(n, "float32", device="cuda:0")
    cuda["vadd"](a, a, out, n, 2, 1, 1, 256, 1, 1)
    assert np.array_equal(out.numpy(), np.full(n, 2, np.float32))


@needs_gpu
def test_no_binary_for_this_gpu_names_the_device(tmp):
    arch = device_arch()
    other = "sm_75" if not arch.startswith("sm_7") else "sm_90"
    module = modpack.cuda_module(KERNELS, targets=[other], compiler=_example_compiler())
    cuda = modpack.load_module(export(tmp, module)).imported_modules[0]
    a = modpack.empty(4, "float32", device="cuda:0")
    with pytest.raises(modpack.UnavailableError, match=rf"no binary for this GPU.*compute "
                                                       rf"capability {arch[3:-1]}\.{arch[-1]}"
                                                       rf".*{other} \(cubin\)"):
        cuda["vadd"](a, a, a, 4, 1, 1, 1, 4, 1, 1)


@needs_gpu
def test_dynamic_shared_memory_above_48k(tmp):
    module = modpack.cuda_module(SHARED, targets=[device_arch()], functions=SHARED_FUNCTIONS,
                                 compiler=_example_compiler())
    reverse = modpack.load_module(export(tmp, module)).imported_modules[0]["reverse"]
    n = 256
    data = np.arange(n, dtype=np.int32)
    src, out = modpack.array(data, device="cuda:0"), modpack.empty(n, "int32", device="cuda:0")
    reverse(src, out, n, 1, n, 1024)
    assert np.array_equal(out.numpy(), data[::-1])
    reverse(src, out, n, 1, n, 64 * 1024)  # opts in through cuFuncSetAttribute
    assert np.array_equal(out.numpy(), data[::-1])


@needs_gpu
def test_template_kernel_with_a_fixed_block_and_a_null_pointer(tmp):
    """A name expression, a block size fixed by the record (the call passes the grid only)
    and None for a pointer the kernel checks."""
    source = TEMPLATES + r"""
    template <int B> __global__ void axpy(float* y, const float* x, const float* bias, int n) {
      int i = blockIdx.x * B + threadIdx.x;
      if (i < n) y[i] += 2.0f * x[i] + (bias ? bias[i] : 0.0f);
    }"""
    spec = {"args": ["float32*", "float32*", "float32*", "int32"], "launch": ["blockIdx.x"],
            "fixed": {"threadIdx.x": 128}}
    module = modpack.cuda_module(source, targets=[device_arch()], compiler=_example_compiler(),
                                 name_expressions=["axpy<128>"], functions={"axpy<128>": spec})
    axpy = modpack.load_module(export(tmp, module)).imported_modules[0]["axpy<128>"]
    n = 1000
    x = np.arange(n, dtype=np.float32)
    y = modpack.array(np.ones(n, np.float32), device="cuda:0")
    axpy(y, modpack.array(x, device="cuda:0"), None, n, (n + 127) // 128)
    assert np.array_equal(y.numpy(), 1 + 2 * x)


@needs_gpu
def test_concurrent_first_launches(tmp):
    module = modpack.cuda_module(KERNELS, targets=[device_arch()], compiler=_example_compiler())
    vadd = modpack.load_module(export(tmp, module)).imported_modules[0]["vadd"]
    n = 512
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            a = modpack.array(np.full(n, k, np.float32), device="cuda:0")
            out = modpack.empty(n, "float32", device="cuda:0")
            for _ in range(20):
                vadd(a, a, out, n, 2, 1, 1, 256, 1, 1)
            assert np.array_equal(out.numpy(), np.full(n, 2 * k, np.float32))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_variant_dataclass_joins_fatbin_arches():
    assert CUDAVariant("fatbin", ("sm_80", "compute_90"), b"").arch == "sm_80+compute_90"


def test_current_stream_is_per_thread_and_per_device():
    """Kernels launch on the calling thread's current stream (set like tvm-ffi's env stream);
    the bookkeeping needs no driver, the launch on it needs a GPU."""
    import threading

    assert modpack.get_stream("cuda:0") is None
    assert modpack.set_stream("cuda:0", 0x1234) is None
    assert modpack.get_stream("cuda:0") == 0x1234 and modpack.get_stream("cuda:1") is None
    seen = []
    thread = threading.Thread(target=lambda: seen.append(modpack.get_stream("cuda:0")))
    thread.start()
    thread.join()
    assert seen == [None]
    assert modpack.set_stream("cuda:0", None) == 0x1234
    assert modpack.get_stream("cuda:0") is None
