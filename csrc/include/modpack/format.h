/*
 * modpack/format.h — format v1 of the `__dev_mblob` blob, as constants and on-disk layouts.
 *
 * This header is the single source of the format's facts: the C reader uses it directly, and
 * the Python writer reads the same numbers, struct offsets and names through the runtime
 * binding (modpack/format/layout.py asserts its struct formats against these structs).
 * docs/format.md describes the format in prose with a worked hex example.
 *
 * Every integer is little-endian on the wire. The reader never casts these structs over blob
 * bytes; it decodes each field with an explicit little-endian load at the field's offsetof().
 * The structs pin the layout (checked by the static assertions below) and document it.
 *
 *   [header 64 B][entry 48 B x module_count][row_ptr u64 x (module_count+1)]
 *   [child_indices u64 x edge_count][type-key string table][pad]  <- index_size ends here
 *   [payloads, each starting at a multiple of MP_FORMAT_PAYLOAD_ALIGNMENT]
 *
 * Format 1.2 grows the header to 96 bytes (mp_format_header_v1_2_t at byte 64), which places
 * the library's metadata and self-tests in the string table's area, after the type keys: inside
 * the index, so that the index checksum, the seal and signatures cover them, and where a reader
 * of 1.0 or 1.1 (which starts the entries at header_size and reads only the keys' ranges of the
 * string table) never looks.
 *
 * Compatibility rule: a reader accepts a blob whose major version equals its own, whatever the
 * minor. A newer minor may only add things an older reader can ignore (it keeps every v1 field
 * where it is and may grow `header_size`); anything else is a new major.
 */
#ifndef MODPACK_FORMAT_H_
#define MODPACK_FORMAT_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* MP_API_BEGIN */
enum {
  MP_FORMAT_MAJOR = 1,
  /* The newest minor this runtime writes: 2 for a blob with metadata or self-tests, 1 for one
   * with code frames (below), else 0 (the oldest minor that holds what the blob holds). */
  MP_FORMAT_MINOR = 2,
  MP_FORMAT_MINOR_CODE_FRAMES = 1,
  MP_FORMAT_MINOR_INDEX_EXTRAS = 2,
  MP_FORMAT_HEADER_SIZE = 64,
  /* The header of format 1.2 and later: the v1 header, then mp_format_header_v1_2_t. */
  MP_FORMAT_HEADER_SIZE_V1_2 = 96,
  /* The most bytes of metadata (UTF-8 JSON) and of self-tests one blob may hold: both are read
   * and hashed with the index at every load, so they stay small beside the payloads. */
  MP_FORMAT_MAX_METADATA = 1048576,
  MP_FORMAT_MAX_SELFTESTS = 4194304,
  MP_FORMAT_ENTRY_SIZE = 48,
  /* Every payload starts at a multiple of this (relative to the blob, which is itself aligned
   * to it in the library), so loaders may hand out aligned zero-copy views. */
  MP_FORMAT_PAYLOAD_ALIGNMENT = 64,
  /* Type keys are 1..MP_FORMAT_MAX_TYPE_KEY bytes of [A-Za-z0-9_.-]. */
  MP_FORMAT_MAX_TYPE_KEY = 64,
  /* header.flags: payload_checksum fields hold XXH3-64 digests of the payload bytes. */
  MP_FORMAT_FLAG_PAYLOAD_CHECKSUMS = 1,
  /* header.flags (format 1.1): some entries' device code is stored in code frames (below). A
   * reader of 1.0 refuses the blob as using an unknown flag, naming format 1.1. */
  MP_FORMAT_FLAG_CODE_FRAMES = 2,
  MP_FORMAT_KNOWN_FLAGS = 3,
  /* entry.flags (only with MP_FORMAT_FLAG_CODE_FRAMES; 0 for "_lib"): every piece of device
   * code in this entry's payload (each CUDA variant, the OpenCL source and each binary, each
   * SPIR-V shader, each ROCm code object) is a code frame; the kind's tables give each frame's
   * size. Only the built-in device kinds take it. */
  MP_FORMAT_ENTRY_CODE_FRAMES = 1,
  MP_FORMAT_KNOWN_ENTRY_FLAGS = 1,
};

