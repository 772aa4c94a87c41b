"""The blob's place in the final library file.

:func:`place_blob_into` puts the blob into a library linked with the anchor object (a placeholder
``__dev_mblob`` in a ``.modpack.blob`` section; see :mod:`modpack.format.section` and the
packers) and the seal note object (:mod:`modpack.packers.seal_note`): the linker only ever sees
the placeholder, and the blob's bytes are written once, straight into the final file, by
modpack, as a read-only ``PT_LOAD`` segment of its own after every other one, at an offset and
an address aligned to the page size.

The library keeps the layout linkers make, so that strippers and ``objcopy`` copy it as they
copy any library, segments and program headers unchanged:

- the program header table stays where the linker put it, at the start of the first segment,
  with as many entries: the blob's segment takes the entry of the link's ``PT_NOTE`` of the
  slot note (a note nothing reads, whose alignment gives it a program header of its own), or
  else of ``PT_PHDR`` (which no dynamic loader needs in a shared library: they find the table
  in the first segment);
- the segment begins right where the linked segments end in the file, rounded up to the page
  (where ``objcopy`` would lay it out again); what the linker put after them (sections nothing
  loads: ``.symtab``, ``.strtab``, ``.comment``, debug information, the section header table)
  moves after the blob.

The ``.modpack.blob`` section header and the ``__dev_mblob`` symbols (``.dynsym`` and
``.symtab``) are pointed at the blob. Nothing of this depends on the linker (GNU ld, gold, lld
and mold all give the same result). :func:`find_blob` says where the blob lies in a library
linked with the whole blob inside (a custom packer, a relinked ``.tar``). ELF is read with
:mod:`.elf64`, a small reader; the few fields changed are written in place with ``struct``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

from ..errors import FormatError, ModpackError
from .elf64 import PHDR, Elf64
from .layout import BLOB_SYMBOL, HEADER_SIZE, align_up
from .section import ANCHOR

__all__ = ["HUGE_SEGMENT_ALIGNMENT", "PLACEABLE_MACHINES", "NoProgramHeaderSlot", "Placement",
           "find_blob", "place_blob_into"]

# Targets whose shared libraries are 64-bit little-endian ELF, which place_blob_into edits.
PLACEABLE_MACHINES = frozenset({"x86_64", "aarch64", "riscv64", "ppc64le", "loongarch64"})
# write_blob(file, offset) writes the blob into |file| from byte |offset| on; returns its size.
BlobWriter = Callable[[BinaryIO, int], int]

_PT_LOAD, _PT_NOTE, _PT_PHDR, _PF_R = 1, 4, 6, 4
_SHT_NOBITS = 8
_E_SHOFF = 40  # in an Elf64_Ehdr
_SH_ADDR, _SH_OFFSET, _SH_SIZE, _SH_ADDRALIGN = 16, 24, 32, 48  # in an Elf64_Shdr
_SHF_ALLOC = 0x2
_ST_VALUE = 8  # in an Elf64_Sym: st_value, then st_size
_INDEX_SIZE_FIELD = 48  # mp_format_header_v1_t.index_size
_SLOT_SECTION = ".note.modpack.slot"  # modpack.packers.seal_note.SLOT_NOTE_SECTION


class NoProgramHeaderSlot(ModpackError):
    """The linked library has no program header the blob's segment can take (a linker that
    makes neither PT_PHDR nor a PT_NOTE of its own for the slot note): the export links the
    blob instead."""


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
    """Write the blob into the library open in |f| (read-write, linked with the anchor object
    and the slot note) as described above; |path| names it in messages. |alignment| is the
    blob's (the payload alignment), |segment_alignment| (if larger than the page) the
    segment's, e.g. HUGE_SEGMENT_ALIGNMENT for large payloads."""
    plan = _Plan.read(f, path)
    page = max(plan.page, alignment)
    offset = align_up(plan.load_end, page)  # the new segment's offset in the file
    vaddr = align_up(plan.end_vaddr, page)
    if segment_alignment > page:  # the address, not the file, moves: no gap to read or hash
        vaddr = align_up(plan.end_vaddr, segment_alignment) + offset % segment_alignment
        page = segment_alignment
    f.seek(plan.load_end)
    tail = f.read()  # what nothing loads: it moves after the blob
    f.truncate(plan.load_end)  # the gap before the blob stays a hole: zeros that take no disk
    size = write_blob(f, offset)
    shift = align_up(offset + size - plan.load_end, plan.tail_alignment)
    f.seek(plan.load_end + shift)
    f.write(tail)
    load = PHDR.pack(_PT_LOAD, _PF_R, offset, vaddr, vaddr, size, size, page)
    f.seek(plan.phoff)
    f.write(b"".join(plan.program_headers(load)))
    shoff = plan.shoff + (shift if plan.shoff >= plan.load_end else 0)
    f.seek(_E_SHOFF)
    f.write(struct.pack("<Q", shoff))
    for index, old in plan.moved_sections:
        f.seek(shoff + index * plan.shentsize + _SH_OFFSET)
        f.write(struct.pack("<Q", old + shift))
    for field, value in ((_SH_ADDR, vaddr), (_SH_OFFSET, offset), (_SH_SIZE, size),
                         (_SH_ADDRALIGN, alignment)):
        f.seek(shoff + plan.anchor * plan.shentsize + field)
        f.write(struct.pack("<Q", value))
    for entry in plan.symbols:
        f.seek(entry + (shift if entry >= plan.load_end else 0) + _ST_VALUE)
        f.write(struct.pack("<QQ", vaddr, size))
    return _with_payloads(f, offset, vaddr, size, alignment)


