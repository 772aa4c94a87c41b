"""The ``rocm`` kind: AMD GPU code objects for several target IDs plus a function-info record per
kernel with its argument layout, all read from the code objects' metadata, and its payload
writer.

Read by the C runtime's ``loadbinary_rocm`` (csrc/src/kinds/rocm/), which needs no GPU to load
the library and picks the code object for each device's target ID at its first launch. The
payload's layout and numbers are in csrc/include/modpack/kinds/rocm.h, read here through the
runtime binding.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import ArgumentError, CompileError, MissingFileError
from ...format.layout import check_struct
from ...runtime.binding import error_from_status, ffi, lib
from ...toolchain.demangle import is_mangled
from ..cuda.names import records_from_symbols
from ..cuda.signatures import parse_cuda_signatures
from ..cxx_names import (
    check_name_expressions,
    hinted,
    instantiation_source,
    lower_by_demangled,
    lower_from_probe,
    probe_source,
    record_names,
)
from ..device import CodeWriter, DeviceModule, check_compiler_options, code_as_is
from ..kernel_info import NULL, SCALAR, KernelArg, KernelInfo, kernel_infos, launch_tags
from .code_object import CodeObject, KernelMetadata, read_code_object
from .compile import compile_source, hip_ir_functions

__all__ = ["KIND_LAUNCH_TAGS", "LAUNCH_TAGS", "ROCmModule", "check_target", "rocm_module"]

# grid x, y, z ("blockIdx"), block x, y, z ("threadIdx"), then the optional dynamic LDS, in
# the runtime's launch-slot order (as the cuda kind's).
KIND_LAUNCH_TAGS: tuple[str, ...] = launch_tags("rocm")
LAUNCH_TAGS: tuple[str, ...] = KIND_LAUNCH_TAGS[:6]
_HEADER = check_struct(struct.Struct("<III"), "mp_rocm_header_v1_t")
_ALIGNMENT: int = lib.MP_ROCM_CODE_ALIGNMENT
_RECORD_VERSION = 2
# OpenCL C's scalar type names (the metadata's .type_name) as dtypes.
_OPENCL_TYPES = {
    "char": "int8", "uchar": "uint8", "short": "int16", "ushort": "uint16", "int": "int32",
    "uint": "uint32", "long": "int64", "ulong": "uint64", "half": "float16", "float": "float32",
    "double": "float64", "size_t": "uint64", "bool": "bool", "unsigned char": "uint8",
    "unsigned short": "uint16", "unsigned int": "uint32", "unsigned long": "uint64",
}


def check_target(target: str, what: str) -> str:
    """|target| if the runtime takes it as a code object's target ID, else ArgumentError with
    the runtime's reason."""
    if not isinstance(target, str) or not target:
        raise ArgumentError(f"{what}: a target ID is a str such as 'gfx90a' or 'gfx90a:xnack-'")
    name = ffi.new("char[]", target.encode())
    out = ffi.new("int32_t*")
    status = lib.mp_rocm_select_variant(ffi.new("const char*[]", [name]), 1, b"gfx900", out)
    if status == lib.MP_ERR_INVALID_ARGUMENT:
        raise ArgumentError(f"{what}: {error_from_status(status)}")
    return target


@dataclass(frozen=True)
class Layout:
    """Where a kernel's explicit arguments lie in its argument segment."""

    explicit_size: int
    offsets: tuple[int, ...]


