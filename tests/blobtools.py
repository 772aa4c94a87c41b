"""Test helpers for taking libraries apart: find the blob in a file, re-seal edited indexes and
libraries, say which bytes a library's seal covers, and run the C reader on raw bytes."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import xxhash
from elftools.elf.elffile import ELFFile

from modpack.format.coverage import read_coverage
from modpack.format.seal import reseal_library
from modpack.runtime.binding import error_from_status, ffi, lib


def blob_extent(path: Path) -> tuple[int, int]:
    """(file offset, size) of __dev_mblob in |path|."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        (sym,) = elf.get_section_by_name(".dynsym").get_symbol_by_name("__dev_mblob")
        section = elf.get_section(sym["st_shndx"])
        return sym["st_value"] - section["sh_addr"] + section["sh_offset"], sym["st_size"]


def read_blob(path: Path) -> bytearray:
    offset, size = blob_extent(path)
    return bytearray(path.read_bytes()[offset : offset + size])


def write_blob(path: Path, blob: bytes, seal: bool = True) -> None:
    """Put |blob| in place of the library's; then, unless not |seal|, seal the library again
    over its new bytes (as a buggy writer would), so that what a test reaches is the blob
    reader's own checks rather than the seal's."""
    offset, size = blob_extent(path)
    assert len(blob) == size
    data = bytearray(path.read_bytes())
    data[offset : offset + size] = blob
    path.write_bytes(bytes(data))
    if seal:
        reseal_library(path)


def covered(path: Path) -> np.ndarray:
    """Per byte of the library at |path|: whether a change to it is caught by every load, which
    checks what its seal (version 2) covers: the digest over the unmasked bytes, the payload
    checksums, the digest itself, and that each signature slot is free or holds a record in its
    form (whether a signature holds only a signed load can tell). The rest (section headers,
    .symtab, debug sections, the trailer, the other masked fields) nothing reads when it loads."""
    with open(path, "rb") as f:
        coverage = read_coverage(f)
    assert coverage is not None, f"{path} has no seal note"
    mask = np.zeros(path.stat().st_size, dtype=bool)
    for begin, end in coverage.ranges:
        mask[begin:end] = True
    for at, size in coverage.masks:
        mask[at:at + size] = False
    mask[coverage.note + 48:coverage.note + 64] = True  # the digest
    data = path.read_bytes()
    for slot in range(4):
        at = coverage.note + 72 + 128 * slot
        if not any(data[at:at + 128]):
            mask[at:at + 128] = True
        else:  # its form: magic, algorithm and reserved fields; not the key id or signature
            mask[at:at + 16] = True
            mask[at + 112:at + 128] = True
    return mask


def note_offset(path: Path) -> int:
    """The file offset of the seal note's header (its descriptor follows 20 bytes later)."""
    with open(path, "rb") as f:
        coverage = read_coverage(f)
    assert coverage is not None, f"{path} has no seal note"
    return coverage.note - 20


def reseal(blob: bytearray) -> bytearray:
    """Recompute the index checksum after editing the index (as a buggy writer would)."""
    index_size = struct.unpack_from("<Q", blob, 48)[0]
    struct.pack_into("<Q", blob, 56, 0)
    struct.pack_into("<Q", blob, 56, xxhash.xxh3_64_intdigest(bytes(blob[:index_size])))
    return blob


def parse(blob: bytes, flags: int = 0) -> Exception | None:
    """Run the C reader; the exception it reports, or None when the blob is valid."""
    data = ffi.from_buffer(blob)
    span = ffi.new("mp_const_byte_span_t*", {"data": data, "size": len(blob)})
    out = ffi.new("mp_blob_t**")
    status = lib.mp_blob_parse(span[0], flags, out)
    if status != 0:
        return error_from_status(status)
    lib.mp_blob_free(out[0])
    return None


def layout(blob: bytes) -> dict[str, int]:
    """Offsets of the index tables in a v1 blob."""
    n, e = struct.unpack_from("<QQ", blob, 32)
    entries = 64
    row_ptr = entries + 48 * n
    children = row_ptr + 8 * (n + 1)
    strings = children + 8 * e
    return {"n": n, "e": e, "entries": entries, "row_ptr": row_ptr, "children": children,
            "strings": strings}
