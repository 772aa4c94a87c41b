/* GGUF files read in place (weights/foreign_index.h): ggml's single-file container for
 * llama.cpp's models, versions 2 and 3, little-endian.
 *
 *   "GGUF" u32 version, u64 tensor_count, u64 metadata_kv_count
 *   metadata_kv_count x (string key, u32 value type, value)
 *   tensor_count x (string name, u32 n_dims, u64 ne[n_dims] (ne0 innermost), u32 ggml type,
 *                   u64 offset in the data section)
 *   zero padding to general.alignment (a u32 key, 32 by default)    <- the data section
 *
 * A string is a u64 length and that many bytes of UTF-8 (no NUL terminator); a value is one
 * of 13 types, an array being a u32 element type, a u64 count and the elements (arrays of
 * arrays allowed). Everything before the data section is the header: read once into a private
 * buffer (from its first MiB, doubled while the header goes on, never past
 * MP_GGUF_MAX_HEADER), parsed there, and kept, so that the digest binding the file is taken
 * over exactly the bytes parsed. Every length and count is checked against what is left of
 * the header before it is used: a claim the file cannot hold is refused before anything is
 * allocated for it. docs/format.md ("GGUF files, as modpack reads them") lists the rules. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/error.h"
#include "files/file.h"
#include "weights/foreign_index.h"

enum {
  GGUF_FIRST_VERSION = 2, /* version 1 (32-bit counts) is no longer read by ggml either */
  GGUF_LAST_VERSION = 3,
  GGUF_DEFAULT_ALIGNMENT = 32,
  /* The first read of a header, doubled while it goes on. The fuzz build (CMakeLists.txt)
   * starts small, so that its inputs go through the growing too. */
#ifdef MODPACK_FUZZ_BUILD
  FIRST_READ = 64,
#else
  FIRST_READ = 1 << 20,
#endif
  /* A key: GGUF's own limit. A tensor's name: MP_WEIGHTS_MAX_NAME. */
  MAX_KEY = 65535,
  /* Arrays of arrays, at most this deep (ggml reads none; gguf-py any). */
  MAX_NESTING = 8,
  /* The elements of an array written out in the metadata JSON; a longer one (a tokenizer's
   * vocabulary of 100k+ strings) is summarized as {"type", "count", "first"}. */
  JSON_ELEMENTS = 64,
  /* Real models have hundreds to a few thousand tensors; each costs an mp_foreign_array_t
   * (about 600 bytes) here, for some 25 bytes of header at the least. */
  MAX_TENSORS = 1 << 18,
  /* The least bytes a key-value pair (a 1-byte key, a u8) and a tensor info (a 1-byte name,
   * no dimensions) take: counts are checked against them before anything is read. */
  MIN_KV_SIZE = 8 + 1 + 4 + 1,
  MIN_TENSOR_INFO_SIZE = 8 + 1 + 4 + 4 + 8,
};

/* ---- the ggml types -------------------------------------------------------------------- */

/* GGUF metadata value types. */
enum {
  VALUE_UINT8 = 0,
  VALUE_INT8 = 1,
  VALUE_UINT16 = 2,
  VALUE_INT16 = 3,
  VALUE_UINT32 = 4,
  VALUE_INT32 = 5,
  VALUE_FLOAT32 = 6,
  VALUE_BOOL = 7,
  VALUE_STRING = 8,
  VALUE_ARRAY = 9,
  VALUE_UINT64 = 10,
  VALUE_INT64 = 11,
  VALUE_FLOAT64 = 12,
  VALUE_TYPES = 13,
};

static const char* const VALUE_TYPE_NAMES[VALUE_TYPES] = {
    "uint8", "int8",   "uint16", "int16", "uint32", "int32",  "float32",
    "bool",  "string", "array",  "uint64", "int64", "float64"};

/* The bytes an element of |type| takes at the least (a string: its length; an array: its
 * element type and count); 0 for a type GGUF does not define. */
static uint64_t value_least_size(uint32_t type) {
  static const uint8_t sizes[VALUE_TYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 8, 12, 8, 8, 8};
  return type < VALUE_TYPES ? sizes[type] : 0;
}

/* A ggml tensor type: its number in the file, its name, its block (elements, bytes), and the
 * DLPack dtype an unblocked type is handed out as (bits 0: block-quantized, handed out as its
 * uint8 blocks). The numbers and blocks are ggml's (gguf-py's GGML_QUANT_SIZES; numbers 4, 5,
 * 31 to 33 and 36 to 38 were types ggml has since removed). tests/test_gguf.py checks this
 * table against the installed gguf package. */
