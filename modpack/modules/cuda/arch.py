"""CUDA architecture names: ``sm_XY`` (SASS for compute capability X.Y, also ``sm_XYa`` and
``sm_XYf``) and ``compute_XY`` (PTX), and the default targets of a build. The rule that picks a
variant for a device lives in the runtime (modpack/kinds/cuda.h)."""

from __future__ import annotations

import re

from ...errors import ArgumentError

__all__ = ["ARCH", "DEFAULT_TARGETS", "check_arch"]

# SASS for the common data-center and desktop GPUs, plus PTX that every GPU since Turing can
# JIT-compile (CUDA 13 supports nothing older than sm_75).
DEFAULT_TARGETS = ("sm_80", "sm_90", "compute_75")
ARCH = re.compile(r"^(?P<kind>sm|compute)_(?P<number>\d{2,3})(?P<suffix>[af]?)$")


def check_arch(name: str, what: str) -> re.Match[str]:
    m = ARCH.match(name) if isinstance(name, str) else None
    if m is None or int(m["number"]) < 10:
        raise ArgumentError(
            f"{what}: {name!r} is not a CUDA architecture; use sm_XY (SASS, e.g. 'sm_80', "
            "'sm_90a') or compute_XY (PTX, e.g. 'compute_80')"
        )
    return m