class ROCmModule(DeviceModule):
    """AMD GPU kernels carried in the library as code objects and launched through the
    runtime's ROCm device (HIP)."""

    type_key = "rocm"
    kind_launch_tags = KIND_LAUNCH_TAGS

    def __init__(self, code_objects: Sequence[CodeObject], functions: Sequence[KernelInfo],
                 layouts: Sequence[Layout], source: str | None = None,
                 name: str | None = None) -> None:
        super().__init__(name)
        if not code_objects:
            raise ArgumentError("a ROCm module needs at least one code object")
        if len(code_objects) > lib.MP_ROCM_MAX_VARIANTS:
            raise ArgumentError(f"{len(code_objects)} code objects (at most "
                                f"{lib.MP_ROCM_MAX_VARIANTS})")
        self.code_objects = list(code_objects)
        self.functions = list(functions)
        self.layouts = list(layouts)
        self.source = source
        targets = [c.target for c in self.code_objects]
        twice = sorted({t for t in targets if targets.count(t) > 1})
        if twice:
            raise ArgumentError(f"code objects for {twice} are given twice")
        self.check_records()

    @property
    def targets(self) -> list[str]:
        return [c.target for c in self.code_objects]

    def payload_chunks(self, code: CodeWriter = code_as_is) -> list[bytes]:
        stored = [bytes(code(c.data)) for c in self.code_objects]
        head = [_HEADER.pack(lib.MP_ROCM_PAYLOAD_VERSION, 0, len(self.code_objects)),
                self.encode_name()]
        for c, data in zip(self.code_objects, stored):
            target = c.target.encode()
            head += [struct.pack("<I", len(target)), target, struct.pack("<Q", len(data))]
        head.append(self.encode_records(_RECORD_VERSION))
        for info, layout in zip(self.functions, self.layouts):
            head.append(struct.pack("<I", layout.explicit_size))
            head += [struct.pack("<II", offset, _arg_size(arg))
                     for offset, arg in zip(layout.offsets, info.args)]
        for c in self.code_objects:
            by_name = {k.name: k for k in c.kernels}
            for info in self.functions:
                head.append(struct.pack("<8I", *by_name[info.symbol or info.name].facts, 0))
        chunks = [b"".join(head)]
        offset = len(chunks[0])
        for data in stored:
            pad = -offset % _ALIGNMENT
            chunks += [b"\0" * pad, data]
            offset += pad + len(data)
        return chunks

    def __repr__(self) -> str:
        kernels = ", ".join(f.name for f in self.functions)
        return f"<modpack.ROCmModule kernels=[{kernels}] targets={self.targets}>"


def _arg_size(arg: KernelArg) -> int:
    if arg.kind == SCALAR:
        assert arg.dtype is not None  # a scalar's record always has its dtype
        return arg.dtype.itemsize * arg.lanes
    return 8


