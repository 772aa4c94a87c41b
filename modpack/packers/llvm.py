"""In-process packer: llvmlite assembles module-level ``.incbin`` asm into ``devc.o`` (no
external tool)."""

from __future__ import annotations

from pathlib import Path

from ..toolchain.cc import target_machine as cc_target
from ..toolchain.llvm import llvm, target_machine
from .blob import BlobWriter, write_blob_file
from .directives import blob_directives

__all__ = ["pack_with_llvm"]


def pack_with_llvm(write_blob: BlobWriter, workspace: Path, cc: str | None,
                   alignment: int, anchor: bool = False) -> Path:
    """``workspace/devc.o`` (``anchor.o`` for an anchor) from the blob, for the target of |cc|
    when it names one (else this process's), with LLVM's integrated assembler."""
    blob = write_blob_file(write_blob, workspace)
    machine = target_machine(cc_target(cc))
    # One `module asm` statement per line; quotes are spelled \22 in IR strings.
    ir = "".join(
        'module asm "{}"\n'.format(line.replace("\\", "\\5C").replace('"', "\\22"))
        for line in blob_directives(blob, machine.triple, alignment, anchor)
    )
    module = llvm().parse_assembly(ir)
    module.triple = machine.triple
    obj = workspace / ("anchor.o" if anchor else "devc.o")
    obj.write_bytes(machine.emit_object(module))
    return obj
