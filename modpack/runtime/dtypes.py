"""numpy dtype <-> DLPack DLDataType (code, bits, lanes): the one table.

bfloat16 and the float8 formats come from ``ml_dtypes`` where it is installed; they use their
own DLPack type codes (4, and 7-14), so every one of them round-trips exactly. The call path
in C (``calls.c``) reads numpy arrays through the buffer protocol: :data:`BUFFER_FORMATS`, the
buffer format of every standard dtype, is derived from this table by asking numpy, so the two
cannot disagree.
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["BUFFER_FORMATS", "dtype_from_dl", "dtype_to_dl"]

_KIND_TO_CODE = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
_CODE_TO_KIND = {0: "i", 1: "u", 2: "f", 5: "c"}
# ml_dtypes names -> DLPack codes (bits 16 for bfloat16, 8 for the float8 formats).
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
}
_CODE_TO_ML = {code: name for name, code in _ML_DTYPES.items()}
# The dtypes numpy itself describes through the buffer protocol.
_STANDARD = ("bool", "int8", "int16", "int32", "int64", "longlong", "uint8", "uint16", "uint32",
             "uint64", "ulonglong", "float16", "float32", "float64", "complex64", "complex128")
_cache: dict[np.dtype, tuple[int, int, int]] = {}


def dtype_to_dl(dtype: np.dtype) -> tuple[int, int, int]:
    """(code, bits, lanes) for a numpy dtype (or an ml_dtypes one)."""
    dtype = np.dtype(dtype)
    found = _cache.get(dtype)
    if found is None:
        found = _cache[dtype] = _dtype_to_dl(dtype)
    return found


def _dtype_to_dl(dtype: np.dtype) -> tuple[int, int, int]:
    if dtype.name in _ML_DTYPES:
        return (_ML_DTYPES[dtype.name], dtype.itemsize * 8, 1)
    code = _KIND_TO_CODE.get(dtype.kind)
    if code is None or dtype.byteorder == ">":
        raise TypeError(
            f"dtype {dtype} has no DLPack equivalent; use a native-endian bool, integer, "
            "float or complex dtype (or bfloat16/float8 from ml_dtypes)"
        )
    return (code, dtype.itemsize * 8, 1)


def dtype_from_dl(code: int, bits: int, lanes: int) -> np.dtype:
    """The numpy dtype for a DLPack type."""
    if lanes != 1:
        raise TypeError(f"vector dtypes (lanes={lanes}) have no numpy equivalent")
    if code == 6 and bits == 8:
        return np.dtype(np.bool_)
    if code in _CODE_TO_ML:
        name = _CODE_TO_ML[code]
        try:
            import ml_dtypes
        except ImportError as exc:
            raise TypeError(f"{name} arrays need the ml_dtypes package") from exc
        return np.dtype(getattr(ml_dtypes, name))
    kind = _CODE_TO_KIND.get(code)
    if kind is None:
        raise TypeError(f"DLPack type code {code} has no numpy equivalent")
    return np.dtype(f"{kind}{bits // 8}")


def _buffer_formats() -> dict[str, tuple[int, int, int]]:
    """Buffer format (as numpy exports it; native, and explicitly little-endian on a
    little-endian machine) -> DLPack."""
    formats: dict[str, tuple[int, int, int]] = {}
    for name in _STANDARD:
        dtype = np.dtype(name)
        variants = [dtype] + ([dtype.newbyteorder("<")] if sys.byteorder == "little" else [])
        for variant in variants:
            formats[memoryview(np.zeros(0, variant)).format] = dtype_to_dl(dtype)
    return formats


BUFFER_FORMATS: dict[str, tuple[int, int, int]] = _buffer_formats()
