"""Compiling CUDA C++ for one target: with NVRTC (NVIDIA's runtime compiler, from PyPI) or with
nvcc (the CUDA toolkit)."""

from __future__ import annotations

import functools
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...errors import CompileError, MissingExtraError, UnavailableError
from ...toolchain.cc import run_tool
from ..cxx_names import nvrtc_expression, overload_hint

__all__ = ["INSTALL_HINT", "find_nvcc", "nvcc_compile", "nvrtc_compile"]

INSTALL_HINT = "pip install modpack[cuda]"
# Signs of host code in a .cu file: a kernel launch, main, runtime API calls.
_HOST_CODE = re.compile(r"<<<|\bint\s+main\s*\(|\bcuda(Malloc|Memcpy|Free)\b")
# ... and in NVRTC's log, which names the file: "dir/launch.cuh(7): error: ...".
_HOST_CODE_IN_LOG = re.compile(
    r'^(?P<file>[^\n]+?)\(\d+\): error: (?:[^\n]*host functions are not allowed in JIT mode|'
    r'identifier "cuda[A-Z]\w*" is undefined)', re.M)
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)
# NVRTC's log for a header it cannot find: 'dir/util.cuh(2): catastrophic error: cannot open
# source file "assert.h"'.
_MISSING_HEADER_IN_LOG = re.compile(
    r'^(?P<file>[^\n]+?)\(\d+\): catastrophic error: cannot open source file "(?P<header>[^"]+)"',
    re.M)
# The C library's headers, which NVRTC does not have: "assert.h", and C++'s "cassert".
_C_LIBRARY = ("assert", "complex", "ctype", "errno", "fenv", "float", "inttypes", "iso646",
              "limits", "locale", "math", "setjmp", "signal", "stdalign", "stdarg", "stdatomic",
              "stdbool", "stddef", "stdint", "stdio", "stdlib", "stdnoreturn", "string",
              "tgmath", "threads", "time", "uchar", "wchar", "wctype")
_STANDARD_HEADERS = frozenset([f"{h}.h" for h in _C_LIBRARY] + [f"c{h}" for h in _C_LIBRARY])
_PROGRAM_NAME = "module.cu"  # what NVRTC calls the source in its log
_MAX_HEADERS = 64  # headers read looking for host code, at most


def _nvrtc() -> Any:
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        raise MissingExtraError(
            "compiling CUDA source with NVRTC needs cuda-python and NVIDIA's NVRTC wheel: "
            f"{INSTALL_HINT}; or pass compiler='nvcc' to use an installed CUDA toolkit"
        ) from None
    try:
        nvrtc.nvrtcVersion()
    except Exception as exc:  # cuda.pathfinder raises its own RuntimeError subclasses
        raise UnavailableError(
            f"NVRTC's library (libnvrtc) cannot be loaded ({exc}): {INSTALL_HINT} installs "
            "nvidia-cuda-nvrtc; or pass compiler='nvcc'"
        ) from None
    return nvrtc


@functools.cache
def cuda_include_dirs() -> tuple[str, ...]:
    """Where the CUDA headers kernels include are (cuda_fp16.h, cuda_bf16.h, <nv/target>,
    <cuda/std/...>): NVIDIA's wheels (modpack[cuda]) or a CUDA toolkit, as cuda.pathfinder
    finds them. NVRTC has no search path of its own."""
    try:
        from cuda import pathfinder
    except ImportError:
        return ()
    dirs = []
    for headers in ("cudart", "cccl"):
        try:
            found = pathfinder.find_nvidia_header_directory(headers)
        except Exception:  # an unknown name in an older pathfinder: go without
            found = None
        if found:
            dirs.append(str(found))
    return tuple(dirs)


def nvrtc_compile(source: str, target: str, options: Sequence[str],
                  name_expressions: Sequence[str] = ()) -> tuple[bytes, bytes, dict[str, str]]:
    """(PTX with its NUL, cubin or b"", each name expression's lowered symbol) for one
    target."""
    nvrtc = _nvrtc()

    def check(result: Any, what: str) -> Any:
        err, *values = result
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"NVRTC {what} failed: {err.name}")
        return values[0] if len(values) == 1 else values

    program = check(nvrtc.nvrtcCreateProgram(source.encode(), _PROGRAM_NAME.encode(), 0, [], []),
                    "nvrtcCreateProgram")
    try:
        for expr in name_expressions:
            check(nvrtc.nvrtcAddNameExpression(program, nvrtc_expression(expr).encode()),
                  f"nvrtcAddNameExpression({expr!r})")
        # The user's include paths first, then the CUDA headers.
        includes = [f"--include-path={d}" for d in cuda_include_dirs()]
        opts = [f"--gpu-architecture={target}".encode(),
                *(o.encode() for o in [*options, *includes])]
        (err,) = nvrtc.nvrtcCompileProgram(program, len(opts), opts)
        log = _read_out(program, nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog, check)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            text = log.rstrip(b"\0").decode("utf-8", "replace").strip()
            where = _host_code_in(source, options, text)
            hint = ""
            if where is not None:
                hint = (f"\n({where} holds host code, which NVRTC does not compile: pass "
                        "compiler='nvcc', or keep only the kernels)")
            else:
                hint = standard_header_hint(text) + overload_hint(text, name_expressions)
            raise CompileError(f"NVRTC failed to compile the CUDA source for {target} "
                               f"({err.name}):\n{text}{hint}")
        ptx = _read_out(program, nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX, check)
        cubin = b""
        if target.startswith("sm_"):
            cubin = _read_out(program, nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN, check)
        lowered = {}
        for expr in name_expressions:
            # Asked with the very text that was added: NVRTC matches it byte for byte.
            symbol = check(nvrtc.nvrtcGetLoweredName(program, nvrtc_expression(expr).encode()),
                           f"nvrtcGetLoweredName({expr!r})")
            lowered[expr] = symbol.decode()
        return (ptx if ptx.endswith(b"\0") else ptx + b"\0"), cubin, lowered
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def _read_out(program: Any, get_size: Any, get: Any, check: Any) -> bytes:
    """What NVRTC hands out through a size call and a fill call (the log, PTX, a cubin), filled
    into a buffer of our own: the fill call writes into the object it is given, so it must be a
    fresh bytearray, never bytes (``b" " * 1`` is CPython's shared one-byte object, and NVRTC
    writing an empty log's NUL into it turned every ``b" "`` of the process into ``b"\\0"``)."""
    size = check(get_size(program), get_size.__name__)
    buffer = bytearray(size)
    check(get(program, buffer), get.__name__)
    return bytes(buffer)


