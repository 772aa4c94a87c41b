/* The one list of built-in kinds. Adding a built-in kind: its folder under kinds/ defining an
 * mp_kind_t, and its two lines here (kinds/README.md lists every other place it touches). The
 * list is public through mp_builtin_kind, which the C tests, the fuzz target and the Python
 * suite iterate. */
#include "kinds/builtin.h"

#include "core/once.h"

/* Each kind's descriptor, defined in its own folder. */
extern const mp_kind_t mp_const_kind;
extern const mp_kind_t mp_opencl_kind;
extern const mp_kind_t mp_cuda_kind;
extern const mp_kind_t mp_vulkan_kind;
extern const mp_kind_t mp_rocm_kind;

static const mp_kind_t* const builtin_kinds[] = {
    &mp_const_kind,
    &mp_opencl_kind,
    &mp_cuda_kind,
    &mp_vulkan_kind,
    &mp_rocm_kind,
};

enum { BUILTIN_COUNT = sizeof builtin_kinds / sizeof builtin_kinds[0] };

const char* mp_builtin_kind(uint32_t index) {
  return index < BUILTIN_COUNT ? builtin_kinds[index]->type_key : NULL;
}

static mp_once_t registered = MP_ONCE_INIT;

static void register_all(void) {
  /* Nothing is registered before this runs, so no key or device type can be taken. */
  for (size_t i = 0; i < BUILTIN_COUNT; ++i)
    (void)mp_registry_add_kind(builtin_kinds[i]);
}

void mp_kinds_register_builtin(void) {
  mp_once(&registered, register_all);
}
