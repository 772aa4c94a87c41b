/* A weight file opened and checked for a tree: the file a library recorded (its name, digest,
 * the arrays it reads and, for another format, what it recorded of them), refused otherwise
 * naming the first difference, and checked as the load asks (checksums; for a signed load,
 * digests, and the file's own signature where no signed library vouches for it). What a
 * binding (library/weights_binding.h), a swap and an overlay (library/overlays.h) open goes
 * through here; it knows no library, only what the library recorded. */
#ifndef MODPACK_LIBRARY_WEIGHTS_OPEN_H_
#define MODPACK_LIBRARY_WEIGHTS_OPEN_H_

#include <stdbool.h>
#include <stdint.h>

#include "library/load_settings.h"
#include "modpack/modpack.h"
#include "weights/weight_file.h"

/* What a library records of one weight file it refers to (modpack/kinds/weights.h). */
typedef struct {
  const char* file_name;
  /* Its content digest (modpack's format) or the SHA-256 of its header (another format);
   * NULL for a weight file loaded on its own, which no library vouches for. */
  const uint8_t* digest;
  const mp_array_spec_t* specs; /* the arrays a module reads from it */
  uint64_t count;
  /* A file in another format: what was recorded of its arrays, which it does not carry, and
   * the digest of those records (NULL: none). */
  const mp_weight_record_t* records;
  uint64_t record_count;
  const uint8_t* records_digest;
} mp_weights_reference_t;

/* The weight file at |path| opened (mp_weight_file_open, or with |ref|'s records) and checked
 * as a binding needs it: the file the library at |library_path| recorded as |ref| says,
 * refused otherwise naming the first difference; checked as |settings| say (checksums; for a
 * signed load, digests, and the file's own signature when no signed library vouches for its
 * digest). A new reference. */
mp_status_t mp_weights_open_checked(const char* path, const mp_weights_reference_t* ref,
                                    const char* library_path,
                                    const mp_load_settings_t* settings,
                                    mp_weight_file_t** out_file);

/* |file| is the file the library at |library_path| recorded as |ref| says: refused otherwise
 * (MP_ERR_MISMATCH; MP_ERR_UNTRUSTED in a signed load), naming the first array that differs,
 * else saying the contents do. */
mp_status_t mp_weights_check_recorded(mp_weight_file_t* file, const mp_weights_reference_t* ref,
                                      const char* library_path, bool signed_load);

/* Integrity and, for a signed load, authenticity of |file| as |settings| ask. |trusted|: the
 * file's digest is vouched for already (a signed library recorded it); otherwise a signed load
 * needs the file's own signature. */
mp_status_t mp_weights_check_file(mp_weight_file_t* file, const mp_load_settings_t* settings,
                                  bool trusted);

#endif /* MODPACK_LIBRARY_WEIGHTS_OPEN_H_ */
