"""Where HIP's headers and ROCm's device libraries are, and the clang that can use them.

``#include <hip/hip_runtime.h>`` needs HIP's headers, and any kernel calling a math function
(``sqrtf``, ``__expf``) or ``printf`` needs ROCm's device libraries: LLVM bitcode (ocml.bc,
ockl.bc, ...) that clang links into the code object. That bitcode is built by one LLVM release,
and an older clang cannot read it ("Opaque pointers are only supported in -opaque-pointers
mode (Producer: 'LLVM15.0.5' Reader: 'LLVM 14.0.6')"), so the clang that compiles must be at
least that release; ROCm's own clang is the one its libraries were built with.

Searched, in order: ``$ROCM_PATH`` (or ``$HIP_PATH``) alone when set; else ``/opt/rocm`` (a
ROCm install, with its clang under ``llvm/``); else the system's packages under ``/usr`` (Debian
and Ubuntu: ``libamdhip64-dev`` for the headers, ``rocm-device-libs`` for the bitcode, in
``/usr/lib/<multiarch>/amdgcn/bitcode``). The LLVM release of the bitcode is read from its
``llvm.ident`` metadata ("clang version 15.0.5"), a plain string in the file, and the clang is
``clang-<that major>`` (on PATH or in ``/usr/lib/llvm-<major>/bin``), unless ``$CLANG`` names
one.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ...errors import CompileError

__all__ = ["HIP_PACKAGES", "HipToolchain", "clang_major", "find_clang", "find_hip_toolchain"]

# What to install on Debian 12 (bookworm), whose HIP 5.2 packages are built with LLVM 15.
HIP_PACKAGES = "libamdhip64-dev rocm-device-libs clang-15 lld-15"
_IDENT = re.compile(rb"clang version (\d+)\.")
_DEVICE_LIB = "ocml.bc"  # one library every HIP kernel build links


@dataclass(frozen=True)
class HipToolchain:
    """HIP's headers and ROCm's device libraries found on this machine, and the clang to use
    with them."""

    clang: str
    rocm_path: Path | None  # holds include/hip/hip_runtime.h; None: no HIP headers
    device_libs: Path | None  # the folder of ocml.bc ...; None: none found, or too new
    libs_major: int | None  # the LLVM major the device libraries were built with
    clang_major: int | None
    hip_version: str | None  # "5.2.21153", from the headers' installation
    note: str  # why a part is missing, for messages; "" when nothing is

    def flags(self) -> list[str]:
        """clang's flags for a HIP build with what was found: the headers (``--rocm-path``)
        and the device libraries (``--rocm-device-lib-path``), or ``-nogpuinc`` and
        ``-nogpulib`` for what is missing."""
        out = [f"--rocm-path={self.rocm_path}"] if self.rocm_path else ["-nogpuinc"]
        if self.rocm_path and self.hip_version:
            # clang reads the version from bin/.hipVersion, which Debian's packages lack, and
            # takes a HIP without one for 3.5, whose headers it does not prepare for: without
            # its runtime wrapper, __global__ is not even defined.
            out.append(f"--hip-version={self.hip_version}")
        out += [f"--rocm-device-lib-path={self.device_libs}"] if self.device_libs else ["-nogpulib"]
        return out


def find_clang() -> str:
    """``$CLANG``, else clang on PATH: the compiler for OpenCL C, and for HIP where no
    headers are installed."""
    explicit = os.environ.get("CLANG")
    if explicit:
        return explicit
    found = shutil.which("clang")
    if found:
        return found
    raise CompileError("clang was not found (not on PATH, $CLANG): compiling ROCm kernels needs "
                       "clang with the AMDGPU target (Debian: apt-get install clang lld; or "
                       "ROCm's own clang), or pass code objects with binaries=")


def find_hip_toolchain() -> HipToolchain:
    """What this machine has for compiling HIP (looked up once per $ROCM_PATH, $HIP_PATH and
    $CLANG)."""
    return _find(os.environ.get("ROCM_PATH") or os.environ.get("HIP_PATH") or "",
                 os.environ.get("CLANG") or "")


@functools.cache
def _find(explicit_root: str, explicit_clang: str) -> HipToolchain:
    roots = [Path(explicit_root)] if explicit_root else [Path("/opt/rocm"), Path("/usr")]
    root = next((r for r in roots if (r / "include" / "hip" / "hip_runtime.h").is_file()), None)
    libs = _device_libs(root) if root is not None else next(
        (found for r in roots if (found := _device_libs(r)) is not None), None)
    libs_major = _ident_major(libs / _DEVICE_LIB) if libs is not None else None
    clang = explicit_clang or _clang_for(root, libs_major) or find_clang()
    major = clang_major(clang)
    note = ""
    if root is None:
        where = ", ".join(str(r / "include") for r in roots)
        note = f"no HIP headers (hip/hip_runtime.h) in {where}"
    if libs is None:
        note = note or f"no ROCm device libraries ({_DEVICE_LIB}) beside the HIP headers"
    elif libs_major is not None and major is not None and major < libs_major:
        note = (f"the ROCm device libraries in {libs} were built by LLVM {libs_major}, which "
                f"{clang} (clang {major}) cannot read: install clang-{libs_major} and "
                f"lld-{libs_major}, or set CLANG to a clang {libs_major} or later")
        libs = None
    version = _hip_version(root) if root is not None else None
    return HipToolchain(clang, root, libs, libs_major, major, version, note)


def _hip_version(root: Path) -> str | None:
    """HIP's version as its installation under |root| records it (``HIP_VERSION_MAJOR=5`` ...
    in share/hip/version, or ROCm's bin/.hipVersion)."""
    for record in (root / "bin" / ".hipVersion", root / "share" / "hip" / "version"):
        try:
            text = record.read_text(errors="replace")
        except OSError:
            continue
        parts = [re.search(rf"^HIP_VERSION_{p}=(\d+)", text, re.M) for p in
                 ("MAJOR", "MINOR", "PATCH")]
        if parts[0] and parts[1]:
            return ".".join(m[1] for m in parts if m)
    return None


