"""What every packer is given: a function that writes the blob into a file, and the blob file
that the ``.incbin`` packers assemble from."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = ["BlobWriter", "write_blob_file"]

# write_blob(file, offset) writes the blob into |file| from byte |offset| on; returns its size.
BlobWriter = Callable[[BinaryIO, int], int]


def write_blob_file(write_blob: BlobWriter, workspace: Path) -> Path:
    """The blob written to ``workspace/devc.bin`` (for packers that embed a file)."""
    path = workspace / "devc.bin"
    with open(path, "w+b") as f:
        write_blob(f, 0)
    return path
