"""ROCm vadd: build a library whose kernel is compiled here for three AMD GPU target IDs, show
what it holds, ask which code object a few GPUs would get, and launch it where ROCm and a GPU
are.

    python examples/rocm_vadd/build.py deploy.so

Needs clang (with its amdgcn-amd-amdhsa target; Debian's clang has it) and modpack[build]. No
GPU is needed to build, inspect or preflight; the launch at the end needs ROCm's HIP runtime
and an AMD GPU, and otherwise says why it cannot run (exit status 77, "skipped").
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import modpack
from modpack import inspect_library
from modpack.cli.main import format_inspection, format_preflight

# OpenCL C without ROCm's device libraries: the work-item id from the amdgcn builtins and the
# dispatch packet (workgroup_size_x is its u16 at byte 4).
KERNEL = r"""
static inline size_t global_id(void) {
  __constant unsigned short* packet = (__constant unsigned short*)__builtin_amdgcn_dispatch_ptr();
  return (size_t)__builtin_amdgcn_workgroup_id_x() * packet[2] + __builtin_amdgcn_workitem_id_x();
}
__kernel void vadd(__global const float* a, __global const float* b, __global float* c, int n) {
  size_t i = global_id();
  if (i < n) c[i] = a[i] + b[i];
}
"""
TARGETS = ["gfx90a:xnack-", "gfx90a", "gfx908"]
DEVICES = ["rocm:gfx90a:sramecc+:xnack-", "rocm:gfx90a:sramecc+:xnack+", "rocm:gfx1100"]


def main(out: Path) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    host = modpack.csource_module("int placeholder;")
    host.import_module(modpack.rocm_module(KERNEL, targets=TARGETS))
    path = host.export_library(out)
    print(format_inspection(inspect_library(path)))
    for device in DEVICES:
        report = modpack.preflight(path, device)
        print(format_preflight(report))
        if device == DEVICES[0]:
            (out.parent / "preflight.json").write_text(json.dumps(report, indent=2) + "\n")
    n = 1000
    a, b = np.arange(n, dtype=np.float32), np.full(n, 2, np.float32)
    try:
        da, db = modpack.array(a, device="rocm:0"), modpack.array(b, device="rocm:0")
        dc = modpack.empty(n, "float32", device="rocm:0")
        vadd = modpack.load_module(path).get_function("vadd", query_imports=True)
        vadd(da, db, dc, n, (n + 63) // 64, 1, 1, 64, 1, 1)
        modpack.synchronize("rocm:0")
    except modpack.UnavailableError as exc:
        print(f"rocm_vadd: cannot launch here: {exc}")
        return 77
    if not np.array_equal(dc.numpy(), a + b):
        print("rocm_vadd: WRONG result")
        return 1
    print(f"rocm_vadd: OK, {n} elements match")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1])))
