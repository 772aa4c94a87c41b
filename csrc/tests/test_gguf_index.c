/* ctest: the GGUF reader (weights/gguf.c, mp_gguf_read_index) over hand-made files. A valid one
 * is indexed field by field (the handed-out dtype and shape of each type kind, the tensors in
 * the order of their offsets, the header kept exactly as the file has it, the metadata as
 * JSON, long arrays summarized, floats as the shortest decimal that reads back); a header
 * longer than the first read is read whole; and each malformed field is refused with its
 * status and a message naming the file and the problem, the index left empty. Every strict
 * prefix of a valid file is refused. Uses the reader's internal header (weights/
 * foreign_index.h), as fuzz_dltensor.c uses the signature checker's. */
#define _GNU_SOURCE /* mkstemp */
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_check.h"
#include "weights/foreign_index.h"


/* ---- writing GGUF files ------------------------------------------------------------------ */

enum { U8 = 0, I8, U16, I16, U32, I32, F32V, BOOL, STRING, ARRAY, U64, I64, F64V };
enum { T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q8_0 = 8, T_Q4_K = 12, T_Q6_K = 14, T_I8 = 24,
       T_BF16 = 30 };

typedef struct {
  uint8_t* data;
  size_t size, capacity;
} file_t;

static void put(file_t* f, const void* bytes, size_t n) {
  if (f->size + n > f->capacity) {
    f->capacity = (f->size + n) * 2;
    f->data = realloc(f->data, f->capacity);
    if (!f->data) exit(2);
  }
  memcpy(f->data + f->size, bytes, n);
  f->size += n;
}
static void u8(file_t* f, uint8_t v) {
  put(f, &v, 1);
}
static void u32(file_t* f, uint32_t v) {
  uint8_t p[4];
  for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
  put(f, p, 4);
}
static void u64(file_t* f, uint64_t v) {
  uint8_t p[8];
  for (int i = 0; i < 8; ++i) p[i] = (uint8_t)(v >> (8 * i));
  put(f, p, 8);
}
static void f32(file_t* f, float v) {
  uint32_t bits;
  memcpy(&bits, &v, 4);
  u32(f, bits);
}
static void f64(file_t* f, double v) {
  uint64_t bits;
  memcpy(&bits, &v, 8);
  u64(f, bits);
}
/* A GGUF string: u64 length, bytes. */
static void bytes_string(file_t* f, const void* s, size_t n) {
  u64(f, n);
  put(f, s, n);
}
static void string(file_t* f, const char* s) {
  bytes_string(f, s, strlen(s));
}
static void header(file_t* f, uint32_t version, uint64_t tensors, uint64_t kvs) {
  put(f, "GGUF", 4);
  u32(f, version);
  u64(f, tensors);
  u64(f, kvs);
}
static void kv_u32(file_t* f, const char* key, uint32_t v) {
  string(f, key);
  u32(f, U32);
  u32(f, v);
}
static void kv_string(file_t* f, const char* key, const char* v) {
  string(f, key);
  u32(f, STRING);
  string(f, v);
}
/* A tensor info: |n_dims| extents (ne0 first), its ggml type, its offset in the data. */
static void tensor(file_t* f, const char* name, uint32_t n_dims, const uint64_t* ne,
                   uint32_t type, uint64_t offset) {
  string(f, name);
  u32(f, n_dims);
  for (uint32_t d = 0; d < n_dims; ++d) u64(f, ne[d]);
  u32(f, type);
  u64(f, offset);
}
static void pad(file_t* f, size_t alignment) {
  while (f->size % alignment) u8(f, 0);
}
static void zeros(file_t* f, size_t n) {
  for (size_t i = 0; i < n; ++i) u8(f, 0);
}

/* ---- reading them ------------------------------------------------------------------------ */

static char path[] = "/tmp/modpack_test_gguf_XXXXXX";

