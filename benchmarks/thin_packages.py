# ruff: noqa: E501  (the CUDA kernels below are one line each)
"""Thin packages (issue 23): compressed device code and ``modpack slim``, measured.

Prints one table: sizes raw vs stored for a real multi-architecture CUDA set (nvcc: four SASS
architectures and PTX) and real OpenCL kernel files; the decompression speed of the variant a
device loads, on one core; load time of a compressed vs an uncompressed library (fresh
process each, median); the load time of a library with weights with compression off and on;
and ``modpack slim`` of a large library (weights plus code for four architectures, cut to one)
against a plain ``cp`` of a file of the same size, with slim's peak RSS.

    PYTHONPATH=. python benchmarks/thin_packages.py [--large-gib 1] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import modpack
from modpack.format.code_frames import CodeFrames, decode_frame
from modpack.runtime.binding import check, ffi, lib
from modpack.tools.inspection import inspect_library

ROOT = Path(__file__).resolve().parents[1]
CUDA_SOURCE = r"""
#include <cuda_fp16.h>
extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + b[i]; }
extern "C" __global__ void axpy(double alpha, const double* x, double* y, unsigned long long n) {
  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += alpha * x[i]; }
template <int TILE> __device__ void gemm_tile(const float* A, const float* B, float* C, int n) {
  __shared__ float a[TILE][TILE], b[TILE][TILE];
  int r = blockIdx.y * TILE + threadIdx.y, c = blockIdx.x * TILE + threadIdx.x; float acc = 0;
  for (int t = 0; t < n; t += TILE) {
    a[threadIdx.y][threadIdx.x] = A[r * n + t + threadIdx.x];
    b[threadIdx.y][threadIdx.x] = B[(t + threadIdx.y) * n + c]; __syncthreads();
    #pragma unroll
    for (int k = 0; k < TILE; ++k) acc += a[threadIdx.y][k] * b[k][threadIdx.x];
    __syncthreads(); }
  C[r * n + c] = acc; }
extern "C" __global__ void gemm8(const float* A, const float* B, float* C, int n) { gemm_tile<8>(A, B, C, n); }
extern "C" __global__ void gemm16(const float* A, const float* B, float* C, int n) { gemm_tile<16>(A, B, C, n); }
extern "C" __global__ void gemm32(const float* A, const float* B, float* C, int n) { gemm_tile<32>(A, B, C, n); }
extern "C" __global__ void softmax(const float* x, float* y, int n) {
  extern __shared__ float s[]; int i = threadIdx.x; float m = -1e30f;
  for (int j = i; j < n; j += blockDim.x) m = fmaxf(m, x[j]); s[i] = m; __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) { if (i < o) s[i] = fmaxf(s[i], s[i + o]); __syncthreads(); }
  m = s[0]; float sum = 0; for (int j = i; j < n; j += blockDim.x) sum += expf(x[j] - m);
  __syncthreads(); s[i] = sum; __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) { if (i < o) s[i] += s[i + o]; __syncthreads(); }
  for (int j = i; j < n; j += blockDim.x) y[j] = expf(x[j] - m) / s[0]; }
