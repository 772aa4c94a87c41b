"""Exceptions: one base class, one class per runtime status code.

A status code from the C runtime becomes an exception in one place
(:func:`modpack.runtime.binding.error_from_status`), with the runtime's own message. Each class
also derives from the built-in exception a Python programmer would reach for, so code that
catches ``ValueError``, ``KeyError``, ``OSError``, ``FileNotFoundError`` or ``MemoryError``
keeps working. An exception raised inside a Python loader or a Python function that the
runtime called reaches the caller as itself (its class and traceback), not as one of these.
"""

from __future__ import annotations

__all__ = [
    "AlreadyExistsError",
    "ArgumentError",
    "CallError",
    "CompileError",
    "DLPackError",
    "FormatError",
    "IncompatibleError",
    "InternalError",
    "MissingExtraError",
    "MissingFileError",
    "ModpackError",
    "ModpackOSError",
    "ModpackWarning",
    "NotFoundError",
    "ResourceExhaustedError",
    "SignatureError",
    "UnavailableError",
    "WeightsMismatchError",
]


class ModpackError(RuntimeError):
    """Base class of every error modpack raises."""


class ModpackWarning(UserWarning):
    """Something works but is probably not what was meant (a kernel another one shadows)."""


class ArgumentError(ModpackError, ValueError, TypeError):
    """A call received a wrong argument count, type or value (MP_ERR_INVALID_ARGUMENT)."""


class DLPackError(ModpackError, BufferError):
    """An array cannot be exported through DLPack as its consumer asked (to another device,
    without the copy that would need, read-only to a consumer older than DLPack 1.0): a
    ``BufferError``, as the Python array API standard has producers raise."""


class FormatError(ModpackError):
    """A library or blob is malformed, truncated or corrupt (MP_ERR_FORMAT)."""


class IncompatibleError(FormatError):
    """Well-formed, but not for this runtime, e.g. written by a newer major format version
    (MP_ERR_INCOMPATIBLE)."""


class NotFoundError(ModpackError, KeyError):
    """No such function, loader, array or file (MP_ERR_NOT_FOUND)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class MissingFileError(NotFoundError, FileNotFoundError):
    """A file modpack was asked to read does not exist: a library to load or inspect, a
    source or object file to build from."""


class ResourceExhaustedError(ModpackError, MemoryError):
    """Out of memory, on the host or a device (MP_ERR_RESOURCE_EXHAUSTED)."""


class SignatureError(FormatError):
    """A library that must be signed by a trusted key is not: unsigned, signed by other keys,
    or changed since it was signed (MP_ERR_UNTRUSTED). Nothing of it was mapped or run."""


class WeightsMismatchError(FormatError):
    """A weight file that is valid but not the one expected: other arrays (names, dtypes,
    shapes) or other contents than the library was exported with, or than the weights it
    replaces (MP_ERR_MISMATCH). The message names the file and the first difference."""


class ModpackOSError(ModpackError, OSError):
    """The operating system refused: open, read, dlopen (MP_ERR_IO)."""

    def __str__(self) -> str:  # OSError would show its (unset) errno fields
        return str(self.args[0]) if self.args else ""


class CallError(ModpackError):
    """A called function or kernel reported a failure (MP_ERR_RUNTIME)."""


class AlreadyExistsError(ModpackError):
    """Something is registered already, e.g. a loader for a type key (MP_ERR_ALREADY_EXISTS)."""


class UnavailableError(ModpackError):
    """A driver or device that this needs is not present (MP_ERR_UNAVAILABLE)."""


class MissingExtraError(UnavailableError, ImportError):
    """A feature needs Python packages this install left out: the message names the command
    that installs them (``pip install modpack[build]`` for exporting, ``modpack[sign]`` for
    signing). Raised when the feature is used, never at ``import modpack``."""


class InternalError(ModpackError):
    """A bug in modpack itself (MP_ERR_INTERNAL): please report it."""


class CompileError(ModpackError):
    """A compiler, assembler or linker failed; the message carries its own output."""