/*
 * A code frame: one piece of device code as stored in a payload whose entry has
 * MP_FORMAT_ENTRY_CODE_FRAMES. A 64-byte header, then stored_size bytes of data:
 *
 *   encoding MP_CODE_STORED: the code itself (raw_size == stored_size), in place, zero copy;
 *   encoding MP_CODE_ZSTD:   one Zstandard frame (RFC 8878) whose content size field says
 *                            raw_size, decoded when a device first loads this piece, into
 *                            memory the module frees.
 *
 * raw_checksum is XXH3-64 (seed 0) of the decoded code, checked after decoding. A reader
 * refuses raw_size above MP_CODE_FRAME_MAX_RAW_SIZE or above MP_CODE_FRAME_MAX_RATIO times
 * stored_size (so a frame cannot make it allocate more than its declared, bounded size), a
 * Zstandard frame that does not decode to exactly raw_size bytes, and a frame whose stored size
 * disagrees with the kind's table. The payload checksum and the seal cover the stored bytes.
 */
enum {
  MP_CODE_FRAME_HEADER_SIZE = 64,
  MP_CODE_FRAME_VERSION = 1,
  MP_CODE_STORED = 0,
  MP_CODE_ZSTD = 1,
  MP_CODE_FRAME_MAX_RATIO = 1024,
};
typedef struct {
  uint8_t magic[4];      /* MP_CODE_FRAME_MAGIC, "MPCF" */
  uint16_t version;      /* MP_CODE_FRAME_VERSION */
  uint16_t encoding;     /* MP_CODE_STORED or MP_CODE_ZSTD */
  uint64_t raw_size;     /* bytes of code once decoded */
  uint64_t raw_checksum; /* XXH3-64 of those bytes */
  uint64_t stored_size;  /* bytes of data after this header */
  uint8_t reserved[32];  /* zero */
} mp_code_frame_v1_t;
/* MP_API_END */

/* The 8 magic bytes: 0x89 'M' 'P' 'K' '\r' '\n' 0x1A '\n'. The high byte and the line endings
 * catch files mangled by text-mode transfers, as PNG's signature does. */
#define MP_FORMAT_MAGIC "\x89MPK\r\n\x1a\n"
#define MP_FORMAT_MAGIC_SIZE 8
/* A code frame's magic, and the most code one frame may decode to. */
#define MP_CODE_FRAME_MAGIC "MPCF"
#define MP_CODE_FRAME_MAX_RAW_SIZE ((uint64_t)1 << 34) /* 16 GiB of code in one piece */

/* The symbol holding the blob inside a deployable library; the type key that marks the host
 * code's place in the tree (reserved: user type keys may not start with '_'); and the type key
 * the runtime gives the host code's node once loaded (and the root of a library without a
 * blob). */
#define MP_BLOB_SYMBOL "__dev_mblob"
#define MP_LIB_TYPE_KEY "_lib"
#define MP_LIBRARY_TYPE_KEY "library"

/* MP_API_BEGIN */
/* On-disk header (64 bytes). index_checksum is XXH3-64 over bytes [0, index_size) of the blob
 * with the index_checksum field itself read as zero. */
typedef struct {
  uint8_t magic[8];
  uint16_t format_major;
  uint16_t format_minor;
  uint32_t header_size; /* >= 64; a later minor may grow it */
  uint64_t blob_size;   /* total bytes of the blob */
  uint8_t writer_major; /* version of the modpack that wrote the blob */
  uint8_t writer_minor;
  uint16_t writer_patch;
  uint32_t flags;        /* MP_FORMAT_FLAG_*; unknown bits are rejected */
  uint64_t module_count; /* >= 1; module 0 is the root */
  uint64_t edge_count;   /* length of child_indices */
  uint64_t index_size;   /* bytes covered by index_checksum; payloads start at or after it */
  uint64_t index_checksum;
} mp_format_header_v1_t;

/* Format 1.2's part of the header, at byte 64: where the metadata and the self-tests lie in the
 * index, in a blob of format 1.2 or later whose header_size is at least 96 (a shorter header, or
 * an earlier minor, has neither). Each lies in the string table's area (after child_indices, before
 * index_size), at a multiple of 64 from the blob's start, the two apart; offset and size both 0:
 * absent. The metadata is UTF-8 JSON text of one object (export_library's metadata=); the
 * self-tests are a bundle of inputs and expected outputs (docs/format.md), read by modpack's
 * `selftest` and run only on request. Neither is interpreted by the reader. */
