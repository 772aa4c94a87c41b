/* The chunked SHA-256 of weight files (modpack/weights.h): the SHA-256 of the concatenated
 * SHA-256 digests of each MP_WEIGHTS_DIGEST_CHUNK-byte chunk. Chunks are independent, so many
 * arrays, or one large array, hash on every core at once. */
#ifndef MODPACK_WEIGHTS_DIGEST_H_
#define MODPACK_WEIGHTS_DIGEST_H_

#include <stdint.h>

#include "modpack/modpack.h"

typedef struct {
  const uint8_t* data; /* |size| bytes, typically a mapping of a weight file */
  uint64_t size;
  /* The file mapped at |data|, from its byte |file_offset| (-1: none): a chunk in one of its
   * holes is the SHA-256 of zeros, hashed without touching the mapping (core/mapped_read.h). */
  int fd;
  uint64_t file_offset;
  uint8_t digest[32]; /* out: the chunked SHA-256 of the bytes */
} mp_digest_job_t;

/* The chunked SHA-256 of each of |count| jobs, their chunks spread over up to as many threads
 * as there are online cores (at most 8). */
mp_status_t mp_chunked_sha256(mp_digest_job_t* jobs, uint64_t count);

#endif /* MODPACK_WEIGHTS_DIGEST_H_ */