static mp_status_t read_index(const uint8_t* data, size_t size, uint64_t file_size,
                              mp_foreign_index_t* x) {
  int fd = open(path, O_RDWR | O_TRUNC);
  if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size)) exit(2);
  if (file_size > size && ftruncate(fd, (off_t)file_size) != 0) exit(2); /* sparse */
  /* As the loader reads it (its first page given) and with nothing read ahead: both must say
   * the same. */
  mp_foreign_index_t alone;
  mp_status_t without = mp_gguf_read_index(fd, file_size, path, (mp_const_byte_span_t){NULL, 0},
                                           &alone);
  uint64_t header_size = without == MP_OK ? alone.header_size : 0;
  if (without == MP_OK) mp_foreign_index_free(&alone);
  size_t head = size < 4096 ? size : 4096;
  mp_status_t status = mp_gguf_read_index(fd, file_size, path,
                                          (mp_const_byte_span_t){data, head}, x);
  close(fd);
  if (status != without || (status == MP_OK && x->header_size != header_size)) {
    fprintf(stderr, "FAIL: read with its first page given (%d) and without (%d) differ\n",
            (int)status, (int)without);
    exit(1);
  }
  return status;
}

static int empty(const mp_foreign_index_t* x) {
  static const mp_foreign_index_t zero;
  return memcmp(x, &zero, sizeof zero) == 0;
}

/* |f| (its bytes followed by zeros to |file_size|, when larger) must be refused with |code| and
 * a message naming the file and containing |needle|, the index left empty. */
static void refused_sized(const char* what, file_t* f, uint64_t file_size, mp_status_t code,
                          const char* needle) {
  mp_foreign_index_t x;
  memset(&x, 0xAB, sizeof x);
  mp_status_t status = read_index(f->data, f->size, file_size, &x);
  const char* message = mp_error_message();
  int ok = status == code && strstr(message, needle) && strstr(message, path) && empty(&x);
  printf("%s %s: status %d: %s\n", ok ? "ok  " : "FAIL", what, (int)status, message);
  if (!ok) ++failures;
  if (status == MP_OK) mp_foreign_index_free(&x);
  free(f->data);
  *f = (file_t){0};
}

static void refused(const char* what, file_t* f, mp_status_t code, const char* needle) {
  refused_sized(what, f, f->size, code, needle);
}

/* ---- a valid file ------------------------------------------------------------------------ */

static file_t valid_file(void) {
  file_t f = {0};
  header(&f, 3, 6, 19);
  kv_string(&f, "general.architecture", "llama");
  kv_u32(&f, "general.alignment", 64);
  string(&f, "u8"), u32(&f, U8), u8(&f, 200);
  string(&f, "i8"), u32(&f, I8), u8(&f, 0x80);
  string(&f, "u16"), u32(&f, U16), put(&f, "\xff\xff", 2);
  string(&f, "i16"), u32(&f, I16), put(&f, "\x00\x80", 2);
  string(&f, "i32"), u32(&f, I32), u32(&f, (uint32_t)-7);
  string(&f, "u64"), u32(&f, U64), u64(&f, UINT64_MAX);
  string(&f, "i64"), u32(&f, I64), u64(&f, (uint64_t)INT64_MIN);
  string(&f, "eps"), u32(&f, F32V), f32(&f, 1e-5f);
  string(&f, "two"), u32(&f, F64V), f64(&f, 2.0);
  string(&f, "nan"), u32(&f, F32V), f32(&f, NAN);
  string(&f, "ok"), u32(&f, BOOL), u8(&f, 1);
  kv_string(&f, "quoted", "a\"b\\c\n\x01 \xc3\xa9");
  string(&f, "short"), u32(&f, ARRAY), u32(&f, U32), u64(&f, 3), u32(&f, 1), u32(&f, 2), u32(&f, 3);
  /* 100 strings: summarized with the first 64. */
  string(&f, "tokens"), u32(&f, ARRAY), u32(&f, STRING), u64(&f, 100);
  for (int i = 0; i < 100; ++i) {
    char token[8];
    snprintf(token, sizeof token, "t%d", i);
    string(&f, token);
  }
  /* An array of two arrays of int16. */
  string(&f, "nested"), u32(&f, ARRAY), u32(&f, ARRAY), u64(&f, 2);
  u32(&f, I16), u64(&f, 1), put(&f, "\x05\x00", 2);
  u32(&f, I16), u64(&f, 0);
  /* 70 u8: summarized, the rest skipped unread. */
  string(&f, "bytes"), u32(&f, ARRAY), u32(&f, U8), u64(&f, 70);
  for (int i = 0; i < 70; ++i) u8(&f, (uint8_t)i);
  string(&f, "empty"), u32(&f, STRING), u64(&f, 0);
  /* Tensors, not in the order of their offsets. */
  tensor(&f, "w", 2, (uint64_t[]){3, 2}, T_F32, 0);                /* 24 bytes */
  tensor(&f, "q8", 2, (uint64_t[]){64, 4}, T_Q8_0, 448);           /* 4 x 2 x 34 = 272 */
  tensor(&f, "k4", 1, (uint64_t[]){512}, T_Q4_K, 128);             /* 2 x 144 = 288, to 416 */
  tensor(&f, "bf", 3, (uint64_t[]){2, 1, 3}, T_BF16, 64);          /* 12 bytes */
  tensor(&f, "scalar", 0, NULL, T_I8, 768);                        /* 1 byte */
  tensor(&f, "none", 2, (uint64_t[]){0, 5}, T_Q6_K, 768);          /* empty: 0 bytes */
  pad(&f, 64);
  zeros(&f, 769 + 20); /* data, then trailing bytes (GGUF writers pad after the last tensor) */
  return f;
}

