/* Reading a large mapped range once, from start to end (to hash it), at the speed its pages
 * allow: memory speed when they are in the page cache, the disk's sequential speed when not. */
#ifndef MODPACK_CORE_MAPPED_READ_H_
#define MODPACK_CORE_MAPPED_READ_H_

#include <stdint.h>

#include "modpack/modpack.h"

/* Advise the kernel before |size| bytes at |data| (a file mapping) are read through once... */
void mp_mapped_read_begin(const uint8_t* data, uint64_t size);
/* ...and after, so that later random access to the same pages does not read ahead. */
void mp_mapped_read_end(const uint8_t* data, uint64_t size);

/* mp_checksum of a mapped range, read that way. */
uint64_t mp_checksum_mapped(mp_const_byte_span_t bytes);

#endif /* MODPACK_CORE_MAPPED_READ_H_ */
