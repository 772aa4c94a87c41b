"""Packer through the system assembler: write a ``.S`` file and let ``$CC -c`` assemble it."""

from __future__ import annotations

from pathlib import Path

from ..exporter.toolchain import c_compiler, run_tool, target_machine
from ..format import ALIGNMENT
from .directives import blob_directives

__all__ = ["pack_with_assembler"]


def pack_with_assembler(blob_path: Path, workspace: Path, cc: str | None = None,
                        alignment: int = ALIGNMENT) -> Path:
    """Assemble ``devc.o`` from |blob_path| with the C compiler driver (a cross compiler
    makes an object for its own target)."""
    source = workspace / "devc.S"
    directives = blob_directives(blob_path, target_machine(cc), alignment)
    source.write_text("\n".join(directives) + "\n")
    obj = workspace / "devc.o"
    run_tool([*c_compiler(cc), "-c", str(source), "-o", str(obj)], "assembling the blob object")
    return obj
