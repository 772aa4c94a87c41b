"""float4 values and DLPack's packed pairs of them (float4_e2m1fn_x2), converted both ways.

PyTorch keeps float4 in pairs (``torch.float4_e2m1fn_x2``: a byte, value 2i in the low nibble),
as DLPack 1.1 packs it; ml_dtypes keeps one ``float4_e2m1fn`` value per byte. These two
functions are the bridge (a copy each way), the pairs being numpy's stand-in dtype
``modpack.float4_e2m1fn_x2`` (:mod:`.subbyte`), zero-copy from then on.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ArgumentError
from .array import numpy_of
from .dtypes import as_dtype
from .subbyte import FLOAT4_E2M1FN_X2, pack_bits, unpack_bits

__all__ = ["pack_float4", "unpack_float4"]


def pack_float4(values: Any) -> np.ndarray:
    """float4 values (an ml_dtypes ``float4_e2m1fn`` array, or numbers, rounded to it) as
    packed pairs: a ``modpack.float4_e2m1fn_x2`` array whose last dimension is half as long,
    value 2i in the low nibble of byte i (DLPack's rule, and torch.float4_e2m1fn_x2's). The
    last dimension must be even (pad it)."""
    fp4 = as_dtype("float4_e2m1fn")  # (ArgumentError saying how to install ml_dtypes)
    array = np.asarray(values)
    if array.dtype != fp4:
        try:
            array = array.astype(fp4)
        except (TypeError, ValueError) as exc:
            raise ArgumentError(f"pack_float4 takes float4 values (ml_dtypes.float4_e2m1fn) "
                                f"or numbers, not a {array.dtype} array: {exc}") from None
    if array.ndim == 0:
        raise ArgumentError("pack_float4: float4_e2m1fn_x2 holds values in pairs along the last "
                            "dimension, and a scalar has none: pass an array of an even length")
    if array.shape[-1] % 2:
        raise ArgumentError(
            f"pack_float4: float4_e2m1fn_x2 holds values in pairs along the last dimension, and "
            f"the shape {array.shape} has an odd one: pad it to an even length")
    pairs = pack_bits(np.ascontiguousarray(array).view(np.uint8), 4).view(FLOAT4_E2M1FN_X2)
    return pairs.reshape(*array.shape[:-1], array.shape[-1] // 2)


def unpack_float4(pairs: Any) -> np.ndarray:
    """The values of packed pairs (a ``modpack.float4_e2m1fn_x2`` array, or a DLPack producer
    of float4_e2m1fn_x2 such as a torch tensor) as an ml_dtypes ``float4_e2m1fn`` array whose
    last dimension is twice as long."""
    fp4 = as_dtype("float4_e2m1fn")
    array = numpy_of(pairs)
    if array.dtype != FLOAT4_E2M1FN_X2 or array.ndim == 0:
        raise ArgumentError(f"unpack_float4 takes float4_e2m1fn_x2 pairs of at least one "
                            f"dimension, not {array.dtype} of shape {array.shape}")
    codes = unpack_bits(np.ascontiguousarray(array).view(np.uint8), array.size * 2, 4)
    shape = (*array.shape[:-1], array.shape[-1] * 2)
    values: np.ndarray = codes.view(fp4).reshape(shape)
    return values
