"""The blob's place in the final library file.

:func:`place_blob_into` puts the blob into a library linked with the anchor object (a placeholder
``__dev_mblob`` in a ``.modpack.blob`` section; see :mod:`modpack.format.section` and the
packers): the linker only ever sees the placeholder, and the blob's bytes are written once,
straight into the final file, by modpack. After the end of the file, at an offset and an
address aligned to the page size and above every segment, go

1. a copy of the program header table with one entry more: a read-only PT_LOAD mapping what
   follows (after the other PT_LOADs, which the dynamic loader wants in address order; a
   PT_PHDR entry is pointed at the copy, which the ELF header now names);
2. the blob, at its alignment; the ``.modpack.blob`` section header and the ``__dev_mblob``
   symbols (``.dynsym`` and ``.symtab``) are pointed at it.

Nothing of this depends on the linker (GNU ld, gold, lld and mold all give the same result).
:func:`find_blob` says where the blob lies in a library linked with the whole blob inside (a
custom packer, a relinked ``.tar``). ELF is read with pyelftools; the few fields changed are
written in place with ``struct``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from ..errors import ModpackError
from .layout import BLOB_SYMBOL, HEADER_SIZE, align_up
from .section import ANCHOR

__all__ = ["HUGE_SEGMENT_ALIGNMENT", "PLACEABLE_MACHINES", "Placement", "find_blob",
           "place_blob_into"]

# Targets whose shared libraries are 64-bit little-endian ELF, which place_blob_into edits.
PLACEABLE_MACHINES = frozenset({"x86_64", "aarch64", "riscv64", "ppc64le", "loongarch64"})
# write_blob(file, offset) writes the blob into |file| from byte |offset| on; returns its size.
BlobWriter = Callable[[BinaryIO, int], int]

_PT_LOAD, _PT_PHDR, _PF_R = 1, 6, 4
_PHDR = struct.Struct("<IIQQQQQQ")
_E_PHOFF, _E_PHNUM = 32, 56  # in an Elf64_Ehdr
_SH_ADDR, _SH_OFFSET, _SH_SIZE, _SH_ADDRALIGN = 16, 24, 32, 48  # in an Elf64_Shdr
_ST_VALUE, _ST_SIZE = 8, 16  # in an Elf64_Sym
_INDEX_SIZE_FIELD = 48  # mp_format_header_v1_t.index_size


@dataclass(frozen=True)
class Placement:
    """The blob in the file: its offset, its address in the library's image, its size, and
    the range of its payloads (offset and size in the file)."""

    offset: int
    vaddr: int
    size: int
    payloads_offset: int
    payloads_size: int


# Large blobs get a segment whose address is congruent to its file offset modulo 2 MiB, with
# p_align 2 MiB (the dynamic loader aligns the library to its largest p_align): the kernel then
# maps the page cache's large folios whole, which halves the cost of touching every page of a
# warm payload (measured on a 512 MiB payload: 55-65 ms otherwise, 25-35 ms so, for faults
# plus hashing).
HUGE_SEGMENT_ALIGNMENT = 2 << 20


def place_blob_into(f: BinaryIO, path: Any, write_blob: BlobWriter, alignment: int,
                    segment_alignment: int = 0) -> Placement:
    """Write the blob into the library open in |f| (read-write, linked with the anchor object)
    as described above; |path| names it in messages. |alignment| is the blob's (the payload
    alignment), |segment_alignment| (if larger than the page) the segment's, e.g.
    HUGE_SEGMENT_ALIGNMENT for large payloads."""
    plan = _Plan.read(f, path)
    page = max(plan.page, alignment)
    f.seek(0, os.SEEK_END)
    segment = align_up(f.tell(), page)  # the new segment: file offset and address
    vaddr = align_up(plan.end_vaddr, page)
    if segment_alignment > page:  # the address, not the file, moves: no gap to read or hash
        vaddr = align_up(plan.end_vaddr, segment_alignment) + segment % segment_alignment
        page = segment_alignment
    table_size = (len(plan.headers) + 1) * _PHDR.size
    blob_at = align_up(table_size, alignment)
    f.seek(segment + blob_at)  # the gap before it stays a hole: zeros that take no disk
    f.truncate()
    size = write_blob(f, segment + blob_at)
    end = blob_at + size
    load = _PHDR.pack(_PT_LOAD, _PF_R, segment, vaddr, vaddr, end, end, page)
    f.seek(segment)
    f.write(b"".join(plan.program_headers(load, segment, vaddr, table_size)))
    f.seek(_E_PHOFF)
    f.write(struct.pack("<Q", segment))
    f.seek(_E_PHNUM)
    f.write(struct.pack("<H", len(plan.headers) + 1))
    blob_vaddr = vaddr + blob_at
    for field, value in ((_SH_ADDR, blob_vaddr), (_SH_OFFSET, segment + blob_at),
                         (_SH_SIZE, size), (_SH_ADDRALIGN, alignment)):
        f.seek(plan.section_header + field)
        f.write(struct.pack("<Q", value))
    for entry in plan.symbols:
        f.seek(entry + _ST_VALUE)
        f.write(struct.pack("<QQ", blob_vaddr, size))
    return _with_payloads(f, segment + blob_at, blob_vaddr, size, alignment)


def find_blob(path: str | os.PathLike, alignment: int) -> Placement | None:
    """Where ``__dev_mblob`` lies in the library at |path|, or None when it has no blob."""
    with open(path, "rb") as f:
        elf = _elf(f, path)
        symbol = None
        for name in (".dynsym", ".symtab"):
            table = elf.get_section_by_name(name)
            found = table.get_symbol_by_name(BLOB_SYMBOL) if table else None
            if found:
                symbol = found[0]
                break
        if symbol is None:
            return None
        vaddr, size = symbol["st_value"], symbol["st_size"]
        for segment in elf.iter_segments():
            start = segment["p_vaddr"]
            if segment["p_type"] == "PT_LOAD" and start <= vaddr < start + segment["p_filesz"]:
                offset = segment["p_offset"] + vaddr - start
                return _with_payloads(f, offset, vaddr, size, alignment)
    raise ModpackError(f"{path}: {BLOB_SYMBOL} lies in no file-backed segment")


def _with_payloads(f: BinaryIO, offset: int, vaddr: int, size: int,
                   alignment: int) -> Placement:
    """The placement, with its payload range read from the blob's header."""
    f.seek(offset + _INDEX_SIZE_FIELD)
    (index_size,) = struct.unpack("<Q", f.read(8))
    if not HEADER_SIZE <= index_size <= size:
        raise ModpackError(f"the blob's header at byte {offset} says its index has "
                           f"{index_size} bytes, in a {size}-byte blob")
    start = min(align_up(index_size, alignment), size)
    return Placement(offset, vaddr, size, offset + start, size - start)


