"""Byte layout of the blob index (header, entries, CSR tree, type-key strings).

See docs/format.md. Sizes, versions and flags are read from the C header through the runtime
binding, so writer and reader share one definition.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import xxhash

from ..runtime.binding import lib

FORMAT_MAJOR: int = lib.MP_FORMAT_MAJOR
FORMAT_MINOR: int = lib.MP_FORMAT_MINOR
HEADER_SIZE: int = lib.MP_FORMAT_HEADER_SIZE
ENTRY_SIZE: int = lib.MP_FORMAT_ENTRY_SIZE
ALIGNMENT: int = lib.MP_FORMAT_PAYLOAD_ALIGNMENT
MAX_TYPE_KEY: int = lib.MP_FORMAT_MAX_TYPE_KEY
FLAG_PAYLOAD_CHECKSUMS: int = lib.MP_FORMAT_FLAG_PAYLOAD_CHECKSUMS
MAGIC = b"\x89MPK\r\n\x1a\n"
BLOB_SYMBOL = "__dev_mblob"
LIB_TYPE_KEY = "_lib"

_HEADER = struct.Struct("<8sHHIQBBHIQQQQ")
_ENTRY = struct.Struct("<QQQIIIIQ")
_CHECKSUM_OFFSET = 56
assert _HEADER.size == HEADER_SIZE and _ENTRY.size == ENTRY_SIZE


def align_up(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


@dataclass
class EntryRecord:
    """One module's entry: its type key and where its payload lies in the blob."""

    type_key: str
    payload_offset: int = 0
    payload_size: int = 0
    payload_checksum: int = 0


@dataclass
class IndexLayout:
    """Where the parts of the index go, computed from the module count, edges and keys."""

    module_count: int
    edge_count: int
    strings: bytes
    key_offsets: dict[str, int]
    index_size: int

    @classmethod
    def plan(cls, type_keys: list[str], edge_count: int) -> IndexLayout:
        strings = bytearray()
        key_offsets: dict[str, int] = {}
        for key in type_keys:
            if key not in key_offsets:
                key_offsets[key] = len(strings)
                strings += key.encode()
        fixed = HEADER_SIZE + ENTRY_SIZE * len(type_keys) + 8 * (len(type_keys) + 1)
        fixed += 8 * edge_count
        index_size = align_up(fixed + len(strings), ALIGNMENT)
        strings += b"\0" * (index_size - fixed - len(strings))
        return cls(len(type_keys), edge_count, bytes(strings), key_offsets, index_size)


def pack_index(
    layout: IndexLayout,
    entries: list[EntryRecord],
    row_ptr: list[int],
    child_indices: list[int],
    blob_size: int,
    writer_version: tuple[int, int, int],
) -> bytes:
    """The complete index bytes [0, index_size), checksum included."""
    parts = [
        _HEADER.pack(
            MAGIC, FORMAT_MAJOR, FORMAT_MINOR, HEADER_SIZE, blob_size,
            writer_version[0], writer_version[1], writer_version[2],
            FLAG_PAYLOAD_CHECKSUMS, layout.module_count, layout.edge_count,
            layout.index_size, 0,
        )
    ]
    for e in entries:
        key = e.type_key.encode()
        parts.append(
            _ENTRY.pack(e.payload_offset, e.payload_size, e.payload_checksum,
                        layout.key_offsets[e.type_key], len(key), 0, 0, 0)
        )
    parts.append(struct.pack(f"<{len(row_ptr)}Q", *row_ptr))
    parts.append(struct.pack(f"<{len(child_indices)}Q", *child_indices))
    parts.append(layout.strings)
    index = bytearray(b"".join(parts))
    assert len(index) == layout.index_size
    checksum = xxhash.xxh3_64_intdigest(bytes(index))
    struct.pack_into("<Q", index, _CHECKSUM_OFFSET, checksum)
    return bytes(index)