typedef struct {
  uint32_t id;
  const char* name;
  uint32_t block_elements, block_bytes;
  DLDataType dtype;
} ggml_type_t;

#define BLOCKS {0, 0, 0}
static const ggml_type_t GGML_TYPES[] = {
    {0, "F32", 1, 4, {kDLFloat, 32, 1}},
    {1, "F16", 1, 2, {kDLFloat, 16, 1}},
    {2, "Q4_0", 32, 18, BLOCKS},
    {3, "Q4_1", 32, 20, BLOCKS},
    {6, "Q5_0", 32, 22, BLOCKS},
    {7, "Q5_1", 32, 24, BLOCKS},
    {8, "Q8_0", 32, 34, BLOCKS},
    {9, "Q8_1", 32, 40, BLOCKS},
    {10, "Q2_K", 256, 84, BLOCKS},
    {11, "Q3_K", 256, 110, BLOCKS},
    {12, "Q4_K", 256, 144, BLOCKS},
    {13, "Q5_K", 256, 176, BLOCKS},
    {14, "Q6_K", 256, 210, BLOCKS},
    {15, "Q8_K", 256, 292, BLOCKS},
    {16, "IQ2_XXS", 256, 66, BLOCKS},
    {17, "IQ2_XS", 256, 74, BLOCKS},
    {18, "IQ3_XXS", 256, 98, BLOCKS},
    {19, "IQ1_S", 256, 50, BLOCKS},
    {20, "IQ4_NL", 32, 18, BLOCKS},
    {21, "IQ3_S", 256, 110, BLOCKS},
    {22, "IQ2_S", 256, 82, BLOCKS},
    {23, "IQ4_XS", 256, 136, BLOCKS},
    {24, "I8", 1, 1, {kDLInt, 8, 1}},
    {25, "I16", 1, 2, {kDLInt, 16, 1}},
    {26, "I32", 1, 4, {kDLInt, 32, 1}},
    {27, "I64", 1, 8, {kDLInt, 64, 1}},
    {28, "F64", 1, 8, {kDLFloat, 64, 1}},
    {29, "IQ1_M", 256, 56, BLOCKS},
    {30, "BF16", 1, 2, {kDLBfloat, 16, 1}},
    {34, "TQ1_0", 256, 54, BLOCKS},
    {35, "TQ2_0", 256, 66, BLOCKS},
    {39, "MXFP4", 32, 17, BLOCKS},
    {40, "NVFP4", 64, 36, BLOCKS},
    {41, "Q1_0", 128, 18, BLOCKS},
};
#undef BLOCKS

static const ggml_type_t* find_type(uint32_t id) {
  for (size_t i = 0; i < sizeof GGML_TYPES / sizeof GGML_TYPES[0]; ++i)
    if (GGML_TYPES[i].id == id) return &GGML_TYPES[i];
  return NULL;
}

/* ---- the metadata JSON ----------------------------------------------------------------- */

/* A growing NUL-terminated text, at most MP_GGUF_MAX_HEADER bytes (escapes and numbers make
 * JSON at most a few times the header's bytes; more than that is no real model's metadata). */
typedef struct {
  char* data;
  uint64_t size, capacity;
  bool out_of_memory, too_large;
} text_t;

static void put(text_t* t, const char* s, uint64_t n) {
  if (t->out_of_memory || t->too_large) return;
  if (n > (uint64_t)MP_GGUF_MAX_HEADER - t->size) {
    t->too_large = true;
    return;
  }
  if (t->size + n + 1 > t->capacity) {
    uint64_t capacity = t->capacity ? t->capacity : 4096;
    while (capacity < t->size + n + 1) capacity *= 2;
    char* grown = realloc(t->data, (size_t)capacity);
    if (!grown) {
      t->out_of_memory = true;
      return;
    }
    t->data = grown;
    t->capacity = capacity;
  }
  memcpy(t->data + t->size, s, (size_t)n);
  t->size += n;
  t->data[t->size] = '\0';
}

static void put_text(text_t* t, const char* s) {
  put(t, s, strlen(s));
}

/* |n| bytes of UTF-8 as a JSON string: quotes, backslashes and control characters escaped,
 * the rest as it is. */
static void put_string(text_t* t, const uint8_t* s, uint64_t n) {
  put_text(t, "\"");
  uint64_t start = 0;
  for (uint64_t i = 0; i < n; ++i) {
    uint8_t c = s[i];
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    put(t, (const char*)s + start, i - start);
    char escape[8];
    if (c == '"' || c == '\\')
      snprintf(escape, sizeof escape, "\\%c", c);
    else
      snprintf(escape, sizeof escape, "\\u%04x", c);
    put_text(t, escape);
    start = i + 1;
  }
  put(t, (const char*)s + start, n - start);
  put_text(t, "\"");
}

