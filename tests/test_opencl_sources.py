"""OpenCL sources as real projects write them go in unchanged: element types from build options,
typedefs, function-like macros, a kernel chosen by ``#if``, prototypes, vector types, untyped
``void*``/``char*`` buffers, ``__local`` reductions. Each is read without ``functions=``, built
with its own build options and run on PoCL, checked against numpy. (The kernels are written
here, in those styles.)"""

from __future__ import annotations

import numpy as np
import pytest

import modpack
from modpack.tools.inspection import inspect_library

pytestmark = pytest.mark.skipif(modpack.device_count("opencl") < 1, reason="no OpenCL device")

# A BLAS-style file: the element type and the tile size come from build options, a typedef
# names the element type, a function-like macro from the options does the arithmetic, and the
# kernel is declared before it is defined.
BLAS = r"""
#ifndef REAL
#error "build with -DREAL=<type>"
#endif
typedef REAL real_t;
#define IDX(r, c, ld) ((r) * (ld) + (c))

__kernel void scale_add(__global const real_t* restrict x, __global real_t* restrict y,
                        const real_t alpha, const int n);

/* y = alpha * x + y, an element per work-item */
__kernel void scale_add(__global const real_t* restrict x, __global real_t* restrict y,
                        const real_t alpha, const int n) {
  const int i = get_global_id(0);
  if (i < n) y[i] = FMA(alpha, x[i], y[i]);
}

__kernel __attribute__((reqd_work_group_size(TS, TS, 1)))
void gemm_tiled(const int M, const int N, const int K, __global const real_t* A,
                __global const real_t* B, __global real_t* C) {
  __local real_t As[TS][TS];
  __local real_t Bs[TS][TS];
  const int r = get_local_id(0), c = get_local_id(1);
  const int row = get_group_id(0) * TS + r, col = get_group_id(1) * TS + c;
  real_t acc = 0;
  for (int t = 0; t < (K + TS - 1) / TS; ++t) {
    const int ka = t * TS + c, kb = t * TS + r;
    As[r][c] = (row < M && ka < K) ? A[IDX(row, ka, K)] : 0;
    Bs[r][c] = (kb < K && col < N) ? B[IDX(kb, col, N)] : 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = 0; k < TS; ++k) acc += As[r][k] * Bs[k][c];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (row < M && col < N) C[IDX(row, col, N)] = acc;
}
"""
BLAS_OPTIONS = "-DREAL=float -DTS=8 -DFMA(a,b,c)=((a)*(b)+(c)) -cl-mad-enable"

# One file, several kernels, one chosen with -DKERNEL=n (a vision-library style).
SELECTED = r"""
#if KERNEL == 0
__kernel void brighten(__global uchar* img, const uchar amount, const int n) {
  int i = get_global_id(0);
  if (i < n) img[i] = add_sat(img[i], amount);
}
#elif KERNEL == 1
__kernel void invert(__global uchar* img, const int n) {
  int i = get_global_id(0);
  if (i < n) img[i] = (uchar)255 - img[i];
}
#endif
"""

# Vector types and untyped buffers, as hosts use them: float arrays passed to float4* and to
# char* parameters.
VECTORS = r"""
__kernel void axpy4(__global float4* y, __global const float4* x, const float a, const int n4) {
  int i = get_global_id(0);
  if (i < n4) y[i] = a * x[i] + y[i];
}
__kernel void copy_bytes(__global const char* src, __global char* dst, const int nbytes) {
  int i = get_global_id(0);
  if (i < nbytes) dst[i] = src[i];
}
__kernel void fill_words(__global void* out, const uint value, const int n) {
  int i = get_global_id(0);
  if (i < n) ((__global uint*)out)[i] = value;
}
"""

# Reductions into __local scratch sized by the caller (an LLM-style RMS norm).
REDUCTIONS = r"""
__kernel void partial_sums(__global const float* x, __global float* sums,
                           __local float* scratch, const int n) {
  const int lid = get_local_id(0), gid = get_global_id(0), size = get_local_size(0);
  scratch[lid] = gid < n ? x[gid] : 0.0f;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = size / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] += scratch[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) sums[get_group_id(0)] = scratch[0];
}

__kernel void rms_norm(__global const float* x, __global const float* w, __global float* out,
                       __local float* scratch, const int n, const float eps) {
  const int lid = get_local_id(0), size = get_local_size(0);
  float acc = 0.0f;
  for (int i = lid; i < n; i += size) acc += x[i] * x[i];
  scratch[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = size / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] += scratch[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float inv = rsqrt(scratch[0] / n + eps);
  for (int i = lid; i < n; i += size) out[i] = x[i] * inv * w[i];
}
"""


def dev(x: np.ndarray) -> modpack.Array:
    return modpack.array(x, device="opencl:0")


def load(tmp_path, *modules) -> modpack.LoadedModule:
    host = modpack.csource_module("int host_placeholder;")
    for module in modules:
        host.import_module(module)
    return modpack.load_module(host.export_library(tmp_path / "k.so"))


