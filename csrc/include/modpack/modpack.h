/*
 * modpack/modpack.h — the modpack runtime's C API.
 *
 * Load a deployable library made by `Module.export_library`, walk its module tree, look up
 * functions and call them, with no Python involved.
 *
 *   mp_module_t* root = NULL;
 *   if (mp_module_load_from_file("deploy.so", 0, &root) != MP_OK) {
 *     fprintf(stderr, "%s\n", mp_error_message());
 *   }
 *   mp_function_t* f = NULL;
 *   mp_module_get_function(root, "vadd", 0, &f);
 *   mp_function_call(f, args, 3, &ret);
 *   mp_function_release(f);
 *   mp_module_release(root);
 *
 * Writing a module kind of your own (a loader, a vtable): modpack/kind.h.
 *
 * Ownership: functions named *_create, *_load_* and *_get_function give the caller one
 * reference, which the caller ends with the matching *_release. Accessors (*_import_at,
 * *_type_key, ...) lend: the result lives as long as the object it came from. A function keeps
 * its module alive, and every module from a library keeps that library loaded, so releasing
 * the root while a function is still held is safe.
 *
 * Errors: every fallible call returns an mp_status_t. On failure the message is in a
 * per-thread slot read with mp_error_message(); it says what failed and, where it can, how to
 * fix it. Bad input never aborts the process.
 *
 * Threads: every function here may be called from any thread. Loading, loader registration
 * and function lookup take internal locks; calls do not.
 */
#ifndef MODPACK_MODPACK_H_
#define MODPACK_MODPACK_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "modpack/abi.h"
#include "modpack/dltensor.h"
#include "modpack/format.h"
#include "modpack/system_lib.h"
#include "modpack/weights.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define MP_API __declspec(dllexport)
#else
#define MP_API __attribute__((visibility("default")))
#endif

/* MP_API_BEGIN */
/* The runtime's version: the one place it is written (CMake, the Python package and its
 * metadata read it from here; a test checks that they agree). */
#define MP_VERSION_MAJOR 0
#define MP_VERSION_MINOR 1
#define MP_VERSION_PATCH 0

typedef struct mp_module mp_module_t;
typedef struct mp_function mp_function_t;
typedef struct mp_library mp_library_t;
typedef struct mp_blob mp_blob_t;

/* A (pointer, length) view of bytes owned by someone else. */
typedef struct {
  const uint8_t* data;
  uint64_t size;
} mp_const_byte_span_t;

typedef struct {
  int32_t major;
  int32_t minor;
  int32_t patch;
} mp_version_t;

/* ---- version and errors ---------------------------------------------------------------- */

/* The runtime's own version (the format version is MP_FORMAT_MAJOR.MP_FORMAT_MINOR). */
MP_API void mp_get_version(mp_version_t* out_version);

/* The calling thread's last error message ("" when none) and its status code. */
MP_API const char* mp_error_message(void);
MP_API mp_status_t mp_error_code(void);
/* Record |message| (copied; truncated at 4 KiB) as this thread's error; returns |code|. */
MP_API mp_status_t mp_error_set(mp_status_t code, const char* message);
MP_API void mp_error_clear(void);

/* A dtype's name ("float32", "int64", "bfloat16", "float8_e4m3fn", ...) written into
 * |buffer|; returns |buffer|. */
MP_API const char* mp_dtype_string(DLDataType dtype, char* buffer, size_t capacity);

/* ---- loading ----------------------------------------------------------------------------- */

/* Signed libraries (`modpack sign`; modpack/format.h). A trusted key is a raw Ed25519 public
 * key; mp_trusted_key_from_pem reads one from PEM ("-----BEGIN PUBLIC KEY-----", as `openssl
 * pkey -pubout` writes it). Signature checks use OpenSSL's libcrypto, loaded when first needed
 * (MP_ERR_UNAVAILABLE, saying so, where it is missing). */
typedef struct {
  uint8_t public_key[32];
} mp_trusted_key_t;
typedef struct {
  uint8_t key_id[32]; /* SHA-256 of the signer's public key */
  int32_t trusted;    /* 1: the signer is one of the keys given */
  int32_t valid;      /* 1: checked and valid (only trusted signers' are checked) */
} mp_signature_info_t;
enum {
  /* Skip the XXH3 checks of payload bytes (the index is always checked). For multi-GB
   * weights whose integrity is guaranteed by other means. */
  MP_LOAD_SKIP_PAYLOAD_CHECKSUMS = 1,
  /* Load a library that carries no seal (linked by hand, or exported by a modpack before the
   * seal): its code, headers and blob index are then not checked before dlopen. A library
   * with a seal is always checked. */
  MP_LOAD_ALLOW_UNSEALED = 2,
  /* For a signed load: copy every byte of the file, payloads included, into private memory
   * before checking it, instead of leaving the weights mapped from the file. A writer who
   * changes the file after the load then changes nothing the process sees; the price is the
   * payloads' size in memory, in every process (docs/trust.md). Without trusted keys:
   * MP_ERR_INVALID_ARGUMENT. */
  MP_LOAD_PRIVATE_COPY = 4,
  /* For a signed load: check each array of a weight file against its SHA-256 digest the first
   * time it is asked for, instead of all of them at load (a large model whose arrays are
   * touched over minutes). An array that does not match fails the lookup (MP_ERR_UNTRUSTED).
   * Without trusted keys: MP_ERR_INVALID_ARGUMENT. */
  MP_LOAD_VERIFY_ON_FIRST_USE = 8,
  /* Check every array of a weight file against its SHA-256 digest at load, even when no
   * signature asks for it (`modpack verify` does). */
  MP_LOAD_CHECK_DIGESTS = 16,
  /* Neither read nor write the kernel cache for this tree: every device builds its code from
   * the payload at its first launch (the cache: mp_kernel_cache_list, docs/trust.md). The
   * environment's MODPACK_KERNEL_CACHE="" turns it off for every load. */
  MP_LOAD_NO_KERNEL_CACHE = 32,
};

