/* ctest: the safetensors reader (weights/safetensors.c) refuses each kind of bad file with the
 * status and a message naming the problem — a header larger than the file or than 100 MB, JSON
 * that is not JSON or not the format's, an unknown dtype, overlapping ranges, a gap, a range
 * past the file, a shape whose bytes disagree with its range, two tensors of one name, shapes
 * that overflow, deep nesting, a NUL in a name — and reads a valid file into an index that is
 * checked field by field (F4 and F6 as their whole-byte groups among them). Every truncation
 * of a valid file is refused. Through the internal interface (weights/foreign_index.h). */
#define _GNU_SOURCE /* mkstemp */
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/bytes.h"
#include "test_check.h"
#include "weights/foreign_index.h"

static char path[] = "/tmp/modpack_test_safetensors_XXXXXX";

static void write_bytes(const uint8_t* bytes, size_t size) {
  FILE* f = fopen(path, "wb");
  if (!f || fwrite(bytes, 1, size, f) != size || fclose(f) != 0) exit(2);
}

/* A file: the u64 |claimed| (the header's size), |json|, then |data_size| bytes 0x5A. */
static size_t write_claimed(uint64_t claimed, const char* json, size_t data_size) {
  size_t json_size = strlen(json), size = 8 + json_size + data_size;
  uint8_t* bytes = malloc(size);
  if (!bytes) exit(2);
  for (int i = 0; i < 8; ++i) bytes[i] = (uint8_t)(claimed >> (8 * i));
  memcpy(bytes + 8, json, json_size);
  memset(bytes + 8 + json_size, 0x5A, data_size);
  write_bytes(bytes, size);
  free(bytes);
  return size;
}

/* A safetensors file of |json| as its header and |data_size| bytes of data. */
static size_t write_file(const char* json, size_t data_size) {
  return write_claimed(strlen(json), json, data_size);
}

/* The file read as the loader reads it (its first page handed to the reader) and with nothing
 * read ahead: both must say the same. */
static mp_status_t read_index(mp_foreign_index_t* index) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) exit(2);
  off_t size = lseek(fd, 0, SEEK_END);
  uint8_t head[4096];
  size_t n = size < (off_t)sizeof head ? (size_t)size : sizeof head;
  if (pread(fd, head, n, 0) != (ssize_t)n) exit(2);
  mp_foreign_index_t alone;
  mp_status_t without =
      mp_safetensors_read_index(fd, (uint64_t)size, path, (mp_const_byte_span_t){NULL, 0}, &alone);
  uint64_t header_size = without == MP_OK ? alone.header_size : 0;
  if (without == MP_OK) mp_foreign_index_free(&alone);
  mp_status_t status =
      mp_safetensors_read_index(fd, (uint64_t)size, path, (mp_const_byte_span_t){head, n}, index);
  close(fd);
  if (status != without || (status == MP_OK && index->header_size != header_size)) {
    fprintf(stderr, "FAIL: read with its first page given (%d) and without (%d) differ\n",
            (int)status, (int)without);
    exit(1);
  }
  return status;
}

/* The file now at |path| is refused with |code| and a message containing each needle. */
static void expect_refused(const char* what, mp_status_t code, const char* needle,
                           const char* needle2) {
  mp_foreign_index_t index;
  memset(&index, 0xAB, sizeof index);
  mp_status_t status = read_index(&index);
  const char* message = status == MP_OK ? "" : mp_error_message();
  int ok = status == code && strstr(message, needle) && (!needle2 || strstr(message, needle2)) &&
           strstr(message, path) && index.arrays == NULL && index.header == NULL &&
           index.metadata_json == NULL && index.count == 0;
  printf("%s %s: status %d: %s\n", ok ? "ok  " : "FAIL", what, (int)status, message);
  if (!ok) ++failures;
  if (status == MP_OK) mp_foreign_index_free(&index);
}

static void refused(const char* what, const char* json, size_t data_size, mp_status_t code,
                    const char* needle, const char* needle2) {
  write_file(json, data_size);
  expect_refused(what, code, needle, needle2);
}

