"""Packers turn the blob file into an object file defining ``__dev_mblob``.

Both embed the bytes with the assembler's ``.incbin`` (time and memory about 1x the blob);
neither ever turns the payload into C or IR text.
"""

from .assembler import pack_with_assembler
from .directives import blob_directives
from .llvm import pack_with_llvm

__all__ = ["blob_directives", "pack_with_assembler", "pack_with_llvm"]
