"""C++ symbol names made readable, by binutils' ``c++filt`` (installed with the C toolchain):
for records of C++ kernels and for ``modpack inspect``."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from ..errors import CallError, UnavailableError

__all__ = ["demangle", "is_mangled"]


def is_mangled(symbol: str) -> bool:
    """True for an Itanium C++ ABI symbol (``_Z...``), which is what nvcc and NVRTC emit."""
    return symbol.startswith("_Z")


def demangle(symbols: Sequence[str]) -> list[str]:
    """The demangled form of each symbol (a name that is not mangled comes back as it is)."""
    if not symbols:
        return []
    tool = shutil.which("c++filt")
    if tool is None:
        raise UnavailableError("reading C++ kernel names needs c++filt (binutils), which comes "
                               "with the C toolchain: install binutils")
    out = subprocess.run([tool], input="\n".join(symbols) + "\n", capture_output=True,
                         text=True, check=True).stdout.splitlines()
    if len(out) != len(symbols):
        raise CallError(f"c++filt returned {len(out)} names for {len(symbols)} symbols")
    return out
