"""In-process packer: llvmlite assembles module-level ``.incbin`` asm into ``devc.o``."""

from __future__ import annotations

from pathlib import Path

__all__ = ["pack_with_llvm"]


def pack_with_llvm(blob_path: Path, workspace: Path, triple: str | None = None,
                   alignment: int = 64) -> Path:
    """Emit ``devc.o`` with LLVM's integrated assembler (no external tool)."""
    from ..modules.llvm import _llvm, target_machine
    from .directives import blob_directives

    llvm = _llvm()
    machine = target_machine(triple)
    # One `module asm` statement per line; quotes are spelled \22 in IR strings.
    ir = "".join(
        'module asm "{}"\n'.format(line.replace("\\", "\\5C").replace('"', "\\22"))
        for line in blob_directives(blob_path, machine.triple, alignment)
    )
    module = llvm.parse_assembly(ir)
    module.triple = machine.triple
    obj = workspace / "devc.o"
    obj.write_bytes(machine.emit_object(module))
    return obj
