"""Copying a range of one file into another by the kernel (``copy_file_range``): a reflink
where the file system shares blocks, else an in-kernel copy that never passes through this
process's memory. What slim keeps of a library and what a ``.tar``'s relink takes of its blob
are copied this way."""

from __future__ import annotations

import os

from ..errors import FormatError

__all__ = ["copy_range"]

_COPY_CHUNK = 1 << 30


def copy_range(src: int, dst: int, src_offset: int, dst_offset: int, size: int) -> None:
    """|size| bytes of file |src| from |src_offset| into file |dst| at |dst_offset|; a
    FormatError if |src| ends first (a file truncated since it was read)."""
    while size > 0:
        done = os.copy_file_range(src, dst, min(size, _COPY_CHUNK), src_offset, dst_offset)
        if done <= 0:
            raise FormatError(f"the input file ended {size} bytes before the range being copied "
                              "from it (was it truncated meanwhile?)")
        src_offset += done
        dst_offset += done
        size -= done
