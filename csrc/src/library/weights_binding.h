/* What a loaded tree's weights modules read: for each weight file a library refers to (by the
 * name it records), the binding to the file it uses now, which mp_module_swap_weights replaces.
 *
 * A call sees one version throughout: the first time a call reads a binding, the file it finds
 * is kept (core/call_scope.h) until the call returns, and later reads in the same call, from
 * any module of the binding, find that one. So a swap never mixes old and new arrays in one
 * call, and never waits for calls: calls in flight finish on the old file, which goes when its
 * last call, held version and device copy are gone. */
#ifndef MODPACK_LIBRARY_WEIGHTS_BINDING_H_
#define MODPACK_LIBRARY_WEIGHTS_BINDING_H_

#include <stdbool.h>
#include <stdint.h>

#include "library/load_settings.h"
#include "library/weights_open.h"
#include "modpack/modpack.h"
#include "weights/weight_file.h"

typedef struct mp_weights_binding mp_weights_binding_t;

/* The binding of |library| for the weight file |ref| describes (a new reference): the
 * library's existing one, or a new one over the file at |path|, opened and checked as
 * |settings| say. Another file is refused naming the first difference. |library| NULL: a
 * weight file loaded on its own (then |ref|'s digest is NULL, and with trusted keys the file's
 * own signature must hold). Caller holds the library lock. */
mp_status_t mp_weights_binding_get(mp_library_t* library, const mp_weights_reference_t* ref,
                                   const char* path, const mp_load_settings_t* settings,
                                   mp_weights_binding_t** out_binding);
void mp_weights_binding_release(mp_weights_binding_t* binding);

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

#endif /* MODPACK_LIBRARY_WEIGHTS_BINDING_H_ */
