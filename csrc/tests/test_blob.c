/* ctest: mp_blob_parse rejects hand-made invalid blobs with MP_ERR_FORMAT and a message that
 * says what is wrong, and never hands out a blob when it fails; a hand-made blob of format 1.2
 * hands out its metadata (mp_blob_metadata) where its header places it, and none when it says
 * an older minor or places it outside the string table; every built-in kind, from the
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

/* A blob of format 1.2 whose index holds host code alone ("_lib") and |metadata| (placed at
 * |at|, after the key at 160, as the writer places it: 192), with |minor| as its minor. */
enum { EXTRAS_BLOB = 256 };
static void make_extras_blob(uint8_t b[EXTRAS_BLOB], const char* metadata, uint64_t at,
                             uint16_t minor) {
  memset(b, 0, EXTRAS_BLOB);
  memcpy(b, MP_FORMAT_MAGIC, MP_FORMAT_MAGIC_SIZE);
  put_le(b + 8, MP_FORMAT_MAJOR, 2);
  put_le(b + 10, minor, 2);
  put_le(b + 12, MP_FORMAT_HEADER_SIZE_V1_2, 4);
  put_le(b + 16, EXTRAS_BLOB, 8); /* blob_size: no payloads */
  put_le(b + 28, MP_FORMAT_FLAG_PAYLOAD_CHECKSUMS, 4);
  put_le(b + 32, 1, 8);           /* module_count */
  put_le(b + 48, EXTRAS_BLOB, 8); /* index_size */
  put_le(b + 64, at, 8);          /* metadata_offset */
  put_le(b + 72, strlen(metadata), 8);
  /* entry 0 at 96: "_lib", key at offset 0 of the string table, size 4; row_ptr [0, 0] */
  put_le(b + 96 + 28, 4, 4);
  memcpy(b + 160, "_lib", 4); /* the string table starts after row_ptr: 96 + 48 + 16 */
  memcpy(b + at, metadata, strlen(metadata));
  mp_const_byte_span_t index = {b, EXTRAS_BLOB};
  put_le(b + 56, mp_checksum(index), 8);
}

static void metadata_of_a_hand_made_blob(void) {
  static const char json[] = "{\"revision\":\"4f2a9c1\"}";
  uint8_t b[EXTRAS_BLOB];
  for (int minor = MP_FORMAT_MINOR_INDEX_EXTRAS - 1; minor <= MP_FORMAT_MINOR_INDEX_EXTRAS + 1;
       ++minor) {
    make_extras_blob(b, json, 192, (uint16_t)minor);
    mp_blob_t* blob = NULL;
    mp_const_byte_span_t bytes = {b, sizeof b};
    mp_status_t status = mp_blob_parse(bytes, 0, &blob);
    mp_const_byte_span_t metadata = {NULL, 1}, selftests = {NULL, 1};
    if (status == MP_OK) {
      mp_blob_metadata(blob, &metadata);
      mp_blob_selftests(blob, &selftests);
      mp_blob_free(blob);
    }
    /* An older minor has no such fields: header bytes past 64 mean nothing to it. */
    int expected = minor >= MP_FORMAT_MINOR_INDEX_EXTRAS;
    int ok = status == MP_OK && selftests.data == NULL && selftests.size == 0 &&
             (expected ? metadata.data == b + 192 && metadata.size == strlen(json)
                       : metadata.data == NULL && metadata.size == 0);
    printf("%s format 1.%d blob's metadata: status %d, %llu bytes\n", ok ? "ok  " : "FAIL",
           minor, (int)status, (unsigned long long)metadata.size);
    if (!ok) ++failures;
  }
  make_extras_blob(b, json, 128, MP_FORMAT_MINOR_INDEX_EXTRAS); /* in the entries and row_ptr */
  expect_format_error("metadata outside the string table", b, sizeof b,
                      "inside the string table's area [160, 256)");
}

int main(void) {
  uint8_t h[64];

  metadata_of_a_hand_made_blob();

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
