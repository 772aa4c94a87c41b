"""Where slim's rewrite of a library reaches: the blob's program header, its section (the anchor
the exporter placed it in), the sections and section header table after it (which move with the
blob's new size), and the ``__dev_mblob`` symbol entries (which hold that size).

Why it is checked: the section headers, ``.symtab`` and the seal's trailer are what no load
reads, and the seal does not cover them (strippers rewrite them); a copy cut short, or damaged
there, loads. Slim must not rewrite such a copy by what its section headers wrongly say, nor
fail on it with a parser's traceback: each part is read with modpack's own bounds-checked
reader (:mod:`modpack.format.elf64`) and checked against what the seal and the program headers
say, and a copy they do not fit is refused with a FormatError naming the damage.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, BinaryIO

from ...errors import FormatError, IncompatibleError
from ...format.elf64 import Elf64
from ...format.layout import BLOB_SYMBOL
from ...format.seal import SEAL_MAGIC, SEAL_SIZE
from ...format.section import ANCHOR

__all__ = ["LibraryLayout", "read_layout"]

_PT_LOAD = 1
_SHT_NOBITS = 8
_MAX_ALIGNMENT = 1 << 16  # no section of a library modpack exports asks for more
_ADVICE = ("slim rewrites a library's section headers along with its blob, and this copy's "
           "(which no load reads, so it still loads) cannot be rewritten; slim the library as "
           "exported, or a copy that kept its section headers")


@dataclass(frozen=True)
class LibraryLayout:
    """What slim rewrites, as file offsets and indexes of the input library."""

    segment: int  # the blob's program header
    phoff: int
    shoff: int
    shentsize: int
    anchor: int  # the blob's section
    alignment: int  # its alignment: the payloads'
    moved: list[tuple[int, int]]  # (index, sh_offset) of the sections after the blob
    tail_start: int  # the first byte after the blob that slim copies (shifted)
    tail_alignment: int  # the largest alignment of what the tail holds
    body_end: int  # where the copied tail ends: the seal's trailer, or the end of the content
    symbols: list[int]  # the file offsets of the __dev_mblob symbol entries


def read_layout(f: BinaryIO, seal: Any, shown: str) -> LibraryLayout:
    """The layout of the library open as |f| (|shown| names it), whose checked |seal| places
    its blob; FormatError when its section headers are gone, cut short or disagree with the
    seal, IncompatibleError when its blob is not in a segment modpack placed."""
    blob_end = seal.blob_offset + seal.blob_size
    try:
        elf = Elf64(f, shown)
    except IncompatibleError:
        raise  # an ELF file of another kind: not damage, which the advice is for
    except FormatError as exc:
        raise FormatError(f"{exc}; {_ADVICE}") from None
    segment = next((s.index for s in elf.segments
                    if s.type == _PT_LOAD and s.offset == seal.blob_offset), None)
    if segment is None or seal.version < 2:
        raise IncompatibleError(
            f"{shown}: its blob is not in a segment of its own (a library exported with a "
            "custom packer, or an older one); slim rewrites libraries whose blob modpack "
            "placed: export it again")

    def damaged(what: str) -> FormatError:
        return FormatError(f"{shown} is damaged where loads do not read: {what}; {_ADVICE}")

    if not elf.sections:
        raise damaged("it has no section headers (cut off, or stripped to its program headers)")
    anchor = elf.section(ANCHOR.name)
    if (anchor is None or anchor.offset != seal.blob_offset or anchor.size != seal.blob_size
            or not 1 <= anchor.addralign <= _MAX_ALIGNMENT or not _is_alignment(anchor.addralign)
            or seal.blob_offset % anchor.addralign):
        raise damaged(f"no section header {ANCHOR.name} holds the blob where its seal places it "
                      f"({seal.blob_size} bytes at offset {seal.blob_offset})")
    table_end = elf.shoff + len(elf.sections) * elf.shentsize
    moved, alignments, ends = [], [8], [blob_end]
    for s in elf.sections:
        if s.index == anchor.index or s.type == _SHT_NOBITS:
            continue
        if s.offset >= blob_end:
            if not _is_alignment(s.addralign):
                raise damaged(f"section [{s.index}] {s.name!r} asks for alignment {s.addralign}")
            moved.append((s.index, s.offset))
            alignments.append(s.addralign)
            ends.append(s.offset + s.size)
        elif s.size and s.offset + s.size > seal.blob_offset:
            raise damaged(f"section [{s.index}] {s.name!r} ({s.size} bytes at offset "
                          f"{s.offset}) overlaps the blob")
    if elf.shoff < blob_end and table_end > seal.blob_offset:
        raise damaged(f"its section header table (at offset {elf.shoff}) overlaps the blob")
    if elf.shoff >= blob_end:
        ends.append(table_end)
    content_end = max(ends)
    if content_end > seal.file_size:
        raise damaged(f"its sections or section headers run to byte {content_end}, past its end "
                      f"({seal.file_size} bytes): it was cut short")
    body_end = _trailer_start(f, seal)
    if body_end is None:  # cut off: the content ends where the last section or table does
        body_end = content_end
    elif content_end > body_end:
        raise damaged(f"its sections or section headers run into its seal's trailer (to byte "
                      f"{content_end}; the trailer begins at {body_end})")
    tail_start = min([o for _, o in moved] + ([elf.shoff] if elf.shoff >= blob_end else []),
                     default=blob_end)
    return LibraryLayout(segment, elf.phoff, elf.shoff, elf.shentsize, anchor.index,
                         anchor.addralign, moved, tail_start, max(alignments), body_end,
                         _blob_symbols(f, elf, seal, damaged))


def _blob_symbols(f: BinaryIO, elf: Elf64, seal: Any, damaged: Any) -> list[int]:
    """The file offsets of __dev_mblob's entries in .dynsym (exactly one: what dlsym finds,
    whose address and size the seal matches) and .symtab (as many as it holds)."""
    out: list[int] = []
    for name in (".dynsym", ".symtab"):
        table = elf.section(name)
        entries = [] if table is None else elf.symbol_entries(table, BLOB_SYMBOL)
        if name == ".dynsym" and len(entries) != 1:
            raise damaged(f"its section headers lead to {len(entries)} {BLOB_SYMBOL} entries "
                          "in .dynsym, not the one the dynamic loader finds")
        for at in entries:
            f.seek(at + 8)
            value, size = struct.unpack("<QQ", f.read(16))
            if (value, size) != (seal.blob_vaddr, seal.blob_size):
                raise damaged(f"its {name} entry of {BLOB_SYMBOL} (at offset {at}) says {size} "
                              f"bytes at {value:#x}; its seal says {seal.blob_size} at "
                              f"{seal.blob_vaddr:#x}")
        out += entries
    return out


def _trailer_start(f: BinaryIO, seal: Any) -> int | None:
    """Where the seal's trailer begins, or None when the copy lost it (cut short: a library
    sealed by its note loads without it)."""
    if seal.file_size < SEAL_SIZE:
        return None
    f.seek(seal.file_size - SEAL_SIZE)
    trailer = f.read(SEAL_SIZE)
    return seal.file_size - SEAL_SIZE if trailer.endswith(SEAL_MAGIC) else None


def _is_alignment(value: int) -> bool:
    """A section alignment slim can keep: 0 or 1 (none), or a power of two up to 64 KiB."""
    return value <= _MAX_ALIGNMENT and value & (value - 1) == 0