static void expect_array(const mp_foreign_index_t* x, uint64_t i, const char* name,
                         DLDataType dtype, int32_t ndim, const int64_t* shape, uint64_t offset,
                         uint64_t size, const char* type, uint32_t type_id, uint32_t be,
                         uint32_t bb, int32_t logical_ndim, const int64_t* logical) {
  if (i >= x->count) {
    CHECK(0, "no array %" PRIu64, i);
    return;
  }
  const mp_foreign_array_t* a = &x->arrays[i];
  CHECK(strcmp(a->name, name) == 0, "array %" PRIu64 " is '%s', not '%s'", i, a->name, name);
  CHECK(a->dtype.code == dtype.code && a->dtype.bits == dtype.bits && a->dtype.lanes == 1,
        "%s: dtype %d/%d/%d", name, a->dtype.code, a->dtype.bits, a->dtype.lanes);
  CHECK(a->ndim == ndim, "%s: ndim %d", name, a->ndim);
  for (int32_t d = 0; d < ndim && d < a->ndim; ++d)
    CHECK(a->shape[d] == shape[d], "%s: shape[%d] %" PRId64, name, d, a->shape[d]);
  CHECK(a->offset == offset, "%s: offset %" PRIu64 ", not %" PRIu64, name, a->offset, offset);
  CHECK(a->size == size, "%s: size %" PRIu64 ", not %" PRIu64, name, a->size, size);
  CHECK(strcmp(a->type_name, type) == 0 && a->type_id == type_id, "%s: type %s (%u)", name,
        a->type_name, a->type_id);
  CHECK(a->block_elements == be && a->block_bytes == bb, "%s: block %u, %u", name,
        a->block_elements, a->block_bytes);
  CHECK(a->logical_ndim == logical_ndim, "%s: logical ndim %d", name, a->logical_ndim);
  for (int32_t d = 0; d < logical_ndim && d < a->logical_ndim; ++d)
    CHECK(a->logical_shape[d] == logical[d], "%s: logical_shape[%d] %" PRId64, name, d,
          a->logical_shape[d]);
}