/* A weight file a library refers to, found somewhere other than beside the library. */
typedef struct {
  /* The weight file's name as the library records it (`modpack inspect` shows it); NULL: the
   * library's only weight file. */
  const char* file_name;
  const char* path;
} mp_weights_location_t;

/* How to load: everything beyond a path. Zero-initialise it and set struct_size, so that
 * fields added later read as zero from older callers. */
typedef struct {
  uint32_t struct_size; /* sizeof(mp_load_options_t) */
  uint32_t flags;       /* MP_LOAD_* */
  /* With num_trusted_keys > 0 (at most 16), a signed load: see mp_module_load_signed. */
  const mp_trusted_key_t* trusted_keys;
  uint64_t num_trusted_keys;
  /* Weight files not beside the library: each by name, or in a folder (NULL: the library's). */
  const mp_weights_location_t* weights;
  uint64_t num_weights;
  const char* weights_folder;
  /* Adapters: weight files (modpack's, safetensors, GGUF) whose arrays host code finds before
   * the tree's own, adding arrays or replacing ones of the same dtype and shape, a later one
   * over an earlier one; the base weights stay as they are, shared. In a signed load each
   * needs its own trusted signature. Swapped whole with mp_module_swap_overlays. */
  const char* const* overlays;
  uint64_t num_overlays;
} mp_load_options_t;

/* Load a deployable library: check the file's seal (format.h) before anything of it is
 * mapped, dlopen it, parse and validate `__dev_mblob`, run each module's loader and rebuild
 * the import tree. |out_module| receives the root (a "library" module when the file has no
 * blob). Loading the same file again while its tree is alive returns the same root. */
MP_API mp_status_t mp_module_load_from_file(const char* path, uint32_t flags,
                                            mp_module_t** out_module);

/* mp_module_load_from_file, or mp_module_load_signed with trusted keys, with |options| (NULL:
 * none). A library that refers to weight files (modpack/weights.h) finds each beside itself,
 * or where options->weights says. A weight file that is missing, or whose content digest
 * differs from the one the library was exported with, is refused before any host code runs,
 * naming the file and the first difference (MP_ERR_NOT_FOUND, MP_ERR_MISMATCH; for a signed
 * load MP_ERR_UNTRUSTED). Loading a library whose tree is alive returns that tree, and
 * refuses options->weights naming other files than the ones it uses. */
MP_API mp_status_t mp_module_load(const char* path, const mp_load_options_t* options,
                                  mp_module_t** out_module);

/* Load a deployable library from |size| bytes in memory (decrypted, downloaded, embedded),
 * with the same checks as from a file. The bytes are copied once into a sealed memfd, which is
 * what dlopen maps and what payloads are zero-copy views of, so |data| may be freed as soon as
 * this returns. Each call gives a tree of its own, even for the same bytes. Where memfd_create
 * does not exist, the copy is an unnamed file in $TMPDIR. */
MP_API mp_status_t mp_module_load_from_memory(const void* data, uint64_t size, uint32_t flags,
                                              mp_module_t** out_module);
/* The same with |options| (NULL: none), for the weight files it refers to (which it can only
 * find where options->weights says). Trusted keys are refused: a signed load reads a file. */
MP_API mp_status_t mp_module_load_memory(const void* data, uint64_t size,
                                         const mp_load_options_t* options,
                                         mp_module_t** out_module);

MP_API mp_status_t mp_trusted_key_from_pem(const char* pem, uint64_t length,
                                           mp_trusted_key_t* out_key);

/* Load |path| only if a signature by one of |keys| (at most 16) verifies, before any of its
 * code runs or any byte of it is mapped for use. The file is read once and hashed. Everything
 * the process will run or parse (code, headers, the blob's index, device code) is copied as it
 * is read into a sealed memfd, which is what is then loaded, so a file replaced or rewritten
 * meanwhile cannot get in; the data of const modules (weights) is hashed through a read-only
 * mapping of the file and that mapping is what the arrays point into: shared with every other
 * process, one copy in the page cache. MP_LOAD_PRIVATE_COPY copies the weights too.
 * MP_ERR_UNTRUSTED, saying why, for a library unsigned, signed by no trusted key, or changed
 * since. Each call loads a tree of its own. What this guarantees: docs/trust.md. */
