"""OpenCL end to end: host C code calls two OpenCL kernels through the module context, with a
weight from a const module, all in one deploy.so.

    python pipeline.py build deploy.so   # export host + OpenCL + const weights
    python pipeline.py run deploy.so     # load (fresh process), run on opencl:0, check vs numpy

`python pipeline.py deploy.so` does both, running the second step in a fresh process.
The pipeline computes out = (a + b) * weights["scale"][0].
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import modpack

KERNELS = r"""
__kernel void vadd(__global const float* a, __global const float* b, __global float* out, int n) {
  int i = get_global_id(0);
  if (i < n) out[i] = a[i] + b[i];
}
__kernel void scale(__global float* x, float factor, int n) {
  int i = get_global_id(0);
  if (i < n) x[i] *= factor;
}
"""

HOST = r"""
#include "modpack/backend.h"

/* pipeline(a, b, out): out = (a + b) * scale, both steps on the arrays' OpenCL device. */
MP_EXPORT_PACKED(pipeline) {
  (void)self; (void)out_ret;
  static void* vadd;   /* handles stay valid while the library is loaded */
  static void* scale;
  mp_status_t s = mp_backend_check_args(
      "pipeline", "a: float32[n] opencl, b: float32[n] opencl, out: float32[n] opencl", args,
      num_args);
  if (s != MP_OK) return s;
  if (!vadd && (s = mp_backend_get_function("vadd", &vadd)) != MP_OK) return s;
  if (!scale && (s = mp_backend_get_function("scale", &scale)) != MP_OK) return s;
  const DLTensor* weights;
  if ((s = mp_backend_get_array("scale", &weights)) != MP_OK) return s;
  int64_t n = args[0].v_tensor->shape[0];
  /* Kernel arguments, then global x, y, z and local x, y, z (0: the driver chooses). */
  mp_value_t add_args[] = {args[0], args[1], args[2], mp_int(n),
                           mp_int(n), mp_int(1), mp_int(1), mp_int(0), mp_int(0), mp_int(0)};
  mp_value_t ret;
  if ((s = mp_backend_call(vadd, add_args, 10, &ret)) != MP_OK) return s;
  float factor = ((const float*)weights->data)[0];
  mp_value_t scale_args[] = {args[2], mp_float(factor), mp_int(n),
                             mp_int(n), mp_int(1), mp_int(1), mp_int(0), mp_int(0), mp_int(0)};
  return mp_backend_call(scale, scale_args, 9, &ret);
}
"""

SCALE = np.array([2.5], dtype=np.float32)


def build(path: Path) -> Path:
    host = modpack.csource_module(HOST)
    host.import_module(modpack.opencl_module(KERNELS))
    host.import_module(modpack.const_module({"scale": SCALE}))
    return host.export_library(path)


def run(path: Path, n: int = 1 << 20) -> None:
    lib = modpack.load_module(path)
    rng = np.random.default_rng(0)
    a_host = rng.standard_normal(n).astype(np.float32)
    b_host = rng.standard_normal(n).astype(np.float32)
    a = modpack.array(a_host, device="opencl:0")
    b = modpack.array(b_host, device="opencl:0")
    out = modpack.empty(n, "float32", device="opencl:0")
    pipeline = lib["pipeline"]

    t0 = time.perf_counter()
    pipeline(a, b, out)
    modpack.synchronize("opencl:0")
    first = time.perf_counter() - t0
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        pipeline(a, b, out)
        modpack.synchronize("opencl:0")
        times.append(time.perf_counter() - t0)
    result = out.numpy()
    expected = (a_host + b_host) * SCALE[0]
    assert np.allclose(result, expected, rtol=1e-6), "OpenCL result differs from numpy"
    print(f"device: {modpack.device_name('opencl:0')}")
    print(f"n = {n}: first call (program build) {first * 1e3:.1f} ms, "
          f"steady state median {sorted(times)[len(times) // 2] * 1e3:.2f} ms")
    print("opencl_vadd (Python): OK, matches numpy")


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
