"""The weight file format, version 1, writer side: its numbers, its two structs and its two
digests.

Every number and the magic come from the public C header (``csrc/include/modpack/weights.h``)
through the runtime binding, and the struct formats below are checked against the header's
structs field by field when this module is imported, so the writer and the C reader share one
definition and a change on either side fails at once instead of writing bad bytes.
docs/format.md ("Weight files") describes the file byte by byte.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any

from ..errors import ArgumentError
from ..format.layout import check_struct
from ..runtime.binding import ffi, lib

__all__ = [
    "DIGEST_CHUNK",
    "DIGEST_SIZE",
    "FORMAT_MAJOR",
    "FORMAT_MINOR",
    "HEADER",
    "HEADER_SIZE",
    "INDEX_ALIGNMENT",
    "INDEX_CHECKSUM_OFFSET",
    "MAGIC",
    "MAX_ALIGNMENT",
    "MAX_NAME",
    "MAX_NDIM",
    "MIN_ALIGNMENT",
    "RECORD",
    "RECORD_SIZE",
    "SIGNATURE_CONTEXT",
    "chunked_sha256",
    "content_digest",
]

FORMAT_MAJOR: int = lib.MP_WEIGHTS_FORMAT_MAJOR
FORMAT_MINOR: int = lib.MP_WEIGHTS_FORMAT_MINOR
HEADER_SIZE: int = lib.MP_WEIGHTS_HEADER_SIZE
RECORD_SIZE: int = lib.MP_WEIGHTS_RECORD_SIZE
MIN_ALIGNMENT: int = lib.MP_WEIGHTS_MIN_ALIGNMENT
MAX_ALIGNMENT: int = lib.MP_WEIGHTS_MAX_ALIGNMENT
MAX_NDIM: int = lib.MP_WEIGHTS_MAX_NDIM
MAX_NAME: int = lib.MP_WEIGHTS_MAX_NAME
DIGEST_SIZE: int = lib.MP_WEIGHTS_DIGEST_SIZE
DIGEST_CHUNK: int = lib.MP_WEIGHTS_DIGEST_CHUNK
MAGIC: bytes = ffi.string(lib.MP_WEIGHTS_MAGIC)
SIGNATURE_CONTEXT: bytes = ffi.string(lib.MP_WEIGHTS_SIGNATURE_CONTEXT)
# index_size is a multiple of this (weights.h: "a multiple of 64").
INDEX_ALIGNMENT = 64

# magic, format_major, format_minor, header_size, index_size, array_count, data_offset,
# data_size, alignment, flags, index_checksum
HEADER = check_struct(struct.Struct("<8sHHIQQQQIIQ"), "mp_weights_header_v1_t")
# name_offset, name_size, dtype_code, dtype_bits, dtype_lanes, ndim, flags, shape_offset,
# data_offset, data_size, checksum, digest, reserved
RECORD = check_struct(struct.Struct("<QIBBHIIQQQQ32sQ"), "mp_weights_record_v1_t")
INDEX_CHECKSUM_OFFSET: int = ffi.offsetof("mp_weights_header_v1_t", "index_checksum")

if (HEADER.size, RECORD.size, len(MAGIC), DIGEST_SIZE) != (HEADER_SIZE, RECORD_SIZE, 8, 32):
    raise ImportError("modpack/weights.h and modpack.weights.format disagree on a size")


def chunked_sha256(data: Any) -> bytes:
    """The chunked SHA-256 of |data| (any C-contiguous buffer: bytes, a memoryview, a numpy
    array): the SHA-256 of the concatenated SHA-256 digests of its DIGEST_CHUNK-byte chunks,
    the last one shorter; no chunks for empty data, which gives the SHA-256 of nothing.

    Why chunked: the chunks hash independently, so a writer or a reader spreads one large
    array over all its cores, and the result is still one 32-byte value per array.
    """
    view = _bytes_view(data)
    inner = b"".join(hashlib.sha256(view[at : at + DIGEST_CHUNK]).digest()
                     for at in range(0, len(view), DIGEST_CHUNK))
    return hashlib.sha256(inner).digest()


def content_digest(index_bytes: Any) -> bytes:
    """A weight file's content digest: the SHA-256 of its index, bytes [0, index_size) of the
    file, where |index_bytes| begins (the index size is read from its header, so the whole
    file may be given).

    Why the index: it holds every name, dtype, shape, offset and array digest, so this one
    value names the whole content without hashing the data again; libraries bind it and
    signatures sign it."""
    view = _bytes_view(index_bytes)
    if len(view) < HEADER_SIZE or bytes(view[:8]) != MAGIC:
        raise ArgumentError("content_digest needs the bytes of a weight file's index, from its "
                         "magic on")
    index_size = struct.unpack_from("<Q", view, ffi.offsetof("mp_weights_header_v1_t",
                                                               "index_size"))[0]
    if index_size > len(view):
        raise ArgumentError(f"the index is {index_size} bytes, but only {len(view)} were given")
    return hashlib.sha256(view[:index_size]).digest()


def _bytes_view(data: Any) -> memoryview:
    """|data| as a flat memoryview of bytes, without a copy."""
    view = memoryview(data)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")