def find_blob(path: str | os.PathLike[str], alignment: int) -> Placement | None:
    """Where ``__dev_mblob`` lies in the library at |path|, or None when it has no blob."""
    with open(path, "rb") as f:
        elf = Elf64(f, path)
        symbol = None
        for name in (".dynsym", ".symtab"):
            table = elf.section(name)
            entries = elf.symbol_entries(table, BLOB_SYMBOL) if table else []
            if entries:
                f.seek(entries[0] + _ST_VALUE)
                symbol = struct.unpack("<QQ", f.read(16))
                break
        if symbol is None:
            return None
        vaddr, size = symbol
        for segment in elf.segments:
            start = segment.vaddr
            if segment.type == _PT_LOAD and start <= vaddr < start + segment.filesz:
                offset = segment.offset + vaddr - start
                return _with_payloads(f, offset, vaddr, size, alignment)
    raise FormatError(f"{path}: {BLOB_SYMBOL} lies in no file-backed segment")


def _with_payloads(f: BinaryIO, offset: int, vaddr: int, size: int,
                   alignment: int) -> Placement:
    """The placement, with its payload range read from the blob's header."""
    f.seek(offset + _INDEX_SIZE_FIELD)
    (index_size,) = struct.unpack("<Q", f.read(8))
    if not HEADER_SIZE <= index_size <= size:
        raise FormatError(f"the blob's header at byte {offset} says its index has "
                          f"{index_size} bytes, in a {size}-byte blob")
    start = min(align_up(index_size, alignment), size)
    return Placement(offset, vaddr, size, offset + start, size - start)


@dataclass
class _Plan:
    """What place_blob_into needs to know of the linked library."""

    phoff: int  # the program header table's offset in the file
    headers: list[bytes]  # the program header table, one entry each
    slot: int  # the entry the blob's segment takes
    load_end: int  # where the file bytes of the linked segments end
    end_vaddr: int  # the end of the highest segment in memory
    page: int  # the largest PT_LOAD alignment
    shoff: int  # the section header table's offset
    shentsize: int
    anchor: int  # index of the .modpack.blob section
    moved_sections: list[tuple[int, int]]  # (index, sh_offset) of the sections after load_end
    tail_alignment: int  # what the move keeps: the largest alignment of those sections
    symbols: list[int]  # file offsets of the __dev_mblob symbol entries

    @classmethod
    def read(cls, f: BinaryIO, path: Any) -> _Plan:
        elf = Elf64(f, path)
        anchor = elf.section(ANCHOR.name)
        if anchor is None:
            raise FormatError(f"{path}: the linked library lacks modpack's anchor section "
                              f"{ANCHOR.name}; was the anchor object left out of the link, or "
                              "dropped by a linker script?")
        segments = elf.segments
        loads = [s for s in segments if s.type == _PT_LOAD]
        if not loads:
            raise FormatError(f"{path}: the linked library has no loadable segment")
        load_end = max(s.offset + s.filesz for s in loads)
        symbols: list[int] = []
        moved = []
        tail_alignment = 8
        for section in elf.sections:
            if section.type == _SHT_NOBITS or section.offset < load_end or (
                    section.flags & _SHF_ALLOC and not section.size):
                continue  # (gold puts an empty .tm_clone_table there)
            if section.flags & _SHF_ALLOC:
                raise FormatError(f"{path}: section {section.name} is allocated but lies after "
                                  "every loadable segment")
            moved.append((section.index, section.offset))
            tail_alignment = max(tail_alignment, section.addralign)
        for name in (".dynsym", ".symtab"):
            table = elf.section(name)
            if table is not None:
                symbols += elf.symbol_entries(table, BLOB_SYMBOL)
            if name == ".dynsym" and not symbols:
                raise FormatError(f"{path}: the library does not export {BLOB_SYMBOL} (a "
                                  "version script or a visibility option hides it); the "
                                  "runtime finds the blob through it")
        f.seek(elf.phoff)
        table_bytes = f.read(PHDR.size * len(segments))
        return cls(
            phoff=elf.phoff,
            headers=[table_bytes[i * PHDR.size:(i + 1) * PHDR.size]
                     for i in range(len(segments))],
            slot=cls._slot(elf, path),
            load_end=load_end,
            end_vaddr=max(s.vaddr + s.memsz for s in loads),
            page=max([s.align for s in loads] + [4096]),
            shoff=elf.shoff,
            shentsize=elf.shentsize,
            anchor=anchor.index,
            moved_sections=moved,
            tail_alignment=tail_alignment,
            symbols=symbols,
        )

    @staticmethod
    def _slot(elf: Elf64, path: Any) -> int:
        """The program header the blob's segment takes: the slot note's own PT_NOTE, else
        PT_PHDR."""
        note = elf.section(_SLOT_SECTION)
        for i, s in enumerate(elf.segments):
            if (note is not None and s.type == _PT_NOTE and s.vaddr == note.addr
                    and s.memsz == note.size):
                return i
        for i, s in enumerate(elf.segments):
            if s.type == _PT_PHDR:
                return i
        raise NoProgramHeaderSlot(
            f"{path}: the linker made no program header the blob's segment can take (neither "
            f"PT_PHDR nor a PT_NOTE of its own for {_SLOT_SECTION})")

    def program_headers(self, load: bytes) -> list[bytes]:
        """The new table, as large as the old one: the slot's entry gone, |load| after the
        last PT_LOAD (the dynamic loader wants them in address order)."""
        headers = [h for i, h in enumerate(self.headers) if i != self.slot]
        last = max(i for i, h in enumerate(headers) if PHDR.unpack(h)[0] == _PT_LOAD)
        headers.insert(last + 1, load)
        return headers