typedef struct {
  uint64_t metadata_offset; /* from the start of the blob */
  uint64_t metadata_size;   /* <= MP_FORMAT_MAX_METADATA */
  uint64_t selftests_offset;
  uint64_t selftests_size; /* <= MP_FORMAT_MAX_SELFTESTS */
} mp_format_header_v1_2_t;

/* On-disk module entry (48 bytes), one per module in DFS index order. */
typedef struct {
  uint64_t payload_offset; /* from the start of the blob; 0 with size 0 for "_lib" */
  uint64_t payload_size;
  uint64_t payload_checksum; /* XXH3-64 of the payload when the header flag says so */
  uint32_t type_key_offset;  /* into the string table, which follows child_indices */
  uint32_t type_key_size;
  uint32_t flags;     /* MP_FORMAT_ENTRY_*; 0 unless the header has MP_FORMAT_FLAG_CODE_FRAMES */
  uint32_t reserved0; /* must be 0 */
  uint64_t reserved1; /* must be 0 */
} mp_format_entry_v1_t;
/* MP_API_END */

/*
 * The seal: how the runtime checks a library by reading it, before any of it is mapped or runs.
 * Two versions exist (docs/format.md, "The seal"):
 *
 * - Version 2, what modpack writes for 64-bit little-endian ELF libraries: an ELF note (owner
 *   MP_SEAL_NOTE_NAME, type MP_SEAL_NOTE_TYPE, mp_seal_note_v2_t below) inside the library's
 *   first loaded segment, found through a PT_NOTE program header. Its digest covers what the
 *   dynamic loader reads and maps: the ELF header, the program header table and the file bytes
 *   of every PT_LOAD segment (code, data, dynamic section, symbol, string and hash tables,
 *   relocations, the blob's index), in file order, each byte once, except the payloads, with
 *   the fields that decide nothing the loader maps (e_shoff, e_shentsize, e_shnum, e_shstrndx;
 *   every p_paddr; the p_offset of segments other than PT_LOAD, which loaders find through
 *   p_vaddr, but for glibc's look for an ABI-tag note through a PT_NOTE's p_offset, which can
 *   only make dlopen refuse the library), the digest itself and the signature slots read as
 *   zeros. What strippers rewrite (section headers, .symtab, .strtab, debug sections) lies
 *   outside it, so a stripped library keeps its seal.
 * - Version 1, the trailer below as the file's last MP_SEAL_SIZE bytes, its digest over every
 *   byte of the file but the payloads: what earlier modpacks wrote for libraries, and what
 *   weight files (and libraries for other targets) still carry. A version 2 library ends
 *   with this trailer too, its version field 2, so that a reader of version 1 refuses it
 *   saying to upgrade; a version 2 reader takes the note and ignores that trailer.
 *
 * The decoded seal of either version is an mp_seal_v1_t (file_size: the file's size; version:
 * 1 or 2). The blob lies at [blob_offset, blob_offset + blob_size) in the file and at
 * blob_vaddr in the library's image, where __dev_mblob points; blob_size is 0 for a library
 * without a blob. [payloads_offset, payloads_offset + payloads_size) is left to the blob's
 * payload checksums.
 *
 * Compatibility rule: a reader accepts the seal versions it knows (1 and 2) and refuses a
 * library with a newer one (upgrade modpack). A library without a seal (linked by hand, or by a
 * modpack before the seal) loads only when the caller asks for it (MP_LOAD_ALLOW_UNSEALED).
 */
/* MP_API_BEGIN */
enum {
  MP_SEAL_SIZE = 80,
  MP_SEAL_VERSION = 2,         /* the newest seal this runtime reads (and writes) */
  MP_SEAL_TRAILER_VERSION = 1, /* the version of a seal that is the trailer alone */
};
typedef struct {
  uint64_t file_size;       /* the whole file, this trailer included */
  uint64_t blob_offset;     /* file offset of __dev_mblob (0 with blob_size 0: no blob) */
  uint64_t blob_vaddr;      /* its address in the library's image, from the load base */
  uint64_t blob_size;       /* the blob's size (its header's blob_size) */
  uint64_t payloads_offset; /* the bytes the digest leaves to the payload checksums */
  uint64_t payloads_size;
  uint64_t digest_low; /* XXH3-128 of the rest of the file (see above), low 64 bits; in
                        * a version 2 library's trailer, the note's digest */
  uint64_t digest_high;
  uint32_t version; /* 1, or 2 in the trailer of a library sealed by its note */
  uint32_t flags;   /* reserved, 0 */
  uint8_t magic[8]; /* MP_SEAL_MAGIC: the file's last 8 bytes */
} mp_seal_v1_t;
/* MP_API_END */
#define MP_SEAL_MAGIC "MPKSEAL\n"

