/* The state of a weight file opened for use (weights/weight_file.h), shared by the files that
 * fill it from each format's index: weights/modpack_file.c (modpack's own, modpack/weights.h)
 * and weights/foreign_file.c (safetensors, GGUF), with what they share in weights/weight_index.c.
 * weight_file.c owns its life, its mapping, its checks and what it hands out; nothing else
 * includes this header. */
#ifndef MODPACK_WEIGHTS_WEIGHT_FILE_STATE_H_
#define MODPACK_WEIGHTS_WEIGHT_FILE_STATE_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "files/file.h"
#include "weights/foreign_index.h"
#include "weights/weight_file.h"

struct mp_weight_file {
  atomic_long refcount;
  char* path;
  mp_file_id_t id;
  mp_weights_format_t format;
  /* For a file in another format opened with what a library recorded of its arrays: the
   * caller's digest of those records (files are shared per version and set of records). */
  bool has_records;
  uint8_t records_digest[32];
  uint64_t file_size;
  uint32_t alignment;
  uint64_t data_offset, data_size;
  uint8_t* index; /* the private copy of [0, index_size): modpack's index, a format's header */
  uint64_t index_size;
  uint8_t digest[32];  /* the content digest: the SHA-256 of that copy */
  mp_foreign_index_t foreign; /* another format's index (the arrays' names and types) */
  const uint8_t* map; /* the whole file, read-only and shared */
  int fd;             /* the file, for where its holes are (core/mapped_read.h); -1: unknown */
  uint64_t map_size;
  uint64_t count;
  mp_weight_array_t* arrays;
  int64_t* shapes;   /* every array's extents, one block */
  uint64_t* by_name; /* array indices sorted by name, for lookups */
  uint8_t* signatures; /* the signature block's records (NULL: unsigned) */
  uint64_t signature_count;
  pthread_mutex_t check_lock;
  uint32_t checks_made; /* MP_WEIGHTS_CHECK_*, under check_lock */
  atomic_uchar* array_checked; /* per array: its digest was checked */
  mp_device_array_cache_t device_arrays;
};

/* MP_ERR_FORMAT: |path| is damaged, |what| says how. */
mp_status_t mp_weight_file_damaged(const char* path, const char* what);

/* Fill |f| from the modpack weight file open as |fd| (modpack_file.c): header, seal, index,
 * signatures; arrays without their data pointers (the mapping is made after). */
mp_status_t mp_weight_file_read_modpack(mp_weight_file_t* f, int fd, const char* path);

/* Fill |f| from the file open as |fd| in |format| (foreign_file.c): its index read from its
 * header (|head|: the file's first bytes, read already), the content digest the SHA-256 of
 * that header, and what |records| (|count|, may be none) say of the arrays they name; arrays
 * without their data pointers. */
mp_status_t mp_weight_file_read_foreign(mp_weight_file_t* f, int fd, const char* path,
                                        mp_weights_format_t format, mp_const_byte_span_t head,
                                        const mp_weight_record_t* records, uint64_t count);

/* Sort |f|'s arrays by name for lookups; refuse two of one name. */
mp_status_t mp_weight_file_index_names(mp_weight_file_t* f, const char* path);

#endif /* MODPACK_WEIGHTS_WEIGHT_FILE_STATE_H_ */