MP_API mp_status_t mp_module_load_signed(const char* path, const mp_trusted_key_t* keys,
                                         uint64_t num_keys, uint32_t flags,
                                         mp_module_t** out_module);

/* The signatures of the library or weight file at |path| (nothing is run, nothing copied),
 * checked against |keys| (may be none; the file is hashed only when one of them signed it):
 * each signer in |out_infos| (up to |capacity|), their number in *out_count (0: unsigned).
 * MP_ERR_FORMAT for a damaged signature block. A weight file's signature signs its content
 * digest; when a trusted one holds, every array is checked against its digest as well
 * (MP_ERR_UNTRUSTED, naming the array, when one does not match). */
MP_API mp_status_t mp_signatures_check_file(const char* path, const mp_trusted_key_t* keys,
                                            uint64_t num_keys, mp_signature_info_t* out_infos,
                                            uint64_t capacity, uint64_t* out_count);

/* Load a system library linked into this program: `mp_module_load_system_lib(
 * modpack_system_lib_NAME(), &root)` (modpack/system_lib.h). No dlopen: the blob is read in
 * place and validated as from a file (payload checksums included), and the host functions and
 * context slots come from the description. While its tree lives, loading it again returns
 * that tree. */
MP_API mp_status_t mp_module_load_system_lib(const mp_system_lib_t* lib, mp_module_t** out_module);

/* What a load of |path| with |options| (NULL: none) would say, short of running any of it: the
 * file's kind and its seal, the blob as the seal places it, read from the file (every offset,
 * the import tree, the payload checksums unless MP_LOAD_SKIP_PAYLOAD_CHECKSUMS) with each
 * payload given to its kind's loader (a loader the caller registered, a Python one say, is the
 * caller's to judge and is not run; a kind with no loader registered in this process fails, as
 * a load in this process fails), then the weight files it refers to; and __dev_mblob as dlsym
 * will find it against the seal, as a load checks it after dlopen. MP_OK when a load would get
 * that far; else the load's own error, and *out_stage (may be NULL) names the stage that failed
 * (the stages in the order they are checked). A library loaded unsealed
 * (MP_LOAD_ALLOW_UNSEALED) gets its extents checked only. modpack inspect, verify and extract
 * use it, so that they and the loader agree on every file. */
enum {
  MP_CHECK_FILE = 1,         /* opening it */
  MP_CHECK_SEAL = 2,         /* its kind, its seal (or its extents, unsealed) */
  MP_CHECK_BLOB = 3,         /* the blob's index and tree */
  MP_CHECK_PAYLOADS = 4,     /* payload checksums and each kind's loader */
  MP_CHECK_WEIGHT_FILES = 5, /* the weight files it refers to */
  /* A module of a kind no loader is registered for in this process: not damage (every other
   * check was made), but a load here refuses it (MP_ERR_NOT_FOUND, as the load says). */
  MP_CHECK_LOADERS = 6,
  /* A library built for another machine (MP_ERR_INCOMPATIBLE, naming both machines), judged
   * last: every other check was made as on a machine of its kind, and held. Not damage. */
  MP_CHECK_MACHINE = 7,
};
MP_API mp_status_t mp_library_check_file(const char* path, const mp_load_options_t* options,
                                         int32_t* out_stage);
/* The same for a blob the caller located in the file at |path|: |blob_size| bytes at
 * |blob_offset| (the __dev_mblob of a .tar export's blob object, read in place, whose tar seal
 * the caller checks; |blob_size| 0: host code only), checked from MP_CHECK_BLOB on: the blob,
 * its payloads and each kind's loader, then the weight files it refers to (found beside
 * |path|, as a load of the .tar finds them). modpack's tools ask this for .tar exports, whose
 * load links the objects into a library first. */
MP_API mp_status_t mp_library_check_blob(const char* path, uint64_t blob_offset,
                                         uint64_t blob_size, const mp_load_options_t* options,
                                         int32_t* out_stage);

