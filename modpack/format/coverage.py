"""What a version 2 seal covers, and the digests over it: the writers' side (export, sign,
slim) of ``csrc/src/files/seal_note.c``, the reader, which decides (docs/format.md, "The seal").

The seal covers what the dynamic loader reads and maps, and nothing a stripper rewrites: the ELF
header, the program header table and the file bytes of every ``PT_LOAD`` segment, as one set of
file offsets taken in increasing order, each byte once, with the fields that decide nothing the
loader maps read as zeros (*masked*), and in the seal note its digest and its signature slots.
The payloads are left out of the seal's digest (their own checksums cover them) and hashed by a
signature's. That rule, and where the seal note lies, are the runtime's alone: the writers ask
it (``mp_seal_coverage``) and hash what it names, so the seal a writer makes is the one the
loader checks by construction, never by two copies of the rule kept in step.
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
from ..runtime.binding import error_from_status, ffi, lib
from .layout import check_struct

__all__ = ["NOTE", "NOTE_HEADER", "Coverage", "covered_bytes", "note_fields", "read_coverage",
           "seal_digest", "signed_digest"]

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

_CHUNK = 1 << 20


@dataclass(frozen=True)
class Coverage:
    """The bytes a seal covers: sorted, disjoint ranges [begin, end) of file offsets, the masked
    (offset, size) pieces in them, and the file offset of the seal note's descriptor."""

    ranges: tuple[tuple[int, int], ...]
    masks: tuple[tuple[int, int], ...]
    note: int


def read_coverage(f: BinaryIO) -> Coverage | None:
    """What a version 2 seal of the library open as |f| covers, asked of the runtime
    (``mp_seal_coverage``: the rule the loader checks, written once); None when the file is no
    64-bit little-endian ELF library with a seal note, or one whose program headers the loader
    refuses (its writer then seals it with a trailer, which a load refuses as it refuses any
    such file)."""
    f.flush()  # the runtime reads the descriptor: what is buffered here must be in the file
    fd = f.fileno()
    counts = ffi.new("uint64_t[3]")
    ranges, masks = ffi.new("mp_file_range_t[]", 16), ffi.new("mp_file_range_t[]", 64)
    for _ in range(2):
        status = lib.mp_seal_coverage(fd, ranges, len(ranges), counts, masks, len(masks),
                                      counts + 1, counts + 2)
        if status in (lib.MP_ERR_NOT_FOUND, lib.MP_ERR_FORMAT):
            return None
        if status != 0:
            raise error_from_status(status)
        if counts[0] <= len(ranges) and counts[1] <= len(masks):
            break
        ranges = ffi.new("mp_file_range_t[]", counts[0])
        masks = ffi.new("mp_file_range_t[]", counts[1])
    else:  # the file grew more program headers between two reads: a writer is racing this one
        raise FormatError(f"{_name(f)} changed while its seal's coverage was read; seal it when "
                          "nothing else writes to it")
    return Coverage(tuple((r.begin, r.end) for r in ranges[0:counts[0]]),
                    tuple((m.begin, m.end - m.begin) for m in masks[0:counts[1]]), counts[2])


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
