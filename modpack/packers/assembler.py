"""Packer through the system assembler: write a ``.S`` file and let ``$CC -c`` assemble it (a
cross compiler makes an object for its own target)."""

from __future__ import annotations

from pathlib import Path

from ..toolchain.cc import c_compiler, run_tool, target_machine
from .blob import BlobWriter, write_blob_file
from .directives import blob_directives

__all__ = ["pack_with_assembler"]


def pack_with_assembler(write_blob: BlobWriter, workspace: Path, cc: str | None,
                        alignment: int, anchor: bool = False) -> Path:
    """``workspace/devc.o`` (``anchor.o`` for an anchor) from the blob, assembled with the C
    compiler driver |cc|."""
    blob = write_blob_file(write_blob, workspace)
    stem = "anchor" if anchor else "devc"
    source = workspace / f"{stem}.S"
    source.write_text("\n".join(blob_directives(blob, target_machine(cc), alignment, anchor))
                      + "\n")
    obj = workspace / f"{stem}.o"
    run_tool([*c_compiler(cc), "-c", str(source), "-o", str(obj)], "assembling the blob object")
    return obj
