"""Packer through the system assembler: write a ``.S`` file and let ``$CC -c`` assemble it."""

from __future__ import annotations

from pathlib import Path

from ..exporter.toolchain import c_compiler, run_tool
from .directives import blob_directives

__all__ = ["pack_with_assembler"]


def pack_with_assembler(blob_path: Path, workspace: Path, cc: str | None = None) -> Path:
    """Assemble ``devc.o`` from |blob_path| with the C compiler driver."""
    source = workspace / "devc.S"
    source.write_text("\n".join(blob_directives(blob_path)) + "\n")
    obj = workspace / "devc.o"
    run_tool([*c_compiler(cc), "-c", str(source), "-o", str(obj)], "assembling the blob object")
    return obj
