/* What a load checks of a library file before anything of it is mapped: its kind (a shared
 * library for this machine; a modpack weight file or a TVM library named as such, sealed or
 * not), its seal, or for a library loaded unsealed on request its extents. */
#ifndef MODPACK_LOAD_FILE_CHECK_H_
#define MODPACK_LOAD_FILE_CHECK_H_

#include <stdbool.h>

#include "files/file.h"
#include "modpack/modpack.h"

/* The checks before dlopen on the library open as |fd|: *sealed says whether it carries a
 * (valid) seal, then in |seal|. |any_machine|: a library built for another machine passes (the
 * tools check the rest of such a file, and name its machine last: load/check.c). */
mp_status_t mp_file_check_before_dlopen(int fd, const char* path, const mp_file_id_t* id,
                                        uint32_t flags, bool any_machine, mp_seal_v1_t* seal,
                                        bool* sealed);

#endif /* MODPACK_LOAD_FILE_CHECK_H_ */
