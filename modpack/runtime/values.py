"""Python values <-> the packed calling convention's tagged values (mp_value_t).

Arrays cross as DLPack DLTensors: numpy arrays are described in place (no copy) and any other
object with ``__dlpack__`` is borrowed through its DLPack capsule for the duration of a call.
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


def tensor_from_array(array: Any, keep: list) -> Any:
    """A ``DLTensor*`` describing |array| (kept valid by what is appended to |keep|)."""
    from .array import Array

    if isinstance(array, Array):
        keep.append(array)
        return array._tensor
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
    code, bits, lanes = dtype_to_dl(array.dtype)
    tensor = ffi.new("DLTensor*")
    shape = ffi.new("int64_t[]", array.shape or [1])
    tensor.data = ffi.cast("void*", array.__array_interface__["data"][0])
    tensor.device.device_type = lib.kDLCPU
    tensor.device.device_id = 0
    tensor.ndim = array.ndim
    tensor.dtype.code = code
    tensor.dtype.bits = bits
    tensor.dtype.lanes = lanes
    tensor.shape = shape
    if not array.flags.c_contiguous:
        itemsize = array.itemsize
        if any(s % itemsize for s in array.strides):
            raise ValueError("array strides must be multiples of its item size")
        strides = ffi.new("int64_t[]", [s // itemsize for s in array.strides] or [1])
        tensor.strides = strides
        keep.append(strides)
    keep.extend((tensor, shape, array))
    return tensor


def fill_value(slot: Any, value: Any, keep: list) -> None:
    """Write Python |value| into the mp_value_t |slot|."""
    from .function import Function  # a Function may be passed back in

    if value is None:
        slot.type_code = lib.MP_TYPE_NONE
    elif isinstance(value, bool | int | np.integer):
        slot.type_code = lib.MP_TYPE_INT
        slot.v_int64 = int(value)
    elif isinstance(value, float | np.floating):
        slot.type_code = lib.MP_TYPE_FLOAT
        slot.v_float64 = float(value)
    elif isinstance(value, str):
        data = ffi.new("char[]", value.encode())
        keep.append(data)
        slot.type_code = lib.MP_TYPE_STR
        slot.v_str = data
    elif isinstance(value, Function):
        slot.type_code = lib.MP_TYPE_FUNCTION
        slot.v_handle = value._handle
        keep.append(value)
    else:
        slot.type_code = lib.MP_TYPE_DLTENSOR
        slot.v_tensor = tensor_from_array(value, keep)


def value_to_python(value: Any) -> Any:
    """The Python value of a returned mp_value_t."""
    code = value.type_code
    if code == lib.MP_TYPE_NONE:
        return None
    if code == lib.MP_TYPE_INT:
        return int(value.v_int64)
    if code == lib.MP_TYPE_FLOAT:
        return float(value.v_float64)
    if code == lib.MP_TYPE_STR:
        return ffi.string(value.v_str).decode() if value.v_str != ffi.NULL else None
    if code == lib.MP_TYPE_FUNCTION:
        from .function import Function

        handle = ffi.cast("mp_function_t*", value.v_handle)
        lib.mp_function_retain(handle)
        return Function._adopt(handle, "<returned>")
    if code == lib.MP_TYPE_HANDLE:
        return int(ffi.cast("uintptr_t", value.v_handle))
    raise TypeError(f"a function returned an unsupported value type {code}")
