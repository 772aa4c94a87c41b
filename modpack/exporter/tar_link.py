"""A ``.tar`` export linked into a shared library at load time, in a private workspace.

Why apart from the loader: the link is an export's last step run late, and it follows the
export's own way where it can. The host objects are linked with an anchor in place of the blob
object, then the blob's bytes are copied from the archive into their segment by the kernel
(:mod:`modpack.format.image`, :mod:`modpack.files.kernel_copy`): no linker reads the payloads
and no extracted copy of the blob object is written, so a 1 GiB archive is not copied twice
more before it loads. A blob object for another machine, or a link that leaves no program
header for the blob, gets the whole link instead.
"""

from __future__ import annotations

import platform
import tarfile
from pathlib import Path

from ..errors import FormatError
from ..files.kernel_copy import copy_range
from ..files.write_behind import WRITE_BEHIND_FROM
from ..format.image import HUGE_SEGMENT_ALIGNMENT, NoProgramHeaderSlot, find_blob, place_blob_into
from ..format.layout import ALIGNMENT
from ..format.seal import seal_file, seal_library
from ..format.tar_blob import TarBlob, find_tar_blob
from ..format.tar_members import check_members
from ..format.tar_seal import SEAL_MEMBER
from ..packers.elf import pack_elf_object
from ..packers.seal_note import seal_note_object
from ..toolchain.cc import create_shared
from .blob_object import write_placeholder

__all__ = ["link_tar"]


def link_tar(path: Path, workspace: Path, seal: bool) -> Path:
    """The objects of the ``.tar`` at |path| linked into ``workspace/<stem>.so``, sealed when
    |seal| (the archive's own seal was checked); FormatError for members that cannot be
    extracted safely or no object to link."""
    shared = workspace / (path.stem + ".so")
    located, arch = _blob_of(path, seal), platform.machine()
    if located is not None:
        located.check_machine(path, arch)  # IncompatibleError, as for a .so of another machine
    if located is not None and located.member is not None and located.arch == arch:
        host = [m for m in located.members if m is not located.member and m.name != SEAL_MEMBER]
        objects = _extract(path, workspace, host)
        try:
            _link_placed(path, located, objects, workspace, shared, arch, seal)
            return shared
        except NoProgramHeaderSlot:
            pass  # this linker left the blob's segment no program header: link it all
    objects = _extract(path, workspace, None)
    if not objects:
        raise FormatError(f"{path} holds no object files to link")
    create_shared(shared, objects)
    if seal:  # checked members, linked here: seal the result for the load's own check
        seal_library(shared, find_blob(shared, ALIGNMENT))
    return shared


def _blob_of(path: Path, sealed: bool) -> TarBlob | None:
    """Where the archive's blob lies. A sealed archive that is no .tar export (an object that
    is not one, two blobs) is refused as every tool refuses it; for an unsealed one loaded with
    allow_unsealed, None: the whole link then extracts its members (under the same rule for
    their names and kinds) and hands them to the linker, which refuses what it must."""
    try:
        return find_tar_blob(path)
    except FormatError:
        if sealed:
            raise
        return None


def _extract(path: Path, workspace: Path, members: list[tarfile.TarInfo] | None) -> list[Path]:
    """Extract |members| (all when None) into |workspace|; the object files among them. Every
    member must be one a .tar export can hold (:mod:`.format.tar_members`): a name that would
    land elsewhere would leave its object out of the link."""
    try:
        with tarfile.open(path) as tar:
            chosen = tar.getmembers() if members is None else members
            check_members(path, chosen)
            tar.extractall(workspace, members=chosen, filter="data")
    except (tarfile.TarError, OSError) as exc:  # what the rule does not foresee
        raise FormatError(f"{path}: cannot extract its members safely: {exc}") from None
    return sorted(workspace / m.name for m in chosen if m.name.endswith(".o"))


def _link_placed(path: Path, located: TarBlob, objects: list[Path], workspace: Path,
                 shared: Path, arch: str, seal: bool) -> None:
    """Link |objects| with an anchor and the slot note, then copy the blob from the archive
    into its own segment of |shared|, as an export places it."""
    parts = workspace / ".placement"  # apart from the members, whatever their names
    parts.mkdir()
    anchor = pack_elf_object(write_placeholder, parts, None, located.alignment, anchor=True,
                             arch=arch)
    create_shared(shared, [*objects, anchor, seal_note_object(parts, None, slot=True)])
    huge = HUGE_SEGMENT_ALIGNMENT if located.size >= WRITE_BEHIND_FROM else 0
    with open(path, "rb") as archive, open(shared, "r+b") as f:

        def write_blob(out: object, offset: int) -> int:
            f.flush()
            copy_range(archive.fileno(), f.fileno(), located.offset, offset, located.size)
            f.seek(offset + located.size)
            return located.size

        placement = place_blob_into(f, shared, write_blob, located.alignment, huge)
        if seal:
            seal_file(f, placement)
