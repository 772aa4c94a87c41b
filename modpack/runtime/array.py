"""Arrays owned by the runtime on a device (CPU, OpenCL; CUDA in the same slots).

``modpack.array(x, device="opencl:0")`` copies a numpy array to a device, ``modpack.empty``
allocates one, ``.numpy()`` copies back. Arrays speak DLPack both ways.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..errors import ArgumentError
from . import _calls
from .binding import check, error_from_status, ffi, lib, string
from .dtypes import as_dtype, dtype_to_dl

__all__ = ["Array", "array", "device_type_name", "empty", "parse_device"]

_DEVICE = re.compile(r"^(?P<type>[a-z]+)(?::(?P<id>\d+))?$")
_CPU = ffi.new("DLDevice*", {"device_type": lib.kDLCPU, "device_id": 0})[0]


def device_type_name(device_type: int) -> str:
    """The runtime's name of a DLPack device type ("cpu", "opencl", "cuda"), or its number."""
    name = lib.mp_device_type_name(device_type)
    return str(device_type) if name == ffi.NULL else string(name)


def parse_device(device: str | tuple[int, int]) -> tuple[int, int]:
    """``"opencl:0"`` → (DLPack device type, id). Also accepts a (type, id) tuple. The device
    types are the runtime's: the CPU and each built-in kind's device."""
    if isinstance(device, tuple):
        try:
            device_type, device_id = (int(v) for v in device)
        except (TypeError, ValueError):
            raise ArgumentError(f"unknown device {device!r}: a tuple is (DLPack device type, "
                                "id), e.g. (4, 0) for 'opencl:0'") from None
        return device_type, device_id
    m = _DEVICE.match(device.strip().lower()) if isinstance(device, str) else None
    if not m:
        raise ArgumentError(f"unknown device {device!r}: use 'cpu', 'opencl:N' or 'cuda:N'")
    out = ffi.new("int32_t*")
    status = lib.mp_device_type_from_name(m["type"].encode(), out)
    if status:
        raise ArgumentError(f"unknown device {device!r}: {error_from_status(status)}")
    return int(out[0]), int(m["id"] or 0)


class Array:
    """An array in device memory, owned by the runtime (freed when the last user drops it)."""

    __slots__ = ("__weakref__", "_address", "_dtype", "_tensor")

    def __init__(self) -> None:
        raise ArgumentError("create arrays with modpack.array() or modpack.empty()")

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
        return f"{device_type_name(d.device_type)}:{d.device_id}"

    def numpy(self) -> np.ndarray:
        """A host copy."""
        out = np.empty(self.shape, dtype=self._dtype)
        self.copy_to(out)
        return out

    def copy_to(self, target: np.ndarray) -> None:
        """Copy into an existing C-contiguous host array of the same shape and dtype."""
        _check_host(target, self.shape, self._dtype)
        if not target.flags.writeable:
            raise ArgumentError("the target array is read-only")
        t = self._tensor
        host = ffi.from_buffer(target.reshape(-1).view(np.uint8))
        check(lib.mp_device_copy(t.data, t.byte_offset, t.device, host, 0, _CPU, self.nbytes))

    def copy_from(self, source: Any) -> None:
        """Copy a host array (same shape and dtype) into this array."""
        source = np.ascontiguousarray(source)
        _check_host(source, self.shape, self._dtype)
        t = self._tensor
        host = ffi.from_buffer(source.reshape(-1).view(np.uint8), require_writable=False)
        check(lib.mp_device_copy(host, 0, _CPU, t.data, t.byte_offset, t.device, self.nbytes))

    def __dlpack_device__(self) -> tuple[int, int]:
        d = self._tensor.device
        return (int(d.device_type), int(d.device_id))

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None,
                   dl_device: Any = None, copy: bool | None = None) -> Any:
        """The array as a DLPack capsule, without a copy; with ``copy=True``, of a new copy
        on the same device."""
        source = self._copy() if copy else self
        managed = ffi.new("DLManagedTensor**")
        check(lib.mp_array_to_dlpack(source._tensor, managed))
        return _calls.dlpack_capsule(int(ffi.cast("uintptr_t", managed[0])))

    def _copy(self) -> Array:
        """A new array on the same device with the same contents."""
        t = self._tensor
        copied = empty(self.shape, self._dtype, self.__dlpack_device__())
        c = copied._tensor
        check(lib.mp_device_copy(t.data, t.byte_offset, t.device, c.data, c.byte_offset, c.device,
                                 self.nbytes))
        return copied

    def __repr__(self) -> str:
        return f"<modpack.Array shape={self.shape} dtype={self._dtype} device={self.device}>"


def _check_host(host: np.ndarray, shape: tuple, dtype: np.dtype) -> None:
    if not isinstance(host, np.ndarray) or not host.flags.c_contiguous:
        raise ArgumentError("expected a C-contiguous numpy array")
    if host.shape != shape or host.dtype != dtype:
        raise ArgumentError(
            f"shape/dtype mismatch: array is {shape} {dtype}, host is {host.shape} {host.dtype}"
        )


def empty(shape: int | tuple[int, ...], dtype: Any = "float32",
          device: str | tuple[int, int] = "cpu") -> Array:
    """An uninitialised array of |shape| and |dtype| on |device| (``"opencl:0"``, ...)."""
    shape = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
    dtype = as_dtype(dtype)
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
    dtype = None if dtype is None else as_dtype(dtype)
    host = np.ascontiguousarray(data, dtype=dtype)
    if host.ndim == 0 and np.ndim(data) == 0:
        host = np.asarray(data, dtype=dtype)
    result = empty(host.shape, host.dtype, device)
    result.copy_from(host.reshape(host.shape))
    return result