def _elf(f: BinaryIO, path: Any) -> ELFFile:
    try:
        elf = ELFFile(f)
    except ELFError as exc:
        raise ModpackError(f"{path} is not an ELF library: {exc}") from None
    if elf.elfclass != 64 or not elf.little_endian or elf["e_type"] != "ET_DYN":
        raise ModpackError(f"{path}: placing the blob needs a 64-bit little-endian shared "
                           f"library (got ELF{elf.elfclass}, {elf['e_type']})")
    return elf


@dataclass
class _Plan:
    """What place_blob_into needs to know of the linked library."""

    headers: list[bytes]  # the program header table, one entry each
    last_load: int  # index of the last PT_LOAD
    end_vaddr: int  # the end of the highest segment
    page: int  # the largest PT_LOAD alignment
    section_header: int  # file offset of the .modpack.blob section header
    symbols: list[int]  # file offsets of the __dev_mblob symbol entries

    @classmethod
    def read(cls, f: BinaryIO, path: Any) -> _Plan:
        elf = _elf(f, path)
        index = elf.get_section_index(ANCHOR.name)
        if index is None:
            raise ModpackError(f"{path}: the linked library lacks modpack's anchor section "
                               f"{ANCHOR.name}; was the anchor object left out of the link, or "
                               "dropped by a linker script?")
        segments = list(elf.iter_segments())
        loads = [i for i, s in enumerate(segments) if s["p_type"] == "PT_LOAD"]
        if not loads or elf["e_phentsize"] != _PHDR.size:
            raise ModpackError(f"{path}: the linked library has no loadable segment")
        symbols = []
        for name in (".dynsym", ".symtab"):
            table = elf.get_section_by_name(name)
            for i, symbol in enumerate(table.iter_symbols() if table else ()):
                if symbol.name == BLOB_SYMBOL:
                    symbols.append(table["sh_offset"] + i * table["sh_entsize"])
            if name == ".dynsym" and not symbols:
                raise ModpackError(f"{path}: the library does not export {BLOB_SYMBOL} (a "
                                   "version script or a visibility option hides it); the "
                                   "runtime finds the blob through it")
        f.seek(elf["e_phoff"])
        table = f.read(_PHDR.size * len(segments))
        return cls(
            headers=[table[i * _PHDR.size:(i + 1) * _PHDR.size] for i in range(len(segments))],
            last_load=loads[-1],
            end_vaddr=max(segments[i]["p_vaddr"] + segments[i]["p_memsz"] for i in loads),
            page=max([segments[i]["p_align"] for i in loads] + [4096]),
            section_header=elf["e_shoff"] + index * elf["e_shentsize"],
            symbols=symbols,
        )

    def program_headers(self, load: bytes, offset: int, vaddr: int, size: int) -> list[bytes]:
        """The new table, at |offset| in the file and |vaddr| in memory (|size| bytes): the old
        one with PT_PHDR pointed at it and |load| after the last PT_LOAD."""
        headers = []
        for raw in self.headers:
            fields = list(_PHDR.unpack(raw))
            if fields[0] == _PT_PHDR:
                fields[2:7] = [offset, vaddr, vaddr, size, size]
            headers.append(_PHDR.pack(*fields))
        headers.insert(self.last_load + 1, load)
        return headers
