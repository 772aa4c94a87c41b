"""The direct packer: write ``devc.o`` as a minimal ELF relocatable object, the blob written
straight into its section — no intermediate blob file, no assembler pass.

The object holds one allocated, read-only section for the blob (its name and flags from
:mod:`modpack.format.section`; the anchor's for an anchor object), an empty
``.note.GNU-stack`` (a non-executable stack), and a symbol table defining ``__dev_mblob`` with
its size. The layout follows the System V ABI's ELF-64 object file format.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

from ..errors import ArgumentError
from ..format import BLOB_SYMBOL
from ..format.section import ANCHOR, blob_section, machine_name
from ..toolchain.cc import target_machine
from .blob import BlobWriter

__all__ = ["ELF_MACHINES", "pack_elf_object", "write_elf_object"]

# Targets whose relocatable objects need no e_flags: architecture -> e_machine.
ELF_MACHINES = {"x86_64": 62, "aarch64": 183}

_SHT_PROGBITS, _SHT_SYMTAB, _SHT_STRTAB = 1, 2, 3
_SHF_ALLOC, _SHF_X86_64_LARGE = 0x2, 0x10000000
_STB_GLOBAL, _STT_OBJECT = 1, 1
_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def pack_elf_object(write_blob: BlobWriter, workspace: Path, cc: str | None,
                    alignment: int, anchor: bool = False, arch: str | None = None) -> Path:
    """Write ``workspace/devc.o`` (``anchor.o`` for an anchor) for the target of |cc| (an
    architecture of ELF_MACHINES) holding the blob aligned to |alignment|; returns its path.
    |arch| (``x86_64``, ``aarch64``) names the target instead of |cc| (slim, which rewrites a
    ``.tar``'s blob object for the target its objects are for)."""
    machine = arch or target_machine(cc) or ""
    path = workspace / ("anchor.o" if anchor else "devc.o")
    with open(path, "w+b") as f:
        write_elf_object(f, 0, write_blob, machine, alignment, anchor)
    return path


def write_elf_object(f: BinaryIO, base: int, write_blob: BlobWriter, machine: str,
                     alignment: int, anchor: bool = False) -> int:
    """Write the object :func:`pack_elf_object` writes into the open, seekable |f|, starting at
    byte |base| (a ``.tar`` member's place: the object is written once, where it stays), for
    |machine| (an architecture or a target triple); returns the object's size and leaves |f|
    at its end."""
    arch = machine_name(machine or None)
    if arch not in ELF_MACHINES:
        raise ArgumentError(
            f"the ELF packer does not support {machine or arch!r}; use packer='asm'")
    placement = ANCHOR if anchor else blob_section(arch)
    large, section = placement.large, placement.name
    names_list = [section, ".note.GNU-stack", ".symtab", ".strtab", ".shstrtab"]
    shstrtab = b"\0" + b"".join(n.encode() + b"\0" for n in names_list)
    names = {n: shstrtab.index(b"\0" + n.encode() + b"\0") + 1 for n in names_list}
    strtab = b"\0" + BLOB_SYMBOL.encode() + b"\0"

    data_at = _align(_EHDR.size, alignment)
    size = write_blob(f, base + data_at)
    symtab_at = _align(data_at + size, 8)
    symbols = _SYM.pack(0, 0, 0, 0, 0, 0) + _SYM.pack(
        1, (_STB_GLOBAL << 4) | _STT_OBJECT, 0, 1, 0, size)
    strtab_at = symtab_at + len(symbols)
    shstrtab_at = strtab_at + len(strtab)
    shdrs_at = _align(shstrtab_at + len(shstrtab), 8)
    flags = _SHF_ALLOC | (_SHF_X86_64_LARGE if large else 0)
    headers = [
        _SHDR.pack(0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        _SHDR.pack(names[section], _SHT_PROGBITS, flags, 0, data_at, size, 0, 0, alignment, 0),
        _SHDR.pack(names[".note.GNU-stack"], _SHT_PROGBITS, 0, 0, data_at, 0, 0, 0, 1, 0),
        # sh_link: the string table; sh_info: index of the first global symbol.
        _SHDR.pack(names[".symtab"], _SHT_SYMTAB, 0, 0, symtab_at, len(symbols), 4, 1, 8,
                   _SYM.size),
        _SHDR.pack(names[".strtab"], _SHT_STRTAB, 0, 0, strtab_at, len(strtab), 0, 0, 1, 0),
        _SHDR.pack(names[".shstrtab"], _SHT_STRTAB, 0, 0, shstrtab_at, len(shstrtab), 0, 0,
                   1, 0),
    ]
    f.seek(base + symtab_at)
    f.write(symbols + strtab + shstrtab)
    f.write(bytes(base + shdrs_at - f.tell()))
    f.write(b"".join(headers))
    end = f.tell()
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)  # 64-bit, little-endian, SysV
    f.seek(base)
    f.write(_EHDR.pack(ident, 1, ELF_MACHINES[arch], 1, 0, 0, shdrs_at, 0, _EHDR.size, 0, 0,
                       _SHDR.size, len(headers), len(headers) - 1))
    f.write(bytes(data_at - _EHDR.size))  # zeros up to the blob, whatever |f| held there
    f.seek(end)
    return end - base
