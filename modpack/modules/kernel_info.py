"""Function-info records of device kernels, as stored in device module payloads.

A record names the kernel, gives each argument's kind (a buffer in device memory, or a scalar)
and dtype, and tags the trailing integer arguments that carry launch dimensions. The C runtime
reads them in csrc/src/kernel_info.c; both sides must agree byte for byte.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..runtime.dtypes import dtype_to_dl

__all__ = ["UNTYPED_POINTER", "KernelArg", "KernelInfo", "kernel_infos"]

BUFFER, SCALAR = "buffer", "scalar"
_DL_OPAQUE_HANDLE = 3  # the record's dtype code of an untyped pointer: any dtype is accepted


@dataclass(frozen=True)
class KernelArg:
    kind: str  # "buffer" or "scalar"
    dtype: np.dtype | None  # None: an untyped pointer (``void*``) taking arrays of any dtype

    @classmethod
    def parse(cls, spec: str | KernelArg) -> KernelArg:
        """``"float32*"`` is a buffer of float32, ``"int32"`` a scalar, ``"void*"`` a buffer
        of any dtype."""
        if isinstance(spec, KernelArg):
            return spec
        text = spec.strip()
        if text.replace(" ", "") == "void*":
            return UNTYPED_POINTER
        kind = BUFFER if text.endswith("*") else SCALAR
        try:
            dtype = np.dtype(text.rstrip("*").strip())
            dtype_to_dl(dtype)
        except TypeError:
            raise ValueError(
                f"argument spec {spec!r}: use a numpy dtype name, with '*' for a buffer "
                "(e.g. 'float32*', 'int64')"
            ) from None
        return cls(kind, dtype)

    def __str__(self) -> str:
        if self.dtype is None:
            return "void*"
        return f"{self.dtype}{'*' if self.kind == BUFFER else ''}"


UNTYPED_POINTER = KernelArg(BUFFER, None)


@dataclass(frozen=True)
class KernelInfo:
    name: str
    args: tuple[KernelArg, ...]
    launch_tags: tuple[str, ...]

    def encode(self) -> bytes:
        name = self.name.encode()
        parts = [struct.pack("<I", len(name)), name, struct.pack("<I", len(self.args))]
        for arg in self.args:
            code, bits, lanes = (
                (_DL_OPAQUE_HANDLE, 8, 1) if arg.dtype is None else dtype_to_dl(arg.dtype)
            )
            parts.append(struct.pack("<BBBB", 0 if arg.kind == BUFFER else 1, code, bits, lanes))
        parts.append(struct.pack("<I", len(self.launch_tags)))
        for tag in self.launch_tags:
            parts += [struct.pack("<I", len(tag)), tag.encode()]
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
        return [f if isinstance(f, KernelInfo) else _bad(f) for f in functions]
    out = []
    for name, spec in functions.items():
        if isinstance(spec, KernelInfo):
            out.append(spec)
            continue
        launch = default_launch_tags
        if isinstance(spec, Mapping):
            launch = tuple(spec.get("launch", default_launch_tags))
            spec = spec.get("args", [])
        out.append(KernelInfo(name, tuple(KernelArg.parse(a) for a in spec), tuple(launch)))
    return out


def _bad(value: Any) -> KernelInfo:
    raise TypeError(f"functions must map kernel names to argument specs, got {value!r}")
