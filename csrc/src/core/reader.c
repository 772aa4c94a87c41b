/* A bounds-checked cursor over untrusted payload bytes (core/bytes.h). Every read checks what
 * remains, in subtraction form, before touching memory. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/error.h"

bool mp_read_bytes(mp_reader_t* r, uint64_t n, const uint8_t** out) {
  if (r->pos > r->size || n > r->size - r->pos) return false;
  *out = r->data + r->pos;
  r->pos += n;
  return true;
}

bool mp_read_u8(mp_reader_t* r, uint8_t* out) {
  const uint8_t* p;
  if (!mp_read_bytes(r, 1, &p)) return false;
  *out = p[0];
  return true;
}

bool mp_read_u32(mp_reader_t* r, uint32_t* out) {
  const uint8_t* p;
  if (!mp_read_bytes(r, 4, &p)) return false;
  *out = mp_load_le32(p);
  return true;
}

bool mp_read_u64(mp_reader_t* r, uint64_t* out) {
  const uint8_t* p;
  if (!mp_read_bytes(r, 8, &p)) return false;
  *out = mp_load_le64(p);
  return true;
}

uint64_t mp_utf8_invalid_at(const uint8_t* s, uint64_t size) {
  for (uint64_t i = 0; i < size;) {
    uint8_t c = s[i];
    uint64_t n = c < 0x80             ? 1
                 : (c & 0xE0) == 0xC0 ? 2
                 : (c & 0xF0) == 0xE0 ? 3
                 : (c & 0xF8) == 0xF0 ? 4
                                      : 0;
    if (n == 0 || n > size - i) return i;
    uint32_t code = n == 1 ? c : n == 2 ? c & 0x1Fu : n == 3 ? c & 0x0Fu : c & 0x07u;
    for (uint64_t k = 1; k < n; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      code = code << 6 | (s[i + k] & 0x3Fu);
    }
    /* Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8. */
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < least[n] || (code >= 0xD800 && code <= 0xDFFF) || code > 0x10FFFF) return i;
    i += n;
  }
  return size;
}

static mp_status_t read_string(mp_reader_t* r, uint32_t max, bool optional, const char* where,
                               const char* field, char** out) {
  *out = NULL;
  uint32_t size;
  const uint8_t* bytes;
  if (!mp_read_u32(r, &size)) return mp_reader_error(r, field);
  if (size == 0 && optional) return MP_OK;
  if (size == 0) return mp_errorf(MP_ERR_FORMAT, "%s: %s%s is empty", r->what, where, field);
  if (size > max)
    return mp_errorf(MP_ERR_FORMAT, "%s: %s%s of %u bytes exceeds %u", r->what, where, field, size,
                     max);
  if (!mp_read_bytes(r, size, &bytes)) return mp_reader_error(r, field);
  if (memchr(bytes, 0, size))
    return mp_errorf(MP_ERR_FORMAT, "%s: %s%s contains a NUL byte", r->what, where, field);
  uint64_t bad = mp_utf8_invalid_at(bytes, size);
  if (bad < size)
    return mp_errorf(MP_ERR_FORMAT, "%s: %s%s is not UTF-8 (byte %" PRIu64 " of %u is 0x%02x)",
                     r->what, where, field, bad, size, bytes[bad]);
  char* s = malloc((size_t)size + 1);
  if (!s) return mp_out_of_memory(field);
  memcpy(s, bytes, size);
  s[size] = '\0';
  *out = s;
  return MP_OK;
}

mp_status_t mp_read_string(mp_reader_t* r, uint32_t max, const char* where, const char* field,
                           char** out) {
  return read_string(r, max, false, where, field, out);
}

mp_status_t mp_read_optional_string(mp_reader_t* r, uint32_t max, const char* where,
                                    const char* field, char** out) {
  return read_string(r, max, true, where, field, out);
}

mp_status_t mp_reader_error(const mp_reader_t* r, const char* field) {
  return mp_errorf(MP_ERR_FORMAT,
                   "%s truncated or corrupt: cannot read %s at byte %" PRIu64 " of %" PRIu64,
                   r->what, field, r->pos, r->size);
}