extern "C" __global__ void hscale(__half* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = __float2half(a * __half2float(x[i])); }
"""
ARCHES = ("sm_75", "sm_80", "sm_86", "sm_90")


def median_time(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cuda_binaries(tmp: Path) -> dict[str, bytes]:
    (tmp / "k.cu").write_text(CUDA_SOURCE)

    def nvcc(*args: str) -> bytes:
        subprocess.run(["nvcc", *args, "-o", str(tmp / "o"), str(tmp / "k.cu")], check=True,
                       capture_output=True)
        return (tmp / "o").read_bytes()

    bins = {a: nvcc("-cubin", f"-arch={a}") for a in ARCHES}
    bins["ptx"] = nvcc("-ptx", "-arch=compute_75")
    return bins


def export(tmp: Path, name: str, modules: list[modpack.Module], compress: bool) -> Path:
    host = modpack.csource_module("int placeholder;")
    for m in modules:
        host.import_module(m)
    return host.export_library(tmp / name, compress_code=compress)


def load_seconds(path: Path, runs: int) -> float:
    """load_module in a fresh process (a process reuses a library it has loaded), median."""
    code = ("import sys, time, modpack\nt = time.perf_counter()\n"
            "m = modpack.load_module(sys.argv[1])\nprint(time.perf_counter() - t)\n")
    times = [float(subprocess.run([sys.executable, "-c", code, str(path)], check=True,
                                  capture_output=True, text=True).stdout)
             for _ in range(runs)]
    return statistics.median(times)


def code_sizes(path: Path) -> tuple[int, int]:
    modules = [m for m in inspect_library(path)["modules"] if m.get("code")]
    return (sum(m["code"]["raw_bytes"] for m in modules),
            sum(m["code"]["stored_bytes"] for m in modules))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--large-gib", type=float, default=1.0,
                        help="size of the library slim cuts (4 in the issue; 1 fits small disks)")
    args = parser.parse_args()
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as name:
        tmp = Path(name)
        bins = cuda_binaries(tmp)
        cuda = modpack.cuda_module(binaries=bins)
        plain = export(tmp, "cuda0.so", [cuda], False)
        packed = export(tmp, "cuda1.so", [cuda], True)
        raw, stored = code_sizes(packed)
        rows.append((f"CUDA code, {len(ARCHES)} SASS + PTX (nvcc)",
                     f"raw {raw} B, stored {stored} B: {100 * (1 - stored / raw):.1f} % smaller; "
                     f"library {plain.stat().st_size} -> {packed.stat().st_size} B"))
        sources = [modpack.opencl_module(
            (ROOT / "examples" / "mlp_opencl" / "mlp_kernels.cl").read_text(),
            build_options="-DREAL=float", name="mlp"), modpack.opencl_module(
            (ROOT / "examples" / "opencl_vadd" / "pipeline.py").read_text().split(
                'KERNELS = r"""')[1].split('"""')[0], name="vadd")]
        ocl = export(tmp, "ocl1.so", sources, True)
        raw_o, stored_o = code_sizes(ocl)
        rows.append(("OpenCL source (examples mlp_opencl, opencl_vadd)",
                     f"raw {raw_o} B, stored {stored_o} B: "
                     f"{100 * (1 - stored_o / raw_o):.1f} % smaller"))
        # Decompression of the variant a device loads (the sm_90 cubin), one core: a sample is
        # 200 decodes, the rate the median sample's.
        one = CodeFrames(19)(bins["sm_90"])
        assert decode_frame(one) == bins["sm_90"]
        out = ffi.new("uint8_t[]", len(bins["sm_90"]))
        src = ffi.from_buffer(one)

        def decode_200() -> None:  # the runtime's decode (header, zstd, checksum), as a load
            for _ in range(200):
                check(lib.mp_code_frame_decode(src, len(one), out, len(bins["sm_90"])))

        per_variant = median_time(decode_200, args.runs) / 200
        rows.append(("decode the chosen variant (sm_90 cubin), 1 core",
                     f"{len(bins['sm_90']) / per_variant / 1e6:.0f} MB/s of raw output "
                     f"({len(bins['sm_90'])} B from {len(one)} B in {per_variant * 1e6:.0f} us)"))
        t0, t1 = load_seconds(plain, args.runs), load_seconds(packed, args.runs)
        rows.append(("load_module, CUDA library (fresh process, median)",
                     f"uncompressed {t0 * 1e3:.2f} ms, compressed {t1 * 1e3:.2f} ms "
                     f"(+{(t1 - t0) * 1e3:.2f} ms; decoding sm_90 at first launch: "
                     f"{per_variant * 1e3:.3f} ms)"))
        weights = np.random.default_rng(0).standard_normal(64 << 20).astype(np.float32)
        const = modpack.const_module({"w": weights})
        w0 = export(tmp, "w0.so", [cuda, const], False)
        w1 = export(tmp, "w1.so", [cuda, const], True)
        t0, t1 = load_seconds(w0, args.runs), load_seconds(w1, args.runs)
        rows.append(("load_module, 256 MiB weights + CUDA (checksums on)",
                     f"compression off {t0 * 1e3:.1f} ms, on {t1 * 1e3:.1f} ms "
                     f"(weights stored as is in both: {w0.stat().st_size - w1.stat().st_size} B "
                     "apart, all code)"))
        del weights
        # slim of a large library: weights and four architectures of code.
        total = int(args.large_gib * (1 << 30))
        code_each = total // 8  # code: half the library, a quarter per architecture
        rng = np.random.default_rng(1)
        large_bins = {}
        for arch in ARCHES:
            pad = rng.integers(0, 256, code_each - len(bins[arch]), dtype=np.uint8).tobytes()
            large_bins[arch] = bins[arch] + pad  # a real cubin's header, incompressible bulk
        large = export(tmp, "large.so", [modpack.cuda_module(
            binaries=large_bins, functions={"vadd": ["float32*"] * 3 + ["int32"]}),
            modpack.const_module({"w": np.zeros(total // 2 // 4, dtype=np.float32)})], False)
        del large_bins
        size = large.stat().st_size
        slim_code = ("import sys, time, modpack.tools.slim as s\nt = time.perf_counter()\n"
                     "s.slim_library(sys.argv[1], sys.argv[2], 'sm_90')\n"
                     "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')]\n"
                     "print(time.perf_counter() - t, hwm[0].split()[1])\n")
        out = tmp / "slim.so"
        slim_runs, rss = [], 0
        for _ in range(3):
            out.unlink(missing_ok=True)
            took, peak = subprocess.run([sys.executable, "-c", slim_code, str(large), str(out)],
                                        check=True, capture_output=True,
                                        text=True).stdout.split()
            slim_runs.append(float(took))
            rss = max(rss, int(peak))
        cp_runs = []
        for _ in range(3):
            (tmp / "copy.so").unlink(missing_ok=True)
            start = time.perf_counter()
            subprocess.run(["cp", str(large), str(tmp / "copy.so")], check=True)
            cp_runs.append(time.perf_counter() - start)
        rows.append((f"slim {size / (1 << 30):.2f} GiB (code {4 * code_each >> 20} MiB for 4 "
                     "archs) to sm_90",
                     f"{statistics.median(slim_runs):.2f} s -> {out.stat().st_size >> 20} MiB; "
                     f"cp of the input {statistics.median(cp_runs):.2f} s; slim peak RSS "
                     f"{rss >> 10} MiB"))

    width = max(len(r[0]) for r in rows)
    print(f"{'measure'.ljust(width)}  result")
    print(f"{'-' * width}  {'-' * 60}")
    for label, value in rows:
        print(f"{label.ljust(width)}  {value}")


if __name__ == "__main__":
    shutil.which("nvcc") or sys.exit("needs nvcc (CUDA toolkit)")
    main()
