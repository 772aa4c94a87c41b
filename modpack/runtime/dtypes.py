"""numpy dtype <-> DLPack DLDataType (code, bits, lanes): the one table.

bfloat16 and the float8, float6 and float4 formats come from ``ml_dtypes`` where it is
installed; they use their own DLPack type codes (4, and 7-17), so every one of them round-trips
exactly. numpy knows their names ("bfloat16") only once ml_dtypes is imported, so names go
through :func:`as_dtype`, which imports it when a name needs it. DLPack packs the float6 and
float4 formats (two float4 values a byte) where ml_dtypes holds one value per byte, so a numpy
array of those is refused wherever its memory would be described to DLPack
(:func:`array_dtype_to_dl`); DLPack's packed pairs, float4_e2m1fn_x2, have a numpy stand-in of
their own (:mod:`.subbyte`). The call path
in C (``calls.c``) reads numpy arrays through the buffer protocol: :data:`BUFFER_FORMATS`, the
buffer format of every standard dtype, is derived from this table by asking numpy, so the two
cannot disagree.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ..errors import ArgumentError
from .binding import ffi, lib
from .subbyte import FLOAT4_E2M1FN_X2, SUBBYTE, padded_error

__all__ = [
    "BUFFER_FORMATS",
    "ML_DTYPES_HINT",
    "ML_DTYPE_NAMES",
    "NUMPY_TYPES",
    "array_dtype_to_dl",
    "as_dtype",
    "display_name",
    "dtype_from_dl",
    "dtype_name",
    "dtype_to_dl",
]

_KIND_TO_CODE = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
_CODE_TO_KIND = {0: "i", 1: "u", 2: "f", 5: "c"}
# ml_dtypes names -> DLPack codes (bits 16 for bfloat16, 8 for the float8 formats; the float6
# and float4 ones, after, 6 and 4).
_ML_DTYPES = {
    "bfloat16": 4,
    "float8_e3m4": 7,
    "float8_e4m3": 8,
    "float8_e4m3b11fnuz": 9,
    "float8_e4m3fn": 10,
    "float8_e4m3fnuz": 11,
    "float8_e5m2": 12,
    "float8_e5m2fnuz": 13,
    "float8_e8m0fnu": 14,
    **{name: code for name, (code, _) in SUBBYTE.items()},
}
_X2_NAME = "float4_e2m1fn_x2"  # DLPack (17, 4, 2): FLOAT4_E2M1FN_X2, no ml_dtypes needed
_X2 = (17, 4, 2)
_CODE_TO_ML = {code: name for name, code in _ML_DTYPES.items()}
ML_DTYPE_NAMES = frozenset(_ML_DTYPES)  # the dtypes that need ml_dtypes
# The dtypes numpy itself describes through the buffer protocol.
_STANDARD = ("bool", "int8", "int16", "int32", "int64", "longlong", "uint8", "uint16", "uint32",
             "uint64", "ulonglong", "float16", "float32", "float64", "complex64", "complex128")
_cache: dict[np.dtype, tuple[int, int, int]] = {}
ML_DTYPES_HINT = "pip install ml_dtypes (modpack[cuda] installs it)"


def _ml_dtypes(name: str) -> Any:
    """The ml_dtypes package, imported; ArgumentError saying how to install it for |name|."""
    try:
        import ml_dtypes
    except ImportError:
        raise ArgumentError(f"{name} needs the ml_dtypes package: {ML_DTYPES_HINT}") from None
    return ml_dtypes


def as_dtype(dtype: Any) -> np.dtype:
    """``np.dtype(dtype)``, also for the names of the ml_dtypes types (``"bfloat16"``,
    ``"float8_e4m3fn"``) whether or not anything imported ml_dtypes yet. ArgumentError (a
    TypeError) for what is not a dtype, or an ml_dtypes name without ml_dtypes installed."""
    result: np.dtype
    if isinstance(dtype, str) and dtype == _X2_NAME:
        return FLOAT4_E2M1FN_X2
    if isinstance(dtype, str) and dtype in _ML_DTYPES:
        result = np.dtype(getattr(_ml_dtypes(dtype), dtype))
        return result
    try:
        result = np.dtype(dtype)
    except TypeError as exc:
        raise ArgumentError(f"{dtype!r} is not a dtype: {exc}") from None
    return result


def dtype_name(code: int, bits: int, lanes: int) -> str:
    """The runtime's name of a DLPack dtype ("float32", "bfloat16", "float8_e4m3fn",
    "float32x4"): the one table of type-code names, core/dtype.c's ``mp_dtype_string``."""
    buffer = ffi.new("char[64]")
    dtype = ffi.new("DLDataType*", {"code": code, "bits": bits, "lanes": lanes})[0]
    return ffi.string(lib.mp_dtype_string(dtype, buffer, 64)).decode()


def display_name(dtype: np.dtype) -> str:
    """A dtype's name for messages and reprs: numpy's, but float4_e2m1fn_x2 for its stand-in."""
    return _X2_NAME if dtype == FLOAT4_E2M1FN_X2 else str(dtype)


