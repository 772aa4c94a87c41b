/* Reading untrusted bytes: checked size arithmetic, little-endian loads that never assume
 * alignment, and a bounds-checked cursor (reader.c) whose every read checks what remains, in
 * subtraction form, before touching memory. */
#ifndef MODPACK_CORE_BYTES_H_
#define MODPACK_CORE_BYTES_H_

#include <stdbool.h>
#include <stdint.h>

#include "modpack/modpack.h"

/* ---- checked size arithmetic (true on success) ---- */
static inline bool mp_add_u64(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}
static inline bool mp_mul_u64(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
/* |offset| + |size| <= |total|, without overflow. */
static inline bool mp_in_bounds(uint64_t offset, uint64_t size, uint64_t total) {
  return offset <= total && size <= total - offset;
}

/* ---- little-endian loads ---- */
static inline uint16_t mp_load_le16(const uint8_t* p) {
  return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t mp_load_le32(const uint8_t* p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t mp_load_le64(const uint8_t* p) {
  return (uint64_t)mp_load_le32(p) | ((uint64_t)mp_load_le32(p + 4) << 32);
}
static inline void mp_store_le64(uint8_t* p, uint64_t value) {
  for (int i = 0; i < 8; ++i) p[i] = (uint8_t)(value >> (8 * i));
}

/* ---- a bounds-checked cursor over payload bytes ---- */
typedef struct {
  const uint8_t* data;
  uint64_t size;
  uint64_t pos;
  const char* what; /* for messages: "opencl payload" */
} mp_reader_t;

bool mp_read_u8(mp_reader_t* r, uint8_t* out);
bool mp_read_u32(mp_reader_t* r, uint32_t* out);
bool mp_read_u64(mp_reader_t* r, uint64_t* out);
/* |*out| points into the payload (no copy); fails if |n| bytes are not there. */
bool mp_read_bytes(mp_reader_t* r, uint64_t n, const uint8_t** out);

/* The offset of the first byte of |s| that does not begin a valid UTF-8 sequence (overlong
 * forms and surrogates are invalid), or |size| when all of it is UTF-8. */
uint64_t mp_utf8_invalid_at(const uint8_t* s, uint64_t size);
/* A length-prefixed (u32) string of 1..|max| bytes without NUL, copied NUL-terminated into a
 * new allocation (*out, freed by the caller). |where| ("kernel vadd: ", may be "") and |field|
 * name it in messages; a size out of range is reported as the violated limit. */
mp_status_t mp_read_string(mp_reader_t* r, uint32_t max, const char* where, const char* field,
                           char** out);
/* The same, except that size 0 is allowed and leaves *out NULL (an absent optional string). */
mp_status_t mp_read_optional_string(mp_reader_t* r, uint32_t max, const char* where,
                                    const char* field, char** out);
/* The error for a failed read: names the payload and the position. */
mp_status_t mp_reader_error(const mp_reader_t* r, const char* field);

#endif /* MODPACK_CORE_BYTES_H_ */
