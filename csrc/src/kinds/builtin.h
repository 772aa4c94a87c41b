/* The built-in kinds: one list, registered once into the passive registry by the runtime's
 * entry points (loading, devices) before they look anything up. */
#ifndef MODPACK_KINDS_BUILTIN_H_
#define MODPACK_KINDS_BUILTIN_H_

#include "core/registry.h"

/* Register every built-in kind (once per process; later calls return at once). */
void mp_kinds_register_builtin(void);

#endif /* MODPACK_KINDS_BUILTIN_H_ */
