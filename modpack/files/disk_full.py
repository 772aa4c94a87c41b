"""A full disk during an export, reported as what it is: :func:`full_disk_reported`.

Why: an export writes in three places (the output's folder, the workspace, and ``$TMPDIR``,
where compilers write their own temporary files), and a full one surfaces as a bare
``OSError`` or, worse, as a compiler's or linker's failure. The user needs to hear which file
system is full, how much room it has, what to do, and that an earlier output is intact.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import ModpackError, ModpackOSError

__all__ = ["full_disk_reported"]


@contextmanager
def full_disk_reported(output: Path, workspace: Path, action: str = "export") -> Iterator[None]:
    """Turn running out of room, in the export to |output| run inside, into a
    ``ModpackOSError`` naming the full file system: an ``OSError`` of ``ENOSPC`` or
    ``EDQUOT``, or a tool's failure (a ``ModpackError``) while a folder is nearly full.
    (Entered while |workspace| still exists, so its file system is seen as the tool saw it.)
    |action| is the verb the message starts with ("cannot export to ..."): ``save_weights``
    says "save".

    A ``ModpackError`` is looked at before an ``OSError``: a ``ModpackOSError`` is both, and
    one raised inside (a weight file's own report, nested in an export's) gets the outer
    file's line too, as any tool's failure does."""
    try:
        yield
    except ModpackError as exc:  # a compiler or linker that failed: was it the disk?
        nearly_full = _full_folder(output, workspace, None)
        if nearly_full is not None:
            raise ModpackOSError(f"{_no_space(output, nearly_full, action)}\n{exc}") from None
        raise
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            full = _full_folder(output, workspace, exc.filename) or output.parent
            raise ModpackOSError(_no_space(output, full, action)) from None
        raise


def _full_folder(output: Path, workspace: Path, filename: str | None) -> Path | None:
    """Which folder an export ran out of room in: the output's, the workspace's, or $TMPDIR
    (where compilers write their own temporary files; Python's tempfile passes over a full
    one, gcc does not). The one holding |filename| if known, else one that is nearly full."""
    folders = [output.parent, workspace]
    if os.environ.get("TMPDIR"):
        folders.append(Path(os.environ["TMPDIR"]))
    if filename:
        for folder in folders:
            if os.fspath(filename).startswith(os.fspath(folder)):
                return folder
    return next((folder for folder in folders if _nearly_full(folder)), None)


def _no_space(output: Path, full: Path, action: str) -> str:
    """The message for a full disk, naming the file system that is full and what to do."""
    if full == output.parent:
        where = f"(the file system of {full}, {_free(full)} free)"
    else:
        where = (f"for the intermediate files in {full} ({_free(full)} free); point TMPDIR (or "
                 "workspace_dir=) at a file system with room")
    return (f"cannot {action} to {output}: no space left on device {where}; any earlier "
            f"{output.name} is intact")


def _free(folder: Path) -> str:
    try:
        return f"{shutil.disk_usage(folder).free / (1 << 20):.1f} MiB"
    except OSError:
        return "unknown"


def _nearly_full(folder: Path) -> bool:
    """Whether the file system of |folder| has (nearly) no room left, as after a tool ran
    out of it."""
    try:
        return shutil.disk_usage(folder).free < (1 << 20)
    except OSError:
        return False
