"""The assembler directives that define ``__dev_mblob`` from a blob file."""

from __future__ import annotations

from pathlib import Path

from ..errors import ArgumentError
from ..format import ALIGNMENT, BLOB_SYMBOL
from ..format.section import ANCHOR, blob_section

__all__ = ["blob_directives"]


def blob_directives(blob_path: Path, machine: str | None = None,
                    alignment: int = ALIGNMENT, anchor: bool = False) -> list[str]:
    """Directives for a read-only ``__dev_mblob`` holding the file's bytes, aligned to
    |alignment| (the payload alignment, so payload offsets keep it in memory), in the blob's
    section for |machine| (a triple or architecture; default: this machine's), or for an
    |anchor| in the anchor's section.
    ``.note.GNU-stack`` keeps the stack non-executable (glibc refuses to dlopen libraries that
    ask for one)."""
    if alignment < ALIGNMENT or alignment & (alignment - 1):
        raise ArgumentError(f"blob alignment must be a power of two >= {ALIGNMENT}")
    path = str(Path(blob_path).resolve()).replace("\\", "\\\\").replace('"', '\\"')
    section = ANCHOR if anchor else blob_section(machine)
    flags = "al" if section.large else "a"
    return [
        f'.section {section.name},"{flags}",@progbits',
        f".globl {BLOB_SYMBOL}",
        f".type {BLOB_SYMBOL},@object",
        f".p2align {alignment.bit_length() - 1}",
        f"{BLOB_SYMBOL}:",
        f'.incbin "{path}"',
        f".size {BLOB_SYMBOL}, .-{BLOB_SYMBOL}",
        '.section .note.GNU-stack,"",@progbits',
    ]
