"""The ``cuda`` kind: CUDA kernels as one or several binary variants plus a function-info
record per kernel, built from source or taken as binaries, and its payload writer.

Read by the C runtime's ``loadbinary_cuda`` (csrc/src/kinds/cuda/), which needs no GPU to load
the library and picks the variant for each device at its first launch. The payload's layout and
numbers are in csrc/include/modpack/kinds/cuda.h, read here through the runtime binding.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ...errors import ArgumentError, CompileError, MissingFileError
from ...format.layout import check_struct
from ...runtime.binding import lib
from ..cxx_names import hinted, lower_from_probe, probe_source
from ..device import CodeWriter, DeviceModule, check_compiler_options, code_as_is
from ..kernel_info import KernelInfo
from .arch import DEFAULT_TARGETS, check_arch
from .compile import nvcc_compile, nvrtc_compile
from .names import (
    check_name_expressions,
    instantiation_source,
    lower_from_ptx,
    records_from_symbols,
)
from .ptx import check_against_ptx, infos_from_ptx, ptx_entries, ptx_target
from .records import KIND_LAUNCH_TAGS, check_launch_tags, records
from .signatures import parse_cuda_signatures
from .variants import CUDAVariant, variant_from_bytes

__all__ = ["CUDAModule", "PTXCheck", "cuda_module"]

# PTX the records are checked against at export: (label, PTX, the kernels it defines; () for
# all of them). Compilers emit PTX beside the cubins they make.
PTXCheck = tuple[str, bytes, tuple[str, ...]]

_HEADER = check_struct(struct.Struct("<III"), "mp_cuda_header_v1_t")
_VARIANT_KINDS = {"cubin": lib.MP_CUDA_VARIANT_CUBIN, "ptx": lib.MP_CUDA_VARIANT_PTX,
                  "fatbin": lib.MP_CUDA_VARIANT_FATBIN}


class CUDAModule(DeviceModule):
    """CUDA kernels carried in the library and launched through the runtime's CUDA device.

    ``variants`` are the binaries (``CUDAVariant``), ``functions`` the kernel records.
    """

    type_key = "cuda"
    kind_launch_tags = KIND_LAUNCH_TAGS

    def __init__(self, variants: Sequence[CUDAVariant], functions: Sequence[KernelInfo],
                 ptx_checks: Sequence[PTXCheck] = (), source: str | None = None,
                 compiler: str | None = None, name: str | None = None) -> None:
        super().__init__(name)
        if not variants:
            raise ArgumentError("a CUDA module needs at least one binary variant")
        self.variants = list(variants)
        self.functions = list(functions)
        self.source = source
        self.compiler = compiler
        self._ptx_checks = list(ptx_checks)
        self.validate()

    @property
    def arches(self) -> list[str]:
        """Every architecture of every variant, in order."""
        return [a for v in self.variants for a in v.arches]

    def validate(self) -> None:
        """Check the records: names unique, launch tags valid, every kernel in some variant,
        and parameters matching every PTX the module was built with or carries. Raises
        ArgumentError on a mismatch."""
        names = [f.name for f in self.functions]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ArgumentError(f"kernels declared more than once: {dupes}")
        self.check_records()
        for info in self.functions:
            check_launch_tags(info)
        for v in self.variants:
            unknown = sorted(set(v.kernels) - set(names))
            if unknown:
                raise ArgumentError(f"the {v.arch} {v.kind} variant names kernels {unknown} that "
                                    "have no record")
        missing = [n for n in names if not any(not v.kernels or n in v.kernels
                                               for v in self.variants)]
        if missing:
            raise ArgumentError(f"no variant defines the kernels {missing}")
        checks = list(self._ptx_checks)
        checks += [(f"{v.arch} PTX", v.data, v.kernels) for v in self.variants if v.kind == "ptx"]
        for label, ptx, kernels in checks:
            entries = ptx_entries(ptx)
            for info in self.functions:
                if not kernels or info.name in kernels:
                    check_against_ptx(info, entries, f"cuda_module ({label})")

    def payload_chunks(self, code: CodeWriter = code_as_is) -> list[bytes]:
        self.validate()  # refuse a record that disagrees with the compiled code at export
        images = [bytes(code(v.data)) for v in self.variants]
        version = self.payload_version(lib.MP_CUDA_PAYLOAD_VERSION)
        if any(v.kernels for v in self.variants):
            version = lib.MP_CUDA_PAYLOAD_VERSION
        head = [_HEADER.pack(version, 0, len(self.variants))]
        if version >= 2:
            head.append(self.encode_name())
        index = {f.name: i for i, f in enumerate(self.functions)}
        for v, image in zip(self.variants, images):
            head.append(struct.pack("<II", _VARIANT_KINDS[v.kind], len(v.arches)))
            for arch in v.arches:
                head += [struct.pack("<I", len(arch)), arch.encode()]
            head.append(struct.pack("<Q", len(image)))
            if version >= 2:
                kernels = sorted(index[k] for k in v.kernels)
                head.append(struct.pack(f"<I{len(kernels)}I", len(kernels), *kernels))
        head.append(self.encode_records(version))
        chunks = [b"".join(head)]
        offset = len(chunks[0])
        for image in images:
            pad = -offset % lib.MP_CUDA_VARIANT_ALIGNMENT
            chunks += [b"\0" * pad, image]
            offset += pad + len(image)
        return chunks

    def __repr__(self) -> str:
        kernels = ", ".join(f.name for f in self.functions)
        variants = ", ".join(f"{v.arch} ({v.kind})" for v in self.variants)
        return f"<modpack.CUDAModule kernels=[{kernels}] variants=[{variants}]>"


def cuda_module(
    source: str | os.PathLike[str] | None = None,
    targets: Sequence[str] | None = None,
    functions: Mapping[str, Any] | Iterable[KernelInfo] | None = None,
    compiler: str = "nvrtc",
    *,
    binaries: Mapping[str, Any] | None = None,
    options: Sequence[str] = (),
    name: str | None = None,
    name_expressions: Sequence[str] = (),
) -> CUDAModule:
    """A CUDA module, from CUDA C++ source or from existing binaries.

    ``cuda_module(source, targets=["sm_80", "sm_90", "compute_90"])`` compiles |source| (the
    text, or the path of a ``.cu`` file, whose folder is then searched for its ``#include
    "..."`` files) once
    per target: ``sm_XY`` (also ``sm_XYa``, ``sm_XYf``) to a cubin, ``compute_XY`` to PTX that
    the driver JIT-compiles for newer GPUs. |compiler| is ``"nvrtc"`` (NVIDIA's runtime
    compiler from PyPI, no toolkit needed: ``pip install modpack[cuda]``) or ``"nvcc"``, which
    also takes ``.cu`` files that hold host code (``main``, ``<<<...>>>`` launches).
    |options| are extra compiler flags (``-I`` include paths, ``-D`` macros, ``-std=c++17``).
    Default targets: ``DEFAULT_TARGETS``. Kernels declared ``extern "C"`` are found by their
    names; template kernels and kernels with C++ names are listed in |name_expressions|
    (``["gemm<float, 128>", "ops::softmax"]``), which instantiates them, and are then called
    by those expressions (``mod["gemm<float, 128>"]``), their arguments read from the
    compiled signature.

    ``cuda_module(binaries={"sm_80": cubin, "sm_90": cubin, "ptx": text})`` takes existing
    binaries: cubins keyed by their ``sm_XY`` (checked against the cubin's ELF header), PTX
    keyed ``"ptx"`` or its ``compute_XY`` (from its ``.target``), fatbins under any key (their
    architectures are read from the container).

    functions : per-kernel argument specs,
        ``{"vadd": ["float32*", "float32*", "float32*", "int32"]}`` (``"void*"`` for an
        untyped pointer), optionally with launch tags:
        ``{"k": {"args": [...], "launch": [*LAUNCH_TAGS, "dyn_shared_memory"]}}``. When
        omitted, records come from the ``__global__`` signatures of the source (checked
        against the compiled PTX), or, for binaries, from a PTX variant's ``.entry``
        signatures, where 64-bit parameters are taken as ``void*`` pointers and other
        parameters as scalars of the PTX type (a kernel with a 64-bit integer scalar needs
        functions=). Binaries without PTX (cubins, fatbins) need functions=.

    name : the module's name; its kernels are then also found as ``"name/kernel"``, so that
        two modules defining the same kernel names can share a library.

    Every kernel is called with its arguments followed by grid x, y, z and block x, y, z
    (and the dynamic shared memory bytes when its launch tags end with
    ``"dyn_shared_memory"``); launch values a record fixes (``{"k": {"args": [...],
    "launch": ["blockIdx.x"], "fixed": {"threadIdx.x": 256}}}``) are not passed.
    """
    expressions = check_name_expressions(name_expressions)
    options = check_compiler_options(options, "cuda_module")
    if (source is None) == (binaries is None):
        raise ArgumentError("cuda_module takes CUDA source or binaries=, exactly one of them")
    if binaries is not None:
        if targets is not None:
            raise ArgumentError("targets= is for compiling source; binaries are used as given")
        return _from_binaries(binaries, functions, name, expressions)
    if isinstance(source, os.PathLike):
        path = Path(source)
        if not path.is_file():
            raise MissingFileError(f"the CUDA source file {path} does not exist")
        source = path.read_text()
        options = [*options, f"-I{path.resolve().parent}"]
    if not isinstance(source, str):
        raise ArgumentError("cuda_module expects CUDA C++ source as a str or a path to a .cu file")
    if compiler not in ("nvrtc", "nvcc"):
        raise ArgumentError(f"compiler must be 'nvrtc' or 'nvcc', not {compiler!r}")
    if isinstance(targets, (str, bytes)):
        raise ArgumentError("targets must be a list such as ['sm_80', 'compute_80'], not a str")
    targets = list(DEFAULT_TARGETS if targets is None else targets)
    if not targets:
        raise ArgumentError("targets must be a non-empty list such as ['sm_80', 'compute_80']")
    for t in targets:
        check_arch(t, "targets")
    if len(set(targets)) != len(targets):
        raise ArgumentError(f"targets has duplicates: {targets}")
    return _from_source(source, targets, functions, compiler, list(options), name, expressions)


def _from_source(source: str, targets: list[str], functions: Any, compiler: str,
                 options: list[str], name: str | None, expressions: list[str]) -> CUDAModule:
    try:
        return _compiled(source, targets, functions, compiler, options, name, expressions)
    except CompileError as exc:
        raise hinted(exc, expressions) from None


def _compiled(source: str, targets: list[str], functions: Any, compiler: str,
              options: list[str], name: str | None, expressions: list[str]) -> CUDAModule:
    variants, checks = [], []
    lowered: dict[str, str] = {}
    # nvcc has no name-expression API: taking the addresses instantiates the kernels.
    compiled = instantiation_source(source, expressions) if expressions else source
    for target in targets:
        if compiler == "nvrtc":
            ptx, cubin, lowered = nvrtc_compile(source, target, options, expressions)
        else:
            cubin = nvcc_compile(compiled, target, options) if target.startswith("sm_") else b""
            ptx = b"" if cubin else nvcc_compile(compiled, target, options)
        if cubin:
            variants.append(CUDAVariant("cubin", (target,), cubin))
            if ptx:
                checks.append((f"{target} build", ptx, ()))
        else:
            variants.append(CUDAVariant("ptx", (ptx_target(ptx),), ptx))
    if not checks and not any(v.kind == "ptx" for v in variants):
        # nvcc made only cubins: compile PTX once so the records can be checked against it.
        first = targets[0]
        checks.append((f"{first} build", nvcc_compile(compiled, first, options, ptx_only=True),
                       ()))
    entries = ptx_entries(checks[0][1] if checks else
                          next(v.data for v in variants if v.kind == "ptx"))
    if compiler == "nvcc" and expressions:
        # nvcc has no lowering API: a probe compile names each expression's kernel.
        probe = nvcc_compile(probe_source(source, expressions), targets[0], options,
                             ptx_only=True)
        lowered = lower_from_probe(expressions, ptx_entries(probe), entries, "nvcc")
    infos = _source_records(source, functions, lowered, entries)
    return CUDAModule(variants, infos, checks, source=source, compiler=compiler, name=name)


def _source_records(source: str, functions: Any, lowered: Mapping[str, str],
                    entries: Mapping[str, Any]) -> list[KernelInfo]:
    """Records of a module compiled from |source|: from |functions|, else from the source's
    ``__global__`` signatures and the |lowered| name expressions' compiled signatures; records
    named by an expression get its symbol."""
    if functions is not None:
        return _with_symbols(records(functions), lowered)
    # With expressions, the extern "C" kernels beside them: only their signatures are read,
    # so that a listed kernel's parameters need not be spelled as dtypes in the source
    # (``floatX*``: its record reads the type the compiler resolved).
    wanted = {e for e in entries if e not in lowered} if lowered else None
    try:
        parsed = parse_cuda_signatures(source, wanted)
    except ValueError as exc:
        raise ArgumentError(f"cuda_module: {exc}") from None
    infos = records_from_symbols(lowered) + parsed
    if not infos:
        raise ArgumentError("no __global__ kernels found in the CUDA source (template kernels "
                            "and kernels without extern \"C\" are listed in name_expressions=, "
                            "e.g. ['gemm<float, 128>'])")
    return infos


def _with_symbols(infos: list[KernelInfo], lowered: Mapping[str, str]) -> list[KernelInfo]:
    """Records named by a name expression get its lowered symbol."""
    return [dataclasses.replace(i, symbol=lowered[i.name]) if i.name in lowered else i
            for i in infos]


def _from_binaries(binaries: Mapping[str, Any], functions: Any, name: str | None,
                   expressions: list[str]) -> CUDAModule:
    if not isinstance(binaries, Mapping):
        raise ArgumentError("binaries must map keys ('sm_80', 'ptx', 'fatbin', ...) to bytes, "
                            f"not {type(binaries).__name__}")
    if not binaries:
        raise ArgumentError("binaries is empty: give at least one cubin, PTX or fatbin, keyed "
                            "by its architecture ({'sm_80': cubin, 'ptx': text}), or leave "
                            "binaries out and pass source")
    variants = [variant_from_bytes(str(key), data) for key, data in binaries.items()]
    ptx = [v for v in variants if v.kind == "ptx"]
    if expressions and not ptx:
        raise ArgumentError("name_expressions= with binaries needs a PTX variant to find the "
                            "kernels' symbols in; cubins and fatbins alone need functions= with "
                            "each kernel's 'symbol'")
    lowered = lower_from_ptx(expressions, ptx_entries(ptx[0].data)) if expressions else {}
    if functions is not None:
        return CUDAModule(variants, _with_symbols(records(functions), lowered), name=name)
    if lowered:
        return CUDAModule(variants, records_from_symbols(lowered), name=name)
    if not ptx:
        raise ArgumentError(
            "cuda_module(binaries=...) without PTX needs functions=: cubins and fatbins do not "
            "record parameter types (e.g. functions={'vadd': ['float32*', 'float32*', "
            "'float32*', 'int32']})"
        )
    try:
        infos = infos_from_ptx(ptx[0].data, f"PTX {ptx[0].arch}")
    except ValueError as exc:
        raise ArgumentError(f"cuda_module: {exc}") from None
    if not infos:
        raise ArgumentError(f"the {ptx[0].arch} PTX defines no kernel (.entry)")
    return CUDAModule(variants, infos, name=name)
