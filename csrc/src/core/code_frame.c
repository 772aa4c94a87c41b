/* Code frames: their header checked, their code decoded and encoded (core/code_frame.h and the
 * public mp_code_frame_* calls in modpack/modpack.h, which writers and tools use, so that the
 * one definition of the encoding is this file's). */
#include "core/code_frame.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/checksum.h"
#include "core/error.h"
#include "core/zstd.h"

#define FIELD(name) offsetof(mp_code_frame_v1_t, name)

mp_status_t mp_code_frame_parse(const uint8_t* frame, uint64_t size, mp_code_frame_t* out) {
  memset(out, 0, sizeof *out);
  if (size < MP_CODE_FRAME_HEADER_SIZE)
    return mp_errorf(MP_ERR_FORMAT, "code frame of %" PRIu64 " bytes: shorter than its %d-byte header",
                     size, MP_CODE_FRAME_HEADER_SIZE);
  if (memcmp(frame, MP_CODE_FRAME_MAGIC, 4) != 0)
    return mp_errorf(MP_ERR_FORMAT, "code frame: bad magic (not \"%s\")", MP_CODE_FRAME_MAGIC);
  uint16_t version = mp_load_le16(frame + FIELD(version));
  if (version != MP_CODE_FRAME_VERSION)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "code frame version %u is not supported (this runtime reads %d); upgrade "
                     "modpack",
                     version, MP_CODE_FRAME_VERSION);
  out->encoding = mp_load_le16(frame + FIELD(encoding));
  if (out->encoding != MP_CODE_STORED && out->encoding != MP_CODE_ZSTD)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "code frame encoding %u is unknown (this runtime reads 0 stored and 1 zstd); "
                     "upgrade modpack",
                     out->encoding);
  for (size_t i = FIELD(reserved); i < MP_CODE_FRAME_HEADER_SIZE; ++i)
    if (frame[i] != 0) return mp_errorf(MP_ERR_FORMAT, "code frame: reserved bytes are not 0");
  out->raw_size = mp_load_le64(frame + FIELD(raw_size));
  out->raw_checksum = mp_load_le64(frame + FIELD(raw_checksum));
  out->stored_size = mp_load_le64(frame + FIELD(stored_size));
  out->data = frame + MP_CODE_FRAME_HEADER_SIZE;
  if (out->stored_size != size - MP_CODE_FRAME_HEADER_SIZE)
    return mp_errorf(MP_ERR_FORMAT,
                     "code frame: its header says %" PRIu64 " stored bytes, but the payload gives "
                     "it %" PRIu64,
                     out->stored_size, size - MP_CODE_FRAME_HEADER_SIZE);
  if (out->encoding == MP_CODE_STORED && out->raw_size != out->stored_size)
    return mp_errorf(MP_ERR_FORMAT,
                     "code frame: stored code of %" PRIu64 " bytes says its size is %" PRIu64,
                     out->stored_size, out->raw_size);
  if (out->encoding == MP_CODE_ZSTD &&
      (out->raw_size > MP_CODE_FRAME_MAX_RAW_SIZE ||
       out->raw_size / MP_CODE_FRAME_MAX_RATIO > out->stored_size))
    return mp_errorf(MP_ERR_FORMAT,
                     "code frame: %" PRIu64 " compressed bytes claim to decode to %" PRIu64
                     " (at most %d times as many, and at most %" PRIu64
                     " bytes): damaged, or not written by modpack",
                     out->stored_size, out->raw_size, MP_CODE_FRAME_MAX_RATIO,
                     (uint64_t)MP_CODE_FRAME_MAX_RAW_SIZE);
  return MP_OK;
}

mp_status_t mp_code_frame_decode_into(const mp_code_frame_t* frame, uint8_t* out) {
  if (frame->encoding == MP_CODE_STORED) {
    if (frame->raw_size) memcpy(out, frame->data, frame->raw_size);
  } else {
    uint64_t declared = 0, decoded = 0;
    MP_RETURN_IF_ERROR_PREFIX(
        mp_zstd_frame_content_size(frame->data, frame->stored_size, &declared), "code frame");
    if (declared != frame->raw_size)
      return mp_errorf(MP_ERR_FORMAT,
                       "code frame: its header says %" PRIu64 " bytes of code, its Zstandard "
                       "frame %" PRIu64,
                       frame->raw_size, declared);
    MP_RETURN_IF_ERROR_PREFIX(
        mp_zstd_decompress(frame->data, frame->stored_size, out, frame->raw_size, &decoded),
        "code frame");
    if (decoded != frame->raw_size)
      return mp_errorf(MP_ERR_FORMAT,
                       "code frame: decoded %" PRIu64 " bytes, but its header says %" PRIu64,
                       decoded, frame->raw_size);
  }
  uint64_t checksum = mp_checksum((mp_const_byte_span_t){out, frame->raw_size});
  if (checksum != frame->raw_checksum)
    return mp_errorf(MP_ERR_FORMAT,
                     "code frame: the decoded code's checksum is %016" PRIx64 ", its header says "
                     "%016" PRIx64 "; the library is damaged: export it again",
                     checksum, frame->raw_checksum);
  return MP_OK;
}

