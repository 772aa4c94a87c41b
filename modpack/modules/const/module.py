"""The ``const`` kind: named arrays (weights, constants) stored in the blob.

Written here, read by the C runtime's ``loadbinary_const`` (csrc/src/kinds/const/). The payload
layout and its numbers are in csrc/include/modpack/kinds/const.h, read here through the runtime
binding. Array bytes are streamed from the caller's arrays, never joined.

The module keeps references to the caller's arrays rather than copies (weights can be as large
as memory), so an array changed between ``const_module()`` and the export would be exported
changed without a word. Instead, each array's XXH3 is taken when the module is built and
checked again as the export streams it (XXH3 runs at memory speed, far above the disk's): a
changed array fails the export, naming it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ...compat import zip_strict
from ...errors import ArgumentError
from ...format.layout import check_struct
from ...runtime.array import numpy_of
from ...runtime.binding import lib
from ...runtime.digests import array_digest, plain_array_digest
from ...runtime.dtypes import array_dtype_to_dl, dtype_to_dl
from ..base import BinaryModule
from ..weights import WeightsModule

__all__ = ["ConstModule", "const_module"]

_HEADER = check_struct(struct.Struct("<IIQ"), "mp_const_header_v1_t")
_RECORD = check_struct(struct.Struct("<QIBBHIIQQQ"), "mp_const_record_v1_t")
_HEADER_SIZE, _RECORD_SIZE = _HEADER.size, _RECORD.size
_DATA_ALIGNMENT: int = lib.MP_CONST_DATA_ALIGNMENT
_MAX_NAME: int = lib.MP_CONST_MAX_NAME
_MAX_NDIM: int = lib.MP_CONST_MAX_NDIM


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


class ConstModule(BinaryModule):
    """Named numpy arrays carried inside the library."""

    type_key = "const"
    __slots__ = ("_arrays", "_digests", "_layout")

    def __init__(self, arrays: Mapping[str, Any]) -> None:
        super().__init__()
        if type(arrays) is not dict and not isinstance(arrays, Mapping):
            raise ArgumentError("const_module expects a mapping of name -> numpy array")
        self._arrays: dict[str, np.ndarray] = {}
        self._digests: dict[str, int] = {}
        for name, value in arrays.items():
            _check_name(name)
            # A plain C-contiguous array of a standard dtype is taken as it is, hashed in place
            # in one call; anything else is made one first.
            digest = plain_array_digest(value)
            if digest is None:
                value = _as_const_array(name, value)
                digest = array_digest(value)
            if value.ndim > _MAX_NDIM:
                raise ArgumentError(f"array {name!r} has {value.ndim} dimensions; the runtime "
                                    f"reads up to {_MAX_NDIM}: reshape it")
            self._arrays[name] = value
            self._digests[name] = digest
        # The payload's layout, planned when first asked for (at export): building a tree of
        # many small modules stays quick.
        self._layout: tuple[bytes, list[int], int] | None = None

    @property
    def arrays(self) -> Mapping[str, np.ndarray]:
        return dict(self._arrays)

    def as_weights_reference(self, file_name: str, digest: bytes) -> WeightsModule:
        """The module that stands for this one once its arrays are in the weight file
        |file_name| of content digest |digest| (``export_library(weights=...)``)."""
        specs = [(name, dtype_to_dl(a.dtype), tuple(int(n) for n in a.shape))
                 for name, a in self._arrays.items()]
        return WeightsModule(file_name, digest, specs)

    def _plan(self) -> tuple[bytes, list[int], int]:
        """The metadata block, each array's data offset, and the total payload size."""
        names = [n.encode() for n in self._arrays]
        count = len(names)
        shapes_at = _HEADER.size + _RECORD.size * count
        shape_offsets, cursor = [], shapes_at
        for a in self._arrays.values():
            shape_offsets.append(cursor)
            cursor += 8 * a.ndim
        name_offsets = []
        for n in names:
            name_offsets.append(cursor)
            cursor += len(n)
        data_offsets = []
        for a in self._arrays.values():
            cursor = _align(cursor, _DATA_ALIGNMENT)
            data_offsets.append(cursor)
            cursor += a.nbytes
        total = cursor
        meta = [_HEADER.pack(lib.MP_CONST_PAYLOAD_VERSION, 0, count)]
        for i, a in enumerate(self._arrays.values()):
            code, bits, lanes = dtype_to_dl(a.dtype)
            meta.append(_RECORD.pack(name_offsets[i], len(names[i]), code, bits, lanes,
                                     a.ndim, 0, shape_offsets[i], data_offsets[i], a.nbytes))
        for a in self._arrays.values():
            meta.append(struct.pack(f"<{a.ndim}Q", *a.shape))
        meta.extend(names)
        return b"".join(meta), data_offsets, total

    def _planned(self) -> tuple[bytes, list[int], int]:
        if self._layout is None:
            self._layout = self._plan()
        return self._layout

    def payload_size(self) -> int:
        # Counted without building the metadata block, which the blob writer builds later
        # (beside the host compiler): planning an export of 10,000 modules stays quick.
        if self._layout is not None:
            return self._layout[2]
        arrays, alignment = self._arrays, _DATA_ALIGNMENT
        cursor = _HEADER_SIZE + _RECORD_SIZE * len(arrays)
        for name, a in arrays.items():
            cursor += 8 * a.ndim + (len(name) if name.isascii() else len(name.encode()))
        for a in arrays.values():
            cursor = (cursor + alignment - 1) // alignment * alignment + a.nbytes
        return cursor

    def payload_chunks(self) -> Iterable[Any]:
        meta, data_offsets, _ = self._planned()
        yield meta
        cursor = len(meta)
        for offset, (name, array) in zip_strict(data_offsets, self._arrays.items()):
            if offset > cursor:
                yield bytes(offset - cursor)
            data = _bytes_of(array)
            if array_digest(array) != self._digests[name]:
                raise ArgumentError(
                    f"const array {name!r} changed after const_module() was built (its bytes "
                    "differ from when the module was made): build the module after the last "
                    "change, or give it a copy (array.copy())")
            yield data
            cursor = offset + array.nbytes


