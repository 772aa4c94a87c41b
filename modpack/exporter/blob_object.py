"""The blob of an export as the finishing steps take it: a writer that streams it into an open
file, and the object files that hold it (or stand in for it) for the linker.

Why apart: every form of output needs the blob one of these ways (a placed ``.so`` writes it
straight into the linked file; a linked ``.so``, a ``.tar`` and a system library link a blob
object), and the choices behind them (write-behind for large payloads, which packer, the
caller's own packer) are the same for all of them.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from ..files.write_behind import WRITE_BEHIND_FROM, WriteBehind
from ..format.section import machine_name
from ..packers import ELF_MACHINES, PACKERS, BlobWriter, Packer
from ..toolchain.cc import target_machine
from .plan import ExportPlan

__all__ = ["PREPARE_IN_MEMORY_BELOW", "WRITE_BEHIND_FROM", "anchor_object", "blob_object",
           "blob_writer", "elf_packed", "prepared_blob", "write_placeholder"]

# A placed blob this small is written to memory while the host code compiles, and copied into
# the library after the link (the blob's bytes do not depend on where it is placed).
PREPARE_IN_MEMORY_BELOW = 64 << 20

_PLACEHOLDER = bytes(8)  # the anchor's stand-in for the blob


def prepared_blob(plan: ExportPlan) -> memoryview:
    """|plan|'s whole blob, in memory (for blobs under PREPARE_IN_MEMORY_BELOW)."""
    buffer = io.BytesIO()
    plan.serializer.write_blob_to(buffer, 0, plan.alignment, label=plan.output.name)
    return buffer.getbuffer()  # (the buffer itself: no copy)


def blob_writer(plan: ExportPlan, prepared: memoryview | None = None) -> BlobWriter:
    """``write_blob(f, offset)``: write |plan|'s blob into |f| at |offset| and return its size;
    large payloads are handed to the disk as they stream (:mod:`.write_behind`). With
    |prepared| (:func:`prepared_blob`), those bytes are written."""
    serializer, alignment = plan.serializer, plan.alignment

    if prepared is not None:
        def write_prepared(f: Any, offset: int) -> int:
            f.seek(offset)
            f.write(prepared)
            return len(prepared)

        return write_prepared

    def write_blob(f: Any, offset: int) -> int:
        if plan.payload_bytes < WRITE_BEHIND_FROM:
            return serializer.write_blob_to(f, offset, alignment, label=plan.output.name)
        behind = WriteBehind(f)
        size = serializer.write_blob_to(behind, offset, alignment, label=plan.output.name)
        behind.finish()
        return size

    return write_blob


def blob_object(plan: ExportPlan, workspace: Path, write_blob: BlobWriter) -> Path:
    """The blob object for a linked blob: written directly as ELF where the target allows
    (one pass over the payloads, no assembler), else with the assembler or llvmlite; or by
    the caller's own packer, which takes a blob file."""
    if plan.fpack_imports is not None:
        blob = workspace / "devc.bin"
        with open(blob, "w+b") as f:
            write_blob(f, 0)
        return Path(plan.fpack_imports(blob, workspace))
    return _packer(plan)(write_blob, workspace, plan.cc, plan.alignment)


def anchor_object(plan: ExportPlan, workspace: Path) -> Path:
    """The anchor a placed ``.so`` links instead of the blob: a placeholder ``__dev_mblob``
    in the blob's section, where the blob is written after the link."""
    return _packer(plan)(write_placeholder, workspace, plan.cc, plan.alignment, anchor=True)


def write_placeholder(f: Any, offset: int) -> int:
    """The anchor object's ``write_blob``: the placeholder that stands for the blob."""
    f.seek(offset)
    f.write(_PLACEHOLDER)
    return len(_PLACEHOLDER)


def elf_packed(plan: ExportPlan) -> bool:
    """Whether |plan|'s blob object is the ELF packer's (written by modpack itself, so it can
    be written anywhere in an open file: a ``.tar`` member's place)."""
    return _packer_name(plan) == "elf"


def _packer_name(plan: ExportPlan) -> str:
    if plan.packer == "auto":
        return "elf" if machine_name(target_machine(plan.cc)) in ELF_MACHINES else "asm"
    return plan.packer


def _packer(plan: ExportPlan) -> Packer:
    return PACKERS[_packer_name(plan)]