/* ---- preflight: which code a device would get ------------------------------------------
 * Which of each module's code a device would get from the library at |path|, and why, or why
 * none fits (what the file has against what the device is), without running or mapping the
 * library: only its seal, its blob's index (checksum checked) and the head of each device
 * module's payload (the variant table: target architectures, records; never code) are read,
 * with pread. The choice is the loader's: the same parsers and the same ranking.
 *
 * |device|: "cuda:sm_XY" (compute capability X.Y), "rocm:TARGET_ID" ("rocm:gfx90a:sramecc+:xnack-",
 * "rocm:gfx1100"), "opencl", "vulkan" (any), "vulkan:N" (this machine's Vulkan device N), or
 * "host": every device this machine's drivers report
 * (a kind whose driver is missing is listed with the reason). The answer is one JSON object
 * written NUL-terminated into |buffer| (truncated to |capacity|; |*out_length| receives the
 * length it needs, so a caller can retry):
 *   {"path", "device", "devices": [{"device", "type", "arch"}], "unavailable": [{"type",
 *    "message"}], "fits", "reason", "modules": [{"index", "type_key", "size", "status",
 *    "reason", "answers": [{"device", "fits", "variant", "kind", "reason", "fallbacks",
 *    "variants", ...}]}], "read": {"bytes", "reads"}}
 * A module's "status" is "fits" (every device of its type gets code), "no-code" (one gets
 * none), "other-device" (a device module for another device type than those asked), "no-device-code"
 * (host code, arrays) or "unknown-kind". "fits" is true when no module is "no-code" and, if the
 * library has device modules, at least one fits. With "host", an answer that fits also says
 * whether the kernel cache holds what that device would build: "kernel_cache": {"state":
 * "hit" | "miss" | "off" | "unused", "detail"} (which reads that code, to hash it). MP_OK whenever the answer is made (|out|'s
 * fits says whether it fits); MP_ERR_INVALID_ARGUMENT for a DEVICE string that names no device
 * (the message gives the forms); MP_ERR_FORMAT for a file that is not a sealed library, or whose
 * index or a payload's head is damaged. modpack preflight and modpack.preflight ask this. */
typedef struct {
  uint32_t struct_size; /* sizeof(mp_preflight_result_t), set by the caller */
  int32_t fits;         /* 1: every module has code for the device (the JSON's "fits") */
  uint64_t bytes_read;  /* bytes this call read from the file */
  uint64_t reads;       /* and in how many reads */
} mp_preflight_result_t;
MP_API mp_status_t mp_preflight(const char* path, const char* device, char* buffer,
                                uint64_t capacity, uint64_t* out_length,
                                mp_preflight_result_t* out_result);
/* The same for a blob the caller located in the file at |path|: |blob_size| bytes at
 * |blob_offset| (the __dev_mblob of a .tar export's blob object, whose tar seal the caller
 * checks; |blob_size| 0: host code only); no seal is read. modpack.preflight asks this for
 * .tar exports. */
MP_API mp_status_t mp_preflight_blob(const char* path, uint64_t blob_offset, uint64_t blob_size,
                                     const char* device, char* buffer, uint64_t capacity,
                                     uint64_t* out_length, mp_preflight_result_t* out_result);

/* Check the seal of the library at |path| by reading the file (nothing is mapped or run):
 * MP_OK, with the seal in |*out_seal|, when it carries one and every byte outside the payloads
 * matches it; MP_ERR_NOT_FOUND when it carries none; MP_ERR_FORMAT, naming the damage, when it
 * does not match; MP_ERR_INCOMPATIBLE for a seal newer than this runtime. */
MP_API mp_status_t mp_seal_check_file(const char* path, mp_seal_v1_t* out_seal);

/* One range of a file's bytes: [begin, end). */
typedef struct {
  uint64_t begin, end;
} mp_file_range_t;

/* What a version 2 seal of the library open as |fd| covers, by the one rule the loader checks
 * (docs/format.md, "The seal"): its sorted, disjoint byte ranges (the ELF header, the program
 * header table, every PT_LOAD segment's file bytes) into |ranges|, the pieces of them read as
 * zeros into |masks|, and the file offset of the seal note's descriptor into |*out_note|. For
 * the writers of a seal and of signatures (export, sign, slim), which ask before the note is
 * filled in: the note's fields are not read. |*out_range_count| and |*out_mask_count| receive
 * how many there are, also when that is more than the capacities (then only as many as fit are
 * written: ask again with room). MP_ERR_NOT_FOUND when the file is not a 64-bit little-endian
 * ELF library with program headers, or carries no seal note (its writer then seals it with a
 * version 1 trailer); MP_ERR_FORMAT when its program headers are damaged. */
MP_API mp_status_t mp_seal_coverage(int fd, mp_file_range_t* ranges, uint64_t range_capacity,
                                    uint64_t* out_range_count, mp_file_range_t* masks,
                                    uint64_t mask_capacity, uint64_t* out_mask_count,
                                    uint64_t* out_note);

/* ---- the kernel cache -------------------------------------------------------------------
 * What a device compiles from a payload's code at its first launch (an OpenCL program binary
 * after the build, the cubin the CUDA driver links from PTX) is kept in a folder, so the next
 * process on the same device and driver loads it instead of compiling. An entry's key is the
 * SHA-256 of the code as the driver sees it, the build options, the device, the driver's
 * version and modpack's version: a signed tree uses only entries made from its own verified
 * bytes. The folder is $MODPACK_KERNEL_CACHE, else $XDG_CACHE_HOME/modpack/kernels, else
 * ~/.cache/modpack/kernels (made 0700); MODPACK_KERNEL_CACHE="" or MP_LOAD_NO_KERNEL_CACHE
 * turns it off. A folder others can write, an entry not owned by this user, a damaged,
 * truncated or foreign entry is never used: the code is built again (a line on the
 * modpack.load logger says why), never an error. $MODPACK_KERNEL_CACHE_MAX bounds its size
 * (bytes, or with a K/M/G suffix; default 1G), the entries least recently used removed first.
 * docs/format.md gives the entry format, docs/trust.md what a writer of the folder can do. */