/* A tensor entry of |dtype|, |shape| (JSON text) and |begin|..|end|. */
static const char* tensor(const char* name, const char* dtype, const char* shape, unsigned begin,
                          unsigned end) {
  static char text[8][512];
  static int next;
  char* t = text[next++ % 8];
  snprintf(t, 512, "\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%u,%u]}", name, dtype,
           shape, begin, end);
  return t;
}

static void refusals(void) {
  static char json[1 << 15];

  /* The size field and the header's place in the file. */
  write_bytes((const uint8_t*)"\x02\0\0", 3);
  expect_refused("a 3-byte file", MP_ERR_FORMAT, "too short", NULL);
  write_claimed(100, "{}", 10);
  expect_refused("a header bigger than the file", MP_ERR_FORMAT,
                 "claim a header of 100 bytes, but only 12 follow", NULL);
  write_claimed(100000001, "{}", 0);
  expect_refused("a header over 100 MB", MP_ERR_FORMAT, "100000001 bytes, more than the 100000000",
                 NULL);
  write_claimed(UINT64_MAX, "{}", 0);
  expect_refused("a header of 2^64 - 1 bytes", MP_ERR_FORMAT, "more than the 100000000", NULL);

  /* Not JSON, or not the format's JSON. */
  refused("no JSON", "", 0, MP_ERR_FORMAT, "expected '{' (an object of tensors), found the end",
          NULL);
  refused("a cut object", "{\"a\":", 0, MP_ERR_FORMAT,
          "(the fields of tensor 'a'): expected '{', found the end of the text", NULL);
  refused("an array at the top", "[]", 0, MP_ERR_FORMAT, "expected '{'", "found an array");
  refused("garbage after the object", "{} x", 0, MP_ERR_FORMAT, "only spaces may follow",
          "found 'x'");
  refused("a NUL after the object", "{}\x01", 0, MP_ERR_FORMAT, "only spaces may follow",
          "byte 0x01");
  refused("not UTF-8", "{\"\xff\":1}", 0, MP_ERR_FORMAT, "is not UTF-8", "byte 2 (0xff)");
  refused("an overlong UTF-8 form", "{\"\xc0\xaf\":1}", 0, MP_ERR_FORMAT, "is not UTF-8", NULL);
  refused("a control character in a string", "{\"a\tb\":1}", 0, MP_ERR_FORMAT,
          "control character (0x09)", NULL);
  refused("an unknown escape", "{\"a\\x\":1}", 0, MP_ERR_FORMAT, "an escape JSON defines", NULL);
  refused("a short \\u escape", "{\"a\\u12\":1}", 0, MP_ERR_FORMAT, "an escape JSON defines",
          NULL);
  refused("a lone high surrogate", "{\"\\ud800\":1}", 0, MP_ERR_FORMAT, "lone high surrogate",
          NULL);
  refused("a lone low surrogate", "{\"\\udc00\":1}", 0, MP_ERR_FORMAT, "low surrogate", NULL);
  refused("an unterminated string", "{\"abc", 0, MP_ERR_FORMAT, "never ends", NULL);
  refused("a string ending in a backslash", "{\"abc\\", 0, MP_ERR_FORMAT, "never ends", NULL);
  refused("a missing colon", "{\"a\" {}}", 0, MP_ERR_FORMAT, "expected ':'", NULL);
  refused("a trailing comma", "{\"a\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]},}", 1,
          MP_ERR_FORMAT, "(a tensor's name): expected a string, found '}'", NULL);
  snprintf(json, sizeof json, "{%s}", tensor("a", "U8", "[-1]", 0, 0));
  refused("a negative extent", json, 0, MP_ERR_FORMAT, "found a negative number",
          "(the shape of tensor 'a')");
  snprintf(json, sizeof json, "{%s}", tensor("a", "U8", "[1.0]", 0, 1));
  refused("a fractional extent", json, 1, MP_ERR_FORMAT, "a fraction or an exponent", NULL);
  snprintf(json, sizeof json, "{%s}", tensor("a", "U8", "[1e0]", 0, 1));
  refused("an extent with an exponent", json, 1, MP_ERR_FORMAT, "a fraction or an exponent",
          NULL);
  snprintf(json, sizeof json, "{%s}", tensor("a", "U8", "[01]", 0, 1));
  refused("a leading zero", json, 1, MP_ERR_FORMAT, "leading zero", NULL);
  snprintf(json, sizeof json, "{%s}", tensor("a", "U8", "[18446744073709551616]", 0, 1));
  refused("an extent of 2^64", json, 1, MP_ERR_FORMAT, "a number over 2^64 - 1", NULL);
  snprintf(json, sizeof json, "{%s}", tensor("a", "U8", "[\"1\"]", 0, 1));
  refused("an extent that is a string", json, 1, MP_ERR_FORMAT, "expected a whole number",
          "found a string");
  refused("three offsets", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1,
          MP_ERR_FORMAT, "(the data_offsets of tensor 'a'): expected ']' (two numbers", NULL);
  refused("a missing field", "{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, MP_ERR_FORMAT,
          "tensor 'a' has no 'shape'", NULL);
  refused("an unknown field",
          "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":1}}", 1,
          MP_ERR_FORMAT, "tensor 'a' has a field 'x'", NULL);
  refused("a field twice",
          "{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
          MP_ERR_FORMAT, "tensor 'a' has 'dtype' twice", NULL);
  refused("a dtype that is no string",
          "{\"a\":{\"dtype\":8,\"shape\":[1],\"data_offsets\":[0,1]}}", 1, MP_ERR_FORMAT,
          "(the dtype of tensor 'a'): expected a string, found a number", NULL);

  /* Deep nesting is refused where it starts, in one pass. */
  size_t n = 0;
  n += (size_t)snprintf(json, sizeof json, "{\"a\":{\"dtype\":\"U8\",\"shape\":");
  for (int i = 0; i < 3000; ++i) json[n++] = '[';
  json[n] = '\0';
  refused("an array nested 3000 deep in a shape", json, 0, MP_ERR_FORMAT,
          "expected a whole number (0 to 2^64 - 1), found an array", NULL);
  n = 0;
  for (int i = 0; i < 5000; ++i) json[n++] = '[';
  json[n] = '\0';
  refused("arrays nested 5000 deep", json, 0, MP_ERR_FORMAT, "found an array", NULL);
  n = (size_t)snprintf(json, sizeof json, "{\"__metadata__\":");
  for (int i = 0; i < 3000; ++i) n += (size_t)snprintf(json + n, sizeof json - n, "{\"k\":");
  refused("objects nested 3000 deep in the metadata", json, 0, MP_ERR_FORMAT,
          "(__metadata__): expected a string, found an object", NULL);

  /* Names. */
  refused("an empty name", "{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
          MP_ERR_FORMAT, "a tensor's name is empty", NULL);
  refused("a NUL in a name", "{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
          1, MP_ERR_FORMAT, "NUL character", NULL);
  n = (size_t)snprintf(json, sizeof json, "{\"");
  for (int i = 0; i < MP_WEIGHTS_MAX_NAME + 1; ++i) json[n++] = 'n';
  snprintf(json + n, sizeof json - n, "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}");
  refused("a name of 4097 bytes", json, 1, MP_ERR_FORMAT, "a name of 4097 bytes", "nnn...'");
  snprintf(json, sizeof json, "{%s,%s}", tensor("a", "U8", "[1]", 0, 1),
           tensor("a", "U8", "[1]", 1, 2));
  refused("two tensors of one name", json, 2, MP_ERR_FORMAT, "two tensors are named 'a'", NULL);
  snprintf(json, sizeof json, "{%s,%s}", tensor("b", "U8", "[1]", 0, 1),
           tensor("\\u0062", "U8", "[1]", 1, 2));
  refused("two names equal once unescaped", json, 2, MP_ERR_FORMAT, "two tensors are named 'b'",
          NULL);

  /* Types and shapes. */
  snprintf(json, sizeof json, "{%s}", tensor("w", "F3", "[1]", 0, 1));
  refused("an unknown dtype", json, 1, MP_ERR_INCOMPATIBLE, "tensor 'w' is of dtype 'F3'",
          "BF16");
  /* A long dtype is shown cut between characters: the message stays UTF-8. */
  char long_type[128] = "";
  for (int i = 0; i < 30; ++i) strcat(long_type, "\xc3\xa9");
  snprintf(json, sizeof json, "{%s}", tensor("w", long_type, "[1]", 0, 1));
  refused("a long dtype of 2-byte characters", json, 1, MP_ERR_INCOMPATIBLE,
          "dtype '\xc3\xa9\xc3\xa9", "\xc3\xa9...'");
  CHECK(mp_utf8_invalid_at((const uint8_t*)mp_error_message(), strlen(mp_error_message())) ==
            strlen(mp_error_message()),
        "the message is not UTF-8: %s", mp_error_message());
  snprintf(json, sizeof json, "{%s}", tensor("w", "f32", "[1]", 0, 4));
  refused("a dtype in lower case", json, 4, MP_ERR_INCOMPATIBLE, "dtype 'f32'", NULL);
  snprintf(json, sizeof json, "{%s}",
           tensor("w", "U8", "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]",
                  0, 1));
  refused("33 dimensions", json, 1, MP_ERR_INCOMPATIBLE, "more than 32 dimensions", NULL);
  snprintf(json, sizeof json, "{%s}", tensor("w", "F32", "[2,3]", 0, 20));
  refused("a shape whose bytes disagree with its range", json, 20, MP_ERR_FORMAT,
          "tensor 'w' (F32 [2, 3], data_offsets [0, 20]): its shape is 24 bytes, its range 20",
          NULL);
  snprintf(json, sizeof json, "{%s}", tensor("w", "U8", "[9223372036854775808]", 0, 1));
  refused("an extent over 2^63 - 1", json, 1, MP_ERR_FORMAT, "extent of 9223372036854775808",
          NULL);
  snprintf(json, sizeof json, "{%s}", tensor("w", "U8", "[4294967296,4294967296]", 0, 1));
  refused("extents whose product overflows", json, 1, MP_ERR_FORMAT,
          "(U8 [4294967296, 4294967296], data_offsets [0, 1]): its shape holds more than 2^63 - 1 "
          "values", NULL);
  snprintf(json, sizeof json, "{%s}", tensor("w", "U8", "[4294967296,4294967296,0]", 0, 0));
  refused("an empty tensor whose other extents overflow", json, 0, MP_ERR_FORMAT,
          "more than 2^63 - 1 values", NULL);
  snprintf(json, sizeof json, "{%s}", tensor("w", "F64", "[4611686018427387904]", 0, 8));
  refused("a shape whose bytes overflow", json, 8, MP_ERR_FORMAT, "more than 2^63 - 1 bytes",
          NULL);
  snprintf(json, sizeof json, "{%s}", tensor("w", "F4", "[3]", 0, 2));
  refused("F4 values that do not fill whole bytes", json, 2, MP_ERR_FORMAT,
          "3 values of 4 bits do not fill whole bytes", NULL);
  snprintf(json, sizeof json, "{%s}", tensor("w", "F4", "[2,3]", 0, 3));
  refused("F4 rows that share a byte", json, 3, MP_ERR_INCOMPATIBLE,
          "(F4 [2, 3], data_offsets [0, 3]): its last dimension is not a multiple of 2",
          "float4_e2m1fn_x2");
  snprintf(json, sizeof json, "{%s}", tensor("w", "F6_E2M3", "[2,2]", 0, 3));
  refused("F6 rows that share bytes", json, 3, MP_ERR_INCOMPATIBLE,
          "last dimension is not a multiple of 4", NULL);

  /* Ranges. */
  snprintf(json, sizeof json, "{%s}", tensor("w", "U8", "[0]", 4, 2));
  refused("a range that ends before it begins", json, 4, MP_ERR_FORMAT,
          "data_offsets [4, 2]): its range ends before it begins", NULL);
  snprintf(json, sizeof json, "{%s}", tensor("w", "U8", "[8]", 0, 8));
  refused("a range past the file", json, 4, MP_ERR_FORMAT,
          "its range ends past the file's 4 bytes of data", NULL);
  snprintf(json, sizeof json, "{%s,%s}", tensor("a", "U8", "[8]", 0, 8),
           tensor("b", "U8", "[8]", 4, 12));
  refused("overlapping ranges", json, 12, MP_ERR_FORMAT,
          "tensors 'a' (data_offsets [0, 8]) and 'b' ([4, 12]) overlap", NULL);
  snprintf(json, sizeof json, "{%s,%s}", tensor("a", "U8", "[4]", 0, 4),
           tensor("b", "U8", "[4]", 0, 4));
  refused("one range twice", json, 4, MP_ERR_FORMAT, "overlap", NULL);
  snprintf(json, sizeof json, "{%s,%s}", tensor("a", "U8", "[4]", 0, 4),
           tensor("b", "U8", "[4]", 6, 10));
  refused("a gap", json, 10, MP_ERR_FORMAT,
          "bytes [4, 6) of its data belong to no tensor (a gap before tensor 'b')", NULL);
  snprintf(json, sizeof json, "{%s}", tensor("a", "U8", "[4]", 2, 6));
  refused("a gap at the start", json, 6, MP_ERR_FORMAT, "bytes [0, 2) of its data", NULL);
  snprintf(json, sizeof json, "{%s}", tensor("a", "U8", "[4]", 0, 4));
  refused("data after the last tensor", json, 7, MP_ERR_FORMAT,
          "3 bytes after them belong to no tensor", NULL);
  refused("data and no tensor", "{}", 1, MP_ERR_FORMAT, "1 bytes after them", NULL);

  /* The metadata. */
  refused("metadata twice", "{\"__metadata__\":{},\"__metadata__\":null}", 0, MP_ERR_FORMAT,
          "\"__metadata__\" twice", NULL);
  refused("a metadata key twice", "{\"__metadata__\":{\"k\":\"1\",\"j\":\"2\",\"k\":\"3\"}}", 0,
          MP_ERR_FORMAT, "has the key 'k' twice", NULL);
  refused("a metadata value that is a number", "{\"__metadata__\":{\"k\":1}}", 0, MP_ERR_FORMAT,
          "(__metadata__): expected a string, found a number", NULL);
  refused("metadata that is a list", "{\"__metadata__\":[]}", 0, MP_ERR_FORMAT,
          "expected an object of strings, or null", NULL);
}

