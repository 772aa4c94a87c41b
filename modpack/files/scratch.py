"""Where an export writes before its output exists, so that an export that dies (killed,
out of memory, power cut) leaves nothing behind.

- The library itself is written into an anonymous file in the output's folder (``O_TMPFILE``):
  it has no name until it is complete, so a killed export leaves no file at all, and the
  kernel frees its space. It gets its name by being linked into the folder and renamed over
  the output, so the output is always whole: the old file or the new one.
- Where the file system has no anonymous files, and for what a linker must write by path,
  scratch files and folders carry the exporting process's id (``.deploy.so.modpack-1234-….tmp``,
  ``modpack-export-1234-…``); every export sweeps away those of processes that no longer
  exist.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import BinaryIO

__all__ = ["AnonymousOutput", "new_workspace", "scratch_name", "sweep_stale"]

_STALE = re.compile(r"^(?:modpack-export-|modpack-relink-|\..*\.modpack-)(\d+)-")


def scratch_name(output: Path) -> Path:
    """A new, empty file beside |output| named for this process (for a linker to write)."""
    fd, name = tempfile.mkstemp(prefix=f".{output.name}.modpack-{os.getpid()}-", suffix=".tmp",
                                dir=output.parent)
    os.close(fd)
    return Path(name)


def new_workspace(kind: str = "export") -> Path:
    """A new folder in the temp folder for intermediate files, named for this process; stale
    ones of dead processes are swept first."""
    root = Path(tempfile.gettempdir())
    sweep_stale(root)
    return Path(tempfile.mkdtemp(prefix=f"modpack-{kind}-{os.getpid()}-", dir=root))


def sweep_stale(folder: Path) -> None:
    """Remove the scratch files and folders in |folder| left by modpack processes that died."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        match = _STALE.match(entry.name)
        if not match or _alive(int(match.group(1))):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            elif entry.name.endswith(".tmp"):
                os.unlink(entry.path)
        except OSError:
            pass  # another export swept it first, or it is not ours to remove


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _link_anonymous(f: BinaryIO, name: Path) -> None:
    """Give the anonymous file open as |f| the name |name| (in the folder it was made in):
    linkat() of its /proc/self/fd entry, following it (os.link does that only when given a
    folder descriptor); a copy where that is refused."""
    folder = os.open(name.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.link(f"/proc/self/fd/{f.fileno()}", name.name, dst_dir_fd=folder,
                follow_symlinks=True)
        return
    except OSError:
        pass  # e.g. /proc not mounted the usual way: fall back to a copy
    finally:
        os.close(folder)
    f.seek(0)
    with open(name, "xb") as copy:
        shutil.copyfileobj(f, copy, 8 << 20)


class AnonymousOutput:
    """A file in |output|'s folder that becomes |output| on :meth:`publish`, and leaves nothing
    if the process dies before. Anonymous (``O_TMPFILE``) where the file system and ``/proc``
    allow; else a named scratch file, removed by :meth:`discard` and swept by later exports."""

    def __init__(self, output: Path) -> None:
        self.output = output
        self._named: Path | None = None
        sweep_stale(output.parent)
        fd = -1
        if hasattr(os, "O_TMPFILE") and os.path.isdir("/proc/self/fd"):
            try:
                fd = os.open(output.parent, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
            except OSError:
                fd = -1  # the file system has no anonymous files
        if fd < 0:
            self._named = scratch_name(output)
            fd = os.open(self._named, os.O_RDWR | os.O_CLOEXEC)
        self.file: BinaryIO = os.fdopen(fd, "r+b")

    def publish(self, mode: int) -> None:
        """Give the file its mode and put it in place of the output, whole."""
        self.file.flush()
        os.fchmod(self.file.fileno(), mode)
        if self._named is None:
            named = scratch_name(self.output)
            os.unlink(named)  # (the name only: linking needs it free)
            _link_anonymous(self.file, named)
            self._named = named
        self.file.close()
        os.replace(self._named, self.output)
        self._named = None

    def discard(self) -> None:
        """Drop the file (after a failure)."""
        if not self.file.closed:
            self.file.close()
        if self._named is not None:
            self._named.unlink(missing_ok=True)
            self._named = None