/* ---- the public calls -------------------------------------------------------------------- */

mp_status_t mp_code_frame_info(const uint8_t* frame, uint64_t size, uint32_t* out_encoding,
                               uint64_t* out_raw_size) {
  if (!frame || !out_encoding || !out_raw_size)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_code_frame_info: NULL argument");
  mp_code_frame_t parsed;
  MP_RETURN_IF_ERROR(mp_code_frame_parse(frame, size, &parsed));
  *out_encoding = parsed.encoding;
  *out_raw_size = parsed.raw_size;
  return MP_OK;
}

mp_status_t mp_code_frame_decode(const uint8_t* frame, uint64_t size, uint8_t* buffer,
                                 uint64_t capacity) {
  if (!frame || (!buffer && capacity))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_code_frame_decode: NULL argument");
  mp_code_frame_t parsed;
  MP_RETURN_IF_ERROR(mp_code_frame_parse(frame, size, &parsed));
  if (capacity < parsed.raw_size)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "mp_code_frame_decode: the code is %" PRIu64 " bytes, the buffer %" PRIu64,
                     parsed.raw_size, capacity);
  return mp_code_frame_decode_into(&parsed, buffer);
}

uint64_t mp_code_frame_bound(uint64_t raw_size) {
  uint64_t zstd = mp_zstd_bound(raw_size);
  uint64_t most = zstd > raw_size ? zstd : raw_size;
  return most > UINT64_MAX - MP_CODE_FRAME_HEADER_SIZE ? 0 : most + MP_CODE_FRAME_HEADER_SIZE;
}

static void store_le(uint8_t* p, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = (uint8_t)(value >> (8 * i));
}

static void write_header(uint8_t* out, uint32_t encoding, uint64_t raw_size, uint64_t checksum,
                         uint64_t stored_size) {
  memset(out, 0, MP_CODE_FRAME_HEADER_SIZE);
  memcpy(out, MP_CODE_FRAME_MAGIC, 4);
  store_le(out + FIELD(version), MP_CODE_FRAME_VERSION, 2);
  store_le(out + FIELD(encoding), encoding, 2);
  store_le(out + FIELD(raw_size), raw_size, 8);
  store_le(out + FIELD(raw_checksum), checksum, 8);
  store_le(out + FIELD(stored_size), stored_size, 8);
}

mp_status_t mp_code_frame_encode(const uint8_t* raw, uint64_t raw_size, int32_t level,
                                 uint8_t* buffer, uint64_t capacity, uint64_t* out_size) {
  if ((!raw && raw_size) || !buffer || !out_size)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_code_frame_encode: NULL argument");
  if (level < 0 || level > 22)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "mp_code_frame_encode: level %d (0: stored, 1 to 22: zstd)", (int)level);
  if (raw_size > MP_CODE_FRAME_MAX_RAW_SIZE)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "a piece of device code of %" PRIu64 " bytes (a frame holds at most %" PRIu64
                     ")",
                     raw_size, (uint64_t)MP_CODE_FRAME_MAX_RAW_SIZE);
  uint64_t needed = MP_CODE_FRAME_HEADER_SIZE + raw_size;
  if (level > 0 && raw_size > 0) {
    uint64_t bound = mp_zstd_bound(raw_size);
    if (bound == 0) return mp_zstd_compress(raw, 0, level, buffer, 0, out_size); /* why */
    if (bound > raw_size) needed = MP_CODE_FRAME_HEADER_SIZE + bound;
  }
  if (capacity < needed)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "mp_code_frame_encode: a buffer of %" PRIu64 " bytes, %" PRIu64
                     " needed (mp_code_frame_bound)",
                     capacity, needed);
  uint64_t checksum = mp_checksum((mp_const_byte_span_t){raw, raw_size});
  uint8_t* data = buffer + MP_CODE_FRAME_HEADER_SIZE;
  uint64_t room = capacity - MP_CODE_FRAME_HEADER_SIZE, stored = 0;
  if (level > 0 && raw_size > 0) {
    MP_RETURN_IF_ERROR(mp_zstd_compress(raw, raw_size, level, data, room, &stored));
    /* Kept only when smaller and within the ratio a reader accepts. */
    if (stored < raw_size && raw_size / MP_CODE_FRAME_MAX_RATIO <= stored) {
      write_header(buffer, MP_CODE_ZSTD, raw_size, checksum, stored);
      *out_size = MP_CODE_FRAME_HEADER_SIZE + stored;
      return MP_OK;
    }
  }
  if (raw_size) memmove(data, raw, raw_size);
  write_header(buffer, MP_CODE_STORED, raw_size, checksum, raw_size);
  *out_size = MP_CODE_FRAME_HEADER_SIZE + raw_size;
  return MP_OK;
}