/* A float as the shortest decimal that reads back as the same value (as a float32 when
 * |single|), always with a point or an exponent so that it reads as a float; NaN and the
 * infinities, which JSON lacks, as the strings "nan", "inf", "-inf". */
static void put_float(text_t* t, double v, bool single) {
  if (isnan(v) || isinf(v)) {
    put_text(t, isnan(v) ? "\"nan\"" : v < 0 ? "\"-inf\"" : "\"inf\"");
    return;
  }
  char text[48];
  for (int digits = single ? 6 : 15; digits <= 17; ++digits) {
    snprintf(text, sizeof text, "%.*g", digits, v);
    double back = strtod(text, NULL);
    if (single ? (float)back == (float)v : back == v) break;
  }
  bool looks_float = false;
  for (char* c = text; *c; ++c) {
    if (*c == 'e') looks_float = true;
    /* A locale's decimal comma (printf's and strtod's agree on it) becomes JSON's point. */
    else if ((*c < '0' || *c > '9') && *c != '-' && *c != '+') *c = '.', looks_float = true;
  }
  put_text(t, text);
  if (!looks_float) put_text(t, ".0");
}

/* ---- the parser ------------------------------------------------------------------------ */

typedef struct {
  const uint8_t* bytes; /* in the header buffer */
  uint64_t size;
} gguf_key_t;

typedef struct {
  const char* path;
  uint64_t file_size;
  uint64_t limit;      /* how far the header may reach: min(file_size, MP_GGUF_MAX_HEADER) */
  const uint8_t* data; /* the header bytes read so far, [0, have) */
  uint64_t have;
  uint64_t pos;
  /* Set when a read needs the bytes [0, want), past those read but not past |limit|: the
   * caller reads more and parses again. */
  uint64_t want;
  char where[320]; /* what is being read, for messages: "key 'general.name'" */
  text_t json;
  gguf_key_t* keys;
  uint64_t key_count, key_capacity;
  uint32_t alignment;
  uint64_t array_capacity;
} parser_t;

