"""The seal, writer side: the trailer that ends every library modpack exports (layout and
rule in ``csrc/include/modpack/format.h``, read here through the binding; the C runtime is
the reader and checks it before ``dlopen``).

Its digest is XXH3-128 over every byte of the file but the payloads (which the blob's payload
checksums cover) and the digest field itself, so code, headers, symbol and hash tables,
relocations and the blob's index are all covered, and reading them back costs little.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any, BinaryIO

import xxhash

from ..errors import ModpackOSError
from ..runtime.binding import error_from_status, ffi, lib
from .layout import check_struct

__all__ = ["SEAL_MAGIC", "SEAL_SIZE", "Seal", "check_seal", "seal_file", "seal_library",
           "write_seal"]

SEAL_SIZE: int = lib.MP_SEAL_SIZE
SEAL_VERSION: int = lib.MP_SEAL_VERSION
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


def write_seal(f: BinaryIO, blob_offset: int = 0, blob_vaddr: int = 0, blob_size: int = 0,
               payloads_offset: int = 0, payloads_size: int = 0) -> Seal:
    """Append the seal to the library open in |f| (read-write), whose blob and payloads lie
    where the arguments say (all 0 for a library without a blob)."""
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


def seal_library(path: str | os.PathLike, placement: Any = None) -> Seal:
    """Append the seal to the linked library at |path|, whose blob lies at |placement| (a
    :class:`~modpack.format.image.Placement`; None for a library without a blob)."""
    with open(path, "r+b") as f:
        return seal_file(f, placement)


def seal_file(f: BinaryIO, placement: Any = None) -> Seal:
    """:func:`seal_library` on the library open in |f| (read-write)."""
    if placement is None:
        return write_seal(f)
    return write_seal(f, placement.offset, placement.vaddr, placement.size,
                      placement.payloads_offset, placement.payloads_size)


def _pack(seal: Seal, digest: int) -> bytes:
    return _SEAL.pack(seal.file_size, seal.blob_offset, seal.blob_vaddr, seal.blob_size,
                      seal.payloads_offset, seal.payloads_size, digest & (2**64 - 1),
                      digest >> 64, SEAL_VERSION, 0, SEAL_MAGIC)


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
                out.payloads_offset, out.payloads_size)
