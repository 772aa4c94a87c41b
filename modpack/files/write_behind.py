"""Large payloads go to disk as they stream, window by window, instead of piling up in the page
cache.

Why: written through the page cache alone, a payload first needs fresh memory for all of itself,
then leaves a payload-sized copy of data the exporting process will not read again. Getting
that memory is not free: on this project's reference machine (a VM whose free memory is handed
back to the host) a 512 MiB export spent 1.4-1.9 s in write(), where the disk takes 0.3 s. Here
each window is handed to the disk once written (``sync_file_range``) and dropped from the cache
once on disk (``POSIX_FADV_DONTNEED``), so the cache holds at most two windows, their pages are
reused, and the export ends with the payload on disk, at the disk's sequential speed.

Linux only (``sync_file_range`` through the C library); elsewhere writes are plain.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any, BinaryIO

__all__ = ["WRITE_BEHIND_FROM", "WriteBehind"]

WRITE_BEHIND_FROM = 64 << 20  # files from this size go to disk as they stream

_WAIT_BEFORE, _WRITE, _WAIT_AFTER = 1, 2, 4  # SYNC_FILE_RANGE_* (linux/fs.h)


def _sync_file_range() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_SYNC_FILE_RANGE = _sync_file_range()


class WriteBehind:
    """|f| (a buffered binary file), with every |window| bytes written handed to the disk and
    the window before it, once written, dropped from the page cache. Reads, seeks and the rest
    go to |f|; call :meth:`finish` when done writing."""

    def __init__(self, f: BinaryIO, window: int = 32 << 20) -> None:
        self._f = f
        self._window = window
        self._fd = f.fileno() if _SYNC_FILE_RANGE else -1
        self._start: int | None = None  # the first byte written and not yet handed over
        self._handed: tuple[int, int] | None = None  # handed to the disk, still cached

    def write(self, data: Any) -> int:
        if self._fd < 0:
            return self._f.write(data)
        view = memoryview(data).cast("B")
        for begin in range(0, len(view), self._window):  # a large array, a window at a time
            self._write_piece(view[begin : begin + self._window])
        return len(view)

    def _write_piece(self, piece: memoryview) -> None:
        here = self._f.tell()
        if self._start is None or here < self._start:
            self._start = here
        self._f.write(piece)
        end = here + len(piece)
        if end - self._start >= self._window:
            self._hand_over(self._start, end)
            self._start = None

    def finish(self) -> None:
        """Hand what is left to the disk, wait for it and drop it from the cache."""
        if self._fd < 0:
            return
        if self._start is not None:
            end = self._f.tell()
            if end > self._start:
                self._hand_over(self._start, end)
            self._start = None
        self._drop_handed()
        # A window's edges fall inside pages, which dropping the window keeps: drop the whole
        # file once it is on disk, or it stays cached as scattered single pages, and a later
        # read of it fills the cache in small pieces around them (warm loads 2-3x slower).
        if not _SYNC_FILE_RANGE(self._fd, 0, 0, _WAIT_BEFORE | _WRITE | _WAIT_AFTER):
            os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_DONTNEED)

    def _hand_over(self, start: int, end: int) -> None:
        self._f.flush()
        _SYNC_FILE_RANGE(self._fd, start, end - start, _WRITE)  # start writing, do not wait
        self._drop_handed()
        self._handed = (start, end)

    def _drop_handed(self) -> None:
        if self._handed is None:
            return
        start, end = self._handed
        self._handed = None
        if _SYNC_FILE_RANGE(self._fd, start, end - start, _WAIT_BEFORE | _WRITE | _WAIT_AFTER):
            return  # advisory: the data is written either way, only left in the cache
        os.posix_fadvise(self._fd, start, end - start, os.POSIX_FADV_DONTNEED)

    def read(self, size: int = -1, /) -> bytes:
        return self._f.read(size)

    def seek(self, offset: int, whence: int = 0, /) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def truncate(self, size: int | None = None, /) -> int:
        return self._f.truncate(size)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)
