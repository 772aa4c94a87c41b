"""A module made from one blob entry's bytes by the loader registered for its type key, as a
load makes it: for the tools (``inspect``, ``extract``, ``slim``), which read a library's
modules one at a time without loading the library. No driver is touched and no code from the
file runs."""

from __future__ import annotations

import json
from typing import Any

from .binding import error_from_status, ffi, lib

__all__ = ["describe_module", "entry_module"]


def entry_module(type_key: str, data: Any, size: int, flags: int = 0) -> Any:
    """The runtime module (an ``mp_module_t*``, released with the returned object) that the
    |type_key| loader makes of the |size| bytes at |data| (a cffi pointer into memory that
    outlives the module), with the entry's |flags|; raises the loader's ``ModpackError``."""
    span = ffi.new("mp_const_byte_span_t*")
    span.data = data
    span.size = size
    out = ffi.new("mp_module_t**")
    status = lib.mp_module_load_from_entry(type_key.encode(), span[0], flags, out)
    if status != 0:
        raise error_from_status(status)
    return ffi.gc(out[0], lib.mp_module_release)


def describe_module(module: Any) -> dict[str, Any]:
    """The kind's own description of |module| (variants, kernels, binaries, ...): the runtime
    writes one JSON object and says how long it is, so a long one is read whole. A module the
    runtime cannot describe gets ``{"error": ...}``."""
    needed = ffi.new("uint64_t*")
    capacity = 1 << 12
    while True:
        buffer = ffi.new("char[]", capacity)
        if lib.mp_module_describe(module, buffer, capacity, needed) != 0:
            return {"error": str(error_from_status(lib.mp_error_code()))}
        if needed[0] < capacity:
            break
        capacity = needed[0] + 1
    try:
        description: dict[str, Any] = json.loads(ffi.string(buffer).decode())
    except ValueError:
        return {"error": "the module's description is not valid JSON"}
    return description
