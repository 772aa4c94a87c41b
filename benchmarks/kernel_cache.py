"""The kernel cache (issue 32): a library's first call in a fresh process, cold and cached.

Prints one Markdown table of medians over fresh processes:

- OpenCL on this machine's driver (PoCL here), with PoCL's own cache off (POCL_KERNEL_CACHE=0,
  so that what a second process skips is modpack's doing): the first call until its result is
  back (the build or the cached binary, the launch, the kernel, the read back; "the call" is
  until the launch returns, the kernel still running), cold (an empty kernel cache), cached (a
  second process over the first one's cache) and with the cache off; and the whole process from
  ``load_module`` to the result.
- CUDA PTX-only, against the stub driver of the tests (tests/data/stub_libcuda.c): its linker
  makes a fake cubin at once, so these rows are modpack's own cost around the driver (the key's
  SHA-256 over the PTX, the entry read and checked), not a GPU's JIT.
- Vulkan on this machine's driver (lavapipe here; the validation layer off): the first call of
  each of two kernels (two pipelines, one of them specialised) until both results are back,
  cold, cached and off, and how many bytes of pipeline cache the driver gave to keep.
- Eight processes started at once on an empty cache: wall time, builds (stores), and whether
  every process computed.

    PYTHONPATH=. python benchmarks/kernel_cache.py [--runs 5] [--only vulkan ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import modpack

ROOT = Path(__file__).resolve().parents[1]

# Two kernels of the kind a library carries: a vector op and a tiled matrix product.
OPENCL_SOURCE = r"""
__kernel void vadd(__global const float* a, __global const float* b, __global float* c, int n) {
  int i = get_global_id(0);
  if (i < n) c[i] = a[i] + b[i];
}
#define TILE 16
__kernel void matmul(__global const float* A, __global const float* B, __global float* C,
                     int n) {
  __local float a[TILE][TILE], b[TILE][TILE];
  int r = get_global_id(1), c = get_global_id(0);
  int lr = get_local_id(1), lc = get_local_id(0);
  float acc = 0.0f;
  for (int t = 0; t < n; t += TILE) {
    a[lr][lc] = A[r * n + t + lc];
    b[lr][lc] = B[(t + lr) * n + c];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = 0; k < TILE; ++k) acc += a[lr][k] * b[k][lc];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  C[r * n + c] = acc;
}
"""

OPENCL_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import modpack
from modpack import kernel_cache_stats
t1 = time.perf_counter()
root = modpack.load_module(sys.argv[1])
vadd = root.get_function("vadd", query_imports=True)
x = np.arange(1024, dtype=np.float32)
a = modpack.array(x, device="opencl:0")
c = modpack.empty(1024, "float32", device="opencl:0")
modpack.synchronize("opencl:0")
t2 = time.perf_counter()
vadd(a, a, c, 1024, 1024, 1, 1, 0, 0, 0)
t3 = time.perf_counter()
modpack.synchronize("opencl:0")
ok = c.numpy().tolist() == (2 * x).tolist()
t4 = time.perf_counter()
print(json.dumps({"ok": ok, "call_ms": (t3 - t2) * 1e3, "first_call_ms": (t4 - t2) * 1e3,
                  "load_to_result_ms": (t4 - t1) * 1e3, **kernel_cache_stats()}))
"""

PTX = """\
.version 7.0
.target sm_80
.address_size 64
.visible .entry tick(
	.param .u32 tick_param_0
)
{
	ret;
}
"""

CUDA_CHILD = r"""
import json, sys, time
import modpack
from modpack import kernel_cache_stats
t1 = time.perf_counter()
root = modpack.load_module(sys.argv[1])
tick = root.get_function("tick", query_imports=True)
t2 = time.perf_counter()
tick(5, 1, 1, 1, 1, 1, 1)
t3 = time.perf_counter()
print(json.dumps({"ok": True, "first_call_ms": (t3 - t2) * 1e3,
                  "load_to_result_ms": (t3 - t1) * 1e3, **kernel_cache_stats()}))
"""