def rocm_module(
    source: str | os.PathLike[str] | None = None,
    targets: Sequence[str] | None = None,
    functions: Mapping[str, Any] | Iterable[KernelInfo] | None = None,
    *,
    binaries: Mapping[str, Any] | None = None,
    language: str | None = None,
    options: Sequence[str] = (),
    name: str | None = None,
    name_expressions: Sequence[str] = (),
) -> ROCmModule:
    """A ROCm module, from AMD GPU code objects or from source compiled here by clang.

    ``rocm_module(binaries={"gfx90a": code_object, "gfx942:xnack-": ..., ...})`` takes code
    objects (``.hsaco`` files' bytes), each keyed by its target ID, which must be the one its
    metadata names (``amdhsa.target``).

    ``rocm_module(source, targets=["gfx90a", "gfx908:xnack-"])`` compiles |source| (the text, or
    the path of a file, whose folder is then searched for its ``#include "..."`` files) once per
    target ID with clang: |language| ``"opencl"`` (OpenCL C) or ``"hip"``, guessed from the
    source when omitted (``__kernel`` or ``__global__``). |options| are extra clang flags.

    HIP is compiled as written (``#include <hip/hip_runtime.h>``, ``threadIdx`` and
    ``hipBlockIdx_x``, ``__shared__``, ``__syncthreads()``, ``tanhf``) where HIP's headers and
    ROCm's device libraries are installed: ``$ROCM_PATH``, ``/opt/rocm``, or the system's
    (Debian 12: ``apt-get install libamdhip64-dev rocm-device-libs clang-15 lld-15``), found
    by :mod:`modpack.modules.rocm.toolchain`, with the clang whose LLVM built those libraries
    (``clang-15`` for Debian's, ROCm's own for ROCm; ``$CLANG`` overrides) and C++17 unless
    |options| give ``-std=``. Without them, clang (``$CLANG``, else ``clang``) is given
    ``-nogpuinc -nogpulib``: kernels use the ``__builtin_amdgcn_*`` builtins, get
    ``__global__``, ``__device__`` and ``__shared__`` defined, and a source that includes
    HIP's headers is refused naming the packages to install. ``--rocm-path=``,
    ``--rocm-device-lib-path=``, ``-nogpuinc`` or ``-nogpulib`` in |options| choose instead.

    C++ kernels (HIP's own style: no ``extern "C"``) are found by name. |name_expressions|
    (``["transpose<16>", "ops::scale<float>", "fill(double*, double, unsigned)"]``) are
    instantiated (their addresses taken in host code, which adds no device code) and each
    record is named by its expression, as written; clang says which symbol it names, through a
    probe compile (:mod:`modpack.modules.cxx_names` tells how), so typedefs and any spelling of
    a template argument resolve as in C++; one of several overloads is named by its signature.
    Every other kernel in the code objects is recorded too: a plain C++ kernel by its qualified
    name (``"bias_gelu"``), an instantiation the source makes itself as the demangler spells it
    (``"transpose<16u>"``), each of several overloads by its signature, an ``extern "C"`` one
    by its name. For code objects built elsewhere, |name_expressions| match those demangled
    names (spelled as the demangler spells them).

    Each kernel's record comes from the code objects' metadata (the NT_AMDGPU_METADATA note):
    its arguments' kinds, offsets and sizes, and for OpenCL C their types. HIP code objects do
    not record scalar types: a C++ kernel's come from its mangled symbol, an ``extern "C"``
    kernel's from the source's ``__global__`` signature, and for binaries from |functions|
    (``{"axpy": ["float32", "float32*", "float32*", "int32"]}``; a C++ kernel is named there by
    its expression or short name), which are checked against the metadata. Every code object
    must define the same kernels with the same argument layout.

    name : the module's name; its kernels are then also found as ``"name/kernel"``.

    Every kernel is called with its arguments followed by grid x, y, z (in blocks) and block
    x, y, z (and the dynamic LDS bytes when its launch tags end with ``"dyn_shared_memory"``).
    At the first launch on a device, the code object for the device's target ID is chosen (its
    processor, or a generic target covering it; xnack and sramecc settings honoured; the rule
    is in modpack/kinds/rocm.h).
    """
    expressions = check_name_expressions(name_expressions)
    options = check_compiler_options(options, "rocm_module")
    if (source is None) == (binaries is None):
        raise ArgumentError("rocm_module takes source or binaries=, exactly one of them")
    if binaries is not None:
        if targets is not None or language is not None:
            raise ArgumentError("targets= and language= are for compiling source; binaries are "
                                "used as given")
        objects = _code_objects(binaries)
        matched = (lower_by_demangled(expressions, [k.name for k in objects[0].kernels],
                                      "the code objects") if expressions else {})
        return _module(objects, functions, None, None, name, matched)
    source_path = None
    if isinstance(source, os.PathLike):
        source_path = Path(source)
        if not source_path.is_file():
            raise MissingFileError(f"the ROCm source file {source_path} does not exist")
        source = source_path.read_text()
    if not isinstance(source, str):
        raise ArgumentError("rocm_module expects OpenCL C or HIP source as a str or a path")
    if isinstance(targets, (str, bytes)) or not targets:
        raise ArgumentError("targets must be a non-empty list of target IDs such as ['gfx90a', "
                            "'gfx908:xnack-']")
    targets = list(targets)
    for t in targets:
        check_target(t, "targets")
    if len(set(targets)) != len(targets):
        raise ArgumentError(f"targets has duplicates: {targets}")
    if language is None:
        language = "hip" if "__global__" in source else "opencl"
    if language not in ("opencl", "hip"):
        raise ArgumentError(f"language must be 'opencl' or 'hip', not {language!r}")
    if expressions and language != "hip":
        raise ArgumentError("name_expressions= are for HIP (C++) kernels; OpenCL C kernels are "
                            "found by their names")
    # The expressions' addresses taken in host code instantiate their kernels, and add no
    # device code; a probe compile then says which symbol each names (modules/cxx_names.py).
    compiled = instantiation_source(source, expressions) if expressions else source
    try:
        objects = [read_code_object(compile_source(compiled, t, language, list(options),
                                                   source_path), f"the {t} build")
                   for t in targets]
        lowered: dict[str, str] = {}
        if expressions:
            probe = compile_source(probe_source(source, expressions), targets[0], language,
                                   list(options), source_path, ir=True)
            lowered = lower_from_probe(expressions, hip_ir_functions(probe),
                                       [k.name for k in objects[0].kernels], "clang")
    except CompileError as exc:
        raise hinted(exc, expressions) from None
    return _module(objects, functions, source, language, name, lowered)


