"""A ``.tar`` as the exporter writes it: ustar headers that carry nothing of this machine (no
time, owner or mode bits but 0o644), so the same objects give the same archive byte for byte;
each member's bytes, padded to tar's 512-byte blocks; tar's end blocks.

Why not :mod:`tarfile`: a member's header holds its size, so tarfile adds a member only from
bytes that exist already. The blob object of a large export would then be written twice, once
to a scratch file and once into the archive, and a 1 GiB export wrote 2 GiB. Here a member can
also be written in place (:meth:`TarWriter.add_written`), its header filled in once its size
is known. The archive is the one tarfile writes (``tarfile.open(path, "w",
format=tarfile.USTAR_FORMAT)``, the same headers, the same end): the tar seal
(:mod:`modpack.format.tar_seal`) appends to it, and ``load_module`` reads it, with tarfile.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Callable
from typing import IO, BinaryIO

from ..errors import ArgumentError, FormatError
from ..format.tar_members import name_problem

__all__ = ["TarWriter"]

_BLOCK = tarfile.BLOCKSIZE
_RECORD = tarfile.RECORDSIZE
_COPY_CHUNK = 1 << 20


def _header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o644
    return info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape")


class TarWriter:
    """Writes a tar archive into |f| (open for writing and reading, at its start), member by
    member; :meth:`close` ends it (the file stays open)."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self._offset = f.tell()
        self._names: set[str] = set()

    def add_file(self, name: str, path: str | os.PathLike[str]) -> None:
        """The file at |path| as member |name|."""
        with open(path, "rb") as source:
            self.add_stream(name, source, os.fstat(source.fileno()).st_size)

    def add_stream(self, name: str, source: IO[bytes], size: int) -> None:
        """The next |size| bytes of |source| (another archive's member, say) as member
        |name|."""
        self._claim(name)
        self._f.seek(self._offset)
        header = _header(name, size)
        self._f.write(header)
        left = size
        while left:
            chunk = source.read(min(_COPY_CHUNK, left))
            if not chunk:
                raise FormatError(f"tar member {name!r}: its source ended {left} bytes before "
                                  "the size its header gives (was it truncated meanwhile?)")
            self._f.write(chunk)
            left -= len(chunk)
        self._end_member(self._offset + len(header), size)

    def add_written(self, name: str, write: Callable[[BinaryIO, int], int]) -> None:
        """Member |name| written in place by ``write(f, offset)``, which writes its bytes into
        the archive's file at |offset| and returns how many (a packer's object, say)."""
        self._claim(name)
        data_at = self._offset + len(_header(name, 0))
        size = write(self._f, data_at)
        self._f.seek(self._offset)
        self._f.write(_header(name, size))
        self._end_member(data_at, size)

    def close(self) -> None:
        """Tar's end: two zero blocks, then zeros to a whole record, as tarfile ends one."""
        end = self._offset + 2 * _BLOCK
        end += -end % _RECORD
        self._f.seek(self._offset)
        self._f.write(bytes(end - self._offset))
        self._f.truncate(end)
        self._offset = end

    def _claim(self, name: str) -> None:
        problem = name_problem(name)
        if problem is not None:  # every reader of a .tar export would refuse the archive
            raise ArgumentError(f"cannot name a tar member {name!r}: {problem}; give the object "
                                "a short plain file name")
        if name in self._names:
            raise ArgumentError(f"two members named {name!r} in one tar: each object goes in "
                                "once")
        self._names.add(name)

    def _end_member(self, data_at: int, size: int) -> None:
        """Pad the member that starts at |data_at| to whole blocks, after its |size| bytes."""
        end = data_at + size
        padded = end + -end % _BLOCK
        self._f.seek(end)
        self._f.write(bytes(padded - end))
        self._offset = padded