/*
 * Signatures (`modpack sign`): after the seal, a block of MP_SIGNATURE_SIZE-byte records and a
 * MP_SIGNATURES_TRAILER_SIZE-byte trailer whose magic ends the file. The sealed file before the
 * block, byte for byte (payloads included), is what is signed: each record holds an Ed25519
 * signature over MP_SIGNATURE_CONTEXT followed by the SHA-256 of those `signed_size` bytes, and
 * the SHA-256 of the signer's raw 32-byte public key, which says whose it is. Readers that do
 * not check signatures find the seal `signed_size` bytes in; dlopen ignores the block.
 */
/* MP_API_BEGIN */
enum {
  MP_SIGNATURE_SIZE = 128,
  MP_SIGNATURES_TRAILER_SIZE = 32,
  MP_SIGNATURES_VERSION = 1,
  MP_SIGNATURE_ED25519 = 1, /* mp_signature_v1_t.algorithm */
  MP_SIGNATURES_MAX = 4096, /* records a reader accepts in one file */
};
typedef struct {
  uint8_t magic[8];   /* MP_SIGNATURE_MAGIC */
  uint32_t algorithm; /* MP_SIGNATURE_ED25519 */
  uint32_t reserved;  /* 0 */
  uint8_t key_id[32]; /* SHA-256 of the signer's raw public key */
  uint8_t signature[64];
  uint8_t reserved2[16]; /* zeros */
} mp_signature_v1_t;
typedef struct {
  uint64_t signed_size; /* the sealed file before the block */
  uint64_t count;       /* records */
  uint32_t version;     /* MP_SIGNATURES_VERSION */
  uint32_t reserved;    /* 0 */
  uint8_t magic[8];     /* MP_SIGNATURES_MAGIC: the file's last 8 bytes */
} mp_signatures_trailer_v1_t;
/* MP_API_END */
#define MP_SIGNATURE_MAGIC "MPKSIG1\0"
#define MP_SIGNATURES_MAGIC "MPKSIGS\n"
#define MP_SIGNATURE_CONTEXT "modpack signature v1\n" /* signed before the SHA-256 */

/*
 * The seal note (version 2): the descriptor of an ELF note with name MP_SEAL_NOTE_NAME
 * (namesz 8) and type MP_SEAL_NOTE_TYPE, 4-byte aligned, in a PT_NOTE segment that lies in a
 * PT_LOAD segment. It is linked into the library as zeros (.note.modpack) and filled in after
 * the link. Its MP_SEAL_NOTE_SIGNATURES slots hold the library's signatures (records as in a
 * signature block, all zeros when free), so that signatures live where strippers keep them;
 * each signs MP_SIGNATURE_CONTEXT_V2 followed by the SHA-256 of the bytes the seal covers,
 * payloads included (docs/format.md). A placed blob's segment takes the program header of
 * PT_PHDR or of the PT_NOTE of a note of type MP_SEAL_NOTE_SLOT_TYPE the link reserved for it.
 */
/* MP_API_BEGIN */
enum {
  MP_SEAL_NOTE_TYPE = 1,
  MP_SEAL_NOTE_SLOT_TYPE = 2,
  MP_SEAL_NOTE_SIGNATURES = 4,
  MP_SEAL_NOTE_DESC_SIZE = 584,
  MP_SEAL_NOTE_SIZE = 604, /* 12-byte note header, the name, the descriptor */
};
typedef struct {
  uint32_t version;         /* MP_SEAL_VERSION (2); 0 in a note never sealed */
  uint32_t flags;           /* reserved, 0 */
  uint64_t blob_vaddr;      /* as in mp_seal_v1_t; all 0: no blob */
  uint64_t blob_size;
  uint64_t blob_offset;
  uint64_t payloads_offset;
  uint64_t payloads_size;
  uint64_t digest_low; /* XXH3-128 of what the seal covers (above), read as zeros here */
  uint64_t digest_high;
  uint32_t signature_slots; /* MP_SEAL_NOTE_SIGNATURES */
  uint32_t reserved;        /* 0 */
  mp_signature_v1_t signatures[MP_SEAL_NOTE_SIGNATURES]; /* read as zeros by both digests */
} mp_seal_note_v2_t;
/* MP_API_END */
#define MP_SEAL_NOTE_NAME "modpack"
#define MP_SIGNATURE_CONTEXT_V2 "modpack signature v2\n" /* signed before the SHA-256 */