def test_a_blas_file_with_its_build_options(tmp_path):
    module = modpack.opencl_module(BLAS, build_options=BLAS_OPTIONS)
    assert [f.signature() for f in module.functions] == [
        "scale_add(float32*, float32*, float32, int32)",
        "gemm_tiled(int32, int32, int32, float32*, float32*, float32*)",
    ]
    root = load(tmp_path, module)
    kernels = root.imported_modules[0]
    rng = np.random.default_rng(3)
    x, y = rng.random(1000, np.float32), rng.random(1000, np.float32)
    yd = dev(y)
    kernels["scale_add"](dev(x), yd, 0.5, 1000, 1000, 1, 1, 0, 0, 0)
    np.testing.assert_allclose(yd.numpy(), 0.5 * x + y, rtol=1e-6)
    m, n, k = 20, 12, 30
    a, b = rng.random((m, k), np.float32), rng.random((k, n), np.float32)
    c = modpack.empty((m, n), "float32", device="opencl:0")
    kernels["gemm_tiled"](m, n, k, dev(a), dev(b), c, 24, 16, 1, 8, 8, 1)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-5)
    # The options travel with the source: inspect shows them.
    contents = inspect_library(root.library_path)["modules"][1]["contents"]
    assert contents["build_options"] == BLAS_OPTIONS


def test_without_its_build_options_the_source_says_so():
    with pytest.raises(modpack.CompileError, match="build with -DREAL"):
        modpack.opencl_module(BLAS)


def test_the_kernel_chosen_by_if(tmp_path):
    chosen = modpack.opencl_module(SELECTED, build_options="-DKERNEL=1")
    assert [f.name for f in chosen.functions] == ["invert"]
    other = modpack.opencl_module(SELECTED, build_options="-DKERNEL=0")
    assert [f.signature() for f in other.functions] == ["brighten(uint8*, uint8, int32)"]
    kernels = load(tmp_path, chosen).imported_modules[0]
    img = np.arange(256, dtype=np.uint8)
    d = dev(img)
    kernels["invert"](d, 256, 256, 1, 1, 0, 0, 0)
    assert np.array_equal(d.numpy(), 255 - img)


def test_vector_and_untyped_buffers_take_arrays_as_hosts_pass_them(tmp_path):
    module = modpack.opencl_module(VECTORS)
    assert [f.signature() for f in module.functions] == [
        "axpy4(float32*, float32*, float32, int32)",
        "copy_bytes(void*, void*, int32)",
        "fill_words(void*, uint32, int32)",
    ]
    kernels = load(tmp_path, module).imported_modules[0]
    x, y = np.arange(64, dtype=np.float32), np.ones(64, np.float32)
    yd = dev(y)
    kernels["axpy4"](yd, dev(x), 2.0, 16, 16, 1, 1, 0, 0, 0)  # float32 arrays for float4*
    np.testing.assert_allclose(yd.numpy(), 2 * x + 1)
    src = np.linspace(0, 1, 10, dtype=np.float64)
    out = modpack.empty(10, "float64", device="opencl:0")
    kernels["copy_bytes"](dev(src), out, 80, 80, 1, 1, 0, 0, 0)  # float64 arrays for char*
    assert np.array_equal(out.numpy(), src)
    words = modpack.empty(8, "int32", device="opencl:0")
    kernels["fill_words"](words, 7, 8, 8, 1, 1, 0, 0, 0)  # an int32 array for void*
    assert np.array_equal(words.numpy(), np.full(8, 7))


def test_local_memory_reductions(tmp_path):
    kernels = load(tmp_path, modpack.opencl_module(REDUCTIONS)).imported_modules[0]
    assert kernels.get_function("partial_sums")
    x = np.random.default_rng(5).random(1000, np.float32)
    groups, local = 16, 64
    sums = modpack.empty(groups, "float32", device="opencl:0")
    kernels["partial_sums"](dev(x), sums, modpack.local_memory(local * 4), 1000,
                            groups * local, 1, 1, local, 1, 1)
    np.testing.assert_allclose(sums.numpy().sum(), x.sum(), rtol=1e-4)
    w = np.random.default_rng(6).random(1000, np.float32)
    out = modpack.empty(1000, "float32", device="opencl:0")
    kernels["rms_norm"](dev(x), dev(w), out, modpack.local_memory(local * 4), 1000, 1e-6,
                        local, 1, 1, local, 1, 1)
    expected = x / np.sqrt(np.mean(x * x) + 1e-6) * w
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4)


def test_local_memory_must_be_given_as_a_size(tmp_path):
    kernels = load(tmp_path, modpack.opencl_module(REDUCTIONS)).imported_modules[0]
    x = dev(np.ones(64, np.float32))
    sums = modpack.empty(1, "float32", device="opencl:0")
    with pytest.raises(modpack.ArgumentError, match=r"argument 2 is __local memory.*got int"):
        kernels["partial_sums"](x, sums, 256, 64, 64, 1, 1, 64, 1, 1)
    with pytest.raises(modpack.ArgumentError, match="must be positive"):
        modpack.local_memory(0)


def test_prebuilt_binaries_carry_the_build_options(tmp_path):
    binaries = modpack.opencl_binaries(SELECTED, build_options="-DKERNEL=0")
    module = modpack.opencl_module(SELECTED, binaries=binaries, build_options="-DKERNEL=0")
    kernels = load(tmp_path, module).imported_modules[0]
    img = np.full(100, 250, dtype=np.uint8)
    d = dev(img)
    kernels["brighten"](d, 10, 100, 100, 1, 1, 0, 0, 0)
    assert np.array_equal(d.numpy(), np.full(100, 255))
