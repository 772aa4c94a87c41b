"""Python values and the calling convention's tagged values (mp_value_t), the parts written in
Python.

Calls from Python convert their arguments in C (``calls.c``), in one place. What that code
cannot take as it is comes here once, to :func:`normalize`, which turns it into a form it
takes or raises the error that names the argument. The other direction — the runtime calling a
Python function with tagged values — is :func:`value_to_python`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import ArgumentError
from . import _calls
from .binding import ffi, lib
from .dtypes import array_dtype_to_dl, dtype_from_dl, dtype_name
from .subbyte import is_packed

__all__ = ["LocalMemory", "local_memory", "normalize", "value_to_python"]

_INT64 = (-(1 << 63), (1 << 63) - 1)
MAX_NDIM: int = _calls.MAX_NDIM  # the most dimensions an array argument may have (calls.c)


class LocalMemory:
    """The value of an OpenCL kernel's ``__local`` parameter: how many bytes of local memory
    the launch gives it (``clSetKernelArg(kernel, i, nbytes, NULL)``)."""

    __slots__ = ("nbytes",)

    def __init__(self, nbytes: int) -> None:
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)):
            raise ArgumentError(f"local_memory takes a number of bytes, not {nbytes!r}")
        if not 0 < int(nbytes) <= _INT64[1]:
            raise ArgumentError(f"local_memory({nbytes}): the size must be positive")
        self.nbytes = int(nbytes)

    def __repr__(self) -> str:
        return f"modpack.local_memory({self.nbytes})"


def local_memory(nbytes: int) -> LocalMemory:
    """|nbytes| of OpenCL ``__local`` memory, passed for a kernel's ``__local`` parameter:
    ``kernel(x, modpack.local_memory(256 * 4), n, *launch)``."""
    return LocalMemory(nbytes)


def normalize(value: Any, index: int) -> Any:
    """A form the C call path takes for argument |index|: an int, a float, a str, a DLPack
    capsule (versioned when the producer makes one), or ``(array view, (code, bits, lanes))``
    for an array whose dtype the buffer protocol cannot describe (bfloat16, the float8
    formats, float4_e2m1fn_x2). Raises ArgumentError otherwise, for a numpy array of a float6 or
    float4 type of ml_dtypes among others (one value per byte, where DLPack packs them)."""
    if isinstance(value, (bool, np.bool_)):
        return int(bool(value))
    if isinstance(value, (int, np.integer)):
        number = int(value)
        if not _INT64[0] <= number <= _INT64[1]:
            raise ArgumentError(
                f"argument {index}: the integer {number} does not fit in 64 bits (int64)"
            )
        return number
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, str):
        if "\0" in value:
            raise ArgumentError(f"argument {index}: the str {value!r} contains a NUL character")
        return str(value)
    if isinstance(value, np.ndarray):
        return _array(value, index)
    if hasattr(value, "__dlpack__"):
        return _capsule(value, index)
    raise ArgumentError(
        f"argument {index}: cannot pass {type(value).__name__}: expected a numpy array or an "
        "object implementing __dlpack__ (an array), or an int, float, str, None or modpack "
        "function"
    )


_DLPACK_VERSION = (_calls.DLPACK_MAJOR_VERSION, _calls.DLPACK_MINOR_VERSION)


def _capsule(value: Any, index: int) -> Any:
    """|value|'s DLPack capsule, borrowed for the call: a versioned one (DLPack 1.x, which says
    whether the array is read-only) from producers that make them, else the legacy one."""
    try:
        return value.__dlpack__(max_version=_DLPACK_VERSION)
    except TypeError:  # a producer of DLPack before 1.0: no keywords
        pass
    except BufferError as exc:
        raise ArgumentError(f"argument {index}: {type(value).__name__} refuses DLPack: "
                            f"{exc}") from None
    try:
        return value.__dlpack__()
    except BufferError as exc:
        raise ArgumentError(f"argument {index}: {type(value).__name__} refuses DLPack: "
                            f"{exc}") from None


def _array(array: np.ndarray, index: int) -> tuple[np.ndarray, tuple[int, int, int]]:
    if array.ndim > MAX_NDIM:  # numpy 2 allows 64
        raise ArgumentError(
            f"argument {index}: the array has {array.ndim} dimensions, but modpack passes "
            f"arrays of at most {MAX_NDIM}: reshape it (e.g. merge adjacent dimensions)"
        )
    try:
        dl = array_dtype_to_dl(array.dtype)
    except TypeError as exc:
        raise ArgumentError(f"argument {index}: {exc}") from None
    if any(s % array.itemsize for s in array.strides):
        raise ArgumentError(
            f"argument {index}: array strides {array.strides} must be multiples of its item "
            f"size ({array.itemsize})"
        )
    # Same-sized unsigned integers: the buffer protocol describes those.
    return array.view(f"u{array.itemsize}"), dl


class _Borrowed:
    """Exposes a CPU DLTensor to numpy in place, for the duration of a call."""

    __slots__ = ("__array_interface__",)

    def __init__(self, tensor: Any, dtype: np.dtype, read_only: bool) -> None:
        shape = tuple(tensor.shape[d] for d in range(tensor.ndim))
        strides = None
        if tensor.strides != ffi.NULL:
            strides = tuple(tensor.strides[d] * dtype.itemsize for d in range(tensor.ndim))
        address = int(ffi.cast("uintptr_t", tensor.data)) + tensor.byte_offset
        self.__array_interface__ = {
            "version": 3, "shape": shape,
            # ml_dtypes types (float8_e5m2's "<f1" included) and float4_e2m1fn_x2 have no
            # typestr numpy reads back: same-sized void, viewed after.
            "typestr": dtype.str if dtype.isbuiltin == 1 else f"|V{dtype.itemsize}",
            "strides": strides, "data": (address, read_only),
        }


def _tensor_to_numpy(value: Any) -> np.ndarray:
    """A numpy view of a CPU array argument, valid while the call lasts (no copy)."""
    tensor = value.v_tensor
    if tensor.device.device_type != lib.kDLCPU:
        raise ArgumentError(
            f"a Python function received an array on device type {tensor.device.device_type}; "
            "only CPU arrays can be viewed from Python"
        )
    code, bits, lanes = tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes
    if is_packed(bits, lanes):
        raise ArgumentError(
            f"a Python function received a packed {dtype_name(code, bits, lanes)} array, which "
            "has no numpy view (numpy holds these one value per byte)")
    dtype = dtype_from_dl(code, bits, lanes)
    view = np.asarray(_Borrowed(tensor, dtype, bool(value.flags & lib.MP_VALUE_READ_ONLY)))
    return view if view.dtype == dtype else view.view(dtype)


def value_to_python(value: Any, wrap_function: Callable[[int], Any]) -> Any:
    """The Python value of a tagged value the runtime passes to a Python function. A function
    value is retained and handed to |wrap_function| as the address of that new reference."""
    code = value.type_code
    if code == lib.MP_TYPE_INT:
        return value.v_int64
    if code == lib.MP_TYPE_FLOAT:
        return value.v_float64
    if code == lib.MP_TYPE_NONE:
        return None
    if code == lib.MP_TYPE_STR:
        return ffi.string(value.v_str).decode() if value.v_str != ffi.NULL else None
    if code == lib.MP_TYPE_FUNCTION:
        handle = ffi.cast("mp_function_t*", value.v_handle)
        lib.mp_function_retain(handle)
        return wrap_function(int(ffi.cast("uintptr_t", handle)))
    if code == lib.MP_TYPE_HANDLE:
        return int(ffi.cast("uintptr_t", value.v_handle))
    if code == lib.MP_TYPE_DLTENSOR and value.v_tensor != ffi.NULL:
        return _tensor_to_numpy(value)
    raise ArgumentError(f"unsupported value type {code}")
