/* Functions: a packed C function pointer plus its state, reference counted, keeping the
 * module (and so the library whose code it points into) alive. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/call_scope.h"
#include "core/error.h"
#include "core/module.h"

struct mp_function {
  atomic_long refcount;
  mp_packed_cfunc_t fn;
  void* self;
  void (*destroy_self)(void*);
  mp_module_t* owner; /* retained */
};

mp_status_t mp_function_create(mp_packed_cfunc_t fn, void* self, void (*destroy_self)(void*),
                               mp_module_t* owner, mp_function_t** out_function) {
  *out_function = NULL;
  if (!fn) {
    if (destroy_self) destroy_self(self);
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_function_create: NULL function pointer");
  }
  mp_function_t* f = malloc(sizeof *f);
  if (!f) {
    if (destroy_self) destroy_self(self);
    return mp_out_of_memory("a function");
  }
  atomic_init(&f->refcount, 1);
  f->fn = fn;
  f->self = self;
  f->destroy_self = destroy_self;
  f->owner = owner;
  mp_module_retain(owner);
  *out_function = f;
  return MP_OK;
}

void mp_function_retain(mp_function_t* function) {
  if (function) atomic_fetch_add_explicit(&function->refcount, 1, memory_order_relaxed);
}

void mp_function_release(mp_function_t* function) {
  if (!function) return;
  if (atomic_fetch_sub_explicit(&function->refcount, 1, memory_order_acq_rel) != 1) return;
  if (function->destroy_self) function->destroy_self(function->self);
  mp_module_t* owner = function->owner;
  free(function);
  mp_module_release(owner);
}

/* A nested call (host code re-entering the runtime) inside a call whose failure mark is set
 * would clear the message of the failure that set it; it is kept aside and put back when the
 * nested call succeeds, so the enclosing call fails with its own message. Rare: only a call
 * that went on from a failure pays for the copy. */
static char* keep_enclosing_message(const mp_thread_state_t* thread) {
  size_t size = strlen(thread->error_message) + 1;
  char* kept = malloc(size);
  if (kept) memcpy(kept, thread->error_message, size);
  return kept;
}

mp_status_t mp_function_call(mp_function_t* function, const mp_value_t* args, int32_t num_args,
                             mp_value_t* out_ret) {
  if (!function || !out_ret)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_function_call: NULL function or out_ret");
  out_ret->type_code = MP_TYPE_NONE;
  out_ret->flags = 0;
  out_ret->v_int64 = 0;
  if (num_args < 0 || (num_args > 0 && !args))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_function_call: bad argument array");
  mp_thread_state_t* thread = mp_thread_state(); /* once: the error channel and the scope */
  mp_status_t enclosing_mark = mp_call_scope_enter(thread);
  char* enclosing_message = enclosing_mark != MP_OK ? keep_enclosing_message(thread) : NULL;
  thread->error_code = MP_OK;
  thread->error_message[0] = '\0';
  mp_status_t status = function->fn(function->self, args, num_args, out_ret);
  if (status == MP_OK) status = mp_call_scope_mark(thread); /* a failure the code went on from */
  mp_call_scope_exit(thread, enclosing_mark);
  if (enclosing_message) {
    if (status == MP_OK) mp_error_set(enclosing_mark, enclosing_message);
    free(enclosing_message);
  }
  if (status == MP_OK) return MP_OK;
  if (thread->error_message[0] == '\0')
    return mp_errorf(status, "a function returned status %d without an error message", (int)status);
  if (thread->error_code != status) mp_error_set(status, thread->error_message);
  return status;
}
