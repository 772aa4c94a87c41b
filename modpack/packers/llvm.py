"""In-process packer: llvmlite assembles module-level ``.incbin`` asm into ``devc.o`` (no
external tool). For this machine's target only: llvmlite carries no assembler for other
targets, and LLVM aborts the process instead of failing (:func:`check_llvm_packer`)."""

from __future__ import annotations

from pathlib import Path

from ..errors import ArgumentError
from ..toolchain.cc import architecture
from ..toolchain.cc import target_machine as cc_target
from ..toolchain.llvm import can_assemble, llvm, target_machine
from .blob import BlobWriter, write_blob_file
from .directives import blob_directives
from .elf import ELF_MACHINES

__all__ = ["check_llvm_packer", "pack_with_llvm"]


def check_llvm_packer(cc: str | None) -> None:
    """ArgumentError, saying what to use instead, when the llvm packer cannot make objects for
    the target of |cc| (a cross compiler's): checked before LLVM is asked, which would abort
    the interpreter ("LLVM ERROR: Inline asm not supported by this streamer")."""
    triple = cc_target(cc)
    if triple is None or can_assemble(triple):
        return
    instead = ("packer='elf' (what the default packer='auto' picks for it) or packer='asm' "
               "(the cross compiler's assembler)" if architecture(triple) in ELF_MACHINES else
               "packer='asm' (the cross compiler's assembler, what the default packer='auto' "
               "picks for it)")
    raise ArgumentError(
        f"packer='llvm' cannot make objects for {triple}: llvmlite assembles for this "
        f"machine's target only ({llvm().get_process_triple()}); use {instead}")


def pack_with_llvm(write_blob: BlobWriter, workspace: Path, cc: str | None,
                   alignment: int, anchor: bool = False) -> Path:
    """``workspace/devc.o`` (``anchor.o`` for an anchor) from the blob, for the target of |cc|
    when it names one (else this process's), with LLVM's integrated assembler."""
    check_llvm_packer(cc)
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
