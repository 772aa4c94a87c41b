"""Function-info records of device kernels, as stored in device module payloads.

A record names the kernel, gives each argument's kind (a buffer in device memory, a scalar,
local memory, or a hidden NULL pointer) and dtype, and tags the trailing integer arguments that
carry launch dimensions. Version 2 records also carry the symbol the device code defines (when
the name is a C++ name expression) and launch values fixed at build time (a block size, dynamic
shared memory), which callers then do not pass. The layout and limits are in
csrc/include/modpack/kinds/kernel.h, read here through the runtime binding; each kind's launch
tags come from the runtime too (:func:`launch_tags`).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ArgumentError
from ..runtime.binding import ffi, lib
from ..runtime.dtypes import ML_DTYPE_NAMES, as_dtype, display_name, dtype_to_dl

__all__ = ["BUFFER", "LOCAL", "NULL", "SCALAR", "UNTYPED_POINTER", "KernelArg", "KernelInfo",
           "builtin_kinds", "kernel_infos", "launch_tags"]

BUFFER, SCALAR, LOCAL, NULL = "buffer", "scalar", "local", "null"
_ARG_KINDS = {BUFFER: lib.MP_KERNEL_ARG_BUFFER, SCALAR: lib.MP_KERNEL_ARG_SCALAR,
              LOCAL: lib.MP_KERNEL_ARG_LOCAL, NULL: lib.MP_KERNEL_ARG_NULL}
_POINTER_PREFIXES = {"local": LOCAL, "null": NULL}
# What the C reader accepts (modpack/kinds/kernel.h); checked when a record is made.
MAX_NAME_BYTES: int = lib.MP_KERNEL_MAX_NAME
MAX_ARGS: int = lib.MP_KERNEL_MAX_ARGS
MAX_LAUNCH_TAGS: int = lib.MP_KERNEL_MAX_LAUNCH_TAGS
MAX_LAUNCH_TAG_BYTES: int = lib.MP_KERNEL_MAX_LAUNCH_TAG
# The record's dtype code of an untyped pointer: any dtype is accepted.
_DL_OPAQUE_HANDLE: int = lib.kDLOpaqueHandle


def builtin_kinds() -> tuple[str, ...]:
    """The type keys of the runtime's built-in kinds, from its one list
    (csrc/src/kinds/builtin.c, through ``mp_builtin_kind``), in its order."""
    kinds: list[str] = []
    while (key := lib.mp_builtin_kind(len(kinds))) != ffi.NULL:
        kinds.append(ffi.string(key).decode())
    return tuple(kinds)


def launch_tags(type_key: str) -> tuple[str, ...]:
    """The launch tags of a built-in device kind's kernels, in its launch-slot order, as the
    runtime defines them (``("global.x", ..., "local.z")`` for ``"opencl"``)."""
    tags: list[str] = []
    while (tag := lib.mp_kind_launch_tag(type_key.encode(), len(tags))) != ffi.NULL:
        tags.append(ffi.string(tag).decode())
    return tuple(tags)


@dataclass(frozen=True)
class KernelArg:
    """One parameter of a kernel: a buffer in device memory (of one dtype, or untyped), a
    scalar (a vector of |lanes| values for OpenCL vector types passed by value), local
    memory (OpenCL ``__local``: sized at the call with ``modpack.local_memory(nbytes)``), or
    a pointer the caller does not pass and the launch sets to NULL (a compiler's hidden
    scratch or profiling pointer, such as Triton's)."""

    kind: str  # "buffer", "scalar", "local" or "null"
    dtype: np.dtype | None  # None: an untyped pointer (``void*``) taking arrays of any dtype
    lanes: int = 1
    # Where the source put it ("global", "constant", "local"); informative, not stored.
    address_space: str | None = field(default=None, compare=False)

    @classmethod
    def parse(cls, spec: str | KernelArg) -> KernelArg:
        """``"float32*"`` is a buffer of float32, ``"int32"`` a scalar, ``"void*"`` a buffer
        of any dtype, ``"float32x4"`` a vector scalar, ``"local float32*"`` (or ``"local*"``)
        local memory, ``"null void*"`` a pointer passed as NULL by the launch."""
        if isinstance(spec, KernelArg):
            return spec
        if not isinstance(spec, str):
            raise ArgumentError(f"argument spec must be a str such as 'float32*', got {spec!r}")
        text = " ".join(spec.replace("*", " * ").split())
        prefix, _, rest = text.partition(" ")
        kind = _POINTER_PREFIXES.get(prefix) if text.endswith("*") else None
        base = rest if kind else text
        kind = kind or (BUFFER if text.endswith("*") else SCALAR)
        base = base.rstrip("*").strip()
        if kind != SCALAR and base in ("", "void"):
            return UNTYPED_POINTER if kind == BUFFER else cls(kind, None)
        lanes = 1
        vector = re.fullmatch(r"(\w+)x(\d+)", base)
        if kind == SCALAR and vector:
            base, lanes = vector[1], int(vector[2])
        try:
            dtype = as_dtype(base)
            dtype_to_dl(dtype)
        except TypeError as exc:
            if base in ML_DTYPE_NAMES:  # a dtype name, but ml_dtypes is missing
                raise ArgumentError(f"argument spec {spec!r}: {exc}") from None
            raise ArgumentError(
                f"argument spec {spec!r}: use a numpy dtype name, with '*' for a buffer "
                "(e.g. 'float32*', 'int64', 'void*', 'float32x4', 'local float32*', "
                "'null void*')"
            ) from None
        return cls(kind, dtype, lanes)

    def __str__(self) -> str:
        name = "void" if self.dtype is None else display_name(self.dtype)
        if self.kind in (LOCAL, NULL):
            return f"{self.kind} {name}*"
        if self.kind == BUFFER:
            return f"{name}*"
        return name if self.lanes == 1 else f"{name}x{self.lanes}"


UNTYPED_POINTER = KernelArg(BUFFER, None)


@dataclass(frozen=True)
class KernelInfo:
    """A kernel's record. |name| is what callers look up (a C name, or a C++ name expression
    such as ``"gemm<64>"``); |symbol| the name the device code defines when that differs (the
    lowered, mangled name); |launch_tags| the launch values a call passes after the
    arguments, |fixed| those fixed here (``{"threadIdx.x": 128}``), which calls do not pass."""

    name: str
    args: tuple[KernelArg, ...]
    launch_tags: tuple[str, ...]
    symbol: str | None = None
    fixed: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Enforce the limits of the C reader here, so a bad record fails when it is made
        rather than when a library carrying it is loaded."""
        if not isinstance(self.name, str):
            raise ArgumentError(f"kernel name must be a str, got {type(self.name).__name__}")
        _check_string(self.name, "kernel name", MAX_NAME_BYTES, "")
        shown = self.name if len(self.name) <= 64 else self.name[:64] + "..."
        if isinstance(self.launch_tags, str):
            raise ArgumentError(f"kernel {shown}: launch tags must be a sequence of str")
        object.__setattr__(self, "args", tuple(KernelArg.parse(a) for a in self.args))
        object.__setattr__(self, "launch_tags", tuple(self.launch_tags))
        if len(self.args) > MAX_ARGS:
            raise ArgumentError(
                f"kernel {shown}: {len(self.args)} arguments exceed the limit of {MAX_ARGS}"
            )
        if len(self.launch_tags) > MAX_LAUNCH_TAGS:
            raise ArgumentError(
                f"kernel {shown}: {len(self.launch_tags)} launch tags exceed the limit of "
                f"{MAX_LAUNCH_TAGS}"
            )
        for tag in self.launch_tags:
            if not isinstance(tag, str):
                raise ArgumentError(f"kernel {shown}: launch tag {tag!r} is not a str")
            _check_string(tag, "launch tag", MAX_LAUNCH_TAG_BYTES, f"kernel {shown}: ")
        if self.symbol is not None:
            if not isinstance(self.symbol, str):
                raise ArgumentError(f"kernel {shown}: symbol must be a str")
            _check_string(self.symbol, "symbol", MAX_NAME_BYTES, f"kernel {shown}: ")
            if self.symbol == self.name:
                object.__setattr__(self, "symbol", None)
        if not isinstance(self.fixed, Mapping):
            raise ArgumentError(f"kernel {shown}: fixed must map launch tags to ints, "
                                f"e.g. {{'threadIdx.x': 128}}")
        fixed = dict(self.fixed)
        for tag, value in fixed.items():
            if not isinstance(tag, str):
                raise ArgumentError(f"kernel {shown}: fixed launch tag {tag!r} is not a str")
            _check_string(tag, "launch tag", MAX_LAUNCH_TAG_BYTES, f"kernel {shown}: ")
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not (
                    0 <= value < 2**64):
                raise ArgumentError(f"kernel {shown}: fixed {tag} must be a non-negative int, "
                                    f"got {value!r}")
            fixed[tag] = int(value)
        if len(self.launch_tags) + len(fixed) > MAX_LAUNCH_TAGS:
            raise ArgumentError(f"kernel {shown}: {len(self.launch_tags) + len(fixed)} passed and "
                                f"fixed launch tags exceed the limit of {MAX_LAUNCH_TAGS}")
        object.__setattr__(self, "fixed", fixed)

    def __hash__(self) -> int:
        return hash((self.name, self.args, self.launch_tags, self.symbol,
                     tuple(self.fixed.items())))

    @property
    def record_version(self) -> int:
        """1 when the record needs nothing of version 2 (older runtimes read it), else 2."""
        hidden = any(a.kind == NULL for a in self.args)
        return 2 if self.symbol or self.fixed or hidden else 1

    def check_tags(self, kind_tags: Sequence[str]) -> None:
        """Every passed and fixed launch tag is one of the kind's |kind_tags|, each at most
        once (what the runtime checks at load time)."""
        tags = [*self.launch_tags, *self.fixed]
        bad = [t for t in tags if t not in kind_tags]
        if bad:
            raise ArgumentError(f"kernel {self.name}: unknown launch tags {bad}; use "
                                f"{list(kind_tags)}")
        twice = sorted({t for t in tags if tags.count(t) > 1})
        if twice:
            raise ArgumentError(f"kernel {self.name}: launch tags {twice} are given twice (a "
                                "tag is either passed by calls or fixed, not both)")

    def encode(self, record_version: int = 1) -> bytes:
        """The record in layout |record_version| (the payload's choice: at least
        :attr:`record_version`)."""
        if record_version < self.record_version:
            raise ArgumentError(f"kernel {self.name} needs record version {self.record_version}")
        name = self.name.encode()
        parts = [struct.pack("<I", len(name)), name, struct.pack("<I", len(self.args))]
        for arg in self.args:
            code, bits, lanes = (
                (_DL_OPAQUE_HANDLE, 8, 1) if arg.dtype is None else dtype_to_dl(arg.dtype)
            )
            lanes = arg.lanes if arg.kind == SCALAR else lanes
            parts.append(struct.pack("<BBBB", _ARG_KINDS[arg.kind], code, bits, lanes))
        parts.append(struct.pack("<I", len(self.launch_tags)))
        parts += [_string(tag) for tag in self.launch_tags]
        if record_version >= 2:
            parts.append(_string(self.symbol or ""))
            parts.append(struct.pack("<I", len(self.fixed)))
            parts += [_string(tag) + struct.pack("<Q", v) for tag, v in self.fixed.items()]
        return b"".join(parts)

    def signature(self) -> str:
        return f"{self.name}({', '.join(map(str, self.args))})"


def kernel_infos(
    functions: Mapping[str, Any] | Iterable[KernelInfo],
    default_launch_tags: Sequence[str],
) -> list[KernelInfo]:
    """Normalise user ``functions=`` into records: ``{name: ["float32*", "int32"]}``,
    ``{name: {"args": [...], "launch": [...]}}`` or KernelInfo objects."""
    if not isinstance(functions, Mapping):
        if isinstance(functions, (str, bytes)) or not isinstance(functions, Iterable):
            _bad(functions)
        return [f if isinstance(f, KernelInfo) else _bad(f) for f in functions]
    out = []
    for name, spec in functions.items():
        if isinstance(spec, KernelInfo):
            out.append(spec)
            continue
        launch, extra = default_launch_tags, {}
        if isinstance(spec, Mapping):
            unknown = set(spec) - {"args", "launch", "fixed", "symbol"}
            if unknown:
                raise ArgumentError(f"kernel {name}: unknown keys {sorted(unknown)} (a kernel "
                                    "spec has 'args', 'launch', 'fixed' and 'symbol')")
            extra = {"fixed": spec.get("fixed", {}), "symbol": spec.get("symbol")}
            if not isinstance(extra["fixed"], Mapping):
                raise ArgumentError(f"kernel {name}: 'fixed' must map launch tags to ints, "
                                    f"e.g. {{'threadIdx.x': 128}}, got {extra['fixed']!r}")
            launch = spec.get("launch", [t for t in default_launch_tags
                                         if t not in extra["fixed"]])
            if isinstance(launch, str) or not isinstance(launch, Iterable):
                raise ArgumentError(
                    f"kernel {name}: 'launch' must be a list of tags, got {launch!r}")
            spec = spec.get("args", [])
            if isinstance(spec, (str, bytes)) or not isinstance(spec, Iterable):
                raise ArgumentError(f"kernel {name}: 'args' must be a list of argument specs "
                                    f"such as ['float32*', 'int32'], got {spec!r}")
        if isinstance(spec, (str, bytes)) or not isinstance(spec, Iterable):
            raise ArgumentError(f"kernel {name}: its spec is a list of argument specs such as "
                                "['float32*', 'int32'], a dict with 'args' (and 'launch', "
                                f"'fixed', 'symbol') or a KernelInfo, not {spec!r}")
        out.append(KernelInfo(name, tuple(KernelArg.parse(a) for a in spec), tuple(launch),
                              **extra))
    return out


def _string(text: str) -> bytes:
    encoded = text.encode()
    return struct.pack("<I", len(encoded)) + encoded


def _check_string(text: str, what: str, max_bytes: int, where: str) -> None:
    size = len(text.encode())
    if size == 0:
        raise ArgumentError(f"{where}{what} is empty")
    if size > max_bytes:
        raise ArgumentError(f"{where}{what} of {size} bytes exceeds the limit of {max_bytes}")
    if "\0" in text:
        raise ArgumentError(f"{where}{what} {text!r} contains a NUL character")


def _bad(value: Any) -> KernelInfo:
    raise ArgumentError(f"functions must map kernel names to argument specs "
                        f"({{'vadd': ['float32*', 'int32']}}) or be a list of KernelInfo, "
                        f"got {value!r}")