def _code_objects(binaries: Mapping[str, Any]) -> list[CodeObject]:
    """|binaries|' code objects, each checked against its key."""
    if not isinstance(binaries, Mapping):
        raise ArgumentError("binaries must map target IDs ('gfx90a', 'gfx942:xnack-') to "
                            f"code objects' bytes, not {type(binaries).__name__}")
    if not binaries:
        raise ArgumentError("binaries is empty: give at least one code object, keyed by its "
                            "target ID ({'gfx90a': code_object}), or leave binaries out and "
                            "pass source")
    objects = []
    for key, data in binaries.items():
        where = f"binaries[{key!r}]"
        check_target(key, where)
        try:
            data = bytes(memoryview(data).cast("B"))
        except TypeError:
            raise ArgumentError(f"{where} must be a code object's bytes, not "
                                f"{type(data).__name__}") from None
        obj = read_code_object(data, where)
        if obj.target != key:
            raise ArgumentError(f"{where} is a code object for {obj.target}, not {key}; key "
                                f"it {obj.target!r}")
        objects.append(obj)
    return objects


def _module(objects: list[CodeObject], functions: Any, source: str | None,
            language: str | None, name: str | None, lowered: Mapping[str, str]) -> ROCmModule:
    first = objects[0]
    names = [k.name for k in first.kernels]
    if not names:
        raise ArgumentError(f"the {first.target} code object defines no kernel")
    for other in objects[1:]:
        if sorted(k.name for k in other.kernels) != sorted(names):
            raise ArgumentError(f"the code objects define different kernels: {first.target} "
                                f"{sorted(names)}, {other.target} "
                                f"{sorted(k.name for k in other.kernels)}")
    metadata = {k.name: k for k in first.kernels}
    called = record_names(names)
    if functions is not None:
        infos = [_with_symbol(i, lowered, called) for i in kernel_infos(functions, LAUNCH_TAGS)]
    else:
        infos = _records(first, source if language == "hip" else None, lowered, called)
    twice = sorted({i.name for i in infos if [j.name for j in infos].count(i.name) > 1})
    if twice:
        raise ArgumentError(f"kernels named more than once: {twice}")
    layouts = []
    for info in infos:
        symbol = info.symbol or info.name
        if symbol not in metadata:
            raise ArgumentError(f"kernel {info.name} is not in the code objects (they define "
                                f"{sorted(called.values())})")
        layout = _layout(info, metadata[symbol], first.target)
        for other in objects[1:]:
            theirs = {k.name: k for k in other.kernels}[symbol]
            if _layout(info, theirs, other.target) != layout:
                raise ArgumentError(f"kernel {info.name}: the {first.target} and {other.target} "
                                    "code objects lay its arguments out differently")
        layouts.append(layout)
    return ROCmModule(objects, infos, layouts, source=source, name=name)


def _with_symbol(info: KernelInfo, lowered: Mapping[str, str], called: Mapping[str, str]
                 ) -> KernelInfo:
    """A record given by hand, with the symbol its name stands for: a name expression's, or
    the C++ kernel it is the short name of (``"vadd"`` for ``_Z4vaddPKfS0_Pfi``)."""
    if info.symbol is not None or info.name in called:
        return info
    symbol = lowered.get(info.name) or next((s for s, n in called.items() if n == info.name),
                                            None)
    return info if symbol is None else dataclasses.replace(info, symbol=symbol)