def standard_header_hint(log: str) -> str:
    """What to do when NVRTC's |log| says it cannot open a C library header (``<assert.h>``,
    ``<cstdio>``): NVRTC ships none, and device code needs none for printf and assert, which
    it declares itself; "" when the log says nothing of the kind."""
    found = next((m for m in _MISSING_HEADER_IN_LOG.finditer(log)
                  if m["header"] in _STANDARD_HEADERS), None)
    if found is None:
        return ""
    header, file = found["header"], found["file"].strip()
    where = "the source" if file == _PROGRAM_NAME else f"the header {file}"
    name = header if header.startswith("c") and not header.endswith(".h") else f"c{header[:-2]}"
    libcu = next((f"<cuda/std/{name}>" for d in cuda_include_dirs()
                  if Path(d, "cuda", "std", name).is_file()), None)
    instead = f", include {libcu} (libcu++, a header NVRTC compiles)" if libcu else ""
    return (f"\n(NVRTC has no C library headers, and {where} includes <{header}>: remove the "
            f"include (NVRTC declares printf and assert itself; #ifndef __CUDACC_RTC__ keeps "
            f"it for nvcc){instead}, or compile with nvcc: cuda_module(..., compiler='nvcc'))")


def _include_dirs(options: Sequence[str]) -> list[Path]:
    """The include folders of compiler |options| (``-Idir``, ``-I dir``, ``--include-path=``)."""
    dirs, options = [], list(options)
    for i, option in enumerate(options):
        for flag in ("-I", "--include-path=", "--include-path"):
            if option == flag.rstrip("=") and i + 1 < len(options):
                dirs.append(Path(options[i + 1]))
            elif option.startswith(flag) and len(option) > len(flag):
                dirs.append(Path(option[len(flag):].lstrip("=")))
    return dirs


def _host_code_in(source: str, options: Sequence[str], log: str) -> str | None:
    """Where host code is that NVRTC cannot compile: ``"the source"``, or the header (among
    those the source includes, found in the |options|' include folders, or one NVRTC's |log|
    names) that holds it; None when nothing says so."""
    if _HOST_CODE.search(source):
        return "the source"
    dirs = _include_dirs(options)
    queue: list[tuple[str, Path | None]] = [(source, None)]
    seen: set[Path] = set()
    while queue and len(seen) < _MAX_HEADERS:
        text, folder = queue.pop(0)
        for quote, name in _INCLUDE.findall(text):
            candidates = ([folder] if quote == '"' and folder else []) + dirs
            header = next((d / name for d in candidates if (d / name).is_file()), None)
            if header is None or header.resolve() in seen:
                continue
            seen.add(header.resolve())
            try:
                content = header.read_text(errors="replace")
            except OSError:
                continue
            if _HOST_CODE.search(content):
                return f"the header {header} included by the source"
            queue.append((content, header.parent))
    found = _HOST_CODE_IN_LOG.search(log)
    if found is None:
        return None
    if found["file"].strip() == _PROGRAM_NAME:
        return "the source"
    return f"the header {found['file'].strip()} included by the source"


def find_nvcc() -> str:
    """``$NVCC``, else nvcc on PATH, else under ``$CUDA_HOME`` or /usr/local/cuda."""
    explicit = os.environ.get("NVCC")
    if explicit:
        return explicit
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and Path(home, "bin", "nvcc").exists():
            return str(Path(home, "bin", "nvcc"))
    raise CompileError(
        "nvcc was not found (not on PATH, $NVCC, $CUDA_HOME): install the CUDA toolkit, or "
        f"compile with NVRTC instead (compiler='nvrtc', {INSTALL_HINT})"
    )


def nvcc_compile(source: str, target: str, options: Sequence[str], ptx_only: bool = False
                  ) -> bytes:
    """The cubin (sm_XY) or PTX with its NUL (compute_XY, or |ptx_only|) for one target."""
    nvcc = find_nvcc()
    with tempfile.TemporaryDirectory(prefix="modpack-nvcc-") as tmp:
        src = Path(tmp, "module.cu")
        src.write_text(source)
        if target.startswith("sm_") and not ptx_only:
            out = Path(tmp, "module.cubin")
            cmd = [nvcc, "-cubin", f"-arch={target}", *options, "-o", str(out), str(src)]
        else:
            out = Path(tmp, "module.ptx")
            arch = "compute_" + target.split("_", 1)[1]
            cmd = [nvcc, "-ptx", f"-arch={arch}", *options, "-o", str(out), str(src)]
        run_tool(cmd, f"nvcc for {target}")
        data = out.read_bytes()
    return data if out.suffix == ".cubin" or data.endswith(b"\0") else data + b"\0"
