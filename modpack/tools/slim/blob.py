"""The slimmed blob, written into the output file: a new index, the payloads slim rewrites
(small: device code), and every other payload copied from the input file by the kernel
(copy_file_range), never through this process's memory — the weights in const modules come out
byte for byte, at the same alignment, with the checksums the input's index holds."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import xxhash

from ...files.kernel_copy import copy_range
from ...format import EntryRecord, IndexExtras, IndexLayout, pack_index
from ...format.layout import NO_EXTRAS, align_up
from .payloads import FileRange

__all__ = ["BlobEntry", "write_blob"]

_HASH_CHUNK = 8 << 20


@dataclass
class BlobEntry:
    """One module of the input's blob, and, when slim rewrites it, its new payload."""

    type_key: str
    offset: int  # in the input blob
    size: int
    checksum: int
    flags: int
    # The rewritten payload: bytes, and FileRanges (absolute offsets in the input file) of
    # what it keeps as is; None: the whole payload copied as is.
    chunks: list[Any] | None = None


def write_blob(src: int, src_blob: int, entries: list[BlobEntry],
               row_ptr: list[int], child_indices: list[int], dst: int, dst_blob: int,
               alignment: int, writer_version: tuple[int, int, int],
               extras: IndexExtras = NO_EXTRAS) -> tuple[int, int]:
    """Write the blob of |entries| (with the input's tree) into file |dst| at |dst_blob|, the
    unchanged payloads copied from file |src|'s blob at |src_blob|; returns (blob size, index
    size). Payloads shared in the input stay shared. |writer_version|: the input's (slim
    rewrites the index, not what the payloads hold, and its output depends on its input and
    keep list only, not on the modpack that slims). |extras|: the input's metadata and
    self-tests, kept as they are."""
    blob_entries = entries
    keys = [e.type_key for e in blob_entries]
    layout = IndexLayout.plan(keys, len(child_indices), extras)
    records = [EntryRecord(e.type_key, flags=e.flags) for e in blob_entries]
    cursor = layout.index_size
    placed: dict[tuple[int, int], int] = {}  # an input payload (offset, size) -> new offset
    for entry, record in zip(blob_entries, records):
        if entry.type_key == "_lib":
            continue
        if entry.chunks is None and (entry.offset, entry.size) in placed:
            record.payload_offset = placed[(entry.offset, entry.size)]
            record.payload_size, record.payload_checksum = entry.size, entry.checksum
            continue
        offset = align_up(cursor, alignment)
        if entry.chunks is None:
            copy_range(src, dst, src_blob + entry.offset, dst_blob + offset, entry.size)
            placed[(entry.offset, entry.size)] = offset
            size, checksum = entry.size, entry.checksum
        else:
            digest = xxhash.xxh3_64()
            size = 0
            for chunk in entry.chunks:
                if isinstance(chunk, FileRange):  # kept code: hashed in pieces, copied whole
                    for at in range(0, chunk.size, _HASH_CHUNK):
                        digest.update(os.pread(src, min(_HASH_CHUNK, chunk.size - at),
                                               chunk.offset + at))
                    copy_range(src, dst, chunk.offset, dst_blob + offset + size, chunk.size)
                    size += chunk.size
                    continue
                view = memoryview(chunk).cast("B")
                digest.update(view)
                os.pwrite(dst, view, dst_blob + offset + size)
                size += len(view)
            checksum = digest.intdigest()
        record.payload_offset, record.payload_size, record.payload_checksum = (
            offset, size, checksum)
        cursor = offset + size
    index = pack_index(layout, records, row_ptr, child_indices, cursor, writer_version)
    os.pwrite(dst, index, dst_blob)
    # The gaps between payloads: zeros (the file was truncated to the blob's start, so they
    # read as zeros where nothing was written; make the blob's end part of the file).
    os.ftruncate(dst, max(os.fstat(dst).st_size, dst_blob + cursor))
    return cursor, layout.index_size
