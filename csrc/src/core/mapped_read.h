/* Reading a large mapped range once, from start to end (to hash it), at the speed its pages
 * allow: memory speed when they are in the page cache, the disk's sequential speed when not. */
#ifndef MODPACK_CORE_MAPPED_READ_H_
#define MODPACK_CORE_MAPPED_READ_H_

#include <stdbool.h>
#include <stdint.h>

#include "modpack/modpack.h"

/* Advise the kernel before |size| bytes at |data| (a file mapping) are read through once... */
void mp_mapped_read_begin(const uint8_t* data, uint64_t size);
/* ...and after, so that later random access to the same pages does not read ahead. */
void mp_mapped_read_end(const uint8_t* data, uint64_t size);

/* mp_checksum of a mapped range, read that way. */
uint64_t mp_checksum_mapped(mp_const_byte_span_t bytes);

/* Holes. A sparse file's holes read as zeros, but reading them through a mapping (or read())
 * fills the page cache with zeroed pages: about 2.6 s per GiB here, so that a crafted file of
 * a few kilobytes claiming 8 GiB of data kept a check busy for half a minute. Pieces the file
 * system says are holes are hashed from zeros in memory instead, at memory speed, and their
 * pages never touched. A writer who fills a hole after it was found is a writer of the file
 * after the check, which docs/trust.md covers. */
enum { MP_ZEROS_SIZE = 4 << 20 };

/* MP_ZEROS_SIZE bytes of zeros, read-only. */
const uint8_t* mp_zeros(void);

/* The extent of the file open as |fd| that starts at |offset|, cut at |end|: where it ends,
 * and in *out_hole whether it is a hole (SEEK_DATA, SEEK_HOLE); data to |end| when the file
 * system cannot tell (or |fd| < 0). */
uint64_t mp_file_extent(int fd, uint64_t offset, uint64_t end, bool* out_hole);

/* Whether the |size| bytes at |offset| of |fd| are all in a hole; false when unknown. */
bool mp_file_is_hole(int fd, uint64_t offset, uint64_t size);

/* Whether [offset, offset + size) of |fd| has a hole anywhere (SEEK_HOLE); false when unknown. */
bool mp_file_has_hole(int fd, uint64_t offset, uint64_t size);

/* Give |consume| the |size| bytes at |data|, a mapping of the file |fd| from its byte
 * |file_offset| (|fd| < 0: unknown), in order: each stretch of data as the mapping holds it
 * (read as mp_mapped_read_begin advises), each hole as zeros from memory (pieces of at most
 * MP_ZEROS_SIZE). Stops at, and returns, the first status other than MP_OK. */
typedef mp_status_t (*mp_bytes_sink_t)(void* context, const uint8_t* bytes, uint64_t size);
mp_status_t mp_read_mapped_file(const uint8_t* data, uint64_t size, int fd, uint64_t file_offset,
                                mp_bytes_sink_t consume, void* context);

/* mp_checksum_mapped of |bytes|, a mapping of the file |fd| from its byte |file_offset|
 * (|fd| < 0: unknown), its holes hashed from zeros. */
uint64_t mp_checksum_mapped_file(mp_const_byte_span_t bytes, int fd, uint64_t file_offset);

#endif /* MODPACK_CORE_MAPPED_READ_H_ */
