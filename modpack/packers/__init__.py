"""Packers turn the blob into an object file defining ``__dev_mblob``, for the linker.

Every packer has one shape::

    packer(write_blob: BlobWriter, workspace: Path, cc: str | None, alignment: int,
           anchor: bool = False) -> Path

``write_blob(file, offset)`` (from the serializer) writes the whole blob into an open, seekable
file starting at ``offset`` and returns its size; ``cc`` is the C compiler whose target the
object is for; ``alignment`` is the blob's alignment in memory (the payload alignment). The
packer returns the object file it wrote in ``workspace``. With ``anchor``, the object is the
*anchor* a ``.so`` export links instead of the blob: ``write_blob`` writes a placeholder, in
the anchor's section; the blob itself is written into the linked library afterwards
(:mod:`modpack.format.image`).

- ``elf``: writes the object itself, the blob straight into its section (one pass, no tool);
- ``asm``: writes the blob to a file and assembles ``.incbin`` directives with ``cc -c``;
- ``llvm``: the same directives, assembled in-process by LLVM (llvmlite).

None of them turns the payload into C or IR text.
"""

from collections.abc import Callable
from pathlib import Path

from .assembler import pack_with_assembler
from .blob import BlobWriter
from .elf import ELF_MACHINES, pack_elf_object
from .llvm import pack_with_llvm

Packer = Callable[..., Path]

PACKERS: dict[str, Packer] = {
    "elf": pack_elf_object,
    "asm": pack_with_assembler,
    "llvm": pack_with_llvm,
}

__all__ = [
    "ELF_MACHINES",
    "PACKERS",
    "BlobWriter",
    "Packer",
    "pack_elf_object",
    "pack_with_assembler",
    "pack_with_llvm",
]
