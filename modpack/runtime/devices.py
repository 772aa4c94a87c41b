"""Device queries: how many devices of a type, their names, and synchronisation."""

from __future__ import annotations

from .array import parse_device
from .binding import check, ffi, lib

__all__ = ["device_count", "device_name", "get_stream", "set_stream", "synchronize"]


def device_count(device_type: str) -> int:
    """Number of devices of |device_type| (``"cpu"``, ``"opencl"``, ``"cuda"``): 0 where the
    driver is missing, as on a machine without that kind of device (using a device there raises
    UnavailableError naming the fix). An unknown device type raises ArgumentError."""
    dtype, _ = parse_device(device_type)
    out = ffi.new("int32_t*")
    status = lib.mp_device_count(dtype, out)
    if status == lib.MP_ERR_UNAVAILABLE:
        return 0
    check(status)
    return int(out[0])


def device_name(device: str) -> str:
    """The device's identity, e.g. ``"Portable Computing Language/pthread-.../3.1"`` for
    OpenCL — the key under which prebuilt OpenCL binaries are matched."""
    dtype, did = parse_device(device)
    dev = ffi.new("DLDevice*", {"device_type": dtype, "device_id": did})
    buf = ffi.new("char[512]")
    check(lib.mp_device_name(dev[0], buf, 512))
    return ffi.string(buf).decode()


def synchronize(device: str) -> None:
    """Wait until every operation queued on |device| has finished."""
    dtype, did = parse_device(device)
    dev = ffi.new("DLDevice*", {"device_type": dtype, "device_id": did})
    check(lib.mp_device_synchronize(dev[0]))


def set_stream(device: str, stream: int | None) -> int | None:
    """Make |stream| (a CUstream as an integer, e.g. ``torch.cuda.current_stream().cuda_stream``
    or ``cupy.cuda.Stream().ptr``; None for the default stream) the calling thread's current
    stream on |device|: CUDA kernels launched from this thread on it go there. Returns the
    stream it replaces. Copies (``modpack.array``, ``.numpy()``) run on the legacy default
    stream, which waits only for blocking streams: after launches on a non-blocking stream,
    call ``modpack.synchronize(device)`` before copying back."""
    dtype, did = parse_device(device)
    dev = ffi.new("DLDevice*", {"device_type": dtype, "device_id": did})
    previous = ffi.new("void**")
    check(lib.mp_device_set_stream(dev[0], ffi.cast("void*", stream or 0), previous))
    return int(ffi.cast("uintptr_t", previous[0])) or None


def get_stream(device: str) -> int | None:
    """The calling thread's current stream on |device| (None: the default stream)."""
    dtype, did = parse_device(device)
    dev = ffi.new("DLDevice*", {"device_type": dtype, "device_id": did})
    return int(ffi.cast("uintptr_t", lib.mp_device_get_stream(dev[0]))) or None
