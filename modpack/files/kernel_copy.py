"""Copying a range of one file into another by the kernel (``copy_file_range``): a reflink
where the file system shares blocks, else an in-kernel copy that never passes through this
process's memory. What slim keeps of a library and what a ``.tar``'s relink takes of its blob
are copied this way, and so is what ``modpack sign`` copies of a weight file."""

from __future__ import annotations

import errno
import os

from ..errors import FormatError

__all__ = ["copy_range"]

_COPY_CHUNK = 1 << 30


def copy_range(src: int, dst: int, src_offset: int, dst_offset: int, size: int, *,
               skip_holes: bool = False) -> None:
    """|size| bytes of file |src| from |src_offset| into file |dst| at |dst_offset|; a
    FormatError if |src| ends first (a file truncated since it was read).

    With |skip_holes| (for a target whose range reads as zeros already: a new file), what lies
    in holes of |src| is not copied, so a sparse file stays sparse: ``copy_file_range`` writes
    a hole's zeros out as data where the file system cannot share blocks, so copying a file of
    a few kilobytes that claims gigabytes would write gigabytes."""
    if skip_holes and os.fstat(src).st_size < src_offset + size:
        raise FormatError(f"the input file ends before the {size} bytes at {src_offset} being "
                          "copied from it (was it truncated meanwhile?)")
    end = src_offset + size
    while src_offset < end:
        stop = end
        if skip_holes:
            data = _next_data(src, src_offset, end)
            dst_offset += data - src_offset
            src_offset = data
            if src_offset >= end:
                break
            stop = min(end, os.lseek(src, src_offset, os.SEEK_HOLE))
        _copy(src, dst, src_offset, dst_offset, stop - src_offset)
        dst_offset += stop - src_offset
        src_offset = stop


def _next_data(fd: int, offset: int, end: int) -> int:
    """The first byte at or after |offset| of |fd| that is not in a hole (|end| if none before
    it); |offset| itself where the file system cannot tell."""
    try:
        return min(os.lseek(fd, offset, os.SEEK_DATA), end)
    except OSError as e:
        if e.errno == errno.ENXIO:  # nothing but a hole from |offset| to the end of the file
            return end
        return offset


def _copy(src: int, dst: int, src_offset: int, dst_offset: int, size: int) -> None:
    while size > 0:
        done = os.copy_file_range(src, dst, min(size, _COPY_CHUNK), src_offset, dst_offset)
        if done <= 0:
            raise FormatError(f"the input file ended {size} bytes before the range being copied "
                              "from it (was it truncated meanwhile?)")
        src_offset += done
        dst_offset += done
        size -= done