def _device_libs(root: Path) -> Path | None:
    """The folder of the device libraries that go with the HIP headers under |root|."""
    candidates = [root / "amdgcn" / "bitcode", root / "lib" / "amdgcn" / "bitcode"]
    candidates += sorted(root.glob("lib/*/amdgcn/bitcode"))  # Debian: lib/<multiarch>/
    # ROCm 6: beside its clang's resource folder.
    candidates += sorted(root.glob("lib/llvm/lib/clang/*/lib/amdgcn/bitcode"), reverse=True)
    candidates += sorted(root.glob("llvm/lib/clang/*/lib/amdgcn/bitcode"), reverse=True)
    return next((c for c in candidates if (c / _DEVICE_LIB).is_file()), None)


def _ident_major(bitcode: Path) -> int | None:
    """The LLVM major of the clang that built |bitcode|, from its ``llvm.ident`` string."""
    try:
        found = _IDENT.search(bitcode.read_bytes())
    except OSError:
        return None
    return int(found[1]) if found else None


def _clang_for(root: Path | None, major: int | None) -> str | None:
    """The clang that goes with the installation at |root|: ROCm's own, else the system's
    clang-<major> that built its device libraries."""
    if root is not None:
        for own in (root / "llvm" / "bin" / "clang", root / "lib" / "llvm" / "bin" / "clang"):
            if own.is_file() and os.access(own, os.X_OK):
                return str(own)
    if major is None:
        return None
    found = shutil.which(f"clang-{major}")
    if found:
        return found
    versioned = Path(f"/usr/lib/llvm-{major}/bin/clang")
    return str(versioned) if versioned.is_file() else None


@functools.cache
def clang_major(clang: str) -> int | None:
    """The major version ``clang --version`` reports; None when it cannot be run or read."""
    try:
        out = subprocess.run([clang, "--version"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"clang version (\d+)\.", out)
    return int(found[1]) if found else None
