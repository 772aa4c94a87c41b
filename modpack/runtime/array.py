"""Arrays owned by the runtime on a device (CPU, OpenCL; CUDA in the same slots).

``modpack.array(x, device="opencl:0")`` copies a numpy array to a device, ``modpack.empty``
allocates one, ``.numpy()`` copies back. Arrays speak DLPack both ways.
"""

from __future__ import annotations

import ctypes
import re
from typing import Any

import numpy as np

from .binding import check, ffi, lib
from .dtypes import dtype_to_dl

__all__ = ["Array", "array", "empty", "parse_device"]

_DEVICE_TYPES = {"cpu": lib.kDLCPU, "cuda": lib.kDLCUDA, "opencl": lib.kDLOpenCL}
_DEVICE_NAMES = {v: k for k, v in _DEVICE_TYPES.items()}
_DEVICE = re.compile(r"^(?P<type>[a-z]+)(?::(?P<id>\d+))?$")

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
_DLTENSOR_NAME = ctypes.create_string_buffer(b"dltensor")  # must outlive every capsule
_DESTRUCTOR = int(ffi.cast("uintptr_t", lib.modpack_capsule_destructor()))


def parse_device(device: str | tuple[int, int]) -> tuple[int, int]:
    """``"opencl:0"`` → (DLPack device type, id). Also accepts a (type, id) tuple."""
    if isinstance(device, tuple):
        return int(device[0]), int(device[1])
    m = _DEVICE.match(device.strip().lower()) if isinstance(device, str) else None
    if not m or m["type"] not in _DEVICE_TYPES:
        raise ValueError(
            f"unknown device {device!r}: use 'cpu', 'opencl:N' or 'cuda:N'"
        )
    return _DEVICE_TYPES[m["type"]], int(m["id"] or 0)


class Array:
    """An array in device memory, owned by the runtime (freed when the last user drops it)."""

    __slots__ = ("__weakref__", "_address", "_dtype", "_tensor")

    def __init__(self) -> None:
        raise TypeError("create arrays with modpack.array() or modpack.empty()")

    @classmethod
    def _adopt(cls, tensor: Any, dtype: np.dtype) -> Array:
        self = object.__new__(cls)
        self._tensor = ffi.gc(tensor, lib.mp_array_release)
        self._address = int(ffi.cast("uintptr_t", tensor))  # read by the C fast call path
        self._dtype = dtype
        return self

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._tensor.shape[d] for d in range(self._tensor.ndim))

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def ndim(self) -> int:
        return int(self._tensor.ndim)

    @property
    def nbytes(self) -> int:
        return int(lib.mp_array_nbytes(self._tensor))

    @property
    def device(self) -> str:
        d = self._tensor.device
        return f"{_DEVICE_NAMES.get(d.device_type, d.device_type)}:{d.device_id}"

    def numpy(self) -> np.ndarray:
        """A host copy."""
        out = np.empty(self.shape, dtype=self._dtype)
        self.copy_to(out)
        return out

    def copy_to(self, target: np.ndarray) -> None:
        """Copy into an existing C-contiguous host array of the same shape and dtype."""
        _check_host(target, self.shape, self._dtype)
        keep: list = []
        from .values import tensor_from_array

        check(lib.mp_array_copy(self._tensor, tensor_from_array(target, keep)))

    def copy_from(self, source: Any) -> None:
        """Copy a host array (same shape and dtype) into this array."""
        source = np.ascontiguousarray(source)
        _check_host(source, self.shape, self._dtype)
        keep: list = []
        from .values import tensor_from_array

        check(lib.mp_array_copy(tensor_from_array(source, keep), self._tensor))

    def _dltensor(self) -> Any:
        """The runtime's own DLTensor, passed to calls as is."""
        return self._tensor

    def __dlpack_device__(self) -> tuple[int, int]:
        d = self._tensor.device
        return (int(d.device_type), int(d.device_id))

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None,
                   dl_device: Any = None, copy: bool | None = None) -> Any:
        if copy:
            raise BufferError("modpack arrays export without copying (copy=True unsupported)")
        managed = ffi.new("DLManagedTensor**")
        check(lib.mp_array_to_dlpack(self._tensor, managed))
        address = int(ffi.cast("uintptr_t", managed[0]))
        return _capsule_new(address, ctypes.addressof(_DLTENSOR_NAME), _DESTRUCTOR)

    def __repr__(self) -> str:
        return f"<modpack.Array shape={self.shape} dtype={self._dtype} device={self.device}>"


def _check_host(host: np.ndarray, shape: tuple, dtype: np.dtype) -> None:
    if not isinstance(host, np.ndarray) or not host.flags.c_contiguous:
        raise TypeError("expected a C-contiguous numpy array")
    if host.shape != shape or host.dtype != dtype:
        raise ValueError(
            f"shape/dtype mismatch: array is {shape} {dtype}, host is {host.shape} {host.dtype}"
        )


def empty(shape: int | tuple[int, ...], dtype: Any = "float32",
          device: str | tuple[int, int] = "cpu") -> Array:
    """An uninitialised array of |shape| and |dtype| on |device| (``"opencl:0"``, ...)."""
    shape = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
    dtype = np.dtype(dtype)
    code, bits, lanes = dtype_to_dl(dtype)
    device_type, device_id = parse_device(device)
    dl_dtype = ffi.new("DLDataType*", {"code": code, "bits": bits, "lanes": lanes})
    dl_device = ffi.new("DLDevice*", {"device_type": device_type, "device_id": device_id})
    out = ffi.new("DLTensor**")
    check(lib.mp_array_empty(ffi.new("int64_t[]", shape or (1,)), len(shape), dl_dtype[0],
                             dl_device[0], out))
    return Array._adopt(out[0], dtype)


def array(data: Any, device: str | tuple[int, int] = "cpu", dtype: Any = None) -> Array:
    """A copy of |data| (a numpy array or anything numpy accepts) on |device|."""
    host = np.ascontiguousarray(data, dtype=dtype)
    if host.ndim == 0 and np.ndim(data) == 0:
        host = np.asarray(data, dtype=dtype)
    result = empty(host.shape, host.dtype, device)
    result.copy_from(host.reshape(host.shape))
    return result

