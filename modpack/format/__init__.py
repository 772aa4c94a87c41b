"""Format v1 of ``__dev_mblob``, writer side. The numbers come from the C header
(``csrc/include/modpack/format.h``) through the runtime binding; the reader is the C runtime."""

from .layout import (
    ALIGNMENT,
    BLOB_SYMBOL,
    ENTRY_SIZE,
    FLAG_PAYLOAD_CHECKSUMS,
    FORMAT_MAJOR,
    FORMAT_MINOR,
    HEADER_SIZE,
    LIB_TYPE_KEY,
    MAGIC,
    EntryRecord,
    IndexLayout,
    pack_index,
)

__all__ = [
    "ALIGNMENT",
    "BLOB_SYMBOL",
    "ENTRY_SIZE",
    "FLAG_PAYLOAD_CHECKSUMS",
    "FORMAT_MAJOR",
    "FORMAT_MINOR",
    "HEADER_SIZE",
    "LIB_TYPE_KEY",
    "MAGIC",
    "EntryRecord",
    "IndexLayout",
    "pack_index",
]
