/* Code frames (modpack/format.h): one piece of device code as a payload stores it when its
 * entry says so, in place or compressed with Zstandard. This is where a frame's header is
 * read and checked and where its code is decoded; kinds/common/code.h keeps a piece decoded
 * once, for the life of its module. */
#ifndef MODPACK_CORE_CODE_FRAME_H_
#define MODPACK_CORE_CODE_FRAME_H_

#include <stdint.h>

#include "modpack/format.h"
#include "modpack/modpack.h"

typedef struct {
  uint32_t encoding; /* MP_CODE_STORED or MP_CODE_ZSTD */
  uint64_t raw_size;
  uint64_t raw_checksum;
  const uint8_t* data; /* the stored data, after the header */
  uint64_t stored_size;
} mp_code_frame_t;

/* Read and check the frame header of the |size| bytes at |frame| (the whole piece): magic,
 * version, encoding, reserved bytes zero, stored size equal to what follows the header, and
 * the raw size within bounds (equal to the stored size when stored; at most
 * MP_CODE_FRAME_MAX_RAW_SIZE and MP_CODE_FRAME_MAX_RATIO times the stored size when
 * compressed). MP_ERR_FORMAT naming the field; nothing is decoded. */
mp_status_t mp_code_frame_parse(const uint8_t* frame, uint64_t size, mp_code_frame_t* out);
/* Decode |frame| (parsed) into exactly frame->raw_size bytes at |out|, and check them against
 * raw_checksum. Compressed data that decodes to another size, or does not decode, is
 * MP_ERR_FORMAT; a missing libzstd MP_ERR_UNAVAILABLE. */
mp_status_t mp_code_frame_decode_into(const mp_code_frame_t* frame, uint8_t* out);

#endif /* MODPACK_CORE_CODE_FRAME_H_ */
