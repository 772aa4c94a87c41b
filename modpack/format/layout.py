"""Byte layout of the blob index (header, entries, CSR tree, type-key strings).

See docs/format.md. Every fact comes from the C header (csrc/include/modpack/format.h) through
the runtime binding — sizes, versions, flags, the magic and the names — and the struct formats
below are checked against the header's structs field by field, so writer and reader share one
definition.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

import xxhash

from ..runtime.binding import ffi, lib

FORMAT_MAJOR: int = lib.MP_FORMAT_MAJOR
FORMAT_MINOR: int = lib.MP_FORMAT_MINOR
HEADER_SIZE: int = lib.MP_FORMAT_HEADER_SIZE
ENTRY_SIZE: int = lib.MP_FORMAT_ENTRY_SIZE
ALIGNMENT: int = lib.MP_FORMAT_PAYLOAD_ALIGNMENT
MAX_TYPE_KEY: int = lib.MP_FORMAT_MAX_TYPE_KEY
FLAG_PAYLOAD_CHECKSUMS: int = lib.MP_FORMAT_FLAG_PAYLOAD_CHECKSUMS
# Format 1.1: entries whose device code is in code frames (format/code_frames.py). A blob
# without them is written as 1.0, which every runtime reads.
FLAG_CODE_FRAMES: int = lib.MP_FORMAT_FLAG_CODE_FRAMES
ENTRY_CODE_FRAMES: int = lib.MP_FORMAT_ENTRY_CODE_FRAMES
MINOR_CODE_FRAMES: int = lib.MP_FORMAT_MINOR_CODE_FRAMES
# Format 1.2: the header grows to HEADER_SIZE_V1_2 bytes and places the metadata and the
# self-tests in the index, after the type keys (IndexExtras). A blob without them is written
# as before (1.0 or 1.1), byte for byte.
MINOR_INDEX_EXTRAS: int = lib.MP_FORMAT_MINOR_INDEX_EXTRAS
HEADER_SIZE_V1_2: int = lib.MP_FORMAT_HEADER_SIZE_V1_2
MAX_METADATA: int = lib.MP_FORMAT_MAX_METADATA
MAX_SELFTESTS: int = lib.MP_FORMAT_MAX_SELFTESTS
MAGIC: bytes = ffi.string(lib.MP_FORMAT_MAGIC)
BLOB_SYMBOL: str = ffi.string(lib.MP_BLOB_SYMBOL).decode()
LIB_TYPE_KEY: str = ffi.string(lib.MP_LIB_TYPE_KEY).decode()
LIBRARY_TYPE_KEY: str = ffi.string(lib.MP_LIBRARY_TYPE_KEY).decode()
FUNC_SYMBOL_PREFIX: str = ffi.string(lib.MP_FUNC_SYMBOL_PREFIX).decode()
SIGNATURE_SYMBOL_PREFIX: str = ffi.string(lib.MP_SIGNATURE_SYMBOL_PREFIX).decode()
# A system library's one entry point is this prefix and its name (modpack/system_lib.h).
SYSTEM_LIB_ENTRY_PREFIX = "modpack_system_lib_"
# The runtime's version, recorded in every blob as its writer's.
WRITER_VERSION = (lib.MP_VERSION_MAJOR, lib.MP_VERSION_MINOR, lib.MP_VERSION_PATCH)


def check_struct(fmt: struct.Struct, c_type: str) -> struct.Struct:
    """Check that |fmt| packs the C struct |c_type| exactly: one code per field, in the
    header's order, each at its offsetof() with its size, and the same total size. Called at
    import for every on-disk struct a writer packs, so a change on either side fails at once
    instead of writing bad bytes. Returns |fmt|."""
    fields = ffi.typeof(c_type).fields
    codes = re.findall(r"\d*[A-Za-z?]", fmt.format.lstrip("<"))
    offset = 0
    problems = [] if len(codes) == len(fields) else [f"{len(codes)} codes, {len(fields)} fields"]
    for (name, field), code in zip(fields, codes):
        size = struct.calcsize("<" + code)
        if field.offset != offset or ffi.sizeof(field.type) != size:
            problems.append(f"{name} at {field.offset} ({ffi.sizeof(field.type)} bytes) vs "
                            f"{offset} ({size} bytes)")
        offset += size
    if fmt.size != ffi.sizeof(c_type) or problems:
        raise ImportError(f"struct format {fmt.format!r} does not match {c_type}: {problems}; "
                          "the C header and the Python writer disagree")
    return fmt


_HEADER = check_struct(struct.Struct("<8sHHIQBBHIQQQQ"), "mp_format_header_v1_t")
_ENTRY = check_struct(struct.Struct("<QQQIIIIQ"), "mp_format_entry_v1_t")
_EXTRAS = check_struct(struct.Struct("<QQQQ"), "mp_format_header_v1_2_t")
_CHECKSUM_OFFSET = ffi.offsetof("mp_format_header_v1_t", "index_checksum")


def type_key_is_valid(key: str, allow_reserved: bool = False) -> bool:
    """The format's type-key rule, asked of the runtime (the one place it is written)."""
    data = key.encode() if isinstance(key, str) else b""
    return bool(lib.mp_type_key_is_valid(data, len(data), allow_reserved)) if data else False


