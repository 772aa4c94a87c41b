"""Format v1 of ``__dev_mblob``, writer side. Every fact (numbers, struct layouts, names, the
type-key rule) comes from the C header (``csrc/include/modpack/format.h``) through the runtime
binding; the reader is the C runtime."""

from .layout import (
    ALIGNMENT,
    BLOB_SYMBOL,
    ENTRY_SIZE,
    FLAG_PAYLOAD_CHECKSUMS,
    FORMAT_MAJOR,
    FORMAT_MINOR,
    FUNC_SYMBOL_PREFIX,
    HEADER_SIZE,
    LIB_TYPE_KEY,
    LIBRARY_TYPE_KEY,
    MAGIC,
    MAX_TYPE_KEY,
    SIGNATURE_SYMBOL_PREFIX,
    SYSTEM_LIB_ENTRY_PREFIX,
    WRITER_VERSION,
    EntryRecord,
    IndexLayout,
    check_struct,
    pack_index,
    type_key_is_valid,
)

__all__ = [
    "ALIGNMENT",
    "BLOB_SYMBOL",
    "ENTRY_SIZE",
    "FLAG_PAYLOAD_CHECKSUMS",
    "FORMAT_MAJOR",
    "FORMAT_MINOR",
    "FUNC_SYMBOL_PREFIX",
    "HEADER_SIZE",
    "LIBRARY_TYPE_KEY",
    "LIB_TYPE_KEY",
    "MAGIC",
    "MAX_TYPE_KEY",
    "SIGNATURE_SYMBOL_PREFIX",
    "SYSTEM_LIB_ENTRY_PREFIX",
    "WRITER_VERSION",
    "EntryRecord",
    "IndexLayout",
    "check_struct",
    "pack_index",
    "type_key_is_valid",
]