/* What this process's lookups found (each device build asks once). */
typedef struct {
  uint32_t struct_size; /* sizeof(mp_kernel_cache_stats_t), set by the caller */
  uint32_t reserved;
  uint64_t hits;     /* an entry was loaded instead of compiling */
  uint64_t misses;   /* none was there: the device compiled, and the result was stored */
  uint64_t stores;   /* entries written */
  uint64_t ignored;  /* entries refused (damaged, truncated, foreign, not this user's) */
  uint64_t refused;  /* entries the driver did not accept (then compiled anew) */
  uint64_t off;      /* builds with the cache off (option, environment or unusable folder) */
  uint64_t waited;   /* misses that waited for another process building the same key */
} mp_kernel_cache_stats_t;
MP_API mp_status_t mp_kernel_cache_stats(mp_kernel_cache_stats_t* out_stats);

/* The cache's folder and entries as one JSON object, written NUL-terminated into |buffer|
 * (truncated to |capacity|; |*out_length| receives the length it needs):
 *   {"folder", "enabled", "reason", "max_size", "total_size", "entries": [{"name", "kind",
 *    "size", "data_size", "last_used", "valid", "problem"}]}
 * "last_used" is the entry's modification time (each hit touches it), in seconds since the
 * epoch; "valid" is false for an entry a lookup would ignore, "problem" says why. The folder is
 * read, never created or changed. */
MP_API mp_status_t mp_kernel_cache_list(char* buffer, uint64_t capacity, uint64_t* out_length);

/* Remove the entries least recently used until the folder's entries take at most |max_size|
 * bytes (0: remove every entry), and entries a lookup would ignore, and the leftovers of
 * writes that never finished. The number of entries removed and the bytes freed are written
 * to |out_removed| and |out_freed| (each may be NULL). */
MP_API mp_status_t mp_kernel_cache_prune(uint64_t max_size, uint64_t* out_removed,
                                         uint64_t* out_freed);

/* ---- weight files (modpack/weights.h) ------------------------------------------------------ */

/* A weight file on its own, as a module of type "weights" whose arrays are the file's: mapped
 * read-only and shared (one mapping per file in the process, whoever opened it), checked as
 * |options| say (NULL: checksums). With trusted keys, a signature by one of them over the
 * file's content digest must hold, and every array's digest is checked (at load, or on first
 * use with MP_LOAD_VERIFY_ON_FIRST_USE). */
MP_API mp_status_t mp_weights_load(const char* path, const mp_load_options_t* options,
                                   mp_module_t** out_module);

/* Replace the weight file that |module|'s tree reads (|module|: any module of a loaded
 * library's tree, or a module from mp_weights_load) by the file at |path|. |file_name| is the
 * name the library records for the file to replace (NULL: its only weight file). The new file
 * is checked completely first: its arrays must have the names, dtypes and shapes of the old
 * ones (else MP_ERR_MISMATCH naming the first difference, and nothing changes), its checksums
 * must hold and, for a tree loaded with trusted keys, a signature by one of them must hold over
 * it and its digests (checked now, or on first use). Then the switch is atomic: a call that
 * started before sees the old arrays throughout (a call keeps the version it first reads until
 * it returns), a call that starts after sees the new ones; arrays copied to devices are copied
 * anew from the new file. The old file is unmapped once no call, version held
 * (mp_weights_current) or device copy uses it. An array obtained outside a call
 * (mp_module_get_array) stays valid until the next swap. */
MP_API mp_status_t mp_module_swap_weights(mp_module_t* module, const char* file_name,
                                          const char* path);
/* Replace the overlays (mp_load_options_t.overlays) of the tree |module| belongs to with the
 * |count| files at |paths| (0: none), checked as the tree was loaded: atomically for callers
 * (a call that started before sees the old ones throughout), the base weights untouched. */
MP_API mp_status_t mp_module_swap_overlays(mp_module_t* module, const char* const* paths,
                                           uint64_t count);

/* One version of a module's weights: the weight file it reads now, held (a new reference) so
 * that its arrays stay valid whatever is swapped later. */
typedef struct mp_weight_file mp_weight_file_t;
MP_API mp_status_t mp_weights_current(mp_module_t* module, mp_weight_file_t** out_file);
MP_API void mp_weight_file_release(mp_weight_file_t* file);
/* A weights module may read several files (the shards of one model, each array in one of
 * them): how many (0 for a module that is not a loaded weights module), the file array
 * |index| is in (UINT64_MAX when there is no such array), and one version of file
 * |file_index| (mp_weights_current is file 0's). */
MP_API uint64_t mp_weights_file_count(mp_module_t* module);
MP_API uint64_t mp_weights_array_file(mp_module_t* module, uint64_t index);
MP_API mp_status_t mp_weights_current_file(mp_module_t* module, uint64_t file_index,
                                           mp_weight_file_t** out_file);
