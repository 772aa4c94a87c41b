"""Prebuilt OpenCL program binaries: building a source for the OpenCL devices of this machine,
so a library carrying the binaries skips the compile on those devices."""

from __future__ import annotations

from collections.abc import Iterable

from ...errors import ArgumentError, CallError
from ...runtime.array import parse_device
from ...runtime.binding import check, ffi, lib
from ...runtime.devices import device_name
from .module import check_build_options

__all__ = ["opencl_binaries"]


def opencl_binaries(source: str, devices: Iterable[str] = ("opencl:0",),
                    build_options: str | None = None) -> dict[str, bytes]:
    """Build |source| with |build_options| for each OpenCL device here and return ``{device
    key: program binary}``, ready for ``opencl_module(source, binaries=...,
    build_options=...)`` with the same options. Elsewhere the runtime builds the source."""
    code = source.encode()
    options = check_build_options(build_options).encode()
    out: dict[str, bytes] = {}
    for device in devices:
        device_type, device_id = parse_device(device)
        if device_type != lib.kDLOpenCL:
            raise ArgumentError(f"{device!r} is not an OpenCL device")
        size = ffi.new("uint64_t*")
        check(lib.mp_opencl_build_binary(code, len(code), options, device_id, ffi.NULL, 0, size))
        # Each call builds anew, and a driver may make a binary of another size the second time
        # (PoCL 3.1 made 49,392 bytes, then 49,508): the call copies nothing into a buffer too
        # small and says the size it needs, so build again until one fits (the bytes were read
        # past the buffer's end before).
        for _ in range(4):
            capacity = size[0]
            buffer = ffi.new("uint8_t[]", capacity)
            check(lib.mp_opencl_build_binary(code, len(code), options, device_id, buffer,
                                             capacity, size))
            if size[0] <= capacity:
                break
        else:
            raise CallError(f"the OpenCL driver of {device} made a program binary of another "
                            "size at each of 4 builds: it cannot be carried")
        out[device_name(device)] = ffi.buffer(buffer, size[0])[:]
    return out