static void check_array(const mp_foreign_index_t* index, uint64_t i, const char* name,
                        DLDataType dtype, int32_t ndim, const int64_t* shape, uint64_t offset,
                        uint64_t size, const char* type_name, uint32_t block_elements,
                        uint32_t block_bytes, int32_t logical_ndim, const int64_t* logical) {
  if (i >= index->count) {
    CHECK(0, "no array %" PRIu64, i);
    return;
  }
  const mp_foreign_array_t* a = &index->arrays[i];
  CHECK(strcmp(a->name, name) == 0, "array %" PRIu64 " is '%s', not '%s'", i, a->name, name);
  CHECK(a->dtype.code == dtype.code && a->dtype.bits == dtype.bits &&
            a->dtype.lanes == dtype.lanes,
        "'%s': dtype {%u, %u, %u}", name, a->dtype.code, a->dtype.bits, a->dtype.lanes);
  CHECK(a->ndim == ndim, "'%s': ndim %d", name, a->ndim);
  for (int32_t d = 0; d < ndim && d < a->ndim; ++d)
    CHECK(a->shape[d] == shape[d], "'%s': shape[%d] %" PRId64, name, d, a->shape[d]);
  CHECK(a->offset == offset && a->size == size, "'%s': offset %" PRIu64 ", size %" PRIu64, name,
        a->offset, a->size);
  CHECK(strcmp(a->type_name, type_name) == 0, "'%s': type_name %s", name, a->type_name);
  CHECK(a->type_id == 0, "'%s': type_id %u", name, a->type_id);
  CHECK(a->block_elements == block_elements && a->block_bytes == block_bytes,
        "'%s': block %u values in %u bytes", name, a->block_elements, a->block_bytes);
  CHECK(a->logical_ndim == logical_ndim, "'%s': logical_ndim %d", name, a->logical_ndim);
  for (int32_t d = 0; d < logical_ndim && d < a->logical_ndim; ++d)
    CHECK(a->logical_shape[d] == logical[d], "'%s': logical_shape[%d] %" PRId64, name, d,
          a->logical_shape[d]);
}