/*
 * A kernel cache entry (modpack.h: the kernel cache): one file in the cache's folder, named by
 * its key as 64 lowercase hex digits, holding this header and then data_size bytes of what a
 * device built (an OpenCL program binary, a cubin). The key is the SHA-256 of
 * MP_KERNEL_CACHE_KEY_CONTEXT, the entry version (u32) and six length-prefixed fields (u64
 * length, then the bytes): modpack's version ("0.1.0"), the kind ("opencl"), the SHA-256 of
 * the code the driver compiles, the build options, the device and the driver's version
 * (docs/format.md gives each kind's). A reader takes an entry only when every field holds: the
 * magic, the version, the header's size, the reserved fields 0, the header's checksum, the key
 * it was looked up by, data_size equal to what follows the header, and the data's checksum.
 */
/* MP_API_BEGIN */
enum {
  MP_KERNEL_CACHE_VERSION = 1,
  MP_KERNEL_CACHE_HEADER_SIZE = 128,
  MP_KERNEL_CACHE_KEY_SIZE = 32,
  MP_KERNEL_CACHE_MAX_KIND = 16, /* the kind's type key, NUL-padded */
};
typedef struct {
  uint8_t magic[8];        /* MP_KERNEL_CACHE_MAGIC */
  uint32_t version;        /* MP_KERNEL_CACHE_VERSION */
  uint32_t header_size;    /* MP_KERNEL_CACHE_HEADER_SIZE */
  uint8_t key[MP_KERNEL_CACHE_KEY_SIZE]; /* the key the entry was stored under */
  char kind[MP_KERNEL_CACHE_MAX_KIND];   /* "opencl", "cuda": who built it (for listing) */
  uint64_t data_size;      /* the bytes after the header */
  uint64_t data_checksum;  /* XXH3-64 of them */
  uint64_t reserved[5];    /* 0 */
  uint64_t header_checksum; /* XXH3-64 of the header's bytes before this field */
} mp_kernel_cache_entry_v1_t;
/* MP_API_END */
#define MP_KERNEL_CACHE_MAGIC "MPKCACH\n"
#define MP_KERNEL_CACHE_KEY_CONTEXT "modpack kernel cache key\n"

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(mp_kernel_cache_entry_v1_t) == MP_KERNEL_CACHE_HEADER_SIZE,
               "a kernel cache entry's header");
_Static_assert(sizeof(mp_format_header_v1_t) == 64, "format v1 header must be 64 bytes");
_Static_assert(sizeof(mp_format_entry_v1_t) == 48, "format v1 entry must be 48 bytes");
_Static_assert(sizeof(mp_format_header_v1_t) + sizeof(mp_format_header_v1_2_t) ==
                   MP_FORMAT_HEADER_SIZE_V1_2,
               "format 1.2's header is the v1 header and its 32 bytes");
_Static_assert(sizeof(mp_code_frame_v1_t) == MP_CODE_FRAME_HEADER_SIZE,
               "a code frame header is 64 bytes");
_Static_assert(sizeof(mp_seal_v1_t) == MP_SEAL_SIZE, "the seal is MP_SEAL_SIZE bytes");
_Static_assert(sizeof(mp_signature_v1_t) == MP_SIGNATURE_SIZE, "a signature record");
_Static_assert(sizeof(mp_signatures_trailer_v1_t) == MP_SIGNATURES_TRAILER_SIZE,
               "the signatures trailer");
_Static_assert(sizeof(mp_seal_note_v2_t) == MP_SEAL_NOTE_DESC_SIZE, "the seal note");
_Static_assert(MP_SEAL_NOTE_SIZE == 12 + 8 + MP_SEAL_NOTE_DESC_SIZE, "the seal note's size");
#endif

#ifdef __cplusplus
}
#endif
#endif /* MODPACK_FORMAT_H_ */
