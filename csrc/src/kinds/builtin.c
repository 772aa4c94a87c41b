/* The one list of built-in kinds. Adding a built-in kind: its folder under kinds/, its
 * descriptor's declaration in builtin.h and one line here. */
#include "kinds/builtin.h"

#include <pthread.h>

static const mp_kind_t* const builtin_kinds[] = {
    &mp_const_kind,
    &mp_opencl_kind,
    &mp_cuda_kind,
};

static pthread_once_t registered = PTHREAD_ONCE_INIT;

static void register_all(void) {
  /* Nothing is registered before this runs, so no key or device type can be taken. */
  for (size_t i = 0; i < sizeof builtin_kinds / sizeof builtin_kinds[0]; ++i)
    (void)mp_registry_add_kind(builtin_kinds[i]);
}

void mp_kinds_register_builtin(void) {
  pthread_once(&registered, register_all);
}
