"""What the weights_*.py workers share: the host code of their libraries, memory readings by
field, and the payload. Workers are run by ``benchmarks/weights_and_trust.py`` in fresh child
processes (``python workers/weights_<name>.py '<json arguments>'``) and print one JSON object
as the last line of their stdout (``_common.emit``)."""

from __future__ import annotations

import numpy as np

# The large libraries (rows 2-7): weight_at(i) reads w[i] through the module context, as the
# host of tests/test_trust.py does.
BIG_HOST_C = r"""
#include "modpack/backend.h"
static double weight_at(int64_t i) {
  const DLTensor* w;
  if (mp_backend_get_array("w", &w) != MP_OK) return -1;
  return ((const float*)w->data)[i];
}
MP_EXPORT_FUNC(weight_at, double, int64_t)
"""

# The small library (rows 8-9), as tests/test_weight_swaps.py: consistent() reads w1, sums it,
# then reads w2. In version k both hold k everywhere, so a call that saw two versions returns
# a1 != a2; the result is a1 * 1000 + a2 (1001 for version 1, 2002 for version 2).
SMALL_HOST_C = r"""
#include "modpack/backend.h"
static int64_t consistent(void) {
  const DLTensor* w1;
  const DLTensor* w2;
  if (mp_backend_get_array("w1", &w1) != MP_OK) return -1;
  const double* p = w1->data;
  double sum = 0;
  for (int64_t i = 0; i < w1->shape[0]; ++i) sum += p[i];
  if (mp_backend_get_array("w2", &w2) != MP_OK) return -1;
  double a1 = sum / (double)w1->shape[0], a2 = ((const double*)w2->data)[w2->shape[0] - 1];
  return (int64_t)(a1 * 1000 + a2);
}
MP_EXPORT_FUNC0(consistent, int64_t)
"""

SMALL_N = 1 << 16  # float64 elements per array of the small weight files


def payload(size: int, seed: int) -> np.ndarray:
    """|size| bytes of float32 noise (size is a multiple of 4)."""
    return np.random.default_rng(seed).random(size // 4, dtype=np.float32)


def sample_indices(count: int) -> list[int]:
    """A few element indices spread over an array of |count| elements."""
    return sorted({0, 1, count // 3, count // 2, count - 2, count - 1})


def status() -> dict[str, int]:
    """The kB fields of /proc/self/status, in bytes (VmRSS, RssAnon, RssFile, RssShmem...)."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return out


def mappings_of(path: str) -> int:
    """How many of this process's mappings are of the file |path|."""
    with open("/proc/self/maps") as maps:
        return sum(line.rstrip().endswith(path) for line in maps)
