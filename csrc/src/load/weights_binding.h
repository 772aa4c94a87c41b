/* What a loaded tree's weights modules read: for each weight file a library refers to (by the
 * name it records), the binding to the file it uses now, which mp_module_swap_weights replaces.
 *
 * A call sees one version throughout: the first time a call reads a binding, the file it finds
 * is kept (core/call_scope.h) until the call returns, and later reads in the same call, from
 * any module of the binding, find that one. So a swap never mixes old and new arrays in one
 * call, and never waits for calls: calls in flight finish on the old file, which goes when its
 * last call, held version and device copy are gone. */
#ifndef MODPACK_LOAD_WEIGHTS_BINDING_H_
#define MODPACK_LOAD_WEIGHTS_BINDING_H_

#include <stdbool.h>
#include <stdint.h>

#include "load/load_settings.h"
#include "modpack/modpack.h"
#include "weights/weight_file.h"

typedef struct mp_weights_binding mp_weights_binding_t;

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

/* The binding of |library| for the weight file |ref| describes (a new reference): the
 * library's existing one, or a new one over the file at |path|, opened and checked as
 * |settings| say. Another file is refused naming the first difference. |library| NULL: a
 * weight file loaded on its own (then |ref|'s digest is NULL, and with trusted keys the file's
 * own signature must hold). Caller holds the library lock. */
mp_status_t mp_weights_binding_get(mp_library_t* library, const mp_weights_reference_t* ref,
                                   const char* path, const mp_load_settings_t* settings,
                                   mp_weights_binding_t** out_binding);
void mp_weights_binding_release(mp_weights_binding_t* binding);

/* The weight file at |path| opened (mp_weight_file_open, or with |ref|'s records) and checked
 * as a binding needs it: the file the library at |library_path| recorded as |ref| says,
 * refused otherwise naming the first difference; checked as |settings| say (checksums; for a
 * signed load, digests, and the file's own signature when no signed library vouches for its
 * digest). A new reference. */
mp_status_t mp_weights_open_checked(const char* path, const mp_weights_reference_t* ref,
                                    const char* library_path,
                                    const mp_load_settings_t* settings,
                                    mp_weight_file_t** out_file);

/* The library's binding recorded as |file_name| (NULL: its only one), retained; NULL with an
 * error naming the files it has when there is no such binding. Caller holds the library
 * lock. */
mp_status_t mp_weights_binding_find(mp_library_t* library, const char* file_name,
                                    mp_weights_binding_t** out_binding);

/* Every weight file |settings| give by name is one |library| binds
 * (mp_load_settings_check_names): for a load of a live tree, or of a library whose weight
 * files were not checked ahead of dlopen (one loaded unsealed). Caller holds the library
 * lock. */
mp_status_t mp_weights_binding_check_given(mp_library_t* library,
                                           const mp_load_settings_t* settings);

const char* mp_weights_binding_file_name(const mp_weights_binding_t* binding);
/* The name of a weight file |library| binds other than |file_name|, or NULL. Caller holds the
 * library lock. */
const char* mp_weights_binding_other_file(mp_library_t* library, const char* file_name);

/* The file the caller reads: inside a call, the one the call keeps (kept now if this is the
 * call's first read of the binding); outside, the current one (borrowed: valid until the next
 * swap). */
mp_status_t mp_weights_binding_file(mp_weights_binding_t* binding, mp_weight_file_t** out_file);
/* The current file, retained. */
mp_weight_file_t* mp_weights_binding_current(mp_weights_binding_t* binding);

/* Array |index| of |file| for a reader of |binding|: checked against its digest first when the
 * binding verifies on first use. */
mp_status_t mp_weights_binding_array(const mp_weights_binding_t* binding, mp_weight_file_t* file,
                                     uint64_t index, const DLTensor** out_array);

/* Replace the file (mp_module_swap_weights in modpack.h says what is checked first). */
mp_status_t mp_weights_binding_swap(mp_weights_binding_t* binding, const char* path);

#endif /* MODPACK_LOAD_WEIGHTS_BINDING_H_ */
