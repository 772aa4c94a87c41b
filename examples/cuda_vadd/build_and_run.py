"""CUDA end to end: host C code calls a CUDA kernel through the module context, both in one
deploy.so, built for several GPU architectures.

    python build_and_run.py build deploy.so   # compile (NVRTC or nvcc), export host + CUDA
    python build_and_run.py run deploy.so     # load, show the variants, run on cuda:0 if any
    python build_and_run.py deploy.so         # both, the run in a fresh process

Options (build): ``--compiler nvrtc|nvcc`` (default: NVRTC when cuda-python is installed,
else nvcc) and ``--targets sm_80,sm_90,compute_80``.

Building needs no GPU. Running loads the library anywhere; the launch needs an NVIDIA GPU and
driver. Without one, `run` prints the runtime's error, which names what is missing, and exits
with status 77 ("skipped"): 0 means the result matched numpy on a GPU.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import modpack

SKIPPED = 77
TARGETS = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "compute_75")

KERNEL = r"""
extern "C" __global__ void vadd(const float* a, const float* b, float* out, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}
"""

HOST = r"""
#include "modpack/backend.h"

/* vadd_host(a, b, out): out = a + b on the arrays' CUDA device, 256 threads a block. */
MP_EXPORT_PACKED(vadd_host) {
  (void)self;
  static void* vadd; /* the handle stays valid while the library is loaded */
  mp_status_t s = mp_backend_check_args(
      "vadd_host", "a: float32[n] cuda, b: float32[n] cuda, out: float32[n] cuda", args, num_args);
  if (s != MP_OK) return s;
  if (!vadd && (s = mp_backend_get_function("vadd", &vadd)) != MP_OK) return s;
  int64_t n = args[0].v_tensor->shape[0];
  /* Kernel arguments, then grid x, y, z and block x, y, z. */
  mp_value_t kernel_args[] = {args[0], args[1], args[2], mp_int(n),
                              mp_int((n + 255) / 256), mp_int(1), mp_int(1),
                              mp_int(256), mp_int(1), mp_int(1)};
  return mp_backend_call(vadd, kernel_args, 10, out_ret);
}
"""


def default_compiler() -> str:
    try:
        from cuda.bindings import nvrtc  # noqa: F401
    except ImportError:
        return "nvcc"
    return "nvrtc"


def build(out: Path, compiler: str | None = None, targets: list[str] | None = None) -> Path:
    compiler = compiler or default_compiler()
    started = time.perf_counter()
    kernels = modpack.cuda_module(KERNEL, targets=list(targets or TARGETS), compiler=compiler)
    host = modpack.csource_module(HOST)
    host.import_module(kernels)
    host.export_library(out)
    print(f"built {out} with {compiler} in {time.perf_counter() - started:.1f} s: "
          + ", ".join(f"{v.arch} ({v.kind}, {len(v.data)} B)" for v in kernels.variants))
    return out


def run(path: Path, n: int = 1 << 20) -> int:
    lib = modpack.load_module(path)  # works without a GPU: nothing touches the driver yet
    (cuda,) = [m for m in lib.imported_modules if m.type_key == "cuda"]
    print(f"loaded {path}: host functions + a cuda module")
    from modpack import inspect_library

    for m in inspect_library(path)["modules"]:
        for v in (m.get("contents") or {}).get("variants", []):
            print(f"  variant {v['arch']}: {v['kind']}, {v['size']} bytes")
    try:
        count = modpack.device_count("cuda")
        device = modpack.device_name("cuda:0")
    except modpack.UnavailableError as exc:
        print(f"cuda_vadd (Python): cannot launch here: {exc}")
        return SKIPPED
    print(f"{count} CUDA device(s); using {device}")

    rng = np.random.default_rng(0)
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    da, db = modpack.array(a, device="cuda:0"), modpack.array(b, device="cuda:0")
    out = modpack.empty(n, "float32", device="cuda:0")
    started = time.perf_counter()
    lib["vadd_host"](da, db, out)  # host code -> CUDA kernel (first call loads the module)
    modpack.synchronize("cuda:0")
    first = time.perf_counter() - started
    np.testing.assert_array_equal(out.numpy(), a + b)
    # The kernel directly from Python: arguments, then grid and block dimensions.
    out2 = modpack.empty(n, "float32", device="cuda:0")
    cuda["vadd"](da, db, out2, n, (n + 127) // 128, 1, 1, 128, 1, 1)
    np.testing.assert_array_equal(out2.numpy(), a + b)
    print(f"first call (module load + launch): {first * 1e3:.1f} ms")
    print(f"cuda_vadd (Python): OK, {n} elements match numpy")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", nargs="?", choices=("build", "run"), help="one step only")
    parser.add_argument("library", type=Path)
    parser.add_argument("--compiler", choices=("nvrtc", "nvcc"))
    parser.add_argument("--targets", help="comma-separated, e.g. sm_80,sm_90,compute_80")
    args = parser.parse_intermixed_args(argv)
    targets = args.targets.split(",") if args.targets else None
    if args.step == "build":
        build(args.library, args.compiler, targets)
        return 0
    if args.step == "run":
        return run(args.library)
    build(args.library, args.compiler, targets)
    # Run in a fresh process, as a deployment would: nothing from the build is reused.
    return subprocess.run([sys.executable, __file__, "run", str(args.library)]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
