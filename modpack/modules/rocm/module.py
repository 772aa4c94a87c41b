"""The ``rocm`` kind: AMD GPU code objects for several target IDs plus a function-info record per
kernel with its argument layout, all read from the code objects' metadata, and its payload
writer.

Read by the C runtime's ``loadbinary_rocm`` (csrc/src/kinds/rocm/), which needs no GPU to load
the library and picks the code object for each device's target ID at its first launch. The
payload's layout and numbers are in csrc/include/modpack/kinds/rocm.h, read here through the
runtime binding.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import ArgumentError, MissingFileError, ModpackError
from ...format.layout import check_struct
from ...runtime.binding import error_from_status, ffi, lib
from ..device import CodeWriter, DeviceModule, check_compiler_options, code_as_is
from ..kernel_info import NULL, SCALAR, KernelArg, KernelInfo, kernel_infos, launch_tags
from .code_object import CodeObject, KernelMetadata, read_code_object
from .compile import compile_source

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
) -> ROCmModule:
    """A ROCm module, from AMD GPU code objects or from source compiled here by clang.

    ``rocm_module(binaries={"gfx90a": code_object, "gfx942:xnack-": ..., ...})`` takes code
    objects (``.hsaco`` files' bytes), each keyed by its target ID, which must be the one its
    metadata names (``amdhsa.target``).

    ``rocm_module(source, targets=["gfx90a", "gfx908:xnack-"])`` compiles |source| (the text, or
    the path of a file) once per target ID with clang (``$CLANG``, else ``clang`` on PATH):
    |language| ``"opencl"`` (OpenCL C) or ``"hip"``, guessed from the source when omitted
    (``__kernel`` or ``__global__``). Without ROCm's device libraries (clang is given
    ``-nogpulib``; pass ``--rocm-path=...`` in |options| to use them), kernels use the
    ``__builtin_amdgcn_*`` builtins; HIP source then gets ``__global__``, ``__device__`` and
    ``__shared__`` defined. |options| are extra clang flags.

    Each kernel's record comes from the code objects' metadata (the NT_AMDGPU_METADATA note):
    its arguments' kinds, offsets and sizes, and for OpenCL C their types; HIP code objects do
    not record scalar types, so HIP source's ``__global__`` signatures give them, and HIP
    binaries need |functions| (``{"axpy": ["float32", "float32*", "float32*", "int32"]}``),
    which are checked against the metadata. Every code object must define the same kernels with
    the same argument layout.

    name : the module's name; its kernels are then also found as ``"name/kernel"``.

    Every kernel is called with its arguments followed by grid x, y, z (in blocks) and block
    x, y, z (and the dynamic LDS bytes when its launch tags end with ``"dyn_shared_memory"``).
    At the first launch on a device, the code object for the device's target ID is chosen (its
    processor, or a generic target covering it; xnack and sramecc settings honoured; the rule
    is in modpack/kinds/rocm.h).
    """
    options = check_compiler_options(options, "rocm_module")
    if (source is None) == (binaries is None):
        raise ArgumentError("rocm_module takes source or binaries=, exactly one of them")
    if binaries is not None:
        if targets is not None or language is not None:
            raise ArgumentError("targets= and language= are for compiling source; binaries are "
                                "used as given")
        if not isinstance(binaries, Mapping) or not binaries:
            raise ArgumentError("binaries must map target IDs ('gfx90a', 'gfx942:xnack-') to "
                                "code objects' bytes")
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
        return _module(objects, functions, None, None, name)
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
    objects = [read_code_object(compile_source(source, t, language, list(options), source_path),
                                f"the {t} build") for t in targets]
    return _module(objects, functions, source, language, name)


def _module(objects: list[CodeObject], functions: Any, source: str | None,
            language: str | None, name: str | None) -> ROCmModule:
    first = objects[0]
    names = [k.name for k in first.kernels]
    if not names:
        raise ModpackError(f"the {first.target} code object defines no kernel")
    for other in objects[1:]:
        if sorted(k.name for k in other.kernels) != sorted(names):
            raise ModpackError(f"the code objects define different kernels: {first.target} "
                               f"{sorted(names)}, {other.target} "
                               f"{sorted(k.name for k in other.kernels)}")
    metadata = {k.name: k for k in first.kernels}
    if functions is not None:
        infos = kernel_infos(functions, LAUNCH_TAGS)
    elif language == "hip" and source is not None:
        infos = _hip_records(source, metadata)
    else:
        infos = [_record_from_metadata(k, first.target) for k in first.kernels]
    layouts = []
    for info in infos:
        symbol = info.symbol or info.name
        if symbol not in metadata:
            raise ModpackError(f"kernel {info.name} is not in the code objects (they define "
                               f"{sorted(metadata)})")
        layout = _layout(info, metadata[symbol], first.target)
        for other in objects[1:]:
            theirs = {k.name: k for k in other.kernels}[symbol]
            if _layout(info, theirs, other.target) != layout:
                raise ModpackError(f"kernel {info.name}: the {first.target} and {other.target} "
                                   "code objects lay its arguments out differently")
        layouts.append(layout)
    return ROCmModule(objects, infos, layouts, source=source, name=name)


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
                raise ModpackError(
                    f"{where}: a {arg.size}-byte value of type {arg.type_name or 'unknown'}; "
                    "code objects built from HIP do not record scalar types: pass functions= "
                    "(e.g. {'axpy': ['float32', 'float32*', 'float32*', 'int32']})")
            args.append(KernelArg.parse(dtype))
        else:
            raise ModpackError(f"{where} is {arg.value_kind}, which modpack cannot pass (buffers "
                               "and scalars only; dynamic LDS through dyn_shared_memory)")
    return KernelInfo(kernel.name, tuple(args), LAUNCH_TAGS)


def _hip_records(source: str, metadata: Mapping[str, KernelMetadata]) -> list[KernelInfo]:
    from ..cuda.signatures import parse_cuda_signatures

    try:
        parsed = {i.name: i for i in parse_cuda_signatures(source)}
    except ValueError as exc:
        raise ModpackError(f"rocm_module: {exc}") from None
    infos = []
    for name in metadata:
        if name not in parsed:
            raise ModpackError(f"kernel {name} is in the code objects but its signature is not "
                               "in the HIP source (declare it extern \"C\" __global__, or pass "
                               "functions=)")
        infos.append(KernelInfo(name, parsed[name].args, LAUNCH_TAGS))
    return infos


def _layout(info: KernelInfo, kernel: KernelMetadata, target: str) -> Layout:
    explicit = kernel.explicit_args
    where = f"kernel {info.name} ({target})"
    if len(explicit) != len(info.args):
        raise ModpackError(f"{where} has {len(info.args)} arguments in its record but "
                           f"{len(explicit)} in the code object's metadata")
    for i, (arg, meta) in enumerate(zip(info.args, explicit)):
        if arg.kind == "local":
            raise ModpackError(f"{where} argument {i}: local memory arguments are not passed by "
                               "the rocm kind; use dyn_shared_memory")
        expected = "by_value" if arg.kind == SCALAR else "global_buffer"
        if arg.kind == NULL and meta.value_kind == "global_buffer":
            expected = meta.value_kind
        if meta.value_kind != expected or meta.size != _arg_size(arg):
            raise ModpackError(f"{where} argument {i} is {arg} ({_arg_size(arg)} bytes) in its "
                               f"record but {meta.value_kind} of {meta.size} bytes in the code "
                               "object's metadata")
    offsets = tuple(a.offset for a in explicit)
    end = max((a.offset + a.size for a in explicit), default=0)
    return Layout(end, offsets)
