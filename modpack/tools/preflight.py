"""``modpack preflight FILE --device DEVICE``: which code a device would get from each module of
a library, and why, or why none fits — read from the library's index and the variant table at
the head of each device module's payload, never its code, and never run. The answer is the C
runtime's (``mp_preflight``), whose choice is the loader's own."""

from __future__ import annotations

import json
import os

from ..errors import ArgumentError, FormatError, MissingFileError
from ..reports import PreflightReport
from ..runtime.binding import error_from_status, ffi, lib

__all__ = ["preflight"]


def preflight(path: str | os.PathLike[str], device: str) -> PreflightReport:
    """Which code |device| would get from each module of the library at |path|.

    device : ``"cuda:sm_90"`` (a compute capability), ``"rocm:gfx90a:sramecc+:xnack-"`` (a
        target ID), ``"opencl"``, ``"vulkan"`` (any Vulkan device: what one needs to run the
        library), ``"vulkan:0"`` (this machine's Vulkan device 0, checked for what the library's
        shaders need), or ``"host"`` (every device this machine's drivers report).

    Returns ``{"path", "device", "devices", "unavailable", "fits", "reason", "modules": [{"index",
    "type_key", "size", "status", "reason", "answers": [{"device", "fits", "variant", "kind",
    "reason", ...}]}], "read": {"bytes", "reads"}}`` (a :class:`~modpack.reports.PreflightReport`;
    docs/json.md: ``modpack preflight --json``); ``fits`` is True when every module has
    code for the device. Raises ArgumentError for a DEVICE that names no device, FormatError for
    a file that is not a sealed library (or is damaged).
    """
    shown = os.fspath(path)
    if not os.path.isfile(shown):
        raise MissingFileError(f"no such library: {shown}")
    if not isinstance(device, str):
        raise ArgumentError(f"device must be a str such as 'cuda:sm_90', not "
                            f"{type(device).__name__}")
    result = ffi.new("mp_preflight_result_t*")
    result.struct_size = ffi.sizeof("mp_preflight_result_t")
    needed = ffi.new("uint64_t*")
    capacity = 1 << 16
    located = _tar_blob(shown) if shown.endswith(".tar") else None
    while True:
        buffer = ffi.new("char[]", capacity)
        if located is None:
            status = lib.mp_preflight(shown.encode(), device.encode(), buffer, capacity,
                                      needed, result)
        else:
            status = lib.mp_preflight_blob(shown.encode(), located[0], located[1],
                                           device.encode(), buffer, capacity, needed, result)
        if status != 0:
            raise error_from_status(status)
        if needed[0] < capacity:
            report: PreflightReport = json.loads(ffi.string(buffer).decode())
            return report
        capacity = needed[0] + 1


def _tar_blob(path: str) -> tuple[int, int]:
    """A ``.tar`` export's blob, (offset, size) in the archive, read in place as for a
    ``.so`` (the blob's index checksum is checked; the tar seal is required, as the seal is of
    a ``.so``, and checked whole by load_module and slim)."""
    from ..format.tar_blob import find_tar_blob
    from ..format.tar_seal import SEAL_MEMBER

    blob = find_tar_blob(path)
    if not blob.members or blob.members[-1].name != SEAL_MEMBER:
        raise FormatError(f"preflight reads a library through its seal: {path} carries no "
                          f"modpack seal (no {SEAL_MEMBER} member at its end)")
    return blob.offset, blob.size
