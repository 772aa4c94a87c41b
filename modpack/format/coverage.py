"""What a version 2 seal covers, and where its note lies: the writer's side of
``csrc/src/files/seal_note.c`` (the reader, which decides; docs/format.md, "The seal").

The seal covers what the dynamic loader reads and maps, and nothing a stripper rewrites: the ELF
header, the program header table and the file bytes of every ``PT_LOAD`` segment, as one set of
file offsets taken in increasing order, each byte once. Read as zeros (*masked*): the fields
that decide nothing the loader maps and that tools rewriting a file may change (``e_shoff``,
``e_shentsize``, ``e_shnum``, ``e_shstrndx``; every ``p_paddr``; the ``p_offset`` of every
segment but ``PT_LOAD``, which loaders find through ``p_vaddr``: glibc reads a ``PT_NOTE``'s
only to look for an ABI-tag note, which can make ``dlopen`` refuse a library, never map other
bytes), and in the seal note its digest and its signature slots. The payloads are left out of
the seal's digest (their own checksums cover them) and hashed by a signature's.

The seal note is found the way the reader finds it: through each ``PT_NOTE`` program header's
address, in the ``PT_LOAD`` segment that maps it, the first 4-byte-aligned note header of owner
``modpack`` and type ``MP_SEAL_NOTE_TYPE`` with the descriptor size of ``mp_seal_note_v2_t``.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import xxhash

from ..errors import FormatError
from ..runtime.binding import ffi, lib
from .elf64 import EHDR, PHDR, Segment
from .layout import check_struct

__all__ = ["NOTE", "NOTE_HEADER", "Coverage", "ElfLayout", "covered_bytes", "read_coverage",
           "read_layout", "seal_digest", "signed_digest"]

NOTE_NAME: bytes = ffi.string(lib.MP_SEAL_NOTE_NAME) + b"\0"
NOTE_TYPE: int = lib.MP_SEAL_NOTE_TYPE
SLOT_NOTE_TYPE: int = lib.MP_SEAL_NOTE_SLOT_TYPE
SIGNATURE_SLOTS: int = lib.MP_SEAL_NOTE_SIGNATURES
NOTE_DESC_SIZE: int = lib.MP_SEAL_NOTE_DESC_SIZE
# The descriptor: version, flags, blob_vaddr, blob_size, blob_offset, payloads_offset,
# payloads_size, digest_low, digest_high, signature_slots, reserved, the slots.
NOTE = check_struct(struct.Struct(f"<IIQQQQQQQII{SIGNATURE_SLOTS * lib.MP_SIGNATURE_SIZE}s"),
                    "mp_seal_note_v2_t")
# What precedes the descriptor: namesz, descsz, type, the name.
NOTE_HEADER = struct.pack("<III", len(NOTE_NAME), NOTE_DESC_SIZE, NOTE_TYPE) + NOTE_NAME
assert len(NOTE_HEADER) + NOTE_DESC_SIZE == lib.MP_SEAL_NOTE_SIZE
_DIGEST_AT = ffi.offsetof("mp_seal_note_v2_t", "digest_low")
_SLOTS_AT = ffi.offsetof("mp_seal_note_v2_t", "signatures")

PT_LOAD, PT_NOTE, PT_PHDR = 1, 4, 6
# Masked fields: (offset, size) in the ELF header and in each program header.
_EHDR_MASKS = ((40, 8), (58, 6))  # e_shoff; e_shentsize, e_shnum, e_shstrndx
_P_OFFSET, _P_PADDR = (8, 8), (24, 8)
_MAX_NOTES = 1 << 20  # a PT_NOTE segment larger than this is not searched
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ElfLayout:
    """The parts of a 64-bit little-endian ELF file a seal depends on."""

    file_size: int
    phoff: int
    segments: tuple[Segment, ...]

    def loads(self) -> list[Segment]:
        return [s for s in self.segments if s.type == PT_LOAD]

    def file_offset(self, vaddr: int, size: int) -> int | None:
        """The file offset of the |size| bytes at |vaddr|, when a PT_LOAD segment's file bytes
        hold them all."""
        for s in self.loads():
            if s.vaddr <= vaddr and vaddr - s.vaddr <= s.filesz and size <= s.filesz - (
                    vaddr - s.vaddr):
                return s.offset + vaddr - s.vaddr
        return None


@dataclass(frozen=True)
class Coverage:
    """The bytes a seal covers: sorted, disjoint ranges [begin, end) of file offsets, the masked
    (offset, size) pieces in them, and the file offset of the seal note's descriptor."""

    ranges: tuple[tuple[int, int], ...]
    masks: tuple[tuple[int, int], ...]
    note: int