static void test_valid_file(void) {
  int before = failures;
  file_t f = valid_file();
  mp_foreign_index_t x;
  mp_status_t status = read_index(f.data, f.size, f.size, &x);
  CHECK(status == MP_OK, "a valid file refused: %s", mp_error_message());
  if (status != MP_OK) return;
  CHECK(x.format == MP_WEIGHTS_FORMAT_GGUF && x.version == 3, "format %d, version %u",
        (int)x.format, x.version);
  CHECK(x.alignment == 64, "alignment %u", x.alignment);
  CHECK(x.data_offset % 64 == 0 && x.header_size == x.data_offset, "header %" PRIu64
        ", data at %" PRIu64, x.header_size, x.data_offset);
  CHECK(x.data_offset + x.data_size == f.size, "data %" PRIu64 " + %" PRIu64 " != %zu",
        x.data_offset, x.data_size, f.size);
  CHECK(x.header && memcmp(x.header, f.data, (size_t)x.header_size) == 0,
        "the header kept is not the file's");
  CHECK(x.count == 6, "%" PRIu64 " arrays", x.count);
  uint64_t d = x.data_offset;
  const DLDataType u8_t = {kDLUInt, 8, 1};
  expect_array(&x, 0, "w", (DLDataType){kDLFloat, 32, 1}, 2, (int64_t[]){2, 3}, d, 24, "F32", 0,
               1, 4, 2, (int64_t[]){2, 3});
  expect_array(&x, 1, "bf", (DLDataType){kDLBfloat, 16, 1}, 3, (int64_t[]){3, 1, 2}, d + 64, 12,
               "BF16", 30, 1, 2, 3, (int64_t[]){3, 1, 2});
  expect_array(&x, 2, "k4", u8_t, 2, (int64_t[]){2, 144}, d + 128, 288, "Q4_K", 12, 256, 144, 1,
               (int64_t[]){512});
  expect_array(&x, 3, "q8", u8_t, 3, (int64_t[]){4, 2, 34}, d + 448, 272, "Q8_0", 8, 32, 34, 2,
               (int64_t[]){4, 64});
  expect_array(&x, 4, "none", u8_t, 3, (int64_t[]){5, 0, 210}, d + 768, 0, "Q6_K", 14, 256, 210,
               2, (int64_t[]){5, 0});
  expect_array(&x, 5, "scalar", (DLDataType){kDLInt, 8, 1}, 0, NULL, d + 768, 1, "I8", 24, 1, 1,
               0, NULL);
  char first[1024] = "";
  for (int i = 0; i < 64; ++i)
    snprintf(first + strlen(first), sizeof first - strlen(first), "%s\"t%d\"", i ? ", " : "", i);
  char bytes[512] = "";
  for (int i = 0; i < 64; ++i)
    snprintf(bytes + strlen(bytes), sizeof bytes - strlen(bytes), "%s%d", i ? ", " : "", i);
  char expected[4096];
  snprintf(expected, sizeof expected,
           "{\"general.architecture\": \"llama\", \"general.alignment\": 64, \"u8\": 200, "
           "\"i8\": -128, \"u16\": 65535, \"i16\": -32768, \"i32\": -7, "
           "\"u64\": 18446744073709551615, \"i64\": -9223372036854775808, \"eps\": 1e-05, "
           "\"two\": 2.0, \"nan\": \"nan\", \"ok\": true, "
           "\"quoted\": \"a\\\"b\\\\c\\u000a\\u0001 \xc3\xa9\", \"short\": [1, 2, 3], "
           "\"tokens\": {\"type\": \"string\", \"count\": 100, \"first\": [%s]}, "
           "\"nested\": [[5], []], "
           "\"bytes\": {\"type\": \"uint8\", \"count\": 70, \"first\": [%s]}, \"empty\": \"\"}",
           first, bytes);
  CHECK(x.metadata_json && strcmp(x.metadata_json, expected) == 0, "metadata:\n%s\nexpected:\n%s",
        x.metadata_json, expected);
  printf("%s a valid file, field by field\n", failures > before ? "FAIL" : "ok  ");
  mp_foreign_index_free(&x);
  CHECK(empty(&x), "mp_foreign_index_free leaves the index empty");
  free(f.data);
}

