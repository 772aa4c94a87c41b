"""The thin layer over ``modpack._rt``: the cffi handles, and status codes as exceptions.

Failures cross the C runtime as a status code plus a per-thread message. A Python exception
raised inside a callback the runtime made (a Python loader, a Python function called from host
code) is parked here by :func:`fail` and comes back out of :func:`error_from_status` as itself,
its traceback intact, with the runtime's context (which module, which library) as a note.
"""

from __future__ import annotations

import threading

from .. import errors
from .._rt import ffi, lib  # built: modpack.runtime's import checks it (runtime/unbuilt.py)

# The functions every load calls, looked up once now: cffi makes a function's Python object
# on its first lookup (3-4 us each), which would otherwise land in a process's first load.
for _name in ("mp_module_load", "mp_module_retain", "mp_module_release"):
    getattr(lib, _name)

__all__ = ["check", "error_from_status", "fail", "ffi", "lib", "loader_names", "string"]

EXCEPTIONS: dict[int, type[errors.ModpackError]] = {
    lib.MP_ERR_INVALID_ARGUMENT: errors.ArgumentError,
    lib.MP_ERR_FORMAT: errors.FormatError,
    lib.MP_ERR_NOT_FOUND: errors.NotFoundError,
    lib.MP_ERR_INCOMPATIBLE: errors.IncompatibleError,
    lib.MP_ERR_RESOURCE_EXHAUSTED: errors.ResourceExhaustedError,
    lib.MP_ERR_IO: errors.ModpackOSError,
    lib.MP_ERR_RUNTIME: errors.CallError,
    lib.MP_ERR_ALREADY_EXISTS: errors.AlreadyExistsError,
    lib.MP_ERR_UNAVAILABLE: errors.UnavailableError,
    lib.MP_ERR_INTERNAL: errors.InternalError,
    lib.MP_ERR_UNTRUSTED: errors.SignatureError,
    lib.MP_ERR_MISMATCH: errors.WeightsMismatchError,
}

# Per thread: the Python exception a callback raised and the message it left in the runtime.
_parked = threading.local()


def string(pointer: object) -> str:
    """A NUL-terminated C string from the runtime (its names are UTF-8)."""
    return ffi.string(pointer).decode("utf-8", "replace")


def fail(exc: BaseException) -> int:
    """Report |exc|, raised inside a callback, to the runtime; returns the status for it. The
    exception is parked so that the caller on the Python side re-raises it as itself."""
    status: int = lib.MP_ERR_FORMAT if isinstance(exc, errors.FormatError) else lib.MP_ERR_RUNTIME
    if isinstance(exc, errors.ModpackError):
        for code, cls in EXCEPTIONS.items():
            if type(exc) is cls:
                status = code
    message = f"{type(exc).__name__}: {exc}"
    lib.mp_error_set(status, message.encode("utf-8", "replace"))
    _parked.exception, _parked.message = exc, message
    return status


def error_from_status(status: int) -> BaseException:
    """The exception for |status|, carrying this thread's runtime error message; the parked
    exception of a failed callback when that is what the runtime is reporting."""
    message = string(lib.mp_error_message())
    parked: BaseException | None = getattr(_parked, "exception", None)
    if parked is not None:
        _parked.exception = None
        if _parked.message in message:
            context = message.replace(_parked.message, "").rstrip(": ")
            if context and hasattr(parked, "add_note"):
                parked.add_note(f"modpack: {context}")
            return parked
    if not message:
        message = f"modpack runtime call failed with status {status}"
    return EXCEPTIONS.get(status, errors.ModpackError)(message)


def check(status: int) -> None:
    """Raise the matching exception if a runtime call failed."""
    if status != 0:
        raise error_from_status(status)


def loader_names() -> list[str]:
    """Type keys with a registered loader, sorted."""
    needed = lib.mp_loader_list(ffi.NULL, 0)
    buf = ffi.new("char[]", needed + 1)
    lib.mp_loader_list(buf, needed + 1)
    text = string(buf)
    return text.split(", ") if text else []
