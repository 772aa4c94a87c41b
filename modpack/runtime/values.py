"""Python values <-> the packed calling convention's tagged values (mp_value_t).

Arrays cross as DLPack DLTensors: numpy arrays are described in place (no copy), runtime
arrays pass their own DLTensor, and any other object with ``__dlpack__`` is borrowed through
its DLPack capsule for the duration of a call. This is the hot path of every call from
Python, so it avoids per-call imports and dictionary building.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from .binding import ffi, lib
from .dtypes import dtype_to_dl

__all__ = ["fill_value", "tensor_from_array", "value_to_python"]

_capsule_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get_pointer.restype = ctypes.c_void_p
_capsule_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

_INT, _FLOAT, _STR = lib.MP_TYPE_INT, lib.MP_TYPE_FLOAT, lib.MP_TYPE_STR
_NONE, _TENSOR = lib.MP_TYPE_NONE, lib.MP_TYPE_DLTENSOR
_CPU = lib.kDLCPU


def tensor_from_array(array: Any, keep: list) -> Any:
    """A ``DLTensor*`` describing |array| (kept valid by what is appended to |keep|)."""
    own = getattr(type(array), "_dltensor", None)
    if own is not None:  # runtime arrays carry their DLTensor
        keep.append(array)
        return own(array)
    if isinstance(array, np.ndarray):
        return _tensor_from_numpy(array, keep)
    if hasattr(array, "__dlpack__"):
        capsule = array.__dlpack__()
        address = _capsule_get_pointer(capsule, b"dltensor")
        # The capsule still owns the tensor: its destructor runs the producer's deleter once
        # the call is over and |keep| is dropped.
        keep.append(capsule)
        return ffi.cast("DLTensor*", address)
    raise TypeError(
        f"cannot pass {type(array).__name__} as an array: expected a numpy array or an object "
        "implementing __dlpack__"
    )


def _tensor_from_numpy(array: np.ndarray, keep: list) -> Any:
    dl = dtype_to_dl(array.dtype)
    shape = ffi.new("int64_t[]", array.shape or (1,))
    if array.flags.c_contiguous:
        data, strides = ffi.from_buffer(array, require_writable=False), ffi.NULL
        keep.append(data)
    else:
        itemsize = array.itemsize
        if any(s % itemsize for s in array.strides):
            raise ValueError("array strides must be multiples of its item size")
        data = ffi.cast("void*", array.__array_interface__["data"][0])
        strides = ffi.new("int64_t[]", [s // itemsize for s in array.strides] or [1])
        keep.append(strides)
    tensor = ffi.new("DLTensor*", {
        "data": data, "device": (_CPU, 0), "ndim": array.ndim, "dtype": dl,
        "shape": shape, "strides": strides,
    })
    keep.extend((tensor, shape, array))
    return tensor


def fill_value(slot: Any, value: Any, keep: list) -> None:
    """Write Python |value| into the mp_value_t |slot|."""
    kind = type(value)
    if kind is int or kind is bool:
        slot.type_code = _INT
        slot.v_int64 = value
    elif kind is float:
        slot.type_code = _FLOAT
        slot.v_float64 = value
    elif value is None:
        slot.type_code = _NONE
    elif isinstance(value, int | np.integer):
        slot.type_code = _INT
        slot.v_int64 = int(value)
    elif isinstance(value, float | np.floating):
        slot.type_code = _FLOAT
        slot.v_float64 = float(value)
    elif kind is str:
        data = ffi.new("char[]", value.encode())
        keep.append(data)
        slot.type_code = _STR
        slot.v_str = data
    elif getattr(kind, "_fill_value", None) is not None:  # Function: passed as a handle
        kind._fill_value(value, slot, keep)
    else:
        slot.type_code = _TENSOR
        slot.v_tensor = tensor_from_array(value, keep)
        if isinstance(value, np.ndarray) and not value.flags.writeable:
            slot.flags = lib.MP_VALUE_READ_ONLY


class _Borrowed:
    """Exposes a CPU DLTensor to numpy in place, for the duration of a call."""

    __slots__ = ("__array_interface__",)

    def __init__(self, tensor: Any, read_only: bool) -> None:
        from .dtypes import dtype_from_dl

        dtype = dtype_from_dl(tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes)
        shape = tuple(tensor.shape[d] for d in range(tensor.ndim))
        strides = None
        if tensor.strides != ffi.NULL:
            strides = tuple(tensor.strides[d] * dtype.itemsize for d in range(tensor.ndim))
        address = int(ffi.cast("uintptr_t", tensor.data)) + tensor.byte_offset
        self.__array_interface__ = {
            "version": 3, "shape": shape,
            # ml_dtypes types have no typestr of their own: same-sized void, viewed after.
            "typestr": f"|V{dtype.itemsize}" if dtype.kind == "V" else dtype.str,
            "strides": strides, "data": (address, read_only),
        }


def tensor_to_numpy(value: Any) -> np.ndarray:
    """A numpy view of a CPU array argument, valid while the call lasts (no copy)."""
    tensor = value.v_tensor
    if tensor.device.device_type != _CPU:
        raise TypeError(
            f"a Python function received an array on device type {tensor.device.device_type}; "
            "only CPU arrays can be viewed from Python"
        )
    from .dtypes import dtype_from_dl

    dtype = dtype_from_dl(tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes)
    holder = _Borrowed(tensor, bool(value.flags & lib.MP_VALUE_READ_ONLY))
    view = np.asarray(holder)
    return view if view.dtype == dtype else view.view(dtype)


def value_to_python(value: Any) -> Any:
    """The Python value of a tagged value (a call's argument or result)."""
    code = value.type_code
    if code == _INT:
        return value.v_int64
    if code == _FLOAT:
        return value.v_float64
    if code == _NONE:
        return None
    if code == _STR:
        return ffi.string(value.v_str).decode() if value.v_str != ffi.NULL else None
    if code == lib.MP_TYPE_FUNCTION:
        from .function import Function

        handle = ffi.cast("mp_function_t*", value.v_handle)
        lib.mp_function_retain(handle)
        return Function._adopt(handle, "<returned>")
    if code == lib.MP_TYPE_HANDLE:
        return int(ffi.cast("uintptr_t", value.v_handle))
    if code == _TENSOR and value.v_tensor != ffi.NULL:
        return tensor_to_numpy(value)
    raise TypeError(f"unsupported value type {code}")
