/* The seal of a library file (modpack/format.h), checked by reading the file before dlopen. */
#ifndef MODPACK_LOAD_SEAL_H_
#define MODPACK_LOAD_SEAL_H_

#include "modpack/modpack.h"

/* mp_seal_check_file (modpack.h) on an open file of |file_size| bytes; |path| names it in
 * messages. */
mp_status_t mp_seal_check_fd(int fd, uint64_t file_size, const char* path, mp_seal_v1_t* out);

#endif /* MODPACK_LOAD_SEAL_H_ */
