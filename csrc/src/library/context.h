/* The module context: the writable pointers a deployable library carries (modpack/abi.h names
 * them, modpack/backend.h defines them) and the runtime fills in after dlopen, through which
 * host code finds device functions and constant arrays and reports errors. */
#ifndef MODPACK_LIBRARY_CONTEXT_H_
#define MODPACK_LIBRARY_CONTEXT_H_

#include "modpack/kind.h"

/* Point |library|'s context at |node| (its "library" node) and fill in every context
 * function the library has a slot for. */
void mp_context_install(mp_library_t* library, mp_module_t* node);

#endif /* MODPACK_LIBRARY_CONTEXT_H_ */
