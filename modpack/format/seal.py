"""The seal, writer side (layout and rule in ``csrc/include/modpack/format.h``, read here
through the binding; the C runtime is the reader and checks it before ``dlopen``).

- Version 2, for libraries linked with modpack's seal note (every ``.so`` export for a 64-bit
  little-endian ELF target): the note, filled in here, holds where the blob lies and XXH3-128
  of what the dynamic loader reads and maps (:mod:`.coverage`): headers, dynamic section,
  symbol and hash tables, relocations, code, data and the blob's index, but not the payloads
  (their own checksums cover them) nor what strippers rewrite. The file then ends with a
  trailer in version 1's layout saying version 2, which older readers refuse clearly.
- Version 1, the trailer alone, its digest over every byte of the file but the payloads: for
  weight files, libraries relinked from a ``.tar``, and targets the note is not made for.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any, BinaryIO

import xxhash

from ..errors import ModpackOSError
from ..runtime.binding import error_from_status, ffi, lib
from .coverage import NOTE, SIGNATURE_SLOTS, Coverage, note_fields, read_coverage, seal_digest
from .layout import check_struct

__all__ = ["SEAL_MAGIC", "SEAL_SIZE", "Seal", "check_seal", "reseal_library", "seal_file",
           "seal_library", "write_seal"]

SEAL_SIZE: int = lib.MP_SEAL_SIZE
SEAL_VERSION: int = lib.MP_SEAL_VERSION
TRAILER_VERSION: int = lib.MP_SEAL_TRAILER_VERSION
SEAL_MAGIC: bytes = ffi.string(lib.MP_SEAL_MAGIC)
_SEAL = check_struct(struct.Struct("<QQQQQQQQII8s"), "mp_seal_v1_t")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Seal:
    """Where the blob and its payloads lie in a sealed library (offsets in the file)."""

    file_size: int
    blob_offset: int = 0
    blob_vaddr: int = 0
    blob_size: int = 0
    payloads_offset: int = 0
    payloads_size: int = 0
    version: int = TRAILER_VERSION


def write_seal(f: BinaryIO, blob_offset: int = 0, blob_vaddr: int = 0, blob_size: int = 0,
               payloads_offset: int = 0, payloads_size: int = 0) -> Seal:
    """Append a version 1 seal (the trailer alone) to the file open in |f| (read-write), whose
    blob and payloads lie where the arguments say (all 0 for a library without a blob)."""
    f.seek(0, os.SEEK_END)
    body = f.tell()
    seal = Seal(body + SEAL_SIZE, blob_offset, blob_vaddr, blob_size, payloads_offset,
                payloads_size)
    digest = xxhash.xxh3_128()
    for begin, end in ((0, payloads_offset if payloads_size else 0),
                       (payloads_offset + payloads_size if payloads_size else 0, body)):
        f.seek(begin)
        while begin < end:
            chunk = f.read(min(_CHUNK, end - begin))
            if not chunk:
                raise ModpackOSError(f"the library ended at byte {begin} while sealing it")
            digest.update(chunk)
            begin += len(chunk)
    trailer = bytearray(_pack(seal, 0))
    digest.update(bytes(trailer))  # its digest field is still zero
    value = digest.intdigest()
    trailer[:] = _pack(seal, value)
    f.seek(body)
    f.write(trailer)
    return seal


def write_note_seal(f: BinaryIO, coverage: Coverage, blob_offset: int = 0, blob_vaddr: int = 0,
                    blob_size: int = 0, payloads_offset: int = 0,
                    payloads_size: int = 0) -> Seal:
    """Seal the library open in |f| (read-write) by its seal note (version 2), whose coverage
    is |coverage|, then append the trailer that tells older readers the version. Signature
    slots already filled are kept (the digest reads them as zeros)."""
    old = note_fields(f, coverage)
    fields = [SEAL_VERSION, 0, blob_vaddr, blob_size, blob_offset, payloads_offset,
              payloads_size, 0, 0, SIGNATURE_SLOTS, 0, old[-1]]
    f.seek(coverage.note)
    f.write(NOTE.pack(*fields))
    value = seal_digest(f, coverage, (payloads_offset, payloads_size))
    fields[7:9] = [value & (2**64 - 1), value >> 64]
    f.seek(coverage.note)
    f.write(NOTE.pack(*fields))
    body = f.seek(0, os.SEEK_END)
    seal = Seal(body + SEAL_SIZE, blob_offset, blob_vaddr, blob_size, payloads_offset,
                payloads_size, SEAL_VERSION)
    f.write(_pack(seal, value))
    return seal


def seal_library(path: str | os.PathLike, placement: Any = None) -> Seal:
    """Append the seal to the linked library at |path|, whose blob lies at |placement| (a
    :class:`~modpack.format.image.Placement`; None for a library without a blob)."""
    with open(path, "r+b") as f:
        return seal_file(f, placement)


def seal_file(f: BinaryIO, placement: Any = None) -> Seal:
    """:func:`seal_library` on the library open in |f| (read-write): by its seal note when it
    was linked with one, else by a trailer."""
    where = (() if placement is None else
             (placement.offset, placement.vaddr, placement.size, placement.payloads_offset,
              placement.payloads_size))
    coverage = read_coverage(f)
    if coverage is not None:
        return write_note_seal(f, coverage, *where)
    return write_seal(f, *where)


def reseal_library(path: str | os.PathLike) -> Seal:
    """Seal the library at |path| again over its current bytes, where its seal says its blob
    lies (for tools and tests that edit a library on purpose)."""
    with open(path, "r+b") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(size - SEAL_SIZE)
        fields = _SEAL.unpack(f.read(SEAL_SIZE))
        if fields[-1] != SEAL_MAGIC:
            raise ModpackOSError(f"{path} has no seal trailer to seal again")
        f.truncate(size - SEAL_SIZE)
        coverage = read_coverage(f)
        if coverage is not None:
            return write_note_seal(f, coverage, *fields[1:6])
        return write_seal(f, *fields[1:6])


def _pack(seal: Seal, digest: int) -> bytes:
    return _SEAL.pack(seal.file_size, seal.blob_offset, seal.blob_vaddr, seal.blob_size,
                      seal.payloads_offset, seal.payloads_size, digest & (2**64 - 1),
                      digest >> 64, seal.version, 0, SEAL_MAGIC)


def check_seal(path: str | os.PathLike) -> Seal | None:
    """The checked seal of the library at |path| (the runtime reads it), None when the file
    carries none; raises FormatError (or a subclass) when it does not match."""
    out = ffi.new("mp_seal_v1_t*")
    status = lib.mp_seal_check_file(os.fsencode(path), out)
    if status == lib.MP_ERR_NOT_FOUND and os.path.exists(path):
        return None
    if status != 0:
        raise error_from_status(status)
    return Seal(out.file_size, out.blob_offset, out.blob_vaddr, out.blob_size,
                out.payloads_offset, out.payloads_size, out.version)
