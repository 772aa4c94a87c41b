"""Compiling OpenCL C or HIP for one AMD GPU target ID with clang (its ``amdgcn-amd-amdhsa``
target writes a code object directly; no ROCm install is needed)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ...errors import CompileError
from ...toolchain.cc import run_tool

__all__ = ["HIP_PRELUDE", "compile_source", "find_clang"]

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


def find_clang() -> str:
    """``$CLANG``, else clang on PATH."""
    explicit = os.environ.get("CLANG")
    if explicit:
        return explicit
    found = shutil.which("clang")
    if found:
        return found
    raise CompileError("clang was not found (not on PATH, $CLANG): compiling ROCm kernels needs "
                       "clang with the AMDGPU target (Debian: apt-get install clang lld; or "
                       "ROCm's own clang), or pass code objects with binaries=")


def compile_source(source: str, target: str, language: str, options: Sequence[str],
                   path: Path | None = None) -> bytes:
    """The code object of |source| (OpenCL C or HIP, |language|) for target ID |target|."""
    clang = find_clang()
    own_libs = any(o.startswith(("--rocm-path", "--rocm-device-lib-path", "--hip-path"))
                   for o in options)
    includes = [f"-I{path.resolve().parent}"] if path is not None else []
    with tempfile.TemporaryDirectory(prefix="modpack-rocm-") as tmp:
        out = Path(tmp, "module.hsaco")
        if language == "opencl":
            src = Path(tmp, "module.cl")
            src.write_text(source)
            cmd = [clang, "-target", "amdgcn-amd-amdhsa", f"-mcpu={target}", "-x", "cl",
                   "-cl-std=CL2.0", "-O2", *([] if own_libs else ["-nogpulib"])]
        else:
            src = Path(tmp, "module.hip")
            src.write_text(source if own_libs else HIP_PRELUDE + source)
            cmd = [clang, "-x", "hip", "--cuda-device-only", f"--offload-arch={target}",
                   "--no-gpu-bundle-output", "-O2",
                   *([] if own_libs else ["-nogpulib", "-nogpuinc"])]
        run_tool([*cmd, *includes, *options, str(src), "-o", str(out)],
                 f"clang ({language}) for {target}")
        return out.read_bytes()