def _as_const_array(name: str, value: Any) -> np.ndarray:
    """|value| (an array, or a DLPack producer such as a PyTorch float8 or float4_e2m1fn_x2
    tensor) as a C-contiguous array of a dtype DLPack describes (raising for one it does
    not, and for a numpy float6/float4 array of ml_dtypes, which is not packed as DLPack's)."""
    array = value if type(value) is np.ndarray else numpy_of(value)
    if not array.flags.c_contiguous:  # (ascontiguousarray would turn 0-d into 1-d)
        array = array.copy(order="C")
    array_dtype_to_dl(array.dtype, f"const array {name!r}")  # raises for what DLPack lacks
    return array


def _check_name(name: Any) -> None:
    """Array names are str of 1 to _MAX_NAME bytes of UTF-8, without NUL."""
    if type(name) is str and name.isascii() and 0 < len(name) <= _MAX_NAME and "\0" not in name:
        return  # the common case, without encoding the name
    try:
        size = len(name.encode()) if isinstance(name, str) else 0
    except UnicodeEncodeError:  # a lone surrogate
        size = 0
    if not 1 <= size <= _MAX_NAME or "\0" in name:
        raise ArgumentError(f"array name {name!r} must be a str of 1 to {_MAX_NAME} bytes of "
                            "UTF-8 without NUL")


def _bytes_of(array: np.ndarray) -> memoryview:
    return array.reshape(-1).view(np.uint8).data


def const_module(arrays: Mapping[str, Any]) -> ConstModule:
    """A ``const`` module of named arrays; after loading, ``mod.arrays`` maps each name to a
    read-only numpy array with the same dtype, shape and bytes."""
    return ConstModule(arrays)
