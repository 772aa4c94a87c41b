"""Read-only numpy views of arrays the runtime hands out (a const module's weights, a weight
file's arrays), zero-copy, each keeping alive what its memory belongs to."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InternalError
from .binding import ffi, lib
from .dtypes import dtype_from_dl

__all__ = ["view_of"]


def view_of(tensor: Any, reference: Any) -> np.ndarray:
    """A read-only numpy view of |tensor|'s bytes, whose base holds |reference|."""
    dtype = dtype_from_dl(tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes)
    if dtype.itemsize * 8 != tensor.dtype.bits * tensor.dtype.lanes:
        raise InternalError(f"dtype {dtype} does not match the {tensor.dtype.bits}-bit record")
    shape = tuple(tensor.shape[d] for d in range(tensor.ndim))
    nbytes = int(lib.mp_array_nbytes(tensor))  # the size the runtime checked
    holder = _ArrayHolder(reference, int(ffi.cast("uintptr_t", tensor.data)), nbytes)
    # View the bytes as the dtype (ml_dtypes too); the base chain ends at the holder.
    return np.asarray(holder).view(dtype).reshape(shape)


class _ArrayHolder:
    """Exposes read-only memory to numpy; being the array's base, it keeps the runtime module
    (and so the library mapping) alive through |reference|."""

    __slots__ = ("__array_interface__", "_reference")

    def __init__(self, reference: Any, address: int, nbytes: int) -> None:
        self._reference = reference
        self.__array_interface__ = {
            "version": 3,
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (address, True),  # read-only: the mapping is not writable
        }
