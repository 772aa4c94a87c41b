"""Where a file is about to be written (a library, a weight file): refused before any work
when no file can go there, with the reason and what to give instead."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import ArgumentError, ModpackOSError

__all__ = ["check_destination"]


def check_destination(path: Any, verb: str, example: str) -> Path:
    """|path| resolved, if a file can be written there: not a directory or other special file,
    in an existing folder this user may write. |verb| ("export", "save") and |example| (a file
    name to suggest) make the messages."""
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentError(f"cannot {verb}: the path must be a str or a path, not "
                            f"{type(path).__name__}")
    output = Path(path).resolve()
    if output.is_dir():
        raise ArgumentError(f"cannot {verb} to {output}: it is a directory; give a file path, "
                            f"e.g. {output / example}")
    if not output.parent.is_dir():
        raise ArgumentError(f"cannot {verb} to {output}: the folder {output.parent} does not "
                            "exist")
    if not os.access(output.parent, os.W_OK | os.X_OK):
        raise ModpackOSError(f"cannot {verb} to {output}: the folder {output.parent} is not "
                             "writable by this user")
    if output.exists() and not output.is_file():
        raise ArgumentError(f"cannot {verb} to {output}: it exists and is not a regular file")
    return output
