"""DLPack 1.1's sub-byte types on the numpy side: float4_e2m1fn, float6_e2m3fn, float6_e3m2fn.

DLPack packs them (and so does every array the runtime reads: modpack/tensor_span.h): values
share bytes, value i in bits [i * bits, (i + 1) * bits) counted from the least significant bit
of the first byte, so two float4 values fill a byte, low nibble first. numpy has no packed
dtype: ``ml_dtypes`` holds one value per byte, in the low bits. The two cannot be views of each
other, so this module keeps them apart and converts between them where a copy is made anyway:

- a numpy array of an ml_dtypes sub-byte type is never described to DLPack (calls, const
  modules, weight files refuse it with the packing rule and the ways out): its memory is not
  what DLPack's float4_e2m1fn means;
- ``modpack.array(x)`` packs such an array into a runtime array of DLPack's type, and
  ``Array.numpy(copy=True)`` unpacks one (:func:`pack_bits`, :func:`unpack_bits`);
- :data:`FLOAT4_E2M1FN_X2` is numpy's stand-in for DLPack's float4_e2m1fn_x2 (code 17, 4 bits,
  2 lanes: one byte holding a pair, PyTorch's ``torch.float4_e2m1fn_x2``), a one-byte dtype of
  its own, so packed pairs stay zero-copy through numpy, calls, const modules and weight files;
  ``modpack.pack_float4`` and ``modpack.unpack_float4`` (:mod:`.float4`) convert values to pairs
  and back.
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError

__all__ = [
    "FLOAT4_E2M1FN_X2",
    "SUBBYTE",
    "is_packed",
    "pack_bits",
    "padded_error",
    "unpack_bits",
]

# A structured dtype of one byte: a dtype of its own (it equals no other), which numpy keeps
# through views, copies and slices, and whose name says what its byte holds.
FLOAT4_E2M1FN_X2: np.dtype = np.dtype([("float4_e2m1fn_x2", "u1")])
# The ml_dtypes sub-byte types -> (DLPack code, bits): DLPack 1.1's codes 15-17.
SUBBYTE = {"float6_e2m3fn": (15, 6), "float6_e3m2fn": (16, 6), "float4_e2m1fn": (17, 4)}


def is_packed(bits: int, lanes: int) -> bool:
    """Whether elements of |bits| x |lanes| share bytes (under 8 bits: DLPack packs them)."""
    return bits * lanes < 8


def padded_error(name: str, what: str = "the array") -> ArgumentError:
    """The refusal of a numpy |name| array (one value per byte) where DLPack's packed type is
    meant, with the ways out."""
    pairs = ("pack the values in pairs with modpack.pack_float4(x) (float4_e2m1fn_x2, two "
             "values a byte, as torch.float4_e2m1fn_x2; zero-copy from then on), "
             if name == "float4_e2m1fn" else "")
    return ArgumentError(
        f"{what} is a numpy {name} array, which ml_dtypes holds one value per byte, but DLPack "
        f"1.1's {name} (and modpack's) is packed, its values sharing bytes: {pairs}make a packed "
        "copy with modpack.array(x), or pass x.view(numpy.uint8) to code that reads one value "
        "per byte")


def pack_bits(codes: np.ndarray, bits: int) -> np.ndarray:
    """The values of |codes| (one per byte, in its low |bits| bits: an ml_dtypes array viewed
    as uint8), packed as DLPack lays them out: ceil(n * bits / 8) bytes."""
    flat = np.ascontiguousarray(codes).reshape(-1).view(np.uint8)
    planes = np.unpackbits(flat[:, None], axis=1, bitorder="little")[:, :bits]
    return np.packbits(planes.reshape(-1), bitorder="little")


def unpack_bits(packed: np.ndarray, count: int, bits: int) -> np.ndarray:
    """The |count| values of |bits| bits packed in |packed| (bytes), one per byte."""
    planes = np.unpackbits(np.ascontiguousarray(packed).reshape(-1).view(np.uint8),
                           bitorder="little")[: count * bits]
    return np.packbits(planes.reshape(count, bits), axis=1, bitorder="little").reshape(count)