/* A header longer than the first read (1 MiB): read on, parsed again, kept whole. */
static void test_long_header(void) {
  int before = failures;
  file_t f = {0};
  header(&f, 2, 1, 2);
  enum { TOKENS = 200000 };
  string(&f, "tokenizer.ggml.tokens"), u32(&f, ARRAY), u32(&f, STRING), u64(&f, TOKENS);
  for (int i = 0; i < TOKENS; ++i) {
    char token[16];
    snprintf(token, sizeof token, "token%06d", i);
    string(&f, token);
  }
  kv_string(&f, "general.architecture", "llama");
  tensor(&f, "w", 1, (uint64_t[]){4}, T_F16, 0);
  pad(&f, 32);
  size_t header_size = f.size;
  zeros(&f, 8);
  mp_foreign_index_t x;
  mp_status_t status = read_index(f.data, f.size, f.size, &x);
  CHECK(status == MP_OK, "a long header refused: %s", mp_error_message());
  if (status == MP_OK) {
    CHECK(header_size > (2 << 20), "the header is only %zu bytes", header_size);
    CHECK(x.version == 2 && x.header_size == header_size && x.data_offset == header_size &&
              memcmp(x.header, f.data, header_size) == 0 && x.count == 1 &&
              x.arrays[0].offset == header_size && x.arrays[0].size == 8,
          "the long header's index");
    CHECK(strstr(x.metadata_json, "\"count\": 200000") &&
              strstr(x.metadata_json, "\"general.architecture\": \"llama\"}"),
          "metadata %.200s", x.metadata_json);
    printf("%s a %zu-byte header\n", failures > before ? "FAIL" : "ok  ", header_size);
    mp_foreign_index_free(&x);
  }
  free(f.data);
}

/* Every strict prefix of the valid file that cuts its header is refused; one that cuts only
 * its data is refused too (a tensor past the end), except where only trailing bytes go. */
static void test_prefixes(void) {
  file_t f = valid_file();
  int refused_count = 0, cases = 0;
  for (size_t n = 0; n + 20 < f.size; ++n) {
    mp_foreign_index_t x;
    mp_status_t status = read_index(f.data, n, n, &x);
    ++cases;
    if (status == MP_OK) {
      CHECK(0, "a %zu-byte prefix of a %zu-byte file was read", n, f.size);
      mp_foreign_index_free(&x);
    } else {
      CHECK(empty(&x) && mp_error_message()[0], "prefix %zu", n);
      ++refused_count;
    }
  }
  printf("%s all %d truncations refused\n", refused_count == cases ? "ok  " : "FAIL", cases);
  free(f.data);
}

/* Arrays nested 8 deep are read (gguf-py writes and reads any depth; ggml reads none). */
static void test_nested_arrays(void) {
  int before = failures;
  file_t f = {0};
  header(&f, 3, 0, 1);
  string(&f, "deep"), u32(&f, ARRAY);
  for (int i = 0; i < 7; ++i) u32(&f, ARRAY), u64(&f, 1); /* 8 arrays */
  u32(&f, U8), u64(&f, 2), u8(&f, 7), u8(&f, 9);
  pad(&f, 32);
  mp_foreign_index_t x;
  mp_status_t status = read_index(f.data, f.size, f.size, &x);
  CHECK(status == MP_OK, "arrays 8 deep refused: %s", mp_error_message());
  if (status == MP_OK) {
    CHECK(strcmp(x.metadata_json, "{\"deep\": [[[[[[[[7, 9]]]]]]]]}") == 0, "%s",
          x.metadata_json);
    printf("%s arrays nested 8 deep\n", failures > before ? "FAIL" : "ok  ");
    mp_foreign_index_free(&x);
  }
  free(f.data);
}

/* ---- refusals ---------------------------------------------------------------------------- */

/* A file with one F32 tensor of |ne0| elements after |kvs| written by |metadata|. */
static file_t one_tensor(uint32_t type, uint64_t ne0, uint64_t offset) {
  file_t f = {0};
  header(&f, 3, 1, 0);
  tensor(&f, "blk.0.w", 1, (uint64_t[]){ne0}, type, offset);
  pad(&f, 32);
  zeros(&f, 64);
  return f;
}