static mp_status_t refuse(const parser_t* p, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* MP_ERR_FORMAT: "'PATH' is not a valid GGUF file: WHERE: WHAT". */
static mp_status_t refuse(const parser_t* p, const char* fmt, ...) {
  char what[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return mp_errorf(MP_ERR_FORMAT, "'%s' is not a valid GGUF file: %s%s%s", p->path, p->where,
                   p->where[0] ? ": " : "", what);
}

/* |n| bytes that are not there. */
static mp_status_t beyond(const parser_t* p, uint64_t n, const char* field) {
  if (p->limit < p->file_size)
    return refuse(p, "its %s (%" PRIu64 " bytes at byte %" PRIu64
                  ") goes past the first %d MiB, which is as much header as modpack reads "
                  "(MP_GGUF_MAX_HEADER): the file is damaged, or not a model's",
                  field, n, p->pos, MP_GGUF_MAX_HEADER >> 20);
  return refuse(p, "its %s (%" PRIu64 " bytes at byte %" PRIu64 ") runs past the end of the "
                "%" PRIu64 "-byte file: it is truncated or damaged; copy or download it again",
                field, n, p->pos, p->file_size);
}

/* The next |n| bytes (pointing into the buffer). */
static mp_status_t take(parser_t* p, uint64_t n, const char* field, const uint8_t** out) {
  if (n <= p->have - p->pos) {
    *out = p->data + p->pos;
    p->pos += n;
    return MP_OK;
  }
  if (n <= p->limit - p->pos) { /* there, but not read yet: read more, parse again */
    p->want = p->pos + n;
    return MP_ERR_INTERNAL;
  }
  return beyond(p, n, field);
}

static mp_status_t read_u32(parser_t* p, const char* field, uint32_t* out) {
  const uint8_t* b = NULL;
  MP_RETURN_IF_ERROR(take(p, 4, field, &b));
  *out = mp_load_le32(b);
  return MP_OK;
}

static mp_status_t read_u64(parser_t* p, const char* field, uint64_t* out) {
  const uint8_t* b = NULL;
  MP_RETURN_IF_ERROR(take(p, 8, field, &b));
  *out = mp_load_le64(b);
  return MP_OK;
}

/* A GGUF string of valid UTF-8 (pointing into the buffer); a name (|name|: a key, a tensor's
 * name) is also 1..|max| bytes without NUL. */
static mp_status_t read_string(parser_t* p, const char* field, bool name, uint64_t max,
                               const uint8_t** out, uint64_t* out_size) {
  uint64_t size = 0;
  MP_RETURN_IF_ERROR(read_u64(p, field, &size));
  if (name && (size == 0 || size > max))
    return refuse(p, "its %s is %" PRIu64 " bytes long, not 1 to %" PRIu64, field, size, max);
  const uint8_t* bytes = NULL;
  MP_RETURN_IF_ERROR(take(p, size, field, &bytes));
  if (name && memchr(bytes, 0, (size_t)size))
    return refuse(p, "its %s holds a NUL byte", field);
  uint64_t bad = mp_utf8_invalid_at(bytes, size);
  if (bad < size)
    return refuse(p, "its %s is not UTF-8 (byte %" PRIu64 " of %" PRIu64 " is 0x%02x)", field,
                  bad, size, bytes[bad]);
  *out = bytes;
  *out_size = size;
  return MP_OK;
}

/* What |count| elements of at least |least| bytes each cannot fit in what is left. */
static mp_status_t check_count(const parser_t* p, uint64_t count, uint64_t least,
                               const char* what) {
  if (count <= (p->limit - p->pos) / least) return MP_OK;
  return refuse(p, "it claims %" PRIu64 " %s, more than the %" PRIu64 " bytes after byte %" PRIu64
                " %s can hold",
                count, what, p->limit - p->pos, p->pos,
                p->limit < p->file_size ? "in the most header modpack reads" : "of the file");
}

static void put_number(text_t* t, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void put_number(text_t* t, const char* fmt, ...) {
  char text[32];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  put_text(t, text);
}

/* A value of |type|, written to the JSON when |emit|. */
static mp_status_t read_value(parser_t* p, uint32_t type, int depth, bool emit) {
  text_t* t = &p->json;
  const uint8_t* b = NULL;
  uint64_t size = value_least_size(type);
  if (size == 0)
    return refuse(p, "its value type is %u, which GGUF does not define (0 to %d)", type,
                  VALUE_TYPES - 1);
  if (type == VALUE_STRING) {
    uint64_t n = 0;
    MP_RETURN_IF_ERROR(read_string(p, "string", false, 0, &b, &n));
    if (emit) put_string(t, b, n);
    return MP_OK;
  }
  if (type == VALUE_ARRAY) {
    if (depth >= MAX_NESTING)
      return refuse(p, "its arrays are nested more than %d deep", MAX_NESTING);
    uint32_t element = 0;
    uint64_t count = 0;
    MP_RETURN_IF_ERROR(read_u32(p, "array's element type", &element));
    MP_RETURN_IF_ERROR(read_u64(p, "array's count", &count));
    uint64_t least = value_least_size(element);
    if (least == 0)
      return refuse(p, "its array's element type is %u, which GGUF does not define (0 to %d)",
                    element, VALUE_TYPES - 1);
    char what[48];
    snprintf(what, sizeof what, "array elements of type %s", VALUE_TYPE_NAMES[element]);
    MP_RETURN_IF_ERROR(check_count(p, count, least, what));
    bool summary = emit && count > JSON_ELEMENTS;
    if (summary) {
      put_text(t, "{\"type\": \"");
      put_text(t, VALUE_TYPE_NAMES[element]);
      put_number(t, "\", \"count\": %" PRIu64 ", \"first\": [", count);
    } else if (emit) {
      put_text(t, "[");
    }
    bool fixed = element != VALUE_STRING && element != VALUE_ARRAY;
    for (uint64_t i = 0; i < count; ++i) {
      bool shown = emit && i < JSON_ELEMENTS;
      if (!shown && fixed) { /* the rest, unread: checked above to fit */
        MP_RETURN_IF_ERROR(take(p, (count - i) * least, "array", &b));
        break;
      }
      if (shown && i > 0) put_text(t, ", ");
      MP_RETURN_IF_ERROR(read_value(p, element, depth + 1, shown));
    }
    if (emit) put_text(t, summary ? "]}" : "]");
    return MP_OK;
  }
  MP_RETURN_IF_ERROR(take(p, size, VALUE_TYPE_NAMES[type], &b));
  if (!emit) return MP_OK;
  switch (type) {
    case VALUE_UINT8: put_number(t, "%u", b[0]); break;
    case VALUE_INT8: put_number(t, "%d", (int8_t)b[0]); break;
    case VALUE_UINT16: put_number(t, "%u", mp_load_le16(b)); break;
    case VALUE_INT16: put_number(t, "%d", (int16_t)mp_load_le16(b)); break;
    case VALUE_UINT32: put_number(t, "%" PRIu32, mp_load_le32(b)); break;
    case VALUE_INT32: put_number(t, "%" PRId32, (int32_t)mp_load_le32(b)); break;
    case VALUE_UINT64: put_number(t, "%" PRIu64, mp_load_le64(b)); break;
    case VALUE_INT64: put_number(t, "%" PRId64, (int64_t)mp_load_le64(b)); break;
    case VALUE_BOOL: put_text(t, b[0] ? "true" : "false"); break; /* as ggml: not 0 is true */
    case VALUE_FLOAT32: {
      uint32_t bits = mp_load_le32(b);
      float f;
      memcpy(&f, &bits, sizeof f);
      put_float(t, f, true);
      break;
    }
    default: { /* VALUE_FLOAT64 */
      uint64_t bits = mp_load_le64(b);
      double d;
      memcpy(&d, &bits, sizeof d);
      put_float(t, d, false);
      break;
    }
  }
  return MP_OK;
}

static int compare_keys(const void* a, const void* b) {
  const gguf_key_t* x = a;
  const gguf_key_t* y = b;
  int c = memcmp(x->bytes, y->bytes, (size_t)(x->size < y->size ? x->size : y->size));
  return c ? c : (x->size > y->size) - (x->size < y->size);
}

static mp_status_t read_metadata(parser_t* p, uint64_t kv_count) {
  static const char ALIGNMENT_KEY[] = "general.alignment";
  text_t* t = &p->json;
  put_text(t, "{");
  for (uint64_t i = 0; i < kv_count; ++i) {
    snprintf(p->where, sizeof p->where, "metadata key %" PRIu64, i);
    const uint8_t* key = NULL;
    uint64_t key_size = 0;
    MP_RETURN_IF_ERROR(read_string(p, "name", true, MAX_KEY, &key, &key_size));
    snprintf(p->where, sizeof p->where, "metadata key '%.*s'", key_size > 256 ? 256 : (int)key_size,
             (const char*)key);
    if (p->key_count == p->key_capacity) {
      uint64_t capacity = p->key_capacity ? 2 * p->key_capacity : 64;
      gguf_key_t* grown = realloc(p->keys, (size_t)capacity * sizeof *grown);
      if (!grown) return mp_out_of_memory("a GGUF file's metadata keys");
      p->keys = grown;
      p->key_capacity = capacity;
    }
    p->keys[p->key_count++] = (gguf_key_t){key, key_size};
    uint32_t type = 0;
    MP_RETURN_IF_ERROR(read_u32(p, "value type", &type));
    if (i > 0) put_text(t, ", ");
    put_string(t, key, key_size);
    put_text(t, ": ");
    if (key_size == sizeof ALIGNMENT_KEY - 1 && memcmp(key, ALIGNMENT_KEY, key_size) == 0) {
      if (type != VALUE_UINT32 && type < VALUE_TYPES)
        return refuse(p, "it is of type %s, not uint32", VALUE_TYPE_NAMES[type]);
      if (type != VALUE_UINT32)
        return refuse(p, "it is of type %" PRIu32 ", not uint32", type);
      MP_RETURN_IF_ERROR(read_u32(p, "value", &p->alignment));
      if (p->alignment == 0 || (p->alignment & (p->alignment - 1)) != 0)
        return refuse(p, "the alignment %" PRIu32 " is not a power of two", p->alignment);
      put_number(t, "%" PRIu32, p->alignment);
    } else {
      MP_RETURN_IF_ERROR(read_value(p, type, 0, true));
    }
    if (t->out_of_memory) return mp_out_of_memory("a GGUF file's metadata");
    if (t->too_large)
      return refuse(p, "the metadata as JSON goes past %d MiB: no real model's does",
                    MP_GGUF_MAX_HEADER >> 20);
  }
  put_text(t, "}");
  if (t->out_of_memory) return mp_out_of_memory("a GGUF file's metadata");
  p->where[0] = '\0';
  /* Keys are unique (sorted, not compared pairwise: a vocabulary file may have many). */
  if (p->key_count > 1) qsort(p->keys, (size_t)p->key_count, sizeof *p->keys, compare_keys);
  for (uint64_t i = 1; i < p->key_count; ++i)
    if (compare_keys(&p->keys[i - 1], &p->keys[i]) == 0)
      return refuse(p, "the metadata key '%.*s' appears twice",
                    p->keys[i].size > 256 ? 256 : (int)p->keys[i].size,
                    (const char*)p->keys[i].bytes);
  return MP_OK;
}

/* The tensor info just read into |a| (its name set), checked and completed: the handed-out
 * dtype and shape, the size, the offset (still relative to the data section). */
static mp_status_t describe_tensor(parser_t* p, mp_foreign_array_t* a, uint32_t n_dims,
                                   const uint64_t* ne, uint32_t type_id, uint64_t offset) {
  const ggml_type_t* type = find_type(type_id);
  if (!type)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "'%s': %s has ggml type %" PRIu32 ", which this runtime does not know: a "
                     "type newer than this modpack (upgrade it), or a damaged file",
                     p->path, p->where, type_id);
  bool blocked = type->dtype.bits == 0;
  snprintf(a->type_name, sizeof a->type_name, "%s", type->name);
  a->type_id = type_id;
  a->block_elements = type->block_elements;
  a->block_bytes = type->block_bytes;
  a->logical_ndim = (int32_t)n_dims;
  for (uint32_t d = 0; d < n_dims; ++d) a->logical_shape[d] = (int64_t)ne[n_dims - 1 - d];
  uint64_t row = n_dims ? ne[0] : 1; /* ne0: the innermost extent */
  if (row % type->block_elements != 0)
    return refuse(p, "its rows hold %" PRIu64 " elements (its ne0), not a multiple of the %" PRIu32
                  " in a block of its type %s",
                  row, type->block_elements, type->name);
  if (blocked && n_dims >= MP_WEIGHTS_MAX_NDIM)
    return refuse(p, "it has %" PRIu32 " dimensions: a block-quantized tensor may have %d (its "
                  "blocks add one)",
                  n_dims, MP_WEIGHTS_MAX_NDIM - 1);
  /* Elements (at most INT64_MAX, as ggml requires), then bytes; none when an extent is 0. */
  uint64_t elements = 1, rows = 1;
  bool empty = false;
  for (uint32_t d = 0; d < n_dims; ++d) empty = empty || ne[d] == 0;
  for (uint32_t d = 0; d < n_dims && !empty; ++d) {
    if (!mp_mul_u64(elements, ne[d], &elements) || elements > (uint64_t)INT64_MAX)
      return refuse(p, "its dimensions hold more than 2^63 elements");
    if (d > 0) rows *= ne[d]; /* <= elements */
  }
  uint64_t size = 0;
  if (!empty && (!mp_mul_u64(rows, row / type->block_elements, &size) ||
                 !mp_mul_u64(size, type->block_bytes, &size) || size > (uint64_t)INT64_MAX))
    return refuse(p, "its dimensions hold more than 2^63 bytes");
  if (offset % p->alignment != 0)
    return refuse(p, "it starts at byte %" PRIu64 " of the data section, not a multiple of the "
                  "file's alignment (%" PRIu32 ")",
                  offset, p->alignment);
  a->size = size;
  a->offset = offset;
  if (blocked) {
    a->dtype = (DLDataType){kDLUInt, 8, 1};
    a->ndim = (int32_t)n_dims + 1;
    for (uint32_t d = 0; d + 1 < n_dims; ++d) a->shape[d] = a->logical_shape[d];
    a->shape[n_dims - 1] = (int64_t)(row / type->block_elements);
    a->shape[n_dims] = type->block_bytes;
  } else {
    a->dtype = type->dtype;
    a->ndim = (int32_t)n_dims;
    memcpy(a->shape, a->logical_shape, n_dims * sizeof *a->shape);
  }
  return MP_OK;
}

static mp_status_t read_tensor_info(parser_t* p, mp_foreign_index_t* x, uint64_t i) {
  snprintf(p->where, sizeof p->where, "tensor %" PRIu64, i);
  const uint8_t* name = NULL;
  uint64_t name_size = 0;
  MP_RETURN_IF_ERROR(read_string(p, "name", true, MP_WEIGHTS_MAX_NAME, &name, &name_size));
  snprintf(p->where, sizeof p->where, "tensor '%.*s'", name_size > 256 ? 256 : (int)name_size,
           (const char*)name);
  uint32_t n_dims = 0, type_id = 0;
  uint64_t ne[MP_WEIGHTS_MAX_NDIM] = {0}, offset = 0;
  MP_RETURN_IF_ERROR(read_u32(p, "dimension count", &n_dims));
  if (n_dims > MP_WEIGHTS_MAX_NDIM)
    return refuse(p, "it has %" PRIu32 " dimensions, more than %d (ggml's tensors have 4)",
                  n_dims, MP_WEIGHTS_MAX_NDIM);
  for (uint32_t d = 0; d < n_dims; ++d) {
    char field[16];
    snprintf(field, sizeof field, "ne%" PRIu32, d);
    MP_RETURN_IF_ERROR(read_u64(p, field, &ne[d]));
    if (ne[d] > (uint64_t)INT64_MAX)
      return refuse(p, "its ne%" PRIu32 " is %" PRIu64 ", more than 2^63 - 1", d, ne[d]);
  }
  MP_RETURN_IF_ERROR(read_u32(p, "ggml type", &type_id));
  MP_RETURN_IF_ERROR(read_u64(p, "offset", &offset));
  if (x->count == p->array_capacity) {
    uint64_t capacity = p->array_capacity ? 2 * p->array_capacity : 16;
    mp_foreign_array_t* grown = realloc(x->arrays, (size_t)capacity * sizeof *grown);
    if (!grown) return mp_out_of_memory("a GGUF file's tensors");
    x->arrays = grown;
    p->array_capacity = capacity;
  }
  mp_foreign_array_t* a = &x->arrays[x->count];
  memset(a, 0, sizeof *a);
  if (!(a->name = malloc((size_t)name_size + 1))) return mp_out_of_memory("a tensor name");
  memcpy(a->name, name, (size_t)name_size);
  a->name[name_size] = '\0';
  x->count++; /* freed with the index from here on */
  return describe_tensor(p, a, n_dims, ne, type_id, offset);
}

static int compare_offsets(const void* a, const void* b) {
  const mp_foreign_array_t* x = a;
  const mp_foreign_array_t* y = b;
  if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
  if (x->size != y->size) return x->size < y->size ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int compare_names(const void* a, const void* b) {
  return strcmp(*(char* const*)a, *(char* const*)b);
}

/* The tensors against the data section and each other: inside it, disjoint, uniquely named;
 * put in the order of their offsets. */
static mp_status_t place_tensors(parser_t* p, mp_foreign_index_t* x) {
  for (uint64_t i = 0; i < x->count; ++i) {
    mp_foreign_array_t* a = &x->arrays[i];
    if (!mp_in_bounds(a->offset, a->size, x->data_size))
      return refuse(p, "tensor '%.256s' lies at [%" PRIu64 ", +%" PRIu64 ") of the data section, "
                    "past its end (%" PRIu64 " bytes): the file is truncated or damaged",
                    a->name, a->offset, a->size, x->data_size);
    a->offset += x->data_offset;
  }
  if (x->count > 1) qsort(x->arrays, (size_t)x->count, sizeof *x->arrays, compare_offsets);
  const mp_foreign_array_t* last = NULL; /* the non-empty tensor ending furthest */
  for (uint64_t i = 0; i < x->count; ++i) {
    const mp_foreign_array_t* a = &x->arrays[i];
    if (a->size == 0) continue; /* an empty range overlaps nothing */
    if (last && a->offset < last->offset + last->size)
      return refuse(p, "tensors '%.256s' and '%.256s' overlap ([%" PRIu64 ", +%" PRIu64
                    ") and [%" PRIu64 ", +%" PRIu64 ") of the file)",
                    last->name, a->name, last->offset, last->size, a->offset, a->size);
    last = a;
  }
  if (x->count < 2) return MP_OK;
  char** names = malloc((size_t)x->count * sizeof *names);
  if (!names) return mp_out_of_memory("a GGUF file's tensor names");
  for (uint64_t i = 0; i < x->count; ++i) names[i] = x->arrays[i].name;
  qsort(names, (size_t)x->count, sizeof *names, compare_names);
  mp_status_t status = MP_OK;
  for (uint64_t i = 1; i < x->count && status == MP_OK; ++i)
    if (strcmp(names[i - 1], names[i]) == 0)
      status = refuse(p, "two tensors are named '%.256s'", names[i]);
  free(names);
  return status;
}

static mp_status_t parse(parser_t* p, mp_foreign_index_t* x) {
  const uint8_t* b = NULL;
  if (p->have < 4 || memcmp(p->data, "GGUF", 4) != 0)
    return mp_errorf(MP_ERR_FORMAT,
                     "'%s' is not a GGUF file (it does not start with \"GGUF\"): give a .gguf "
                     "file as llama.cpp writes them",
                     p->path);
  MP_RETURN_IF_ERROR(take(p, 4, "magic", &b));
  MP_RETURN_IF_ERROR(read_u32(p, "version", &x->version));
  if (x->version == 1)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "'%s' is a GGUF version 1 file, which this runtime (like ggml itself) no "
                     "longer reads: convert the model again with a current llama.cpp",
                     p->path);
  if (x->version != 0 && (x->version & 0xFFFF) == 0)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "'%s' is a big-endian GGUF file (its version reads 0x%08" PRIx32
                     "): this runtime reads little-endian ones only",
                     p->path, x->version);
  if (x->version > GGUF_LAST_VERSION)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "'%s' is a GGUF version %" PRIu32 " file; this runtime reads versions %d "
                     "and %d: upgrade modpack",
                     p->path, x->version, GGUF_FIRST_VERSION, GGUF_LAST_VERSION);
  if (x->version < GGUF_FIRST_VERSION) return refuse(p, "its version is 0");
  uint64_t tensor_count = 0, kv_count = 0;
  MP_RETURN_IF_ERROR(read_u64(p, "tensor count", &tensor_count));
  MP_RETURN_IF_ERROR(read_u64(p, "metadata key-value count", &kv_count));
  MP_RETURN_IF_ERROR(check_count(p, kv_count, MIN_KV_SIZE, "metadata key-value pairs"));
  MP_RETURN_IF_ERROR(check_count(p, tensor_count, MIN_TENSOR_INFO_SIZE, "tensors"));
  if (tensor_count > MAX_TENSORS)
    return refuse(p, "it claims %" PRIu64 " tensors, more than modpack reads (%d)", tensor_count,
                  MAX_TENSORS);
  p->alignment = GGUF_DEFAULT_ALIGNMENT;
  MP_RETURN_IF_ERROR(read_metadata(p, kv_count));
  MP_RETURN_IF_ERROR(check_count(p, tensor_count, MIN_TENSOR_INFO_SIZE, "tensors"));
  for (uint64_t i = 0; i < tensor_count; ++i) MP_RETURN_IF_ERROR(read_tensor_info(p, x, i));
  p->where[0] = '\0';
  /* The data section starts at the next multiple of the alignment: the header is all before
   * it, padding included (pos <= MP_GGUF_MAX_HEADER and alignment < 2^32: no overflow). */
  uint64_t data_offset = (p->pos + p->alignment - 1) / p->alignment * p->alignment;
  if (data_offset > p->file_size)
    return refuse(p, "its data section would start at byte %" PRIu64 " (its header padded to "
                  "its alignment of %" PRIu32 "), past the end of the %" PRIu64 "-byte file: it "
                  "is truncated or damaged",
                  data_offset, p->alignment, p->file_size);
  MP_RETURN_IF_ERROR(take(p, data_offset - p->pos, "padding before the data", &b));
  x->format = MP_WEIGHTS_FORMAT_GGUF;
  x->header_size = x->data_offset = data_offset;
  x->data_size = p->file_size - data_offset;
  x->alignment = p->alignment;
  return place_tensors(p, x);
}

