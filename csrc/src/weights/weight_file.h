/* A weight file opened for use: validated, mapped read-only and shared. The process holds one
 * object per version of a file, so every library that refers to the file, and every load of
 * it, maps it once; and each check is made once per object.
 *
 * A weight file is modpack's own (modpack/weights.h) or another project's: safetensors or GGUF
 * (weights/foreign_index.h), read in place. Opening validates everything that can be validated
 * without reading the arrays: for modpack's, its header, seal, index checksum, records and data
 * ranges (weights/modpack_file.c); for another format, its header as that format defines it
 * (weights/safetensors.c, weights/gguf.c). The index (the header) is read into private memory
 * and parsed there, so a writer who changes the file later cannot change a name, dtype, shape
 * or offset, and the content digest is the SHA-256 of those very bytes. The arrays are checked
 * on request: their XXH3 checksums (integrity), or their chunked SHA-256 digests
 * (authenticity: what a library or a signature vouches for), all at once on every core or one
 * array at a time. A modpack file records both for every array; a file in another format
 * records neither, so they come from a library that recorded them when it was exported
 * (mp_weight_file_open_recorded), and a file opened without them is checked for its structure
 * only.
 *
 * An array whose data is not aligned to its element size in the file (safetensors places
 * arrays back to back) is handed out as a private aligned copy, made once when the file is
 * opened; its checks then hash the copy, which is what is used. */
#ifndef MODPACK_WEIGHTS_WEIGHT_FILE_H_
#define MODPACK_WEIGHTS_WEIGHT_FILE_H_

#include <stdbool.h>
#include <stdint.h>

#include "device/array_cache.h"
#include "modpack/modpack.h"
#include "weights/foreign_index.h"

typedef struct mp_weight_file mp_weight_file_t;

typedef struct {
  const char* name;  /* NUL-terminated */
  DLTensor tensor;   /* a CPU array in the file's mapping (or its copy), compact, read-only */
  uint64_t offset;   /* of its data in the file */
  uint64_t size;     /* of its data */
  bool recorded;     /* checksum and digest are known (the file's records, or a library's) */
  uint64_t checksum; /* XXH3-64, from its record */
  uint8_t digest[32]; /* chunked SHA-256, from its record */
  bool copied;       /* tensor.data is a private aligned copy of its bytes, not the mapping */
  const mp_foreign_array_t* foreign; /* what another format says of it; NULL: modpack's */
} mp_weight_array_t;

/* What a library recorded of an array of a weight file in another format, which carries no
 * checksums or digests of its own. */
typedef struct {
  const char* name;
  uint64_t checksum;  /* XXH3-64 of its bytes */
  uint8_t digest[32]; /* chunked SHA-256 of its bytes */
} mp_weight_record_t;

/* What mp_weight_file_check checks. */
enum {
  MP_WEIGHTS_CHECK_CHECKSUMS = 1, /* every array's XXH3-64, and zeros between arrays */
  MP_WEIGHTS_CHECK_DIGESTS = 2,   /* every array's chunked SHA-256 */
};

/* The weight file at |path| (a new reference): the object already open for this version of
 * the file, or a new one, opened and validated. A file rewritten in place while an earlier
 * version of it is open is refused (MP_ERR_IO), as for libraries. */
mp_status_t mp_weight_file_open(const char* path, mp_weight_file_t** out_file);
/* The same for a file in another format (safetensors, GGUF) that a library recorded |records|
 * of (|count|), which its checks then check against; |records_digest| is the caller's digest of
 * those records: one object per version of the file and set of records. A modpack weight file
 * is opened as by mp_weight_file_open (its own records are the ones it is checked against). */
mp_status_t mp_weight_file_open_recorded(const char* path, const mp_weight_record_t* records,
                                         uint64_t count, const uint8_t records_digest[32],
                                         mp_weight_file_t** out_file);
void mp_weight_file_retain(mp_weight_file_t* file);
void mp_weight_file_release(mp_weight_file_t* file);