def array_dtype_to_dl(dtype: Any, what: str = "the array") -> tuple[int, int, int]:
    """(code, bits, lanes) for the memory of a numpy array of |dtype|: :func:`dtype_to_dl`,
    but ArgumentError for the ml_dtypes float6/float4 types, whose numpy arrays hold one value
    per byte where DLPack's are packed (|what| names the array in the message)."""
    found = dtype_to_dl(dtype)
    if found[1] < 8 and found[2] == 1:
        raise padded_error(as_dtype(dtype).name, what)
    return found


def dtype_to_dl(dtype: Any) -> tuple[int, int, int]:
    """(code, bits, lanes) for a numpy dtype (or an ml_dtypes one, or the name of one) as an
    element type: float4_e2m1fn is DLPack's packed (17, 4, 1). For a numpy array's memory, use
    :func:`array_dtype_to_dl`."""
    if type(dtype) is not str:  # a dtype seen before: one dict lookup (names go through
        try:                    # as_dtype, which knows the ml_dtypes names)
            found = _cache.get(dtype)
        except TypeError:  # unhashable: not a dtype, as_dtype says why
            found = None
        if found is not None:
            return found
    dtype = as_dtype(dtype)
    found = _cache.get(dtype)
    if found is None:
        found = _cache[dtype] = _dtype_to_dl(dtype)
    return found


def _dtype_to_dl(dtype: np.dtype) -> tuple[int, int, int]:
    if dtype == FLOAT4_E2M1FN_X2:
        return _X2
    if dtype.name in SUBBYTE and dtype.kind == "V":
        return (*SUBBYTE[dtype.name], 1)
    if dtype.name in _ML_DTYPES:
        return (_ML_DTYPES[dtype.name], dtype.itemsize * 8, 1)
    code = _KIND_TO_CODE.get(dtype.kind)
    if code is None or dtype.byteorder == ">":
        raise ArgumentError(
            f"dtype {dtype} has no DLPack equivalent; use a native-endian bool, integer, "
            "float or complex dtype (or bfloat16/float8/float6/float4 from ml_dtypes, or "
            "modpack.float4_e2m1fn_x2)"
        )
    return (code, dtype.itemsize * 8, 1)


def dtype_from_dl(code: int, bits: int, lanes: int) -> np.dtype:
    """The numpy dtype for a DLPack type: float4_e2m1fn_x2's stand-in for (17, 4, 2), and for
    the packed float6/float4 types (lanes 1) the ml_dtypes type of one value, which numpy
    holds one per byte: an array of them has no numpy view (:func:`.subbyte.is_packed`)."""
    if (code, bits, lanes) == _X2:
        return FLOAT4_E2M1FN_X2
    if lanes != 1:
        raise ArgumentError(f"vector dtypes (lanes={lanes}) have no numpy equivalent")
    if code == 6 and bits == 8:
        return np.dtype(np.bool_)
    if code in _CODE_TO_ML:
        name = _CODE_TO_ML[code]
        if bits != (SUBBYTE[name][1] if name in SUBBYTE else 16 if code == 4 else 8):
            raise ArgumentError(f"DLPack type code {code} ({name}) of {bits} bits: DLPack "
                                "fixes its width, and a consumer must refuse another")
        ml_dtype: np.dtype = np.dtype(getattr(_ml_dtypes(f"{name} arrays"), name))
        return ml_dtype
    kind = _CODE_TO_KIND.get(code)
    if kind is None:
        raise ArgumentError(f"DLPack type code {code} has no numpy equivalent")
    return np.dtype(f"{kind}{bits // 8}")


def _buffer_formats() -> dict[str, tuple[int, int, int]]:
    """Buffer format (as numpy exports it; native, and explicitly little-endian on a
    little-endian machine) -> DLPack."""
    formats: dict[str, tuple[int, int, int]] = {}
    for name in _STANDARD:
        dtype = np.dtype(name)
        variants = [dtype] + ([dtype.newbyteorder("<")] if sys.byteorder == "little" else [])
        for variant in variants:
            formats[np.zeros(0, variant).data.format] = dtype_to_dl(dtype)
    return formats


BUFFER_FORMATS: dict[str, tuple[int, int, int]] = _buffer_formats()


def _numpy_types() -> dict[int, tuple[int, int, int, int]]:
    """numpy type number -> (DLPack code, bits, lanes, itemsize), for the dtypes whose arrays
    calls read in place from numpy's array struct: each the DLPack type its buffer format
    gives, so that both ways to read an array agree."""
    types: dict[int, tuple[int, int, int, int]] = {}
    for name in _STANDARD:
        dtype = np.dtype(name)
        dl = BUFFER_FORMATS.get(np.zeros(0, dtype).data.format)
        if dl is not None:
            types[dtype.num] = (*dl, dtype.itemsize)
    return types


NUMPY_TYPES: dict[int, tuple[int, int, int, int]] = _numpy_types()