def read_layout(f: BinaryIO) -> ElfLayout | None:
    """The layout of the ELF file open as |f|, or None when it is not a 64-bit little-endian ELF
    file whose program headers lie in it (such files get a version 1 seal)."""
    size = f.seek(0, 2)
    f.seek(0)
    head = f.read(EHDR.size)
    if len(head) < EHDR.size or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        return None
    fields = EHDR.unpack(head)
    phoff, phentsize, phnum = fields[5], fields[9], fields[10]
    if phentsize != PHDR.size or phoff > size or phnum * PHDR.size > size - phoff:
        return None
    f.seek(phoff)
    table = f.read(phnum * PHDR.size)
    segments = tuple(Segment(i, *PHDR.unpack_from(table, i * PHDR.size)) for i in range(phnum))
    return ElfLayout(size, phoff, segments)


def find_note(f: BinaryIO, layout: ElfLayout) -> int | None:
    """The file offset of the seal note's descriptor in the file open as |f|, or None."""
    for s in layout.segments:
        if s.type != PT_NOTE or not 0 < s.filesz <= _MAX_NOTES:
            continue
        offset = layout.file_offset(s.vaddr, s.filesz)
        if offset is None:
            continue
        f.seek(offset)
        notes = f.read(s.filesz)
        at = 0
        while at + len(NOTE_HEADER) + NOTE_DESC_SIZE <= len(notes):
            found = notes.find(NOTE_HEADER, at)
            if found < 0 or found + len(NOTE_HEADER) + NOTE_DESC_SIZE > len(notes):
                break
            if found % 4 == 0:
                return offset + found + len(NOTE_HEADER)
            at = found + 1
    return None


def read_coverage(f: BinaryIO, layout: ElfLayout | None = None) -> Coverage | None:
    """What a version 2 seal of the library open as |f| covers; None when the file has no seal
    note (it then gets a version 1 seal)."""
    layout = layout or read_layout(f)
    if layout is None:
        return None
    note = find_note(f, layout)
    if note is None:
        return None
    ranges = [(0, EHDR.size), (layout.phoff, layout.phoff + len(layout.segments) * PHDR.size)]
    ranges += [(s.offset, s.offset + s.filesz) for s in layout.loads() if s.filesz]
    masks = list(_EHDR_MASKS)
    for s in layout.segments:
        at = layout.phoff + s.index * PHDR.size
        masks.append((at + _P_PADDR[0], _P_PADDR[1]))
        if s.type != PT_LOAD:
            masks.append((at + _P_OFFSET[0], _P_OFFSET[1]))
    masks += [(note + _DIGEST_AT, 16), (note + _SLOTS_AT, NOTE.size - _SLOTS_AT)]
    return Coverage(tuple(_merged(ranges)), tuple(sorted(masks)), note)


def _merged(ranges: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    begin = end = -1
    for b, e in sorted(r for r in ranges if r[0] < r[1]):
        if b <= end:
            end = max(end, e)
            continue
        if end > begin:
            yield begin, end
        begin, end = b, e
    if end > begin:
        yield begin, end


def covered_bytes(f: BinaryIO, coverage: Coverage,
                  skip: tuple[int, int] = (0, 0)) -> Iterator[bytes]:
    """The covered bytes of the file open as |f| in file order, masked, in chunks; the range
    |skip| (offset, size: the payloads) left out."""
    skip_begin, skip_end = skip[0], skip[0] + skip[1]
    for begin, end in coverage.ranges:
        parts = [(begin, end)]
        if skip_end > skip_begin and skip_begin < end and begin < skip_end:
            parts = [(begin, max(begin, skip_begin)), (min(end, skip_end), end)]
        for b, e in parts:
            while b < e:
                f.seek(b)
                chunk = bytearray(f.read(min(_CHUNK, e - b)))
                if not chunk:
                    raise FormatError(
                        f"{_name(f)} is truncated: it ends at byte {b}, inside a loaded segment "
                        f"that runs to byte {end}; copy or export it again")
                for at, size in coverage.masks:
                    lo, hi = max(at, b), min(at + size, b + len(chunk))
                    if lo < hi:
                        chunk[lo - b:hi - b] = bytes(hi - lo)
                yield bytes(chunk)
                b += len(chunk)


def _name(f: BinaryIO) -> str:
    name = getattr(f, "name", None)
    return os.fsdecode(name) if isinstance(name, (str, bytes)) else "the library"


def seal_digest(f: BinaryIO, coverage: Coverage, payloads: tuple[int, int]) -> int:
    """XXH3-128 of what the seal covers, the payloads |payloads| (offset, size) left out."""
    digest = xxhash.xxh3_128()
    for chunk in covered_bytes(f, coverage, payloads):
        digest.update(chunk)
    return digest.intdigest()


def signed_digest(f: BinaryIO, coverage: Coverage) -> bytes:
    """SHA-256 of what the seal covers, payloads included: what a signature signs."""
    digest = hashlib.sha256()
    for chunk in covered_bytes(f, coverage):
        digest.update(chunk)
    return digest.digest()


def note_fields(f: BinaryIO, coverage: Coverage) -> tuple[Any, ...]:
    """The seal note's descriptor, unpacked (NOTE's fields)."""
    f.seek(coverage.note)
    return NOTE.unpack(f.read(NOTE.size))
