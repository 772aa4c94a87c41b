/* ctest: mp_blob_parse rejects hand-made invalid blobs with MP_ERR_FORMAT and a message that
 * says what is wrong, and never hands out a blob when it fails; every built-in kind, from the
 * runtime's one list (mp_builtin_kind), has a loader that refuses an empty payload and a
 * payload of a newer version cleanly. Uses only the public API. */
#include <stdio.h>
#include <string.h>

#include "modpack/kind.h"

static int failures = 0;

static void put_le(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

/* A 64-byte blob that is only a header: format 1.0, blob/header/index size 64. */
static void make_header(uint8_t h[64]) {
  memset(h, 0, 64);
  memcpy(h, MP_FORMAT_MAGIC, MP_FORMAT_MAGIC_SIZE);
  put_le(h + 8, MP_FORMAT_MAJOR, 2);
  put_le(h + 10, MP_FORMAT_MINOR, 2);
  put_le(h + 12, MP_FORMAT_HEADER_SIZE, 4);
  put_le(h + 16, 64, 8); /* blob_size */
  put_le(h + 48, 64, 8); /* index_size */
}

static void expect_format_error(const char* what, const uint8_t* data, uint64_t size,
                                const char* needle) {
  mp_blob_t* blob = (mp_blob_t*)&failures; /* must be reset to NULL on failure */
  mp_const_byte_span_t bytes = {data, size};
  mp_status_t status = mp_blob_parse(bytes, 0, &blob);
  const char* message = mp_error_message();
  int ok = status == MP_ERR_FORMAT && mp_error_code() == MP_ERR_FORMAT && blob == NULL &&
           message[0] != '\0' && strstr(message, needle) != NULL;
  printf("%s %s: status %d, message: %s\n", ok ? "ok  " : "FAIL", what, (int)status, message);
  if (!ok) {
    ++failures;
    if (status == MP_OK) mp_blob_free(blob);
  }
}

/* Each built-in kind's loader is registered and refuses what it cannot read: no bytes, and a
 * header claiming version 0xffff (every built-in payload starts with a u32 version, and a
 * version it does not know is MP_ERR_INCOMPATIBLE, naming the upgrade). */
static void every_builtin_kind_refuses_garbage(void) {
  uint32_t count = 0;
  for (const char* key; (key = mp_builtin_kind(count)) != NULL; ++count) {
    static const uint8_t newer[16] = {0xff, 0xff, 0, 0};
    const uint8_t* inputs[2] = {newer, newer};
    const uint64_t sizes[2] = {0, sizeof newer};
    for (int i = 0; i < 2; ++i) {
      mp_module_t* module = (mp_module_t*)&failures;
      mp_const_byte_span_t span = {inputs[i], sizes[i]};
      mp_status_t status = mp_module_load_from_payload(key, span, &module);
      int refused = i ? status == MP_ERR_INCOMPATIBLE
                      : status != MP_OK && status != MP_ERR_NOT_FOUND;
      int ok = refused && module == NULL && mp_error_message()[0] != '\0';
      printf("%s built-in kind %s, %s payload: status %d: %s\n", ok ? "ok  " : "FAIL", key,
             i ? "a newer" : "an empty", (int)status, mp_error_message());
      if (!ok) ++failures;
    }
  }
  if (count < 3) {
    printf("FAIL mp_builtin_kind lists %u kinds\n", count);
    ++failures;
  }
}

int main(void) {
  uint8_t h[64];

  every_builtin_kind_refuses_garbage();

  make_header(h);
  expect_format_error("truncated header", h, 16, "truncated");

  make_header(h);
  h[1] = 'X';
  expect_format_error("bad magic", h, sizeof h, "magic");

  make_header(h);
  put_le(h + 56, 0x0123456789abcdefull, 8);
  expect_format_error("index checksum mismatch", h, sizeof h, "checksum");

  /* A correct checksum (XXH3-64 of the index with its checksum field zero), but no root. */
  make_header(h);
  mp_const_byte_span_t index = {h, sizeof h};
  put_le(h + 56, mp_checksum(index), 8);
  expect_format_error("no modules", h, sizeof h, "module_count");

  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("test_blob: OK\n");
  return 0;
}
