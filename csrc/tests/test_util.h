/* Helpers for the runtime's C tests of payloads: a little-endian byte writer for hand-made
 * payloads, and loading them through the public API (the checks: test_check.h). */
#ifndef MODPACK_TEST_UTIL_H_
#define MODPACK_TEST_UTIL_H_

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modpack/kind.h"
#include "test_check.h"


/* A payload being written: 64-byte aligned, as payloads are inside a blob. */
typedef struct {
  _Alignas(64) uint8_t data[1 << 16];
  size_t size;
} buf_t;

static inline void put(buf_t* b, const void* bytes, size_t n) {
  if (b->size + n > sizeof b->data) {
    printf("test payload too large\n");
    exit(2);
  }
  memcpy(b->data + b->size, bytes, n);
  b->size += n;
}
static inline void put_u8(buf_t* b, uint8_t v) {
  put(b, &v, 1);
}
static inline void put_u16(buf_t* b, uint16_t v) {
  uint8_t p[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
  put(b, p, 2);
}
static inline void put_u32(buf_t* b, uint32_t v) {
  uint8_t p[4];
  for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
  put(b, p, 4);
}
static inline void put_u64(buf_t* b, uint64_t v) {
  uint8_t p[8];
  for (int i = 0; i < 8; ++i) p[i] = (uint8_t)(v >> (8 * i));
  put(b, p, 8);
}
/* u32 size, then the bytes of |s| (no NUL). */
static inline void put_str(buf_t* b, const char* s) {
  put_u32(b, (uint32_t)strlen(s));
  put(b, s, strlen(s));
}
static inline void pad_to(buf_t* b, size_t alignment) {
  while (b->size % alignment) put_u8(b, 0);
}
static inline void set_u32(buf_t* b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b->data[at + i] = (uint8_t)(v >> (8 * i));
}
static inline void set_u64(buf_t* b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b->data[at + i] = (uint8_t)(v >> (8 * i));
}

/* Loads |size| bytes at |data| with the |type_key| loader; NULL (and a failure) if refused. */
static inline mp_module_t* load(const char* type_key, const uint8_t* data, size_t size) {
  mp_module_t* module = NULL;
  mp_const_byte_span_t span = {data, size};
  mp_status_t status = mp_module_load_from_payload(type_key, span, &module);
  CHECK(status == MP_OK && module, "%s payload refused: %s", type_key, mp_error_message());
  return status == MP_OK ? module : NULL;
}

/* The payload must be refused with |code| and a message containing |needle|. */
static inline void expect_refused(const char* what, const char* type_key, const uint8_t* data,
                                  size_t size, mp_status_t code, const char* needle) {
  mp_module_t* module = (mp_module_t*)&failures; /* must be reset to NULL */
  mp_const_byte_span_t span = {data, size};
  mp_status_t status = mp_module_load_from_payload(type_key, span, &module);
  const char* message = mp_error_message();
  int ok = status == code && module == NULL && strstr(message, needle) != NULL;
  printf("%s %s %s: status %d: %s\n", ok ? "ok  " : "FAIL", type_key, what, (int)status, message);
  if (!ok) {
    ++failures;
    if (status == MP_OK && module) mp_module_release(module);
  }
}

/* Every strict prefix of a valid payload is refused cleanly (an error, no module, no crash). */
static inline void every_prefix_refused(const char* type_key, const buf_t* b) {
  int refused = 0;
  for (size_t n = 0; n < b->size; ++n) {
    mp_module_t* module = NULL;
    mp_const_byte_span_t span = {b->data, n};
    mp_status_t status = mp_module_load_from_payload(type_key, span, &module);
    if (status == MP_OK) {
      CHECK(0, "%s: a %zu-byte prefix of a %zu-byte payload loaded", type_key, n, b->size);
      mp_module_release(module);
    } else {
      CHECK(module == NULL && mp_error_message()[0] != '\0', "%s: prefix %zu", type_key, n);
      ++refused;
    }
  }
  printf("%s %s: all %d truncations refused\n", refused == (int)b->size ? "ok  " : "FAIL", type_key,
         refused);
}

/* mp_module_describe as a string (static buffer). */
static inline const char* describe(mp_module_t* module) {
  static char text[1 << 14];
  uint64_t needed = 0;
  CHECK(mp_module_describe(module, text, sizeof text, &needed) == MP_OK, "describe: %s",
        mp_error_message());
  CHECK(needed == strlen(text), "describe says %llu bytes, wrote %zu", (unsigned long long)needed,
        strlen(text));
  return text;
}


#endif /* MODPACK_TEST_UTIL_H_ */
