"""modpack quickstart: export host C code plus a const module into one deploy.so, load it in a
fresh process, call a host function on numpy data and print the module tree."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import modpack

HOST_CODE = r"""
#include "modpack/backend.h"

/* out = x * weights + bias, with the weights and bias fetched from the const module
 * through the module context (no copies: they live in the mapped library). */
static void affine(const DLTensor* x, DLTensor* out) {
  const DLTensor* w; const DLTensor* b;
  if (mp_backend_get_array("weights", &w) != MP_OK || mp_backend_get_array("bias", &b) != MP_OK)
    return;  /* the failed lookup has already failed the call, with its message */
  if (w->shape[0] != x->shape[0] || b->shape[0] != x->shape[0]) {
    mp_backend_errorf(MP_ERR_INVALID_ARGUMENT, "affine: x has %lld features, the model %lld",
                      (long long)x->shape[0], (long long)w->shape[0]);
    return;
  }
  const float* xv = x->data; const float* wv = w->data; const float* bv = b->data;
  float* ov = out->data;
  for (int64_t i = 0; i < x->shape[0]; ++i) ov[i] = xv[i] * wv[i] + bv[i];
}
/* The wrapper checks every call against the signature before affine runs: float32 vectors of
 * one length n, compact, in host memory; anything else is refused with a message. */
MP_EXPORT_TYPED_VOID_FUNC(affine, "x: float32[n] cpu, out: float32[n] cpu",
                          const DLTensor*, DLTensor*)
"""

LOAD_AND_RUN = r"""
import sys, time
import numpy as np
import modpack

t0 = time.perf_counter()
lib = modpack.load_module(sys.argv[1])
t1 = time.perf_counter()

def show(module, depth=0):
    arrays = ""
    if module.type_key == "const":
        items = module.arrays.items()
        arrays = "  " + ", ".join(f"{k}{tuple(v.shape)}:{v.dtype}" for k, v in items)
    print("  " * depth + f"- {module.type_key}{arrays}")
    for child in module.imported_modules:
        show(child, depth + 1)

print(f"loaded in {1e3 * (t1 - t0):.2f} ms; module tree:")
show(lib)
x = np.linspace(0, 1, 8, dtype=np.float32)
out = np.empty_like(x)
lib["affine"](x, out)
weights = lib.imported_modules[0].arrays["weights"]
bias = lib.imported_modules[0].arrays["bias"]
expected = x * weights + bias
print("affine(x) =", np.round(out, 3))
assert np.allclose(out, expected), "result differs from numpy"
print("matches numpy: yes")
"""


def main() -> None:
    # Left in the current folder (or where argv[1] says), for `modpack inspect deploy.so`.
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "deploy.so").resolve()
    host = modpack.csource_module(HOST_CODE)
    host.import_module(modpack.const_module({
        "weights": np.arange(8, dtype=np.float32) / 4,
        "bias": np.full(8, 0.5, dtype=np.float32),
    }))
    t0 = time.perf_counter()
    host.export_library(path)
    print(f"exported {path} ({path.stat().st_size} bytes) in "
          f"{1e3 * (time.perf_counter() - t0):.1f} ms")
    # A fresh process proves nothing from the exporting process is needed.
    subprocess.run([sys.executable, "-c", LOAD_AND_RUN, str(path)], check=True)
    print(f"next: modpack inspect {os.path.relpath(path)}")


if __name__ == "__main__":
    main()