/* Array |index| (< mp_module_array_count) of the weights module |module| as |file| (from
 * mp_weights_current_file on the file it is in) holds it; verified on first use when the tree
 * asked for that. */
MP_API mp_status_t mp_weights_array_in(mp_module_t* module, mp_weight_file_t* file, uint64_t index,
                                       const char** out_name, const DLTensor** out_array);

/* ---- modules ----------------------------------------------------------------------------- */

MP_API void mp_module_retain(mp_module_t* module);
MP_API void mp_module_release(mp_module_t* module);
MP_API const char* mp_module_type_key(const mp_module_t* module);
/* The module's name (device modules may have one, so that "name/function" finds a function
 * in that module only), or NULL. */
MP_API const char* mp_module_name(const mp_module_t* module);
enum { MP_MODULE_MAX_NAME = 255 };
/* The library this module was loaded from, or NULL (borrowed). */
MP_API mp_library_t* mp_module_library(const mp_module_t* module);
MP_API uint64_t mp_module_import_count(const mp_module_t* module);
/* Borrowed; NULL when |index| is out of range. */
MP_API mp_module_t* mp_module_import_at(const mp_module_t* module, uint64_t index);
/* Add |child| to |parent|'s imports; refuses an import that would close a cycle. */
MP_API mp_status_t mp_module_import(mp_module_t* parent, mp_module_t* child);

/* Look |name| up in |module| and then, if |query_imports|, depth-first in its imports.
 * "module/function" looks |function| up in the module named |module| only. Returns
 * MP_ERR_NOT_FOUND (with a message naming the function and module) when absent. */
MP_API mp_status_t mp_module_get_function(mp_module_t* module, const char* name,
                                          int32_t query_imports, mp_function_t** out_function);

/* Functions the module lists (kernels of a device module); NULL when out of range. */
MP_API uint64_t mp_module_function_count(mp_module_t* module);
MP_API const char* mp_module_function_name(mp_module_t* module, uint64_t index);
/* Kind-specific details as one JSON object ("{}" when the kind has none), written
 * NUL-terminated into |buffer| (truncated to |capacity|); |out_length| (may be NULL) receives
 * the length the whole object needs, so a caller can retry with a larger buffer. */
MP_API mp_status_t mp_module_describe(mp_module_t* module, char* buffer, uint64_t capacity,
                                      uint64_t* out_length);

/* What the library |module| was loaded from carries besides its modules (format 1.2): the
 * metadata it was exported with (`export_library(..., metadata=...)`: UTF-8 JSON text of one
 * object, with what modpack recorded under "modpack"), and its self-tests (a bundle of inputs
 * and expected outputs that `modpack selftest` runs; docs/format.md). Both lie in the blob's
 * index, so the seal and signatures cover them, and are lent: valid while |module| (or any module
 * of its library) lives. {NULL, 0} when the library has none, or for a module not loaded from a
 * library (mp_module_load_from_payload). Usage:
 *   mp_const_byte_span_t json;
 *   mp_module_metadata(root, &json);
 *   if (json.size) printf("%.*s\n", (int)json.size, (const char*)json.data);
 */
MP_API void mp_module_metadata(const mp_module_t* module, mp_const_byte_span_t* out_metadata);
MP_API void mp_module_selftests(const mp_module_t* module, mp_const_byte_span_t* out_selftests);

/* Run the loader registered for |type_key| on a payload held by the caller (who keeps it
 * alive and unchanged while the module lives), without any library: for tools that inspect
 * a blob without loading it. Loaders must not touch drivers while loading. */
MP_API mp_status_t mp_module_load_from_payload(const char* type_key, mp_const_byte_span_t payload,
                                               mp_module_t** out_module);
/* The same for a payload whose blob entry has flags (mp_blob_module_flags: code frames). */
MP_API mp_status_t mp_module_load_from_entry(const char* type_key, mp_const_byte_span_t payload,
                                             uint32_t entry_flags, mp_module_t** out_module);

/* Named arrays: count, i-th, and lookup by name (optionally through the imports). */
MP_API uint64_t mp_module_array_count(mp_module_t* module);
MP_API mp_status_t mp_module_array_at(mp_module_t* module, uint64_t index, const char** out_name,
                                      const DLTensor** out_array);
MP_API mp_status_t mp_module_get_array(mp_module_t* module, const char* name, int32_t query_imports,
                                       const DLTensor** out_array);

/* ---- functions --------------------------------------------------------------------------- */

MP_API void mp_function_retain(mp_function_t* function);
MP_API void mp_function_release(mp_function_t* function);
/* Call |function|. |out_ret| is set to MP_TYPE_NONE before the call. */
MP_API mp_status_t mp_function_call(mp_function_t* function, const mp_value_t* args,
                                    int32_t num_args, mp_value_t* out_ret);

MP_API void mp_library_retain(mp_library_t* library);
MP_API void mp_library_release(mp_library_t* library);
MP_API const char* mp_library_path(const mp_library_t* library);