def _records(code: CodeObject, hip_source: str | None, lowered: Mapping[str, str],
             called: Mapping[str, str]) -> list[KernelInfo]:
    """A record per name expression, then per other kernel of |code|: a C++ kernel by the
    name |called| gives it, its arguments from its demangled signature; an extern "C" one by
    its symbol, its arguments from the |hip_source|'s signature, else (OpenCL C) from the
    metadata."""
    listed = set(lowered.values())
    rest = [k for k in code.kernels if k.name not in listed]
    cxx = {called[k.name]: k.name for k in rest if is_mangled(k.name)}
    by_symbol = {r.symbol: r for r in records_from_symbols(cxx, LAUNCH_TAGS, "rocm_module")}
    plain = {k.name for k in rest if not is_mangled(k.name)}
    parsed = {}
    if hip_source is not None and plain:
        try:
            parsed = {i.name: i for i in parse_cuda_signatures(hip_source, plain)}
        except ValueError as exc:
            raise ArgumentError(f"rocm_module: {exc}") from None
    infos = records_from_symbols(lowered, LAUNCH_TAGS, "rocm_module")
    for kernel in rest:
        if kernel.name in by_symbol:
            infos.append(by_symbol[kernel.name])
        elif hip_source is None:
            infos.append(_record_from_metadata(kernel, code.target))
        elif kernel.name in parsed:
            infos.append(KernelInfo(kernel.name, parsed[kernel.name].args, LAUNCH_TAGS))
        else:
            raise ArgumentError(f"kernel {kernel.name} is in the code objects but its signature "
                                "is not in the HIP source (is it made by a macro?): pass "
                                "functions=")
    return infos


def _record_from_metadata(kernel: KernelMetadata, target: str) -> KernelInfo:
    args = []
    for i, arg in enumerate(kernel.explicit_args):
        where = f"kernel {kernel.name} argument {i} ({target} metadata)"
        if arg.value_kind == "global_buffer":
            base = (arg.type_name or "").replace("*", "").strip()
            dtype = _OPENCL_TYPES.get(base)
            args.append(KernelArg.parse(f"{dtype}*" if dtype else "void*"))
        elif arg.value_kind == "by_value":
            dtype = _OPENCL_TYPES.get((arg.type_name or "").strip())
            if dtype is None:
                raise ArgumentError(
                    f"{where}: a {arg.size}-byte value of type {arg.type_name or 'unknown'}; "
                    "code objects built from HIP do not record scalar types: pass functions= "
                    "(e.g. {'axpy': ['float32', 'float32*', 'float32*', 'int32']})")
            args.append(KernelArg.parse(dtype))
        else:
            raise ArgumentError(f"{where} is {arg.value_kind}, which modpack cannot pass (buffers "
                                "and scalars only; dynamic LDS through dyn_shared_memory)")
    return KernelInfo(kernel.name, tuple(args), LAUNCH_TAGS)


def _layout(info: KernelInfo, kernel: KernelMetadata, target: str) -> Layout:
    explicit = kernel.explicit_args
    where = f"kernel {info.name} ({target})"
    if len(explicit) != len(info.args):
        raise ArgumentError(f"{where} has {len(info.args)} arguments in its record but "
                            f"{len(explicit)} in the code object's metadata")
    for i, (arg, meta) in enumerate(zip(info.args, explicit)):
        if arg.kind == "local":
            raise ArgumentError(f"{where} argument {i}: local memory arguments are not passed by "
                                "the rocm kind; use dyn_shared_memory")
        expected = "by_value" if arg.kind == SCALAR else "global_buffer"
        if arg.kind == NULL and meta.value_kind == "global_buffer":
            expected = meta.value_kind
        if meta.value_kind != expected or meta.size != _arg_size(arg):
            raise ArgumentError(f"{where} argument {i} is {arg} ({_arg_size(arg)} bytes) in its "
                                f"record but {meta.value_kind} of {meta.size} bytes in the code "
                                "object's metadata")
    offsets = tuple(a.offset for a in explicit)
    end = max((a.offset + a.size for a in explicit), default=0)
    return Layout(end, offsets)
