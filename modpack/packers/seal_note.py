"""The seal note's object file: linked into every ``.so`` export for a 64-bit little-endian
ELF target, so that the library carries, inside its first loaded segment, the note its version
2 seal is written into after the link (:mod:`modpack.format.seal`).

The object holds ``.note.modpack``: one ELF note (owner ``modpack``, type
``MP_SEAL_NOTE_TYPE``) whose descriptor is ``mp_seal_note_v2_t`` as zeros, allocated,
read-only, 4-byte aligned. For a placed blob it also holds ``.note.modpack.slot``: an empty
note (type ``MP_SEAL_NOTE_SLOT_TYPE``) aligned to 16, unlike any other note, so that linkers
give it a ``PT_NOTE`` program header of its own, which the blob's segment then takes
(:mod:`modpack.format.image`): the program header table keeps its place and size. Written as ELF
directly for the targets of :data:`~.elf.ELF_MACHINES`, else assembled by the C compiler.
"""

from __future__ import annotations

import struct
from pathlib import Path

from ..format.coverage import NOTE_DESC_SIZE, NOTE_HEADER, NOTE_NAME, SLOT_NOTE_TYPE
from ..format.image import PLACEABLE_MACHINES
from ..format.section import machine_name
from ..toolchain.cc import c_compiler, run_tool, target_machine
from .elf import ELF_MACHINES

__all__ = ["SEAL_NOTE_SECTION", "SLOT_NOTE_SECTION", "seal_note_object", "takes_seal_note"]

SEAL_NOTE_SECTION = ".note.modpack"
SLOT_NOTE_SECTION = ".note.modpack.slot"
_SLOT_ALIGNMENT = 16

_SHT_PROGBITS, _SHT_SYMTAB, _SHT_STRTAB, _SHT_NOTE = 1, 2, 3, 7
_SHF_ALLOC = 0x2
_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")


def takes_seal_note(cc: str | None) -> bool:
    """Whether libraries for the target of |cc| are sealed by the note (64-bit little-endian
    ELF); others keep the version 1 trailer."""
    return machine_name(target_machine(cc) or None) in PLACEABLE_MACHINES


def _seal_note() -> bytes:
    return NOTE_HEADER + bytes(NOTE_DESC_SIZE)


def _slot_note() -> bytes:
    return struct.pack("<III", len(NOTE_NAME), 0, SLOT_NOTE_TYPE) + NOTE_NAME


def seal_note_object(workspace: Path, cc: str | None, slot: bool) -> Path:
    """``workspace/seal.o`` for the target of |cc|: the seal note, and with |slot| the note
    whose program header a placed blob's segment takes."""
    arch = machine_name(target_machine(cc) or None)
    path = workspace / "seal.o"
    if arch in ELF_MACHINES:
        path.write_bytes(_elf_object(ELF_MACHINES[arch], slot))
        return path
    source = workspace / "seal.S"
    source.write_text("\n".join(_directives(slot)) + "\n")
    run_tool([*c_compiler(cc), "-c", str(source), "-o", str(path)],
             "assembling the seal note")
    return path


def _directives(slot: bool) -> list[str]:
    def note(data: bytes) -> list[str]:
        return [f".byte {', '.join(str(b) for b in data[i:i + 16])}"
                for i in range(0, len(data), 16)]

    lines = []
    if slot:  # first: followed by a note of other alignment, it is a PT_NOTE of its own
        lines += [f'.section {SLOT_NOTE_SECTION},"a",@note',
                  f".p2align {_SLOT_ALIGNMENT.bit_length() - 1}", *note(_slot_note())]
    lines += [f'.section {SEAL_NOTE_SECTION},"a",@note', ".p2align 2", *note(NOTE_HEADER),
              f".zero {NOTE_DESC_SIZE}"]
    return [*lines, '.section .note.GNU-stack,"",@progbits']


def _elf_object(machine: int, slot: bool) -> bytes:
    """A relocatable ELF-64 object holding the notes (no symbols)."""
    sections = [(SEAL_NOTE_SECTION, _seal_note(), 4)]
    if slot:  # first: followed by a note of other alignment, it is a PT_NOTE of its own
        sections.insert(0, (SLOT_NOTE_SECTION, _slot_note(), _SLOT_ALIGNMENT))
    names = [name for name, _, _ in sections] + [".note.GNU-stack", ".symtab", ".strtab",
                                                 ".shstrtab"]
    shstrtab = b"\0" + b"".join(n.encode() + b"\0" for n in names)
    name_at = {n: shstrtab.index(b"\0" + n.encode() + b"\0") + 1 for n in names}
    body = bytearray(_EHDR.size)
    headers = [_SHDR.pack(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)]
    for name, data, align in sections:
        body += bytes(-len(body) % align)
        headers.append(_SHDR.pack(name_at[name], _SHT_NOTE, _SHF_ALLOC, 0, len(body), len(data),
                                  0, 0, align, 0))
        body += data
    headers.append(_SHDR.pack(name_at[".note.GNU-stack"], _SHT_PROGBITS, 0, 0, len(body), 0, 0,
                              0, 1, 0))
    body += bytes(-len(body) % 8)
    symbols = bytes(24)  # the null symbol
    strtab_index = len(headers) + 1
    headers.append(_SHDR.pack(name_at[".symtab"], _SHT_SYMTAB, 0, 0, len(body), len(symbols),
                              strtab_index, 1, 8, 24))
    body += symbols
    headers.append(_SHDR.pack(name_at[".strtab"], _SHT_STRTAB, 0, 0, len(body), 1, 0, 0, 1, 0))
    body += b"\0"
    headers.append(_SHDR.pack(name_at[".shstrtab"], _SHT_STRTAB, 0, 0, len(body), len(shstrtab),
                              0, 0, 1, 0))
    body += shstrtab
    body += bytes(-len(body) % 8)
    shoff = len(body)
    body += b"".join(headers)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)  # 64-bit, little-endian, SysV
    body[:_EHDR.size] = _EHDR.pack(ident, 1, machine, 1, 0, 0, shoff, 0, _EHDR.size, 0, 0,
                                   _SHDR.size, len(headers), len(headers) - 1)
    return bytes(body)