/* ---- devices and arrays -------------------------------------------------------------------
 * One device API for every device type (CPU, OpenCL; CUDA fits the same slots). Device
 * memory is addressed by the `data` pointer a DLTensor of that device carries (for OpenCL, a
 * cl_mem). Copies are synchronous with respect to the host. */

/* The name of a device type this runtime supports ("cpu", "opencl", "cuda"), or NULL. */
MP_API const char* mp_device_type_name(int32_t device_type);
/* The device type called |name|; MP_ERR_INVALID_ARGUMENT listing the supported names. */
MP_API mp_status_t mp_device_type_from_name(const char* name, int32_t* out_device_type);
MP_API mp_status_t mp_device_count(int32_t device_type, int32_t* out_count);
/* A human-readable name for a device ("OpenCL 0: pthread-AMD EPYC (PoCL)"). */
MP_API mp_status_t mp_device_name(DLDevice device, char* buffer, uint64_t capacity);
MP_API mp_status_t mp_device_alloc(DLDevice device, uint64_t nbytes, void** out_data);
MP_API mp_status_t mp_device_free(DLDevice device, void* data);
/* Copy |nbytes| from (from + from_offset) on |from_device| to (to + to_offset) on |to_device|:
 * host <-> device, or within one device type. */
MP_API mp_status_t mp_device_copy(const void* from, uint64_t from_offset, DLDevice from_device,
                                  void* to, uint64_t to_offset, DLDevice to_device,
                                  uint64_t nbytes);
MP_API mp_status_t mp_device_synchronize(DLDevice device);
/* The calling thread's current stream for |device| (a CUstream for CUDA; NULL, the default,
 * until set): kernels launched from this thread on that device go to it. |out_previous|
 * (may be NULL) receives the stream it replaces. */
MP_API mp_status_t mp_device_set_stream(DLDevice device, void* stream, void** out_previous);
MP_API void* mp_device_get_stream(DLDevice device);

/* Arrays owned by the runtime, reference counted: made by mp_array_empty (compact, in memory
 * the runtime allocated) or adopted from a DLPack producer by mp_array_from_dlpack*. The
 * mp_array_* functions below that take a DLTensor* (retain, release, flags, to_dlpack*) take
 * only such arrays; the others take any DLTensor. */
MP_API mp_status_t mp_array_empty(const int64_t* shape, int32_t ndim, DLDataType dtype,
                                  DLDevice device, DLTensor** out_array);
MP_API void mp_array_retain(DLTensor* array);
MP_API void mp_array_release(DLTensor* array);
enum {
  /* The array must not be written: adopted from a DLPack tensor flagged read-only (a const
   * module's weights, a read-only numpy array). Calls pass it with MP_VALUE_READ_ONLY. */
  MP_ARRAY_READ_ONLY = 1,
};
/* The array's MP_ARRAY_* flags. */
MP_API uint32_t mp_array_flags(const DLTensor* array);
/* Adopt a DLPack producer's tensor as an array, without a copy: on MP_OK the array owns
 * |managed| and runs its deleter on its last release (so the producer's memory lives as long
 * as the array); on a failure the caller still owns it. Its data, byte_offset and strides are
 * kept (a strided tensor stays strided: mp_array_copy and mp_array_nbytes's callers that need
 * compact arrays refuse or mis-size it, so check strides == NULL first); shape and strides are
 * copied. Refused: more than 32 dimensions, a device type this runtime does not know, a tensor
 * whose bytes cannot be addressed (modpack/tensor_span.h), and, versioned, a major version
 * other than DLPACK_MAJOR_VERSION (MP_ERR_INCOMPATIBLE) or a sub-byte type its producer marks
 * DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (the runtime takes them packed, DLPack's default).
 * DLPACK_FLAG_BITMASK_READ_ONLY makes the array MP_ARRAY_READ_ONLY. */
MP_API mp_status_t mp_array_from_dlpack(DLManagedTensor* managed, DLTensor** out_array);
MP_API mp_status_t mp_array_from_dlpack_versioned(DLManagedTensorVersioned* managed,
                                                  DLTensor** out_array);
/* Bytes of a compact array: product(shape) elements of bits * lanes bits, whole bytes each or,
 * under a byte, packed (ceil(product(shape) * bits * lanes / 8): modpack/tensor_span.h). */
MP_API uint64_t mp_array_nbytes(const DLTensor* array);
/* Copy between two compact arrays of the same shape and dtype, on any devices. */
MP_API mp_status_t mp_array_copy(const DLTensor* from, DLTensor* to);
/* Export |array| for DLPack consumers, without a copy: the managed tensor holds a reference,
 * released by its deleter. The legacy (pre-1.0) form cannot say read-only, so it refuses an
 * MP_ARRAY_READ_ONLY array; the versioned one (DLPack DLPACK_MAJOR_VERSION.
 * DLPACK_MINOR_VERSION) sets DLPACK_FLAG_BITMASK_READ_ONLY for it, plus the DLPACK_FLAG_BITMASK_*
 * bits in |flags| (DLPACK_FLAG_BITMASK_IS_COPIED for an array the caller just copied). */
