"""What a ``.tar`` export may hold: regular files, each once, under plain names (no folder, no
``..``, nothing absolute, no control characters) that fit the 100 bytes of a tar header's name
field, as modpack's export writes them (``lib0.o``, ``devc.o``, ``MODPACK-SEAL``).

Why one rule for every reader: a member whose name does not land in the folder it is extracted
to (``/tmp/lib0.o``, ``sub/lib0.o``, ``../lib0.o``), or that is a link or a device, is read by
one path and passed over or refused by another — the link at load once left such a host object
out and loaded the library without its host code, while ``inspect`` refused the archive. The
tar seal's check, the blob's finder, the link at load, ``inspect`` and ``extract`` all apply
this rule first, so an archive is either refused by all of them, with the same FormatError, or
read whole by each.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Iterable

from ..errors import FormatError

__all__ = ["NAME_BYTES", "check_members", "name_problem"]

NAME_BYTES = 100  # a ustar header's name field: the names modpack's export writes fit it


def name_problem(name: str) -> str | None:
    """Why |name| cannot name a member of a ``.tar`` export, or None when it can."""
    if name in ("", ".", ".."):
        return "its name is not a file name"
    if "/" in name:
        return ("its name is a path, not a plain file name (it would be extracted outside the "
                "folder the archive is extracted to, or into a subfolder no link reads)")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return "its name holds a control character"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "its name is not UTF-8"
    if size > NAME_BYTES:
        return (f"its name has {size} bytes, more than the {NAME_BYTES} of the tar header's name "
                "field that modpack's export writes names into")
    return None


def check_members(path: str | os.PathLike[str], members: Iterable[tarfile.TarInfo]) -> None:
    """FormatError naming the first of |members| (of the archive at |path|) that a ``.tar``
    export cannot hold: not a regular file, a name :func:`name_problem` refuses, or a name
    that appears twice."""
    seen: set[str] = set()
    for member in members:
        problem = name_problem(member.name)
        if problem is not None:
            raise FormatError(f"{os.fspath(path)} has an unsafe member name {member.name!r}: "
                              f"{problem}; a modpack .tar holds only object files under plain "
                              "names; export it again")
        if not member.isfile():
            raise FormatError(f"{os.fspath(path)} is damaged: member {member.name} is "
                              f"{_kind_of(member)}, not a regular file; a modpack .tar holds "
                              "only object files")
        if member.name in seen:
            raise FormatError(f"{os.fspath(path)} is damaged: member {member.name} appears "
                              "twice; a modpack .tar holds each object once")
        seen.add(member.name)


def _kind_of(member: tarfile.TarInfo) -> str:
    if member.isdir():
        return "a directory"
    if member.issym() or member.islnk():
        return f"a link to {member.linkname!r}"
    if member.isdev():
        return "a device or FIFO"
    return "not a regular file"