mp_status_t mp_gguf_read_index(int fd, uint64_t file_size, const char* path,
                               mp_const_byte_span_t head, mp_foreign_index_t* out) {
  memset(out, 0, sizeof *out);
  uint64_t limit = file_size < (uint64_t)MP_GGUF_MAX_HEADER ? file_size : MP_GGUF_MAX_HEADER;
  uint64_t have = 0, target = limit < FIRST_READ ? limit : FIRST_READ;
  uint8_t* buffer = NULL;
  for (;;) {
    uint8_t* grown = realloc(buffer, (size_t)(target ? target : 1));
    if (!grown) {
      free(buffer);
      return mp_out_of_memory("a GGUF file's header");
    }
    buffer = grown;
    if (have == 0 && head.size) { /* the caller's read of the file's start */
      have = head.size < target ? head.size : target;
      memcpy(buffer, head.data, (size_t)have);
    }
    if (target > have && !mp_file_read_at(fd, buffer + have, (size_t)(target - have), have)) {
      free(buffer);
      return mp_errorf(MP_ERR_IO, "cannot read '%s': %s", path,
                       errno ? strerror(errno) : "the file shrank");
    }
    have = target;
    parser_t p = {.path = path, .file_size = file_size, .limit = limit, .data = buffer,
                  .have = have};
    mp_foreign_index_t index = {0};
    mp_status_t status = parse(&p, &index);
    free(p.keys);
    if (status == MP_OK) {
      index.metadata_json = p.json.data;
      /* Keep exactly the header (the bytes parsed, and the padding to the data). */
      uint8_t* header = realloc(buffer, (size_t)index.header_size);
      index.header = header ? header : buffer;
      *out = index;
      return MP_OK;
    }
    free(p.json.data);
    mp_foreign_index_free(&index);
    if (p.want == 0) {
      free(buffer);
      return status;
    }
    /* The header goes on past what was read: read twice as much (or what it needs), and
     * parse it again from its start, so that every pointer into the buffer stays valid. */
    target = have > limit / 2 ? limit : 2 * have;
    if (target < p.want) target = p.want;
  }
}
