/* Zstandard from the system's libzstd, loaded with dlopen the first time a code frame needs it
 * (as libcrypto is for signatures, core/crypto.h): the runtime links nothing more and builds
 * without zstd's headers; a library without compressed code never loads it. Without libzstd,
 * these return MP_ERR_UNAVAILABLE saying what to install. */
#ifndef MODPACK_CORE_ZSTD_H_
#define MODPACK_CORE_ZSTD_H_

#include <stdint.h>

#include "modpack/modpack.h"

/* The size the Zstandard frame at |data| (|size| bytes: exactly one frame) says it decodes to;
 * MP_ERR_FORMAT when it is not one whole frame that records its content size. */
mp_status_t mp_zstd_frame_content_size(const uint8_t* data, uint64_t size, uint64_t* out_size);
/* Decode the one frame at |data| into |capacity| bytes at |out|; *out_size what it decoded.
 * MP_ERR_FORMAT (with zstd's reason) for a damaged frame or one larger than |capacity|. */
mp_status_t mp_zstd_decompress(const uint8_t* data, uint64_t size, uint8_t* out, uint64_t capacity,
                               uint64_t* out_size);
/* Encode |size| bytes at |data| as one frame at |level| (1..22) into |capacity| bytes at |out|
 * (mp_zstd_bound(size) always suffice); deterministic for a given libzstd and level. */
mp_status_t mp_zstd_compress(const uint8_t* data, uint64_t size, int32_t level, uint8_t* out,
                             uint64_t capacity, uint64_t* out_size);
/* The most bytes mp_zstd_compress may write for |size| bytes; 0 when libzstd is missing. */
uint64_t mp_zstd_bound(uint64_t size);

#endif /* MODPACK_CORE_ZSTD_H_ */
