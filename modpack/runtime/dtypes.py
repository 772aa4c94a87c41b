"""numpy dtype <-> DLPack DLDataType (code, bits, lanes)."""

from __future__ import annotations

import numpy as np

__all__ = ["dtype_from_dl", "dtype_to_dl"]

_KIND_TO_CODE = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
_CODE_TO_KIND = {0: "i", 1: "u", 2: "f", 5: "c"}
_BFLOAT = 4


_cache: dict[np.dtype, tuple[int, int, int]] = {}


def dtype_to_dl(dtype: np.dtype) -> tuple[int, int, int]:
    """(code, bits, lanes) for a numpy dtype; bfloat16 and float8 types from ml_dtypes too."""
    dtype = np.dtype(dtype)
    found = _cache.get(dtype)
    if found is None:
        found = _cache[dtype] = _dtype_to_dl(dtype)
    return found


def _dtype_to_dl(dtype: np.dtype) -> tuple[int, int, int]:
    if dtype.name == "bfloat16":
        return (_BFLOAT, 16, 1)
    if dtype.name.startswith("float8"):
        return (_KIND_TO_CODE["f"], 8, 1)
    code = _KIND_TO_CODE.get(dtype.kind)
    if code is None or dtype.byteorder == ">":
        raise TypeError(
            f"dtype {dtype} has no DLPack equivalent; use a native-endian bool, integer, "
            "float or complex dtype"
        )
    return (code, dtype.itemsize * 8, 1)


def dtype_from_dl(code: int, bits: int, lanes: int, name_hint: str | None = None) -> np.dtype:
    """The numpy dtype for a DLPack type; |name_hint| picks among same-shaped ml_dtypes."""
    if lanes != 1:
        raise TypeError(f"vector dtypes (lanes={lanes}) have no numpy equivalent")
    if name_hint:
        try:
            return np.dtype(name_hint)
        except TypeError:
            pass
    if code == 6 and bits == 8:
        return np.dtype(np.bool_)
    if code == _BFLOAT and bits == 16:
        try:
            import ml_dtypes
        except ImportError as exc:
            raise TypeError("bfloat16 arrays need the ml_dtypes package") from exc
        return np.dtype(ml_dtypes.bfloat16)
    kind = _CODE_TO_KIND.get(code)
    if kind is None:
        raise TypeError(f"DLPack type code {code} has no numpy equivalent")
    return np.dtype(f"{kind}{bits // 8}")
