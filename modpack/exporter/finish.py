"""The last step of an export: the compiled host objects and the blob made into the output, in
one of its forms, put in place whole (the old file or the new one, never half of either).

- :func:`finish_placed`: a ``.so`` whose blob modpack writes itself, after the link, straight
  into the final file (:mod:`modpack.format.image`), so no linker touches payload bytes;
- :func:`finish_linked`: a ``.so`` linked with a blob object (a custom packer, targets the
  placement does not handle);
- :func:`finish_tar`: the objects, the blob object among them, kept for a later link;
- :func:`finish_system_lib`: a relocatable object or archive (:mod:`.system_lib`).

Why apart from the rest: each form is written, sealed and published its own way, and keeping
those ways side by side here shows what they share (the link, the rename into place).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ArgumentError
from ..files.scratch import AnonymousOutput, scratch_name
from ..files.tar_writer import TarWriter
from ..format.image import HUGE_SEGMENT_ALIGNMENT, NoProgramHeaderSlot, find_blob, place_blob_into
from ..format.seal import seal_file, seal_library
from ..format.tar_seal import seal_tar
from ..log import export_log, timed
from ..packers import BlobWriter
from ..packers.elf import write_elf_object
from ..packers.seal_note import seal_note_object, takes_seal_note
from ..toolchain.cc import create_shared, create_tar, target_machine
from .blob_object import (
    WRITE_BEHIND_FROM,
    anchor_object,
    blob_object,
    blob_writer,
    elf_packed,
)
from .plan import ExportPlan
from .system_lib import write_system_lib

__all__ = ["LARGE_BLOB", "finish_linked", "finish_placed", "finish_system_lib", "finish_tar"]

LARGE_BLOB = 1 << 30  # from here on, a linked blob is linked with GNU ld (see _link)
_ET_DYN = 3  # an ELF shared library's e_type


def finish_placed(plan: ExportPlan, objects: list[Path], linker: str | None,
                  workspace: Path, prepared: memoryview | None = None) -> None:
    """A ``.so`` with the blob placed: the host objects are linked with the anchor and the
    seal note (with its slot note) into a small library in the workspace, then finished in an
    anonymous file beside the output, so a killed export leaves nothing of payload size
    anywhere. |prepared|: the blob, when it was written to memory already
    (:func:`.blob_object.prepared_blob`). A linker that leaves the blob's segment no program
    header gets the blob linked instead."""
    linked = workspace / "linked.so"
    try:
        _link(plan, linked, [*objects, anchor_object(plan, workspace),
                             seal_note_object(workspace, plan.cc, slot=True)], linker,
              whole_blob=False)
        _place_blob(linked, plan, blob_writer(plan, prepared))
    except NoProgramHeaderSlot:
        finish_linked(plan, objects, linker, workspace)
    finally:
        linked.unlink(missing_ok=True)


def finish_linked(plan: ExportPlan, objects: list[Path], linker: str | None,
                  workspace: Path) -> None:
    """A ``.so`` (or the caller's fcompile's output) linked with the whole blob as an object,
    its seal saying where the linker put the blob. What an fcompile makes that is not a
    shared library (a relocatable object from ``ld -r``, an archive) has no place the blob
    is loaded at to seal: it is kept as made, for a later link into one."""

    def seal(library: Path) -> None:
        if not _is_shared_library(library):
            return
        seal_library(library, find_blob(library, plan.alignment) if plan.has_blob else None)

    if takes_seal_note(plan.cc):
        objects = [*objects, seal_note_object(workspace, plan.cc, slot=False)]
    _link_beside_output(plan, objects, linker, workspace, seal, 0o755)


def finish_tar(plan: ExportPlan, objects: list[Path], linker: str | None,
               workspace: Path) -> None:
    """A ``.tar`` of the objects, the blob object among them, for a link at load time; sealed
    over every member (:mod:`modpack.format.tar_seal`). The ELF packer writes the blob object
    straight into the archive, so the payloads are written once (another packer's object is
    copied in)."""
    if not (plan.has_blob and plan.fcompile is create_tar and plan.fpack_imports is None
            and elf_packed(plan)):
        _link_beside_output(plan, objects, linker, workspace, seal_tar, 0o644)
        return
    write_blob, machine = blob_writer(plan), target_machine(plan.cc) or ""

    def write_tar(tmp: Path) -> None:
        with timed(export_log, "write %s: %d objects and the blob object in place",
                   plan.output.name, len(objects)), open(tmp, "w+b") as f:
            tar = TarWriter(f)
            for obj in objects:
                tar.add_file(obj.name, obj)
            tar.add_written("devc.o", lambda out, offset: write_elf_object(
                out, offset, write_blob, machine, plan.alignment))
            tar.close()

    _make_beside_output(plan, write_tar, seal_tar, 0o644)


def finish_system_lib(plan: ExportPlan, objects: list[Path], workspace: Path) -> None:
    """A system library (``.o``, or ``.a``): the host objects, the blob object and a generated
    description in one relocatable object (:func:`.system_lib.write_system_lib`)."""
    write_blob = blob_writer(plan)
    blob_size = 0  # the description records it

    def write_counted(f: Any, offset: int) -> int:
        nonlocal blob_size
        blob_size = write_blob(f, offset)
        return blob_size

    if plan.has_blob:
        objects = [*objects, blob_object(plan, workspace, write_counted)]
    tmp = scratch_name(plan.output)
    assert plan.system_lib is not None  # the plan of a system library names it
    try:
        with timed(export_log, "link system library %s", plan.output.name):
            write_system_lib(tmp, plan.output.suffix == ".a", objects, blob_size,
                             plan.system_lib, plan.cc, workspace)
        os.chmod(tmp, 0o644)
        os.replace(tmp, plan.output)
    finally:
        tmp.unlink(missing_ok=True)


def _link_beside_output(plan: ExportPlan, objects: list[Path], linker: str | None,
                        workspace: Path, seal: Callable[[Path], None], mode: int) -> None:
    """Link |objects| and the blob object into a file beside the output, |seal| it, and
    rename it over the output, so the output is complete or absent, never half."""
    if plan.has_blob:
        objects = [*objects, blob_object(plan, workspace, blob_writer(plan))]
    if not objects:
        raise ArgumentError("nothing to export: the tree has no host code and no modules")
    _make_beside_output(plan, lambda tmp: _link(plan, tmp, objects, linker,
                                                whole_blob=plan.has_blob), seal, mode)


def _make_beside_output(plan: ExportPlan, make: Callable[[Path], None],
                        seal: Callable[[Path], None], mode: int) -> None:
    """``make(tmp)`` the output in a file beside it, |seal| it, and rename it over the output
    (its weight file first), so the output is complete or absent, never half."""
    tmp = scratch_name(plan.output)
    try:
        make(tmp)
        with timed(export_log, "seal %s", plan.output.name):
            seal(tmp)
        os.chmod(tmp, mode)
        _publish_weights(plan)
        os.replace(tmp, plan.output)
    finally:
        tmp.unlink(missing_ok=True)


def _is_shared_library(path: Path) -> bool:
    """Whether |path| is an ELF shared library (e_type ET_DYN), by its header."""
    with open(path, "rb") as f:
        head = f.read(18)
    if len(head) < 18 or head[:4] != b"\x7fELF" or head[5] not in (1, 2):
        return False
    return int.from_bytes(head[16:18], "little" if head[5] == 1 else "big") == _ET_DYN


def _publish_weights(plan: ExportPlan) -> None:
    """A library that refers to a weight file puts it in place first, just before itself."""
    if plan.weights is not None:
        plan.weights.publish()


def _link(plan: ExportPlan, output: Path, objects: list[Path], linker: str | None,
          whole_blob: bool) -> None:
    """Run the plan's fcompile: |objects| linked (or archived) into |output|; |whole_blob|: the
    blob's object among them."""
    options = list(plan.options)
    if (plan.fcompile is create_shared and whole_blob and plan.payload_bytes >= LARGE_BLOB
            and "MODPACK_LINKER" not in os.environ):
        # GNU ld places x86-64 large sections after the data, so code-to-data references
        # never span the blob; lld before 17 does not, and fails past 2 GiB.
        options.append("-fuse-ld=bfd")
    with timed(export_log, "link %d objects (%s)", len(objects),
               getattr(plan.fcompile, "__name__", "fcompile")):
        if plan.fcompile in (create_shared, create_tar):
            plan.fcompile(output, objects, options, linker)
        else:
            plan.fcompile(str(output), [str(o) for o in objects], options)


def _place_blob(linked: Path, plan: ExportPlan, write_blob: BlobWriter) -> None:
    """Copy the linked library into an anonymous file beside the output, write the blob into
    it, seal it, and put it in place of the output."""
    target = AnonymousOutput(plan.output)
    try:
        with open(linked, "rb") as source:
            shutil.copyfileobj(source, target.file)
        huge = HUGE_SEGMENT_ALIGNMENT if plan.payload_bytes >= WRITE_BEHIND_FROM else 0
        placement = place_blob_into(target.file, plan.output, write_blob, plan.alignment, huge)
        with timed(export_log, "seal %s", plan.output.name):
            seal_file(target.file, placement)
        _publish_weights(plan)
        target.publish(0o755)
    finally:
        target.discard()