# A vector op and a row softmax whose workgroup size is a specialization constant.
VULKAN_SHADERS = {
    "scale": """#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { float k; uint n; } p;
void main() { uint i = gl_GlobalInvocationID.x; if (i < p.n) y[i] = x[i] * p.k; }
""",
    "softmax": """#version 450
layout(constant_id = 0) const uint BLOCK_SIZE = 32;
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint ncols; } p;
shared float partial[BLOCK_SIZE];
void main() {
  const uint base = gl_WorkGroupID.x * p.ncols, tid = gl_LocalInvocationID.x;
  float m = -1.0 / 0.0;
  for (uint c = tid; c < p.ncols; c += BLOCK_SIZE) m = max(m, x[base + c]);
  partial[tid] = m;
  barrier();
  for (uint s = BLOCK_SIZE / 2; s > 0; s >>= 1) {
    if (tid < s) partial[tid] = max(partial[tid], partial[tid + s]);
    barrier();
  }
  m = partial[0];
  barrier();
  float sum = 0.0;
  for (uint c = tid; c < p.ncols; c += BLOCK_SIZE) sum += exp(x[base + c] - m);
  partial[tid] = sum;
  barrier();
  for (uint s = BLOCK_SIZE / 2; s > 0; s >>= 1) {
    if (tid < s) partial[tid] += partial[tid + s];
    barrier();
  }
  for (uint c = tid; c < p.ncols; c += BLOCK_SIZE) y[base + c] = exp(x[base + c] - m) / partial[0];
}
""",
}

