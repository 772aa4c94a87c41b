"""The assembler directives that define ``__dev_mblob`` from a blob file."""

from __future__ import annotations

import platform
from pathlib import Path

from ..format import ALIGNMENT, BLOB_SYMBOL

__all__ = ["blob_directives"]


def blob_directives(blob_path: Path, machine: str | None = None) -> list[str]:
    """Directives for a read-only, 64-byte aligned ``__dev_mblob`` holding the file's bytes.

    On x86-64 the blob goes to a *large* data section (``.lrodata``, flag ``l``), which the
    linker places after the code and data: blobs over 2 GiB then still link, where
    ``.rodata`` fails with relocation overflows. ``.note.GNU-stack`` keeps the stack
    non-executable (glibc refuses to dlopen libraries that ask for one).
    """
    machine = machine or platform.machine()
    path = str(Path(blob_path).resolve()).replace("\\", "\\\\").replace('"', '\\"')
    if machine in ("x86_64", "AMD64"):
        section = f'.section .lrodata.{BLOB_SYMBOL},"al",@progbits'
    else:
        section = f'.section .rodata.{BLOB_SYMBOL},"a",@progbits'
    return [
        section,
        f".globl {BLOB_SYMBOL}",
        f".type {BLOB_SYMBOL},@object",
        f".p2align {ALIGNMENT.bit_length() - 1}",
        f"{BLOB_SYMBOL}:",
        f'.incbin "{path}"',
        f".size {BLOB_SYMBOL}, .-{BLOB_SYMBOL}",
        '.section .note.GNU-stack,"",@progbits',
    ]