static void valid_file(void) {
  /* Tensors listed out of the order of their offsets (older writers sorted by name), empty
   * ones sharing an offset, escaped names, metadata with escapes, padding spaces. */
  const char* json =
      "{\"__metadata__\":{\"format\":\"pt\",\"quote\\\"\":\"tab\\t\\u00e9\\ud83d\\ude00\"},"
      "\"z.bias\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[24,30]},"
      "\"a.weight\":{\"shape\":[2,3],\"data_offsets\":[0,24],\"dtype\":\"F32\"},"
      "\"\\u00e9t\\u00e9\":{\"dtype\":\"F8_E4M3\",\"shape\":[],\"data_offsets\":[30,31]},"
      "\"empty2\":{\"dtype\":\"I64\",\"shape\":[0,5],\"data_offsets\":[31,31]},"
      "\"empty1\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[31,31]},"
      "\"fp4\":{\"dtype\":\"F4\",\"shape\":[2,4],\"data_offsets\":[31,35]},"
      "\"fp6\":{\"dtype\":\"F6_E3M2\",\"shape\":[1,8],\"data_offsets\":[35,41]},"
      "\"mask\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[41,44]}}     ";
  const uint64_t n = strlen(json), data = 44;
  size_t file_size = write_file(json, data);
  mp_foreign_index_t index;
  mp_status_t status = read_index(&index);
  CHECK(status == MP_OK, "a valid file refused: %s", mp_error_message());
  if (status != MP_OK) return;
  CHECK(index.format == MP_WEIGHTS_FORMAT_SAFETENSORS && index.version == 0, "format %d v%u",
        (int)index.format, index.version);
  CHECK(index.header_size == 8 + n && index.data_offset == 8 + n, "header %" PRIu64
        ", data at %" PRIu64, index.header_size, index.data_offset);
  CHECK(index.data_size == data && index.data_offset + index.data_size == file_size,
        "data_size %" PRIu64, index.data_size);
  CHECK(index.alignment == 8, "alignment %u", index.alignment);
  CHECK(index.header && index.header[0] == (uint8_t)n && memcmp(index.header + 8, json, n) == 0,
        "the header bytes kept are not the file's");
  CHECK(index.count == 8, "count %" PRIu64, index.count);
  const uint64_t o = index.data_offset;
  const int64_t s23[] = {2, 3}, s3[] = {3}, s0[] = {0}, s05[] = {0, 5}, s22[] = {2, 2},
                s24[] = {2, 4}, s12[] = {1, 2}, s18[] = {1, 8};
  check_array(&index, 0, "a.weight", (DLDataType){kDLFloat, 32, 1}, 2, s23, o, 24, "F32", 1, 4,
              2, s23);
  check_array(&index, 1, "z.bias", (DLDataType){kDLBfloat, 16, 1}, 1, s3, o + 24, 6, "BF16", 1,
              2, 1, s3);
  check_array(&index, 2, "\xc3\xa9t\xc3\xa9", (DLDataType){kDLFloat8_e4m3fn, 8, 1}, 0, NULL,
              o + 30, 1, "F8_E4M3", 1, 1, 0, NULL);
  check_array(&index, 3, "empty1", (DLDataType){kDLUInt, 8, 1}, 1, s0, o + 31, 0, "U8", 1, 1, 1,
              s0);
  check_array(&index, 4, "empty2", (DLDataType){kDLInt, 64, 1}, 2, s05, o + 31, 0, "I64", 1, 8,
              2, s05);
  check_array(&index, 5, "fp4", (DLDataType){kDLFloat4_e2m1fn, 4, 2}, 2, s22, o + 31, 4, "F4", 2,
              1, 2, s24);
  check_array(&index, 6, "fp6", (DLDataType){kDLFloat6_e3m2fn, 6, 4}, 2, s12, o + 35, 6,
              "F6_E3M2", 4, 3, 2, s18);
  check_array(&index, 7, "mask", (DLDataType){kDLBool, 8, 1}, 1, s3, o + 41, 3, "BOOL", 1, 1, 1,
              s3);
  const char* metadata =
      "{\"format\": \"pt\", \"quote\\\"\": \"tab\\u0009\xc3\xa9\xf0\x9f\x98\x80\"}";
  CHECK(index.metadata_json && strcmp(index.metadata_json, metadata) == 0, "metadata %s",
        index.metadata_json);
  mp_foreign_index_free(&index);
  CHECK(index.arrays == NULL && index.header == NULL && index.count == 0, "free left fields");
  printf("ok   a valid file, field by field\n");

  /* Every truncation is refused, cleanly. */
  FILE* f = fopen(path, "rb");
  uint8_t* whole = malloc(file_size);
  if (!f || !whole || fread(whole, 1, file_size, f) != file_size) exit(2);
  fclose(f);
  int truncations = 0;
  for (size_t size = 0; size < file_size; ++size) {
    write_bytes(whole, size);
    status = read_index(&index);
    CHECK(status == MP_ERR_FORMAT, "a %zu-byte prefix: status %d", size, (int)status);
    if (status == MP_OK) mp_foreign_index_free(&index);
    truncations += status == MP_ERR_FORMAT;
  }
  free(whole);
  printf("%s all %d truncations refused\n", truncations == (int)file_size ? "ok  " : "FAIL",
         truncations);
}

