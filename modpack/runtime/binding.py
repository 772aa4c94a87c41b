"""The thin layer over ``modpack._rt``: the cffi handles and status → exception mapping."""

from __future__ import annotations

from .. import errors

try:
    from .._rt import ffi, lib
except ImportError as exc:  # pragma: no cover - only without a build
    raise ImportError(
        "modpack's C runtime (modpack._rt) is not built: install the package with "
        "`pip install -e .` (or `pip install .`) from the repository root"
    ) from exc

__all__ = ["check", "error_from_status", "ffi", "lib", "loader_names"]

_EXCEPTIONS: dict[int, type[errors.ModpackError]] = {
    lib.MP_ERR_INVALID_ARGUMENT: errors.ArgumentError,
    lib.MP_ERR_FORMAT: errors.FormatError,
    lib.MP_ERR_INCOMPATIBLE: errors.IncompatibleError,
    lib.MP_ERR_NOT_FOUND: errors.NotFoundError,
    lib.MP_ERR_UNAVAILABLE: errors.UnavailableError,
}


def error_from_status(status: int) -> errors.ModpackError:
    """The exception for |status|, carrying this thread's runtime error message."""
    message = ffi.string(lib.mp_error_message()).decode("utf-8", "replace")
    if not message:
        message = f"modpack runtime call failed with status {status}"
    return _EXCEPTIONS.get(status, errors.ModpackError)(message)


def check(status: int) -> None:
    """Raise the matching exception if a runtime call failed."""
    if status != 0:
        raise error_from_status(status)


def loader_names() -> list[str]:
    """Type keys with a registered loader, sorted."""
    needed = lib.mp_loader_list(ffi.NULL, 0)
    buf = ffi.new("char[]", needed + 1)
    lib.mp_loader_list(buf, needed + 1)
    text = ffi.string(buf).decode()
    return text.split(", ") if text else []