MP_API mp_status_t mp_array_to_dlpack(DLTensor* array, DLManagedTensor** out_managed);
MP_API mp_status_t mp_array_to_dlpack_versioned(DLTensor* array, uint64_t flags,
                                                DLManagedTensorVersioned** out_managed);

/* ---- blobs: the format reader, usable without loading anything ----------------------------- */

typedef struct {
  uint16_t format_major;
  uint16_t format_minor;
  uint8_t writer_major;
  uint8_t writer_minor;
  uint16_t writer_patch;
  uint32_t flags;
  uint64_t blob_size;
  uint64_t module_count;
  uint64_t edge_count;
  uint64_t index_size;
  uint64_t index_checksum;
} mp_blob_info_t;

typedef struct {
  const char* type_key; /* NUL-terminated copy owned by the mp_blob_t */
  uint64_t payload_offset;
  uint64_t payload_size;
  uint64_t payload_checksum;
  uint64_t first_edge; /* this module's children are child_indices[first_edge, +child_count) */
  uint64_t child_count;
} mp_blob_module_t;

/* Validate the blob in |bytes| completely (header, index checksum, import tree, payload
 * bounds and, unless MP_LOAD_SKIP_PAYLOAD_CHECKSUMS, payload checksums). The parsed index
 * refers to |bytes|, which must outlive it. */
MP_API mp_status_t mp_blob_parse(mp_const_byte_span_t bytes, uint32_t flags, mp_blob_t** out_blob);
MP_API void mp_blob_free(mp_blob_t* blob);
MP_API void mp_blob_info(const mp_blob_t* blob, mp_blob_info_t* out_info);
MP_API mp_status_t mp_blob_module(const mp_blob_t* blob, uint64_t index,
                                  mp_blob_module_t* out_module);
/* child_indices[edge]; UINT64_MAX when out of range. */
MP_API uint64_t mp_blob_child(const mp_blob_t* blob, uint64_t edge);
/* The XXH3-64 digest the format uses, for writers and tools. */
MP_API uint64_t mp_checksum(mp_const_byte_span_t bytes);
/* The entry flags (MP_FORMAT_ENTRY_*) of module |index|; 0 past the end. */
MP_API uint32_t mp_blob_module_flags(const mp_blob_t* blob, uint64_t index);
/* The metadata (UTF-8 JSON text of one object) and the self-test bundle the blob's index holds
 * (format 1.2, modpack/format.h), as stored: views into the bytes the blob was parsed from,
 * {NULL, 0} when it holds none. The reader checks where they lie, not what they say: the index
 * checksum vouches for them only as far as the file itself is trusted (a seal, a signature). */
MP_API void mp_blob_metadata(const mp_blob_t* blob, mp_const_byte_span_t* out_metadata);
MP_API void mp_blob_selftests(const mp_blob_t* blob, mp_const_byte_span_t* out_selftests);

/* Code frames (modpack/format.h): the one writer and reader of the encoding, for writers and
 * tools. Zstandard comes from the system's libzstd, loaded on first use (MP_ERR_UNAVAILABLE
 * naming the package when it is missing). */
/* The frame of |size| bytes at |frame| (header and data), its header checked as a load checks
 * it: its encoding (MP_CODE_STORED, MP_CODE_ZSTD) and the size of the code it holds. */
MP_API mp_status_t mp_code_frame_info(const uint8_t* frame, uint64_t size, uint32_t* out_encoding,
                                      uint64_t* out_raw_size);
/* Decode the frame into |buffer| (|capacity| >= its raw size), with every check a load makes:
 * the decoded size and the checksum of the decoded code. */
MP_API mp_status_t mp_code_frame_decode(const uint8_t* frame, uint64_t size, uint8_t* buffer,
                                        uint64_t capacity);
/* The largest frame mp_code_frame_encode may write for |raw_size| bytes of code. */
MP_API uint64_t mp_code_frame_bound(uint64_t raw_size);
/* Encode |raw_size| bytes of code at |raw| as a frame into |buffer|: Zstandard at |level| (1 to
 * 22) when that is smaller (and within MP_CODE_FRAME_MAX_RATIO), else stored; level 0 stores.
 * The same code and level give the same bytes with the same libzstd. *out_size: its size. */
MP_API mp_status_t mp_code_frame_encode(const uint8_t* raw, uint64_t raw_size, int32_t level,
                                        uint8_t* buffer, uint64_t capacity, uint64_t* out_size);
/* True if the |size| bytes at |key| are a type key the format accepts: 1 to
 * MP_FORMAT_MAX_TYPE_KEY bytes of [A-Za-z0-9_.-]. A loader's key may not start with '_'
 * (reserved for "_lib"): pass |allow_reserved| false to check that too. */
MP_API bool mp_type_key_is_valid(const char* key, uint64_t size, bool allow_reserved);
/* MP_API_END */

#ifdef __cplusplus
}
#endif
#endif /* MODPACK_MODPACK_H_ */