static void small_files(void) {
  mp_foreign_index_t index;
  /* No tensors, no data; metadata null or absent reads as {}. */
  const char* empty[] = {"{}", "  {  }  ", "{\"__metadata__\":null}", "{\"__metadata__\":{}}"};
  for (size_t i = 0; i < sizeof empty / sizeof empty[0]; ++i) {
    write_file(empty[i], 0);
    mp_status_t status = read_index(&index);
    CHECK(status == MP_OK, "'%s' refused: %s", empty[i], mp_error_message());
    if (status != MP_OK) continue;
    CHECK(index.count == 0 && index.data_size == 0 && strcmp(index.metadata_json, "{}") == 0,
          "'%s': %" PRIu64 " arrays, metadata %s", empty[i], index.count, index.metadata_json);
    mp_foreign_index_free(&index);
  }
  /* Every dtype, each mapped as the table in safetensors.c says. */
  static const struct {
    const char* name;
    DLDataType dtype;
    unsigned bytes;
  } types[] = {
      {"BOOL", {kDLBool, 8, 1}, 1},
      {"U8", {kDLUInt, 8, 1}, 1},
      {"I8", {kDLInt, 8, 1}, 1},
      {"U16", {kDLUInt, 16, 1}, 2},
      {"I16", {kDLInt, 16, 1}, 2},
      {"U32", {kDLUInt, 32, 1}, 4},
      {"I32", {kDLInt, 32, 1}, 4},
      {"U64", {kDLUInt, 64, 1}, 8},
      {"I64", {kDLInt, 64, 1}, 8},
      {"F16", {kDLFloat, 16, 1}, 2},
      {"BF16", {kDLBfloat, 16, 1}, 2},
      {"F32", {kDLFloat, 32, 1}, 4},
      {"F64", {kDLFloat, 64, 1}, 8},
      {"C64", {kDLComplex, 64, 1}, 8},
      {"F8_E4M3", {10, 8, 1}, 1},
      {"F8_E5M2", {12, 8, 1}, 1},
      {"F8_E4M3FNUZ", {11, 8, 1}, 1},
      {"F8_E5M2FNUZ", {13, 8, 1}, 1},
      {"F8_E8M0", {14, 8, 1}, 1},
  };
  for (size_t i = 0; i < sizeof types / sizeof types[0]; ++i) {
    char json[256];
    snprintf(json, sizeof json, "{%s}", tensor("t", types[i].name, "[3]", 0, 3 * types[i].bytes));
    write_file(json, 3 * types[i].bytes);
    mp_status_t status = read_index(&index);
    CHECK(status == MP_OK, "%s refused: %s", types[i].name, mp_error_message());
    if (status != MP_OK) continue;
    const int64_t s3[] = {3};
    check_array(&index, 0, "t", types[i].dtype, 1, s3, 8 + strlen(json), 3 * types[i].bytes,
                types[i].name, 1, types[i].bytes, 1, s3);
    mp_foreign_index_free(&index);
  }
  printf("ok   empty files and every whole-byte dtype\n");
}

int main(void) {
  int fd = mkstemp(path);
  if (fd < 0) return 2;
  close(fd);
  refusals();
  valid_file();
  small_files();
  unlink(path);
  if (failures) {
    printf("safetensors_index: %d failure(s)\n", failures);
    return 1;
  }
  printf("safetensors_index: all passed\n");
  return 0;
}
