"""Compiling OpenCL C or HIP for one AMD GPU target ID with clang (its ``amdgcn-amd-amdhsa``
target writes a code object directly; no ROCm install is needed).

HIP is compiled as written (``#include <hip/hip_runtime.h>``, ``threadIdx``, ``__syncthreads()``,
math functions) where HIP's headers and ROCm's device libraries are installed, with the clang
that can read those libraries (:mod:`.toolchain` finds them: Debian's libamdhip64-dev and
rocm-device-libs with clang-15, or ROCm). Without them, clang is given ``-nogpuinc -nogpulib``
and the source gets ``__global__``, ``__device__`` and ``__shared__`` defined
(:data:`HIP_PRELUDE`): kernels then use the ``__builtin_amdgcn_*`` builtins, and a source that
includes HIP's headers is refused with the packages to install.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ...errors import CompileError
from ...toolchain.cc import run_tool
from .toolchain import HIP_PACKAGES, find_clang, find_hip_toolchain

__all__ = ["HIP_PRELUDE", "compile_source", "find_clang", "hip_ir_functions"]

# Without HIP's headers (-nogpuinc), what a kernel file needs of them.
HIP_PRELUDE = """\
#ifndef __global__
#define __global__ __attribute__((global))
#endif
#ifndef __device__
#define __device__ __attribute__((device))
#endif
#ifndef __shared__
#define __shared__ __attribute__((shared))
#endif
#line 1
"""
# Flags by which the caller chooses HIP's headers and device libraries itself.
_OWN_CHOICE = ("--rocm-path", "--rocm-device-lib-path", "--hip-path", "--hip-device-lib",
               "-nogpuinc", "-nogpulib")
_HIP_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]hip/', re.M)
# A function LLVM IR defines: `define ... @name(` or `define ... @"name"(`.
_IR_DEFINE = re.compile(r'^define\b[^@\n]*@(?:"([^"]+)"|([-\w.$]+))\(', re.M)


def compile_source(source: str, target: str, language: str, options: Sequence[str],
                   path: Path | None = None, ir: bool = False) -> bytes:
    """The code object of |source| (OpenCL C or HIP, |language|) for target ID |target|; with
    |ir|, the device code's LLVM IR as text instead (HIP only: read for its symbols, linked with
    no device library)."""
    includes = [f"-I{path.resolve().parent}"] if path is not None else []
    with tempfile.TemporaryDirectory(prefix="modpack-rocm-") as tmp:
        out = Path(tmp, "module.ll" if ir else "module.hsaco")
        note = ""
        if language == "opencl":
            own = any(o.startswith(("--rocm-path", "--rocm-device-lib-path")) for o in options)
            src = Path(tmp, "module.cl")
            src.write_text(source)
            cmd = [find_clang(), "-target", "amdgcn-amd-amdhsa", f"-mcpu={target}", "-x", "cl",
                   "-cl-std=CL2.0", "-O2", *([] if own else ["-nogpulib"])]
        else:
            clang, flags, note = _hip_flags(source, options)
            if ir:
                flags = [f for f in flags if not f.startswith("--rocm-device-lib-path")]
                flags = [*flags, "-nogpulib"] if "-nogpulib" not in flags else flags
            src = Path(tmp, "module.hip")
            src.write_text(HIP_PRELUDE + source if "-nogpuinc" in [*flags, *options] else source)
            # C++17 unless the options say otherwise, as nvcc and NVRTC default to (clang's
            # HIP default is C++11).
            std = [] if any(o.startswith(("-std=", "--std")) for o in options) else ["-std=c++17"]
            cmd = [clang, "-x", "hip", "--cuda-device-only", f"--offload-arch={target}",
                   *(["-emit-llvm", "-S", "-O0"] if ir else ["--no-gpu-bundle-output", "-O2"]),
                   *std, *flags]
        what = f"clang ({language}) for {target}"
        try:
            run_tool([*cmd, *includes, *options, str(src), "-o", str(out)], what)
        except CompileError as exc:
            if note:
                raise CompileError(f"{exc}\n(HIP toolchain: {note})") from None
            raise
        return out.read_bytes()


def _hip_flags(source: str, options: Sequence[str]) -> tuple[str, list[str], str]:
    """(clang, its flags for HIP's headers and device libraries, what is missing) for
    |source| with the caller's |options|."""
    found = find_hip_toolchain()
    if any(o.startswith(_OWN_CHOICE) for o in options):
        return found.clang, [], ""
    if found.rocm_path is None and _HIP_INCLUDE.search(source):
        raise CompileError(
            f"the HIP source includes HIP's headers (#include <hip/...>), and {found.note}: "
            f"install them (Debian 12: apt-get install {HIP_PACKAGES}; or ROCm, then set "
            "ROCM_PATH if it is not /opt/rocm), or pass --rocm-path=... in options=")
    return found.clang, found.flags(), found.note


def hip_ir_functions(ir: bytes) -> list[str]:
    """The symbols of the functions LLVM IR text |ir| defines."""
    text = ir.decode("utf-8", "replace")
    return [m[1] or m[2] for m in _IR_DEFINE.finditer(text)]
