/* The extent of a call: from the moment a function of a loaded tree is called on a thread
 * (mp_function_call) until that outermost call returns, nested calls included.
 *
 * What a call looks up may be kept for the rest of it. Weight files use this so that a call
 * sees one version of the weights throughout, even when they are swapped while it runs: the
 * first lookup in a call keeps the version it found, later lookups in the same call find
 * that one, and it is released when the call returns. */
#ifndef MODPACK_CORE_CALL_SCOPE_H_
#define MODPACK_CORE_CALL_SCOPE_H_

#include <stdbool.h>

#include "modpack/modpack.h"

void mp_call_scope_enter(void);
/* Leaving the outermost call releases everything kept during it. */
void mp_call_scope_exit(void);

/* Whether this thread is inside a call. */
bool mp_call_scope_active(void);
/* What the current call keeps under |key|, or NULL. */
void* mp_call_scope_find(const void* key);
/* Keep |value| under |key| until the outermost call returns, then call release(value). Only
 * inside a call; MP_ERR_RESOURCE_EXHAUSTED when out of memory (|value| is then not kept). */
mp_status_t mp_call_scope_keep(const void* key, void* value, void (*release)(void* value));

#endif /* MODPACK_CORE_CALL_SCOPE_H_ */
