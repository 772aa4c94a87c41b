"""Vulkan end to end: host C code runs a pipeline of two Vulkan compute kernels (GLSL compiled to
SPIR-V at export, their arguments read from the SPIR-V by reflection) with an intermediate in a
workspace and weights uploaded to the device once, all in one deploy.so.

    python pipeline.py build deploy.so   # export host + Vulkan shaders + const weights
    python pipeline.py run deploy.so     # load (fresh process), run on vulkan:0, check vs numpy

`python pipeline.py deploy.so` does both, running the second step in a fresh process.
The pipeline computes out = (a * scale + b) * w, with scale and w from a const module.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import modpack

N = 4096  # the weights' length: the pipeline's arrays have this many elements

AXPB = r"""
#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Params { float scale; uint n; } p;
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i < p.n) y[i] = a[i] * p.scale + b[i];
}
"""

MUL = r"""
#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Params { uint n; } p;
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i < p.n) y[i] = x[i] * w[i];
}
"""

HOST = r"""
#include "modpack/backend.h"

/* pipeline(a, b, out): out = (a * scale + b) * w on the arrays' Vulkan device. The intermediate
 * lives in a workspace; w is uploaded to the device the first time and kept there. */
MP_EXPORT_PACKED(pipeline) {
  (void)self; (void)out_ret;
  static void* axpb; /* handles stay valid while the library is loaded */
  static void* mul;
  mp_status_t s = mp_backend_check_args(
      "pipeline", "a: float32[n] vulkan, b: float32[n] vulkan, out: float32[n] vulkan", args,
      num_args);
  if (s != MP_OK) return s;
  if (!axpb && (s = mp_backend_get_function("axpb", &axpb)) != MP_OK) return s;
  if (!mul && (s = mp_backend_get_function("mul", &mul)) != MP_OK) return s;
  const DLTensor *scale, *w;
  DLDevice dev = args[0].v_tensor->device;
  if ((s = mp_backend_get_array("scale", &scale)) != MP_OK) return s;
  if ((s = mp_backend_get_array_on("w", dev, &w)) != MP_OK) return s;
  int64_t n = args[0].v_tensor->shape[0];
  if (w->shape[0] != n)
    return mp_backend_errorf(MP_ERR_INVALID_ARGUMENT, "pipeline: arrays of %lld elements, but "
                             "the weights have %lld", (long long)n, (long long)w->shape[0]);
  void* scratch;
  if ((s = mp_backend_alloc_workspace(dev, (uint64_t)n * 4, &scratch)) != MP_OK) return s;
  int64_t shape[1] = {n};
  DLTensor tmp = {scratch, dev, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  int64_t groups = (n + 63) / 64; /* the shaders' workgroups are 64 wide */
  /* Kernel arguments (buffers, then push constants), then workgroup counts x, y, z. */
  mp_value_t first[] = {args[0], args[1], mp_tensor(&tmp),
                        mp_float(((const float*)scale->data)[0]), mp_int(n),
                        mp_int(groups), mp_int(1), mp_int(1)};
  mp_value_t second[] = {mp_tensor(&tmp), mp_tensor((DLTensor*)w), args[2], mp_int(n),
                         mp_int(groups), mp_int(1), mp_int(1)};
  mp_value_t ret;
  s = mp_backend_call(axpb, first, 8, &ret);
  if (s == MP_OK) s = mp_backend_call(mul, second, 7, &ret);
  mp_backend_free_workspace(dev, scratch);
  return s;
}
"""

SCALE = np.array([1.5], dtype=np.float32)
W = np.linspace(-1.0, 1.0, N, dtype=np.float32)


def build(path: Path) -> Path:
    host = modpack.csource_module(HOST)
    host.import_module(modpack.vulkan_module({"axpb": AXPB, "mul": MUL}))
    host.import_module(modpack.const_module({"scale": SCALE, "w": W}))
    return host.export_library(path)


def run(path: Path) -> None:
    lib = modpack.load_module(path)
    rng = np.random.default_rng(0)
    a_host = rng.standard_normal(N).astype(np.float32)
    b_host = rng.standard_normal(N).astype(np.float32)
    a = modpack.array(a_host, device="vulkan:0")
    b = modpack.array(b_host, device="vulkan:0")
    out = modpack.empty(N, "float32", device="vulkan:0")
    pipeline = lib["pipeline"]

    t0 = time.perf_counter()
    pipeline(a, b, out)  # the first call makes both pipelines and uploads w
    first = time.perf_counter() - t0
    times = []
    for _ in range(50):
        t0 = time.perf_counter()
        pipeline(a, b, out)
        times.append(time.perf_counter() - t0)
    result = out.numpy()
    expected = (a_host * SCALE[0] + b_host) * W
    assert np.allclose(result, expected, rtol=1e-5, atol=1e-6), "Vulkan result differs from numpy"
    print(f"device: {modpack.device_name('vulkan:0')}")
    print(f"n = {N}: first call (device, pipelines, weight upload) {first * 1e3:.1f} ms, "
          f"steady state median {sorted(times)[len(times) // 2] * 1e3:.3f} ms")
    print("vulkan_pipeline (Python): OK, matches numpy")


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] in ("build", "run"):
        (build if sys.argv[1] == "build" else run)(Path(sys.argv[2]))
    elif len(sys.argv) == 2:
        path = build(Path(sys.argv[1]))
        print(f"exported {path}")
        subprocess.run([sys.executable, __file__, "run", str(path)], check=True)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