static void test_refusals(void) {
  file_t f = {0};
  refused("an empty file", &f, MP_ERR_FORMAT, "is not a GGUF file");
  put(&f, "GGML", 4), u32(&f, 3), u64(&f, 0), u64(&f, 0);
  refused("bad magic", &f, MP_ERR_FORMAT, "does not start with \"GGUF\"");
  header(&f, 1, 0, 0);
  refused("version 1", &f, MP_ERR_INCOMPATIBLE, "GGUF version 1 file");
  header(&f, 4, 0, 0);
  refused("version 4", &f, MP_ERR_INCOMPATIBLE, "GGUF version 4 file; this runtime reads versions "
          "2 and 3: upgrade modpack");
  header(&f, 0x03000000, 0, 0);
  refused("a big-endian file", &f, MP_ERR_INCOMPATIBLE, "big-endian");
  header(&f, 0, 0, 0);
  refused("version 0", &f, MP_ERR_FORMAT, "its version is 0");
  put(&f, "GGUF", 4), u32(&f, 3), u32(&f, 0);
  refused("a header cut short", &f, MP_ERR_FORMAT,
          "its tensor count (8 bytes at byte 8) runs past the end of the 12-byte file");
  header(&f, 3, 0, 1000);
  pad(&f, 32);
  refused("a key-value count beyond the file", &f, MP_ERR_FORMAT,
          "it claims 1000 metadata key-value pairs, more than the 8 bytes after byte 24");
  header(&f, 3, UINT64_MAX, 0);
  refused("a tensor count beyond the file", &f, MP_ERR_FORMAT,
          "it claims 18446744073709551615 tensors");
  header(&f, 3, 300000, 0);
  refused_sized("more tensors than modpack reads", &f, 16 << 20, MP_ERR_FORMAT,
                "it claims 300000 tensors, more than modpack reads (262144)");
  header(&f, 3, 0, 1);
  u64(&f, 1000), put(&f, "general.name", 12);
  refused("a key longer than the file", &f, MP_ERR_FORMAT,
          "metadata key 0: its name (1000 bytes at byte 32) runs past the end");
  header(&f, 3, 0, 1);
  string(&f, "general.name"), u32(&f, STRING), u64(&f, UINT64_MAX - 4);
  refused("a string length beyond the file", &f, MP_ERR_FORMAT,
          "metadata key 'general.name': its string (18446744073709551611 bytes at byte 56) runs "
          "past the end of the 56-byte file");
  header(&f, 3, 0, 1);
  string(&f, "general.name"), u32(&f, STRING), u64(&f, 300u << 20);
  refused_sized("a string past the most header modpack reads", &f, 400u << 20, MP_ERR_FORMAT,
                "goes past the first 256 MiB");
  header(&f, 3, 0, 1);
  string(&f, "x"), u32(&f, 13), u32(&f, 0);
  refused("an unknown value type", &f, MP_ERR_FORMAT,
          "metadata key 'x': its value type is 13, which GGUF does not define (0 to 12)");
  header(&f, 3, 0, 1);
  string(&f, "x"), u32(&f, ARRAY), u32(&f, 99), u64(&f, 1), u32(&f, 0);
  refused("an unknown array element type", &f, MP_ERR_FORMAT,
          "its array's element type is 99, which GGUF does not define");
  header(&f, 3, 0, 1);
  string(&f, "x"), u32(&f, ARRAY), u32(&f, U32), u64(&f, 1u << 30), u32(&f, 0);
  refused("an array count beyond the file", &f, MP_ERR_FORMAT,
          "metadata key 'x': it claims 1073741824 array elements of type uint32, more than the");
  header(&f, 3, 0, 1);
  string(&f, "deep"), u32(&f, ARRAY);
  for (int i = 0; i < 8; ++i) u32(&f, ARRAY), u64(&f, 1); /* 9 arrays */
  u32(&f, U8), u64(&f, 0);
  refused("arrays nested 9 deep", &f, MP_ERR_FORMAT, "its arrays are nested more than 8 deep");
  header(&f, 3, 0, 3);
  kv_u32(&f, "b", 1), kv_u32(&f, "a", 2), kv_u32(&f, "b", 3);
  refused("a duplicate key", &f, MP_ERR_FORMAT, "the metadata key 'b' appears twice");
  header(&f, 3, 0, 1);
  bytes_string(&f, "ke\xffy", 4), u32(&f, U8), u8(&f, 0);
  refused("a key not UTF-8", &f, MP_ERR_FORMAT,
          "metadata key 0: its name is not UTF-8 (byte 2 of 4 is 0xff)");
  header(&f, 3, 0, 1);
  string(&f, "k"), u32(&f, STRING), bytes_string(&f, "\xc0\x80", 2); /* an overlong NUL */
  refused("a string value not UTF-8", &f, MP_ERR_FORMAT,
          "metadata key 'k': its string is not UTF-8 (byte 0 of 2 is 0xc0)");
  header(&f, 3, 0, 1);
  string(&f, "v"), u32(&f, ARRAY), u32(&f, STRING), u64(&f, 80);
  for (int i = 0; i < 79; ++i) string(&f, "ok");
  bytes_string(&f, "\xed\xa0\x80", 3); /* a surrogate, past the 64 written out */
  refused("a string not UTF-8 past the first 64", &f, MP_ERR_FORMAT, "is not UTF-8");
  header(&f, 3, 0, 1);
  u64(&f, 0), u32(&f, U8), u8(&f, 0);
  pad(&f, 32);
  refused("an empty key", &f, MP_ERR_FORMAT, "its name is 0 bytes long, not 1 to 65535");
  header(&f, 3, 0, 1);
  kv_string(&f, "general.alignment", "32");
  refused("an alignment not u32", &f, MP_ERR_FORMAT,
          "metadata key 'general.alignment': it is of type string, not uint32");
  header(&f, 3, 0, 1);
  kv_u32(&f, "general.alignment", 48);
  refused("an alignment not a power of two", &f, MP_ERR_FORMAT,
          "the alignment 48 is not a power of two");
  header(&f, 3, 0, 1);
  kv_u32(&f, "general.alignment", 0);
  refused("an alignment of 0", &f, MP_ERR_FORMAT, "the alignment 0 is not a power of two");

  f = one_tensor(99, 4, 0);
  refused("an unknown ggml type", &f, MP_ERR_INCOMPATIBLE,
          "tensor 'blk.0.w' has ggml type 99, which this runtime does not know");
  f = one_tensor(4, 32, 0);
  refused("a removed ggml type (Q4_2)", &f, MP_ERR_INCOMPATIBLE, "has ggml type 4");
  f = one_tensor(T_F32, 4, 16);
  refused("a misaligned offset", &f, MP_ERR_FORMAT,
          "tensor 'blk.0.w': it starts at byte 16 of the data section, not a multiple of the "
          "file's alignment (32)");
  f = one_tensor(T_F32, 4, 64);
  refused("a tensor past the data", &f, MP_ERR_FORMAT,
          "tensor 'blk.0.w' lies at [64, +16) of the data section, past its end (64 bytes)");
  f = one_tensor(T_F32, 17, 0);
  refused("a tensor longer than the data", &f, MP_ERR_FORMAT, "lies at [0, +68)");
  f = one_tensor(T_Q8_0, 48, 0);
  refused("ne0 not a multiple of the block", &f, MP_ERR_FORMAT,
          "tensor 'blk.0.w': its rows hold 48 elements (its ne0), not a multiple of the 32 in a "
          "block of its type Q8_0");
  f = one_tensor(T_F32, (uint64_t)1 << 63, 0);
  refused("an extent past INT64_MAX", &f, MP_ERR_FORMAT, "its ne0 is 9223372036854775808");
  f = one_tensor(T_F32, (uint64_t)1 << 62, 0);
  refused("a size past 2^63 bytes", &f, MP_ERR_FORMAT, "hold more than 2^63 bytes");

  header(&f, 3, 1, 0);
  tensor(&f, "big", 3, (uint64_t[]){1u << 31, 1u << 31, 1u << 31}, T_F32, 0);
  pad(&f, 32);
  refused("dimensions overflowing", &f, MP_ERR_FORMAT,
          "tensor 'big': its dimensions hold more than 2^63 elements");
  header(&f, 3, 1, 0);
  string(&f, "many"), u32(&f, 33);
  for (int i = 0; i < 33; ++i) u64(&f, 1);
  u32(&f, T_F32), u64(&f, 0);
  refused("33 dimensions", &f, MP_ERR_FORMAT, "tensor 'many': it has 33 dimensions, more than 32");
  header(&f, 3, 1, 0);
  uint64_t ones[32];
  for (int i = 0; i < 32; ++i) ones[i] = 1;
  ones[0] = 32;
  tensor(&f, "q", 32, ones, T_Q8_0, 0);
  pad(&f, 32);
  zeros(&f, 64);
  refused("32 dimensions of blocks", &f, MP_ERR_FORMAT,
          "it has 32 dimensions: a block-quantized tensor may have 31");
  header(&f, 3, 2, 0);
  tensor(&f, "a", 1, (uint64_t[]){16}, T_F32, 0);  /* [0, 64) */
  tensor(&f, "b", 1, (uint64_t[]){8}, T_F32, 32);  /* [32, 64) */
  pad(&f, 32);
  zeros(&f, 64);
  refused("overlapping tensors", &f, MP_ERR_FORMAT, "tensors 'a' and 'b' overlap");
  header(&f, 3, 2, 0);
  tensor(&f, "same", 1, (uint64_t[]){8}, T_F32, 0);
  tensor(&f, "same", 1, (uint64_t[]){8}, T_F32, 32);
  pad(&f, 32);
  zeros(&f, 64);
  refused("a duplicate tensor name", &f, MP_ERR_FORMAT, "two tensors are named 'same'");
  header(&f, 3, 1, 0);
  tensor(&f, "na\xe9me", 1, (uint64_t[]){8}, T_F32, 0);
  pad(&f, 32);
  zeros(&f, 32);
  refused("a tensor name not UTF-8", &f, MP_ERR_FORMAT,
          "tensor 0: its name is not UTF-8 (byte 2 of 5 is 0xe9)");
  header(&f, 3, 1, 0);
  bytes_string(&f, "a\0b", 3), u32(&f, 1), u64(&f, 8), u32(&f, T_F32), u64(&f, 0);
  pad(&f, 32);
  zeros(&f, 32);
  refused("a tensor name with NUL", &f, MP_ERR_FORMAT, "tensor 0: its name holds a NUL byte");
  header(&f, 3, 1, 0);
  u64(&f, 0), u32(&f, 1), u64(&f, 8), u32(&f, T_F32), u64(&f, 0);
  pad(&f, 32);
  zeros(&f, 32);
  refused("an empty tensor name", &f, MP_ERR_FORMAT, "its name is 0 bytes long, not 1 to 4096");
  header(&f, 3, 1, 1);
  kv_u32(&f, "general.alignment", 4096);
  tensor(&f, "w", 1, (uint64_t[]){8}, T_F32, 0);
  zeros(&f, 100);
  refused("data that would start past the end", &f, MP_ERR_FORMAT,
          "its data section would start at byte 4096 (its header padded to its alignment of "
          "4096), past the end of the");
}

int main(void) {
  int fd = mkstemp(path);
  if (fd < 0) return 2;
  close(fd);
  test_valid_file();
  test_long_header();
  test_prefixes();
  test_nested_arrays();
  test_refusals();
  unlink(path);
  printf("%s\n", failures ? "FAILED" : "all passed");
  return failures ? 1 : 0;
}
