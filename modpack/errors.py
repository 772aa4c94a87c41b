"""Exceptions: one base class, one subclass per runtime status code.

A status code from the C runtime becomes an exception here and nowhere else
(:func:`modpack.runtime.binding.check`), with the runtime's own message.
"""

from __future__ import annotations

__all__ = [
    "ArgumentError",
    "CompileError",
    "FormatError",
    "IncompatibleError",
    "ModpackError",
    "NotFoundError",
    "UnavailableError",
]


class ModpackError(RuntimeError):
    """Base class of every error modpack raises."""


class FormatError(ModpackError):
    """A library or blob is malformed, truncated or corrupt."""


class IncompatibleError(FormatError):
    """Well-formed, but not for this runtime (e.g. written by a newer major format version)."""


class NotFoundError(ModpackError, KeyError):
    """No such function, loader, array or file."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class UnavailableError(ModpackError):
    """A driver or device that this needs is not present."""


class CompileError(ModpackError):
    """A compiler, assembler or linker failed; the message carries its own output."""


class ArgumentError(ModpackError, TypeError):
    """A call received a wrong argument count, type or value."""
