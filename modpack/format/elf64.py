"""A small reader of 64-bit little-endian ELF shared libraries: the headers, the sections by
name, and where a symbol's entries are.

Why not pyelftools, which the tools use: placing the blob reads the freshly linked library on
every export, and pyelftools' parsing took 19 ms of a 10,000-module export's critical path
for the few dozen fields needed. This reads those fields with ``struct``, bounds-checked, and
raises :class:`~modpack.FormatError` naming the file for anything it cannot read (and
:class:`~modpack.IncompatibleError` for an ELF file of a kind it does not read).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, BinaryIO

from ..errors import FormatError, IncompatibleError

__all__ = ["EHDR", "PHDR", "Elf64", "Section", "Segment"]

EHDR = struct.Struct("<16sHHIQQQIHHHHHH")  # Elf64_Ehdr
PHDR = struct.Struct("<IIQQQQQQ")  # Elf64_Phdr
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_ET_DYN = 3
_SHT_SYMTAB, _SHT_DYNSYM = 2, 11
_TYPE_NAMES = {0: "ET_NONE", 1: "ET_REL", 2: "ET_EXEC", 3: "ET_DYN", 4: "ET_CORE"}
_MAX_TABLE = 1 << 28  # no header table or symbol table this reader reads is larger


@dataclass(frozen=True)
class Segment:
    """A program header, the |index|-th of its table."""

    index: int
    type: int
    flags: int
    offset: int
    vaddr: int
    paddr: int
    filesz: int
    memsz: int
    align: int


@dataclass(frozen=True)
class Section:
    index: int
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    addralign: int
    entsize: int


class Elf64:
    """The headers of the 64-bit little-endian shared library open as |f| (|path| names it in
    messages)."""

    def __init__(self, f: BinaryIO, path: Any) -> None:
        self._f, self.path = f, path
        self.file_size = f.seek(0, 2)
        head = self._read(0, EHDR.size, "its ELF header")
        if head[:4] != b"\x7fELF":
            raise FormatError(f"{path} is not an ELF library: no ELF magic bytes")
        if head[4] != 2 or head[5] != 1 or EHDR.unpack(head)[1] != _ET_DYN:
            kind = _TYPE_NAMES.get(struct.unpack_from("<H", head, 16)[0], "an unknown type")
            raise IncompatibleError(f"{path}: placing the blob needs a 64-bit little-endian shared "
                                    f"library (got ELF{64 if head[4] == 2 else 32}, "
                                    f"{'little' if head[5] == 1 else 'big'}-endian, {kind})")
        fields = EHDR.unpack(head)
        self.phoff, self.shoff = fields[5], fields[6]
        self.phentsize, self.shentsize = fields[9], fields[11]
        phnum, shnum, shstrndx = fields[10], fields[12], fields[13]
        if (phnum and self.phentsize != PHDR.size) or (shnum and self.shentsize != _SHDR.size):
            raise FormatError(f"{path} is not an ELF library this reader knows: program or "
                               "section header entries of an unexpected size")
        table = self._read(self.phoff, phnum * PHDR.size, "its program headers")
        self.segments = [Segment(i, *p) for i, p in enumerate(PHDR.iter_unpack(table))]
        raw = list(_SHDR.iter_unpack(
            self._read(self.shoff, shnum * _SHDR.size, "its section headers")))
        names = b""
        if 0 < shstrndx < len(raw):
            _, _, _, _, offset, size, *_ = raw[shstrndx]
            names = self._read(offset, size, "its section names")
        self.sections = [Section(i, _string(names, s[0]), *s[1:]) for i, s in enumerate(raw)]

    def section(self, name: str) -> Section | None:
        return next((s for s in self.sections if s.name == name), None)

    def symbol_entries(self, table: Section, name: str) -> list[int]:
        """The file offsets of the entries of symbol table |table| named |name|."""
        if table.type not in (_SHT_SYMTAB, _SHT_DYNSYM) or table.entsize != _SYM.size:
            return []
        if not 0 < table.link < len(self.sections):
            raise FormatError(f"{self.path}: symbol table {table.name} names no string table")
        strings = self.sections[table.link]
        text = self._read(strings.offset, strings.size, f"the strings of {table.name}")
        wanted = name.encode()
        entries = self._read(table.offset, table.size - table.size % _SYM.size,
                             f"symbol table {table.name}")
        return [table.offset + i * _SYM.size
                for i, symbol in enumerate(_SYM.iter_unpack(entries))
                if text.startswith(wanted, symbol[0]) and _string(text, symbol[0]) == name]

    def _read(self, offset: int, size: int, what: str) -> bytes:
        if size > _MAX_TABLE:
            raise FormatError(f"{self.path}: {what} would be {size} bytes, more than an ELF "
                              f"library this reader edits holds ({_MAX_TABLE} at most)")
        if offset > self.file_size or size > self.file_size - offset:
            raise FormatError(f"{self.path} is cut short or damaged: {what} ({size} bytes at "
                              f"offset {offset}) lie past its end ({self.file_size} bytes)")
        self._f.seek(offset)
        data = self._f.read(size)
        if len(data) != size:
            raise FormatError(f"{self.path}: reading {what} came short")
        return data


def _string(table: bytes, offset: int) -> str:
    end = table.find(b"\0", offset)
    return table[offset:end if end >= 0 else len(table)].decode("utf-8", "replace")
