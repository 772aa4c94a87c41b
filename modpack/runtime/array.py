"""Arrays owned by the runtime on a device (CPU, OpenCL; CUDA in the same slots).

``modpack.array(x, device="opencl:0")`` copies a numpy array (or any DLPack producer) to a
device, ``modpack.empty`` allocates one, ``modpack.from_dlpack(x)`` takes a producer's memory
as it is, ``.numpy()`` is a view on the CPU and a copy from other devices. Arrays speak DLPack
both ways, 1.x (versioned capsules, with the read-only flag) and the legacy form.

An array of DLPack's packed float6/float4 types (float4_e2m1fn: two values a byte) has no
numpy view, numpy (ml_dtypes) holding one value per byte: ``modpack.array(x)`` packs such a
numpy array, ``.numpy(copy=True)``, ``copy_to`` and ``copy_from`` convert, and ``.numpy()``
says so. Packed pairs (float4_e2m1fn_x2, one byte each) are viewed like any other dtype.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..errors import ArgumentError, DLPackError
from . import _calls
from .binding import check, error_from_status, ffi, lib, string
from .dtypes import (
    array_dtype_to_dl,
    as_dtype,
    display_name,
    dtype_from_dl,
    dtype_name,
    dtype_to_dl,
)
from .subbyte import is_packed, pack_bits, unpack_bits

__all__ = ["Array", "array", "device_type_name", "empty", "from_dlpack", "numpy_of",
           "parse_device"]

_DEVICE = re.compile(r"^(?P<type>[a-z]+)(?::(?P<id>\d+))?$")
_CPU = ffi.new("DLDevice*", {"device_type": lib.kDLCPU, "device_id": 0})[0]
# The DLPack version this side speaks (DLPACK_*_VERSION of dlpack.h) and its flags.
DLPACK_VERSION: tuple[int, int] = (_calls.DLPACK_MAJOR_VERSION, _calls.DLPACK_MINOR_VERSION)
_READ_ONLY = _calls.DLPACK_FLAG_READ_ONLY
_IS_COPIED = _calls.DLPACK_FLAG_IS_COPIED


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
    """An array on a device, owned by the runtime (freed when the last user drops it): memory
    the runtime allocated (``modpack.empty``, ``modpack.array``), or a DLPack producer's taken
    as it is (``modpack.from_dlpack``), which then stays alive as long as the array. A read-only
    array (from a read-only producer: a const module's weights, a non-writeable numpy array)
    is passed to calls as read-only, and says so to DLPack consumers."""

    __slots__ = ("__weakref__", "_address", "_dtype", "_tensor")
    _tensor: Any  # the runtime's DLTensor* (cffi), released with the array
    _address: int  # the same, as an int: read by the C fast call path
    _dtype: np.dtype

    def __init__(self) -> None:
        raise ArgumentError("create arrays with modpack.array(), modpack.empty() or "
                            "modpack.from_dlpack()")

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
        """The bytes of its elements (product(shape) * itemsize)."""
        return int(lib.mp_array_nbytes(self._tensor))

    @property
    def device(self) -> str:
        d = self._tensor.device
        return f"{device_type_name(d.device_type)}:{d.device_id}"

    @property
    def read_only(self) -> bool:
        """True for an array that must not be written (taken from a read-only producer)."""
        return bool(lib.mp_array_flags(self._tensor) & lib.MP_ARRAY_READ_ONLY)

    @property
    def data_ptr(self) -> int:
        """The address of its first element (``data + byte_offset``; on a device, the
        device's handle plus that offset), as an int."""
        t = self._tensor
        return int(ffi.cast("uintptr_t", t.data)) + int(t.byte_offset)

    @property
    def strides(self) -> tuple[int, ...] | None:
        """Its strides in elements, or None for a compact (row-major) array. Only arrays
        taken from a strided producer's view have them."""
        t = self._tensor
        if t.strides == ffi.NULL:
            return None
        return tuple(t.strides[d] for d in range(t.ndim))

    @property
    def packed(self) -> bool:
        """True for an array of DLPack's packed sub-byte types (float4_e2m1fn, float6_*:
        values share bytes), which has no numpy view."""
        d = self._tensor.dtype
        return is_packed(d.bits, d.lanes)

    def numpy(self, *, copy: bool = False) -> np.ndarray:
        """The array as numpy. On the CPU a view sharing its memory, no copy (read-only when
        the array is; the view keeps the array alive); from another device, or with
        ``copy=True``, a host copy of its own (for a packed array, its values unpacked, one a
        byte, as ml_dtypes holds them)."""
        if self._tensor.device.device_type == lib.kDLCPU and not (copy and self.packed):
            view = self._host_view()
            return view.copy() if copy else view
        out = np.empty(self.shape, dtype=self._dtype)
        self.copy_to(out)
        return out

    def _no_view(self) -> ArgumentError:
        d = self._tensor.dtype
        return ArgumentError(
            f"a packed {dtype_name(d.code, d.bits, d.lanes)} array (values sharing bytes, as "
            "DLPack packs them) has no numpy view, numpy (ml_dtypes) holding one value per byte: "
            "numpy(copy=True) unpacks a copy")

    def _host_view(self) -> np.ndarray:
        if self.packed:
            raise self._no_view()
        itemsize = self._dtype.itemsize
        strides = self.strides
        holder = _HostView(self, self.shape, self._dtype,
                           None if strides is None else tuple(s * itemsize for s in strides))
        view = np.asarray(holder)
        return view if view.dtype == self._dtype else view.view(self._dtype)

    def copy_to(self, target: np.ndarray) -> None:
        """Copy into an existing C-contiguous host array of the same shape and dtype."""
        _check_host(target, self.shape, self._dtype)
        if not target.flags.writeable:
            raise ArgumentError("the target array is read-only")
        t = self._tensor
        if t.strides != ffi.NULL:
            target[...] = self._strided_host_view()
            return
        if self.packed:  # the packed bytes, then unpacked into the target
            raw = np.empty(self.nbytes, np.uint8)
            check(lib.mp_device_copy(t.data, t.byte_offset, t.device, ffi.from_buffer(raw), 0,
                                     _CPU, self.nbytes))
            target.reshape(-1).view(np.uint8)[...] = unpack_bits(raw, target.size, t.dtype.bits)
            return
        host = ffi.from_buffer(target.reshape(-1).view(np.uint8))
        check(lib.mp_device_copy(t.data, t.byte_offset, t.device, host, 0, _CPU, self.nbytes))

    def copy_from(self, source: Any) -> None:
        """Copy a host array (same shape and dtype) into this array."""
        if self.read_only:
            raise ArgumentError("the array is read-only (taken from a read-only DLPack "
                                "producer): copy it with modpack.array(x) to get one to write")
        source = np.ascontiguousarray(source)
        _check_host(source, self.shape, self._dtype)
        t = self._tensor
        if t.strides != ffi.NULL:
            self._strided_host_view()[...] = source
            return
        if self.packed:  # one value a byte (ml_dtypes) -> DLPack's packing
            source = pack_bits(source.view(np.uint8), t.dtype.bits)
        host = ffi.from_buffer(source.reshape(-1).view(np.uint8), require_writable=False)
        check(lib.mp_device_copy(host, 0, _CPU, t.data, t.byte_offset, t.device, self.nbytes))

    def _strided_host_view(self) -> np.ndarray:
        if self._tensor.device.device_type != lib.kDLCPU:
            raise ArgumentError(f"a strided array on {self.device} cannot be copied: only "
                                "compact arrays are copied to and from devices")
        return self._host_view()

    def __dlpack_device__(self) -> tuple[int, int]:
        d = self._tensor.device
        return (int(d.device_type), int(d.device_id))

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None,
                   copy: bool | None = None) -> Any:
        """The array as a DLPack capsule, as the Python array API standard says: a versioned
        capsule (``"dltensor_versioned"``, DLPack 1.x, with the read-only flag of a read-only
        array) for a consumer whose |max_version| is 1.0 or newer, the legacy ``"dltensor"``
        one otherwise. No copy unless |copy| is True, |dl_device| is another device (the CPU:
        a host copy), or a legacy consumer asks for a read-only array (it could not be told
        the array is read-only, so it gets a copy of its own; with ``copy=False``,
        :class:`~modpack.DLPackError`, a ``BufferError``). On a device, a |stream| other than
        None and -1 waits for the device's work first."""
        major = -1 if max_version is None else int(max_version[0])
        versioned = major >= 1
        source, copied = self, False
        if dl_device is not None and tuple(int(v) for v in dl_device) != \
                self.__dlpack_device__():
            if int(dl_device[0]) != lib.kDLCPU:
                raise DLPackError(f"a modpack array on {self.device} is exported on its own "
                                  f"device or copied to the CPU, not to device {dl_device}")
            if copy is False:
                raise DLPackError(f"exporting a modpack array on {self.device} to the CPU "
                                  "needs a copy, and copy=False was asked")
            source, copied = self._copy_to_host(), True
        elif copy:
            source, copied = self._copy(), True
        if not versioned and source.read_only:
            if copy is False:
                raise DLPackError(
                    "the array is read-only, which a DLPack consumer older than 1.0 cannot be "
                    "told: ask with max_version=(1, 0), or allow a copy")
            source, copied = source._copy(), True
        if stream is not None and stream != -1 and \
                self._tensor.device.device_type != lib.kDLCPU:
            check(lib.mp_device_synchronize(self._tensor.device))
        if not versioned:
            legacy = ffi.new("DLManagedTensor**")
            check(lib.mp_array_to_dlpack(source._tensor, legacy))
            return _calls.dlpack_capsule(int(ffi.cast("uintptr_t", legacy[0])), False)
        managed = ffi.new("DLManagedTensorVersioned**")
        check(lib.mp_array_to_dlpack_versioned(source._tensor, _IS_COPIED if copied else 0,
                                               managed))
        if max_version is not None and major == DLPACK_VERSION[0]:  # the minor it knows
            managed[0].version.minor = min(int(max_version[1]), DLPACK_VERSION[1])
        return _calls.dlpack_capsule(int(ffi.cast("uintptr_t", managed[0])), True)

    def _copy(self) -> Array:
        """A new (writable, compact) array on the same device with the same contents."""
        t = self._tensor
        if t.strides != ffi.NULL:
            return array(self._strided_host_view(), self.__dlpack_device__())
        copied = empty(self.shape, self._dtype, self.__dlpack_device__())
        c = copied._tensor
        check(lib.mp_device_copy(t.data, t.byte_offset, t.device, c.data, c.byte_offset, c.device,
                                 self.nbytes))
        return copied

    def _copy_to_host(self) -> Array:
        copied = empty(self.shape, self._dtype, "cpu")
        t, c = self._tensor, copied._tensor
        if t.strides == ffi.NULL:  # its bytes as they are (packed ones too)
            check(lib.mp_device_copy(t.data, t.byte_offset, t.device, c.data, c.byte_offset,
                                     c.device, self.nbytes))
        else:
            self.copy_to(copied._host_view())
        return copied

    def __repr__(self) -> str:
        flags = " read_only" if self.read_only else ""
        d = self._tensor.dtype
        name = dtype_name(d.code, d.bits, d.lanes) if self.packed else display_name(self._dtype)
        return (f"<modpack.Array shape={self.shape} dtype={name} device={self.device}"
                f"{flags}>")


class _HostView:
    """Exposes a CPU array's memory to numpy; as the view's base, it keeps the array alive."""

    __slots__ = ("__array_interface__", "_array")

    def __init__(self, array: Array, shape: tuple[int, ...], dtype: np.dtype,
                 strides: tuple[int, ...] | None) -> None:
        self._array = array
        self.__array_interface__ = {
            "version": 3, "shape": shape, "strides": strides,
            # ml_dtypes types (float8_e5m2's "<f1" included) and float4_e2m1fn_x2 have no
            # typestr numpy reads back: same-sized void, viewed after.
            "typestr": dtype.str if dtype.isbuiltin == 1 else f"|V{dtype.itemsize}",
            "data": (array.data_ptr, array.read_only),
        }


def _check_host(host: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> None:
    if not isinstance(host, np.ndarray) or not host.flags.c_contiguous:
        raise ArgumentError("expected a C-contiguous numpy array")
    if host.shape != shape or host.dtype != dtype:
        raise ArgumentError(
            f"shape/dtype mismatch: array is {shape} {display_name(dtype)}, host is {host.shape} "
            f"{display_name(host.dtype)}"
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


def array(data: Any, device: str | tuple[int, int] = "cpu", dtype: Any = None, *,
          copy: bool | None = True) -> Array:
    """|data| (a numpy array, anything numpy accepts, or a DLPack producer: a PyTorch tensor,
    a JAX array, a modpack array, a capsule) as an array on |device|, of |dtype| (default:
    |data|'s). A copy by default; with ``copy=None`` a producer's memory is used as it is
    when it already is on |device| with that dtype (:func:`from_dlpack`), and copied
    otherwise; ``copy=False`` never copies, and raises ArgumentError when it would have to."""
    dtype = None if dtype is None else as_dtype(dtype)
    target = parse_device(device)
    if copy is not True or (not isinstance(data, np.ndarray) and _speaks_dlpack(data)):
        try:
            source = from_dlpack(data)
        except (ArgumentError, BufferError, TypeError) as exc:
            if copy is False:
                raise ArgumentError(f"modpack.array(copy=False): {exc}") from None
            source = None
        if source is not None:
            same = source.__dlpack_device__() == target and (dtype is None or dtype ==
                                                              source.dtype)
            if same and copy is not True and source.strides is None:
                return source
            if copy is False:
                raise ArgumentError(
                    f"modpack.array(copy=False): the data is {source.dtype} on {source.device}"
                    f"{' (strided)' if source.strides is not None else ''}, so a "
                    f"{dtype or source.dtype} array on {device} needs a copy")
            if same:
                return source._copy()
            data = source.numpy(copy=source.packed)  # (packed: unpacked, packed again)
    host = np.ascontiguousarray(data, dtype=dtype)
    if host.ndim == 0 and np.ndim(data) == 0:
        host = np.asarray(data, dtype=dtype)
    result = empty(host.shape, host.dtype, target)
    result.copy_from(host.reshape(host.shape))
    return result


def _speaks_dlpack(data: Any) -> bool:
    return hasattr(data, "__dlpack__") or _calls.capsule_tensor(data) is not None


def from_dlpack(x: Any, *, device: str | tuple[int, int] | None = None,
                copy: bool | None = None) -> Array:
    """An array over a DLPack producer's memory, without a copy: a numpy array, a PyTorch
    tensor, a JAX array, a modpack array, or a DLPack capsule (legacy or versioned). It is
    asked for a DLPack 1.x capsule (older producers give the legacy one), so a read-only
    producer (a const module's weights) gives a read-only array; the producer's memory lives
    as long as the array does. ``copy=True`` asks for a copy of one's own; |device| other than
    the producer's copies there (``copy=False`` refuses, with ArgumentError)."""
    if isinstance(x, Array):
        result = x._copy() if copy else x
    else:
        result = _take_dlpack(x, copy)
    if device is not None and parse_device(device) != result.__dlpack_device__():
        if copy is False:
            raise ArgumentError(f"from_dlpack(copy=False): the data is on {result.device}, "
                                f"so an array on {device} needs a copy")
        host = result if result.__dlpack_device__()[0] == lib.kDLCPU else \
            result._copy_to_host()
        result = array(host.numpy(copy=host.packed), device)
    return result


def _take_dlpack(x: Any, copy: bool | None) -> Array:
    """A new Array owning the tensor of |x|'s DLPack capsule. numpy exports none of the
    ml_dtypes types nor float4_e2m1fn_x2's stand-in: such an array is taken as the same-sized
    unsigned integers, its DLPack type set on the tensor after (no copy either way)."""
    retype = None
    if isinstance(x, np.ndarray) and x.dtype.isbuiltin != 1:
        retype = array_dtype_to_dl(x.dtype)  # (refuses ml_dtypes' padded float4 and float6)
        x = x.view(f"u{x.dtype.itemsize}")
    capsule, copied = x, False
    if _calls.capsule_tensor(x) is None:
        if type(x).__name__ == "PyCapsule":
            raise ArgumentError("this capsule is not an unused DLPack capsule: a DLPack "
                                "capsule is taken once (it is renamed 'used_...' then)")
        if not hasattr(x, "__dlpack__"):
            raise ArgumentError(f"cannot take a {type(x).__name__} as an array: it does not "
                                "implement __dlpack__ (DLPack)")
        ask: dict[str, Any] = {"max_version": DLPACK_VERSION}
        if copy is not None:
            ask["copy"] = copy
        device = x.__dlpack_device__() if hasattr(x, "__dlpack_device__") else None
        if device is not None and int(device[0]) != lib.kDLCPU:
            ask["stream"] = _consumer_stream(int(device[0]), int(device[1]))
        try:
            try:
                capsule = x.__dlpack__(**ask)
                copied = bool(copy)
            except TypeError:  # a producer of DLPack before 1.0: no keywords
                capsule = x.__dlpack__()
        except BufferError as exc:
            raise DLPackError(f"{type(x).__name__} refuses DLPack: {exc}") from None
    found = _calls.capsule_tensor(capsule)
    if found is None:
        raise ArgumentError(f"{type(x).__name__}.__dlpack__() returned "
                            f"{type(capsule).__name__}, not an unused DLPack capsule")
    address, versioned = found
    out = ffi.new("DLTensor**")
    if versioned:
        check(lib.mp_array_from_dlpack_versioned(
            ffi.cast("DLManagedTensorVersioned*", address), out))
    else:
        check(lib.mp_array_from_dlpack(ffi.cast("DLManagedTensor*", address), out))
    _calls.capsule_consume(capsule)  # the array owns the tensor now
    t = out[0]
    if retype is not None:
        t.dtype.code, t.dtype.bits, t.dtype.lanes = retype
    try:
        dtype = dtype_from_dl(t.dtype.code, t.dtype.bits, t.dtype.lanes)
    except ArgumentError:
        lib.mp_array_release(t)
        raise
    result = Array._adopt(t, dtype)
    return result._copy() if copy and not copied else result


def _consumer_stream(device_type: int, device_id: int) -> Any:
    """The stream this thread's launches use on a device, as DLPack's consumer names it (CUDA:
    1, the legacy default stream, or the stream set with set_stream; ROCm: 0 or the stream)."""
    current = int(ffi.cast("uintptr_t", lib.mp_device_get_stream(
        ffi.new("DLDevice*", {"device_type": device_type, "device_id": device_id})[0])))
    if current:
        return current
    return 1 if device_type == lib.kDLCUDA else 0 if device_type == lib.kDLROCM else None


def numpy_of(value: Any) -> np.ndarray:
    """|value| as a numpy array: ``numpy.asarray(value)``, or, for a DLPack producer numpy
    cannot convert (a PyTorch tensor of float8, bfloat16 or float4_e2m1fn_x2), its memory
    through :func:`from_dlpack` (a view on the CPU, whose base keeps the producer alive; a host
    copy from a device). Raises what ``numpy.asarray`` raised when neither works."""
    try:
        return np.asarray(value)
    except Exception as exc:
        if isinstance(value, np.ndarray) or not hasattr(value, "__dlpack__"):
            raise
        failure = exc
    try:
        taken = from_dlpack(value)
    except (ArgumentError, BufferError):
        raise failure from None
    return taken.numpy(copy=taken.__dlpack_device__()[0] != lib.kDLCPU)
