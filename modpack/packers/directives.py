"""The assembler directives that define ``__dev_mblob`` from a blob file."""

from __future__ import annotations

import platform
from pathlib import Path

from ..format import ALIGNMENT, BLOB_SYMBOL

__all__ = ["blob_directives"]


def blob_directives(blob_path: Path, machine: str | None = None,
                    alignment: int = ALIGNMENT) -> list[str]:
    """Directives for a read-only ``__dev_mblob`` holding the file's bytes, aligned to
    |alignment| (the payload alignment, so payload offsets keep it in memory). |machine| is
    the target's architecture (``x86_64``, ``aarch64``; default: this machine's).

    On x86-64 the blob goes to a *large* data section (``.lrodata``, flag ``l``), which the
    linker places after the code and data: blobs over 2 GiB then still link, where
    ``.rodata`` fails with relocation overflows. ``.note.GNU-stack`` keeps the stack
    non-executable (glibc refuses to dlopen libraries that ask for one).
    """
    machine = (machine or platform.machine()).split("-")[0]
    if alignment < ALIGNMENT or alignment & (alignment - 1):
        raise ValueError(f"blob alignment must be a power of two >= {ALIGNMENT}")
    path = str(Path(blob_path).resolve()).replace("\\", "\\\\").replace('"', '\\"')
    if machine in ("x86_64", "AMD64"):
        section = f'.section .lrodata.{BLOB_SYMBOL},"al",@progbits'
    else:
        section = f'.section .rodata.{BLOB_SYMBOL},"a",@progbits'
    return [
        section,
        f".globl {BLOB_SYMBOL}",
        f".type {BLOB_SYMBOL},@object",
        f".p2align {alignment.bit_length() - 1}",
        f"{BLOB_SYMBOL}:",
        f'.incbin "{path}"',
        f".size {BLOB_SYMBOL}, .-{BLOB_SYMBOL}",
        '.section .note.GNU-stack,"",@progbits',
    ]