const char* mp_weight_file_path(const mp_weight_file_t* file);
mp_weights_format_t mp_weight_file_format(const mp_weight_file_t* file);
/* Whether |file| was opened with the records whose digest is |records_digest| (NULL: none, as
 * for a modpack file or another format's opened on its own). */
bool mp_weight_file_records_match(const mp_weight_file_t* file, const uint8_t* records_digest);
/* The content digest: the SHA-256 of the index, naming every array and its digest. */
const uint8_t* mp_weight_file_digest(const mp_weight_file_t* file);
uint64_t mp_weight_file_count(const mp_weight_file_t* file);
const mp_weight_array_t* mp_weight_file_array(const mp_weight_file_t* file, uint64_t index);
/* The index of the array called |name|, or UINT64_MAX. */
uint64_t mp_weight_file_find(const mp_weight_file_t* file, const char* name);
/* Whether |array| is one |file| hands out (&mp_weight_file_array(file, i)->tensor). */
bool mp_weight_file_holds(const mp_weight_file_t* file, const DLTensor* array);
/* The file's size and its alignment, for tools. */
uint64_t mp_weight_file_size(const mp_weight_file_t* file);
uint32_t mp_weight_file_alignment(const mp_weight_file_t* file);

/* An array as a reader expects it: its name, dtype and shape. */
typedef struct {
  const char* name;
  DLDataType dtype;
  int32_t ndim;
  const int64_t* shape;
} mp_array_spec_t;

/* The first way |file|'s arrays differ from |specs| (a missing array, another dtype or shape;
 * with |exact|, also an array |specs| lack), as MP_ERR_MISMATCH naming the array, the file
 * and |what| (what the specs come from: "the library", "the weight file it would replace");
 * MP_OK when they agree. */
mp_status_t mp_weight_file_match(const mp_weight_file_t* file, const mp_array_spec_t* specs,
                                 uint64_t count, bool exact, const char* what);

/* Make the |checks| (MP_WEIGHTS_CHECK_*) not made yet on this object. A mismatch is
 * MP_ERR_FORMAT for a checksum (damage) and MP_ERR_UNTRUSTED for a digest (the file is not the
 * one vouched for), naming the array. */
mp_status_t mp_weight_file_check(mp_weight_file_t* file, uint32_t checks);
/* The digest of array |index| alone, checked once (its first use, for verification on first
 * use); thread-safe. */
mp_status_t mp_weight_file_check_array(mp_weight_file_t* file, uint64_t index);
/* Whether array |index|'s digest has been checked (alone or with all the others). */
bool mp_weight_file_array_checked(const mp_weight_file_t* file, uint64_t index);

/* The file's signatures (what they sign: modpack/weights.h), checked against |keys| (may be
 * none): each signer in |out_infos| (up to |capacity|), their number in *out_count and whether
 * one by a trusted key holds in *out_trusted. Only the index is signed: the arrays' digests
 * must be checked as well for the arrays to be vouched for. */
mp_status_t mp_weight_file_signatures(const mp_weight_file_t* file, const mp_trusted_key_t* keys,
                                      uint64_t num_keys, mp_signature_info_t* out_infos,
                                      uint64_t capacity, uint64_t* out_count, bool* out_trusted);

/* The file's arrays copied to devices (kept as long as the object: every library sharing the
 * file shares them). */
mp_device_array_cache_t* mp_weight_file_device_arrays(mp_weight_file_t* file);

/* A JSON object describing the file for tools (path, size, alignment, digest, arrays with
 * offset, size, checksum and digest), NUL-terminated into |buffer| (truncated to |capacity|);
 * *out_length receives the length it needs. */
mp_status_t mp_weight_file_describe(const mp_weight_file_t* file, char* buffer, uint64_t capacity,
                                    uint64_t* out_length);

#endif /* MODPACK_WEIGHTS_WEIGHT_FILE_H_ */
