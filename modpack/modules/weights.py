"""The ``weights`` kind: a module that refers to a weight file instead of holding arrays.

Its payload (``csrc/include/modpack/kinds/weights.h``, read here through the binding) names
the file, its content digest and the arrays the module hands out with their dtypes and shapes,
so that the runtime finds the file when the library loads and refuses any other. The arrays
themselves never enter the library: changing the code does not rewrite the weights, two
libraries compiled from one model share one weight file, and the weights can be swapped in a
loaded tree. Host code reads them exactly as a ``const`` module's (``mp_backend_get_array``).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..errors import ArgumentError, MissingFileError
from ..format.layout import check_struct
from ..runtime.binding import check, ffi, lib, string
from ..runtime.weight_files import describe_module, load_options
from .base import BinaryModule

__all__ = ["ArraySpec", "WeightsModule", "weights_module"]

_HEADER = check_struct(struct.Struct("<II32sQIIQ"), "mp_weights_ref_header_v1_t")
_RECORD = check_struct(struct.Struct("<QIBBHIIQ"), "mp_weights_ref_record_v1_t")
_MAX_FILE_NAME: int = lib.MP_WEIGHTS_REF_MAX_FILE_NAME
TYPE_KEY: str = string(lib.MP_WEIGHTS_KIND)

ArraySpec = tuple[str, tuple[int, int, int], tuple[int, ...]]
"""An array a weights module hands out: its name, DLPack dtype (code, bits, lanes) and shape."""


class WeightsModule(BinaryModule):
    """A reference to the weight file named |file_name| whose content digest is |digest|,
    handing out |arrays| (each an :data:`ArraySpec`). Made by :func:`weights_module`, or by
    ``export_library(weights=...)`` in place of each ``const`` module."""

    type_key = TYPE_KEY

    def __init__(self, file_name: str, digest: bytes, arrays: Sequence[ArraySpec]) -> None:
        super().__init__()
        encoded = file_name.encode() if isinstance(file_name, str) else b""
        if not 1 <= len(encoded) <= _MAX_FILE_NAME or "/" in file_name or "\0" in file_name:
            raise ArgumentError(f"a weight file's name is a file name of 1 to {_MAX_FILE_NAME} "
                                f"bytes, not {file_name!r}")
        if not isinstance(digest, bytes) or len(digest) != 32:
            raise ArgumentError("a weight file's content digest is 32 bytes (SHA-256)")
        self.file_name = file_name
        self.digest = digest
        self.arrays_spec: list[ArraySpec] = list(arrays)
        self._payload = self._pack()

    def _pack(self) -> bytes:
        names = [name.encode() for name, _, _ in self.arrays_spec]
        cursor = _HEADER.size + _RECORD.size * len(names)
        shape_offsets = []
        for _, _, shape in self.arrays_spec:
            shape_offsets.append(cursor)
            cursor += 8 * len(shape)
        name_offsets = []
        for n in names:
            name_offsets.append(cursor)
            cursor += len(n)
        file_name = self.file_name.encode()
        parts = [_HEADER.pack(lib.MP_WEIGHTS_REF_VERSION, 0, self.digest, cursor, len(file_name),
                              0, len(names))]
        for i, (_, (code, bits, lanes), shape) in enumerate(self.arrays_spec):
            parts.append(_RECORD.pack(name_offsets[i], len(names[i]), code, bits, lanes,
                                      len(shape), 0, shape_offsets[i]))
        parts.extend(struct.pack(f"<{len(shape)}Q", *shape) for _, _, shape in self.arrays_spec)
        parts.extend(names)
        parts.append(file_name)
        return b"".join(parts)

    def payload_size(self) -> int:
        return len(self._payload)

    def payload_chunks(self) -> Iterable[Any]:
        yield self._payload

    def __repr__(self) -> str:
        return (f"<modpack.WeightsModule {self.file_name!r} arrays={len(self.arrays_spec)} "
                f"sha256:{self.digest.hex()[:16]}...>")


def weights_module(path: str | os.PathLike[str]) -> WeightsModule:
    """A module for a tree that refers to the existing weight file at |path| (written by
    :func:`modpack.save_weights`) instead of holding its arrays: host code reads them with
    ``mp_backend_get_array`` / ``mp_backend_get_array_on`` exactly as from a ``const`` module.
    The library records the file's name and content digest; at load the file is looked for
    beside the library (or where ``load_module(..., weights=...)`` says) and must be this very
    file. Only the file's index is read here, not its arrays."""
    shown = Path(path)
    if not shown.is_file():
        raise MissingFileError(f"no such weight file: {shown}")
    options = load_options(lib.MP_LOAD_SKIP_PAYLOAD_CHECKSUMS)
    out = ffi.new("mp_module_t**")
    check(lib.mp_weights_load(os.fsencode(shown), options.pointer, out))
    handle = ffi.gc(out[0], lib.mp_module_release)
    info = describe_module(handle)
    return WeightsModule(shown.name, bytes.fromhex(info["digest"].removeprefix("sha256:")),
                         _specs(handle))


def _specs(handle: Any) -> list[ArraySpec]:
    """The arrays of a loaded weights module, as specs."""
    out: list[ArraySpec] = []
    name = ffi.new("char**")
    tensor = ffi.new("DLTensor**")
    for i in range(lib.mp_module_array_count(handle)):
        check(lib.mp_module_array_at(handle, i, name, tensor))
        t = tensor[0]
        out.append((string(name[0]), (t.dtype.code, t.dtype.bits, t.dtype.lanes),
                    tuple(t.shape[d] for d in range(t.ndim))))
    return out