def align_up(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


@dataclass
class EntryRecord:
    """One module's entry: its type key and where its payload lies in the blob."""

    type_key: str
    payload_offset: int = 0
    payload_size: int = 0
    payload_checksum: int = 0
    flags: int = 0  # ENTRY_CODE_FRAMES


@dataclass(frozen=True)
class IndexExtras:
    """What a blob's index carries besides its modules (format 1.2): the metadata, UTF-8 JSON
    text of one object (:mod:`modpack.metadata`), and the self-test bundle
    (:mod:`modpack.selftests.bundle`), each as the bytes to store; empty: none."""

    metadata: bytes = b""
    selftests: bytes = b""

    def __bool__(self) -> bool:
        return bool(self.metadata or self.selftests)


NO_EXTRAS = IndexExtras()  # a blob of format 1.0 or 1.1


@dataclass
class IndexLayout:
    """Where the parts of the index go, computed from the module count, edges, keys and the
    extras (placed after the keys, each at a multiple of 64 from the blob's start)."""

    module_count: int
    edge_count: int
    strings: bytes
    key_offsets: dict[str, int]
    index_size: int
    header_size: int = HEADER_SIZE
    # (offset, size) from the blob's start of the metadata and the self-tests; (0, 0): none
    metadata: tuple[int, int] = (0, 0)
    selftests: tuple[int, int] = (0, 0)

    @classmethod
    def plan(cls, type_keys: list[str], edge_count: int,
             extras: IndexExtras = NO_EXTRAS) -> IndexLayout:
        strings = bytearray()
        key_offsets: dict[str, int] = {}
        for key in type_keys:
            if key not in key_offsets:
                key_offsets[key] = len(strings)
                strings += key.encode()
        header_size = HEADER_SIZE_V1_2 if extras else HEADER_SIZE
        fixed = header_size + ENTRY_SIZE * len(type_keys) + 8 * (len(type_keys) + 1)
        fixed += 8 * edge_count
        places = []
        for data in (extras.metadata, extras.selftests):
            if not data:
                places.append((0, 0))
                continue
            offset = align_up(fixed + len(strings), ALIGNMENT)
            strings += bytes(offset - fixed - len(strings)) + data
            places.append((offset, len(data)))
        index_size = align_up(fixed + len(strings), ALIGNMENT)
        strings += b"\0" * (index_size - fixed - len(strings))
        return cls(len(type_keys), edge_count, bytes(strings), key_offsets, index_size,
                   header_size, places[0], places[1])


def pack_index(
    layout: IndexLayout,
    entries: list[EntryRecord],
    row_ptr: list[int],
    child_indices: list[int],
    blob_size: int,
    writer_version: tuple[int, int, int],
) -> bytes:
    """The complete index bytes [0, index_size), checksum included: format 1.2 when the layout
    holds extras (metadata, self-tests), else 1.1 with its header flag when an entry holds code
    frames, else 1.0. Each minor is the oldest that holds what the blob holds, and a runtime of
    an older minor reads 1.2 too (it skips the header's new bytes and the extras, which lie
    where it never looks)."""
    frames = any(e.flags & ENTRY_CODE_FRAMES for e in entries)
    extras = layout.header_size >= HEADER_SIZE_V1_2
    minor = MINOR_INDEX_EXTRAS if extras else MINOR_CODE_FRAMES if frames else 0
    parts = [
        _HEADER.pack(
            MAGIC, FORMAT_MAJOR, minor, layout.header_size, blob_size,
            writer_version[0], writer_version[1], writer_version[2],
            FLAG_PAYLOAD_CHECKSUMS | (FLAG_CODE_FRAMES if frames else 0), layout.module_count,
            layout.edge_count, layout.index_size, 0,
        )
    ]
    if extras:
        parts.append(_EXTRAS.pack(*layout.metadata, *layout.selftests))
    for e in entries:
        key = e.type_key.encode()
        parts.append(
            _ENTRY.pack(e.payload_offset, e.payload_size, e.payload_checksum,
                        layout.key_offsets[e.type_key], len(key), e.flags, 0, 0)
        )
    parts.append(struct.pack(f"<{len(row_ptr)}Q", *row_ptr))
    parts.append(struct.pack(f"<{len(child_indices)}Q", *child_indices))
    parts.append(layout.strings)
    index = bytearray(b"".join(parts))
    assert len(index) == layout.index_size
    checksum = xxhash.xxh3_64_intdigest(bytes(index))
    struct.pack_into("<Q", index, _CHECKSUM_OFFSET, checksum)
    return bytes(index)