VULKAN_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import modpack
from modpack import kernel_cache_stats
t1 = time.perf_counter()
root = modpack.load_module(sys.argv[1])
scale = root.get_function("scale", query_imports=True)
softmax = root.get_function("softmax", query_imports=True)
x = np.random.default_rng(0).standard_normal((8, 256)).astype(np.float32)
a = modpack.array(x.ravel(), device="vulkan:0")
y = modpack.empty(x.size, "float32", device="vulkan:0")
z = modpack.empty(x.size, "float32", device="vulkan:0")
t2 = time.perf_counter()
scale(a, y, 2.0, x.size, x.size // 64, 1, 1)
softmax(a, z, 256, 8, 1, 1)
ys, zs = y.numpy(), z.numpy().reshape(8, 256)
t3 = time.perf_counter()
e = np.exp(x - x.max(axis=1, keepdims=True))
ok = (ys.tolist() == (2 * x.ravel()).tolist()
      and bool(np.allclose(zs, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)))
print(json.dumps({"ok": ok, "first_call_ms": (t3 - t2) * 1e3,
                  "load_to_result_ms": (t3 - t1) * 1e3, **kernel_cache_stats()}))
"""


def child(code: str, library: Path, env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", code, str(library)], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    result: dict = json.loads(proc.stdout)
    if not result["ok"]:
        raise SystemExit(f"a run computed a wrong result: {result}")
    return result


def median(results: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in results)


def opencl_rows(work: Path, runs: int) -> list[tuple[str, str]]:
    host = modpack.csource_module("int placeholder;")
    host.import_module(modpack.opencl_module(OPENCL_SOURCE))
    library = host.export_library(work / "opencl.so")
    base = {"POCL_KERNEL_CACHE": "0"}
    cold, cached, off = [], [], []
    for i in range(runs):  # interleaved, so that a busy moment falls on every column alike
        cache = work / f"opencl-{i}"
        cold.append(child(OPENCL_CHILD, library, {**base, "MODPACK_KERNEL_CACHE": str(cache)}))
        assert cold[-1]["misses"] == 1 and cold[-1]["stores"] == 1, cold[-1]
        cached.append(child(OPENCL_CHILD, library, {**base, "MODPACK_KERNEL_CACHE": str(cache)}))
        assert cached[-1]["hits"] == 1, cached[-1]
        off.append(child(OPENCL_CHILD, library, {**base, "MODPACK_KERNEL_CACHE": ""}))
    rows = []
    for label, results in (("cold (empty cache: build, store)", cold),
                           ("cached (second process: the entry)", cached),
                           ("cache off", off)):
        rows.append((f"OpenCL first call, {label}",
                     f"{median(results, 'first_call_ms'):.1f} ms, of which the call "
                     f"{median(results, 'call_ms'):.1f} ms (load to result "
                     f"{median(results, 'load_to_result_ms'):.1f} ms)"))
    for key, what in (("first_call_ms", "first call"), ("call_ms", "the call alone")):
        spread = sorted(r[key] for r in cached)
        rows.append((f"OpenCL cached, {what}, every run", ", ".join(f"{v:.1f}" for v in spread)
                     + " ms"))
    return rows


def cuda_rows(work: Path, runs: int) -> list[tuple[str, str]]:
    stub = work / "libcuda.so.1"
    subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC", "-o", str(stub),
                    str(ROOT / "tests" / "data" / "stub_libcuda.c")], check=True)
    host = modpack.csource_module("int placeholder;")
    host.import_module(modpack.cuda_module(binaries={"ptx": PTX.encode()},
                                           functions={"tick": ["int32"]}))
    library = host.export_library(work / "ptx.so")
    base = {"MODPACK_CUDA_LIBRARY": str(stub), "STUB_CUINIT_RESULT": "0", "STUB_CC": "9.0",
            "STUB_ACCEPT": "1"}
    cold, cached = [], []
    for i in range(runs):
        cache = {"MODPACK_KERNEL_CACHE": str(work / f"cuda-{i}")}
        cold.append(child(CUDA_CHILD, library, {**base, **cache}))
        cached.append(child(CUDA_CHILD, library, {**base, **cache}))
        assert cold[-1]["stores"] == 1 and cached[-1]["hits"] == 1, (cold[-1], cached[-1])
    return [("CUDA PTX-only first call (stub driver), cold: link, store",
             f"{median(cold, 'first_call_ms'):.2f} ms"),
            ("CUDA PTX-only first call (stub driver), cached: the stored cubin",
             f"{median(cached, 'first_call_ms'):.2f} ms")]


def vulkan_rows(work: Path, runs: int) -> list[tuple[str, str]]:
    host = modpack.csource_module("int placeholder;")
    host.import_module(modpack.vulkan_module(VULKAN_SHADERS,
                                             specialization={"BLOCK_SIZE": 64}))
    library = host.export_library(work / "vulkan.so")
    base = {"MODPACK_VULKAN_VALIDATION": "0"}
    cold, cached, off = [], [], []
    kept: list[int] = []
    for i in range(runs):  # interleaved, as OpenCL's
        cache = work / f"vulkan-{i}"
        cold.append(child(VULKAN_CHILD, library, {**base, "MODPACK_KERNEL_CACHE": str(cache)}))
        assert cold[-1]["misses"] == 2 and cold[-1]["stores"] == 2, cold[-1]
        cached.append(child(VULKAN_CHILD, library, {**base, "MODPACK_KERNEL_CACHE": str(cache)}))
        assert cached[-1]["hits"] == 2, cached[-1]
        off.append(child(VULKAN_CHILD, library, {**base, "MODPACK_KERNEL_CACHE": ""}))
        kept = sorted(p.stat().st_size - 128 for p in cache.iterdir() if len(p.name) == 64)
    rows = []
    for label, results in (("cold (empty cache: build, store)", cold),
                           ("cached (second process: the entries)", cached),
                           ("cache off", off)):
        rows.append((f"Vulkan first call of two kernels, {label}",
                     f"{median(results, 'first_call_ms'):.1f} ms (load to result "
                     f"{median(results, 'load_to_result_ms'):.1f} ms)"))
    rows.append(("Vulkan pipeline cache the driver gave to keep, per pipeline",
                 " and ".join(f"{n} bytes" for n in kept)))
    return rows


def eight_at_once(work: Path) -> tuple[str, str]:
    host = modpack.csource_module("int placeholder;")
    host.import_module(modpack.opencl_module(OPENCL_SOURCE))
    library = host.export_library(work / "eight.so")
    # PoCL's own cache on, in an empty folder: with it off, processes loading one PoCL binary
    # at once share the folder it names (docs: tests/test_kernel_cache.py).
    env = {k: v for k, v in os.environ.items() if k != "POCL_KERNEL_CACHE"}
    env.update(MODPACK_KERNEL_CACHE=str(work / "eight"), POCL_CACHE_DIR=str(work / "pocl"))
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", OPENCL_CHILD, str(library)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(8)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise SystemExit(err)
        results.append(json.loads(out))
    wall = time.perf_counter() - start
    stores = sum(r["stores"] for r in results)
    hits = sum(r["hits"] for r in results)
    correct = sum(r["ok"] for r in results)
    return ("8 OpenCL processes at once, empty cache",
            f"{wall:.1f} s wall; {stores} build stored, {hits} hits; {correct}/8 correct")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per row")
    parser.add_argument("--only", nargs="+", choices=("opencl", "cuda", "vulkan", "eight"),
                        help="measure only these rows (default: all)")
    args = parser.parse_args()
    only = set(args.only or ("opencl", "cuda", "vulkan", "eight"))
    with tempfile.TemporaryDirectory(prefix="modpack-kernel-cache-") as folder:
        work = Path(folder)
        rows = []
        if "opencl" in only:
            rows += opencl_rows(work, args.runs)
        if "cuda" in only:
            rows += cuda_rows(work, args.runs)
        if "vulkan" in only:
            rows += vulkan_rows(work, args.runs)
        if "eight" in only:
            rows.append(eight_at_once(work))
    print(f"| measure (medians of {args.runs} fresh processes) | result |")
    print("|---|---|")
    for label, value in rows:
        print(f"| {label} | {value} |")


if __name__ == "__main__":
    main()
