/* A pull reader of JSON from untrusted bytes (core/json_reader.h). */
#include "core/json_reader.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/error.h"

static bool is_space(uint8_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool is_digit(int c) {
  return c >= '0' && c <= '9';
}

enum { SHOWN_SUBJECT = 200 };

static mp_status_t refuse_at(const mp_json_reader_t* r, uint64_t pos, const char* context,
                             const char* expected, const char* found) {
  if (!r->subject)
    return mp_errorf(MP_ERR_FORMAT,
                     "%s is not the JSON expected at byte %" PRIu64 " (%s): expected %s, found %s",
                     r->what, pos, context, expected, found);
  size_t n = strlen(r->subject);
  bool cut = n > SHOWN_SUBJECT;
  if (cut)
    for (n = SHOWN_SUBJECT; n > 0 && ((uint8_t)r->subject[n] & 0xC0) == 0x80;) --n;
  return mp_errorf(MP_ERR_FORMAT,
                   "%s is not the JSON expected at byte %" PRIu64 " (%s '%.*s%s'): expected %s, "
                   "found %s",
                   r->what, pos, context, (int)n, r->subject, cut ? "..." : "", expected, found);
}

mp_status_t mp_json_reader_init(mp_json_reader_t* r, const uint8_t* data, uint64_t size,
                                const char* what) {
  *r = (mp_json_reader_t){data, size, 0, what, NULL};
  uint64_t bad = mp_utf8_invalid_at(data, size);
  if (bad < size)
    return mp_errorf(MP_ERR_FORMAT, "%s is not UTF-8: byte %" PRIu64 " (0x%02x) begins no UTF-8 "
                     "character", what, bad, data[bad]);
  return MP_OK;
}

int mp_json_peek(mp_json_reader_t* r) {
  while (r->pos < r->size && is_space(r->data[r->pos])) ++r->pos;
  return r->pos < r->size ? r->data[r->pos] : -1;
}

bool mp_json_accept(mp_json_reader_t* r, char c) {
  if (mp_json_peek(r) != (uint8_t)c) return false;
  ++r->pos;
  return true;
}

mp_status_t mp_json_expect(mp_json_reader_t* r, char c, const char* context,
                           const char* expected) {
  return mp_json_accept(r, c) ? MP_OK : mp_json_unexpected(r, context, expected);
}

bool mp_json_accept_null(mp_json_reader_t* r) {
  if (mp_json_peek(r) != 'n' || r->size - r->pos < 4 || r->data[r->pos + 1] != 'u' ||
      r->data[r->pos + 2] != 'l' || r->data[r->pos + 3] != 'l')
    return false;
  r->pos += 4;
  return true;
}

mp_status_t mp_json_unexpected(mp_json_reader_t* r, const char* context, const char* expected) {
  int c = mp_json_peek(r);
  char found[32];
  if (c < 0)
    snprintf(found, sizeof found, "the end of the text");
  else if (c == '{')
    snprintf(found, sizeof found, "an object");
  else if (c == '[')
    snprintf(found, sizeof found, "an array");
  else if (c == '"')
    snprintf(found, sizeof found, "a string");
  else if (c == '-' || is_digit(c))
    snprintf(found, sizeof found, "a number");
  else if (c > 0x20 && c < 0x7F)
    snprintf(found, sizeof found, "'%c'", c);
  else
    snprintf(found, sizeof found, "byte 0x%02x", (unsigned)c);
  return refuse_at(r, r->pos, context, expected, found);
}

static int hex_value(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* The 4 hex digits of a \u escape at data[at, at + 6) ("\uXXXX"), if all of it is before
 * |end|; -1 otherwise. */
static int32_t unicode_escape(const mp_json_reader_t* r, uint64_t at, uint64_t end) {
  if (at > end || end - at < 6 || r->data[at] != '\\' || r->data[at + 1] != 'u') return -1;
  int32_t value = 0;
  for (int i = 2; i < 6; ++i) {
    int digit = hex_value(r->data[at + i]);
    if (digit < 0) return -1;
    value = value << 4 | digit;
  }
  return value;
}

static uint64_t put_utf8(uint8_t* out, uint32_t code) {
  if (code < 0x80) {
    out[0] = (uint8_t)code;
    return 1;
  }
  if (code < 0x800) {
    out[0] = (uint8_t)(0xC0 | code >> 6);
    out[1] = (uint8_t)(0x80 | (code & 0x3F));
    return 2;
  }
  if (code < 0x10000) {
    out[0] = (uint8_t)(0xE0 | code >> 12);
    out[1] = (uint8_t)(0x80 | (code >> 6 & 0x3F));
    out[2] = (uint8_t)(0x80 | (code & 0x3F));
    return 3;
  }
  out[0] = (uint8_t)(0xF0 | code >> 18);
  out[1] = (uint8_t)(0x80 | (code >> 12 & 0x3F));
  out[2] = (uint8_t)(0x80 | (code >> 6 & 0x3F));
  out[3] = (uint8_t)(0x80 | (code & 0x3F));
  return 4;
}

/* Decode the string text [start, end) (between its quotes, its end found and its bytes
 * checked) into |out|, which has room for end - start bytes: no escape decodes longer than
 * it is written. The number of bytes, or -1 with the refusal recorded. */
static int64_t decode(const mp_json_reader_t* r, uint64_t start, uint64_t end,
                      const char* context, uint8_t* out) {
  uint64_t n = 0;
  for (uint64_t i = start; i < end;) {
    uint8_t c = r->data[i];
    if (c != '\\') {
      out[n++] = c;
      ++i;
      continue;
    }
    uint8_t e = r->data[i + 1]; /* the scan saw a byte after every backslash */
    static const char shorts[] = "\"\\/bfnrt";
    static const char decoded[] = "\"\\/\b\f\n\r\t";
    const char* at = e ? memchr(shorts, e, sizeof shorts - 1) : NULL;
    if (at) {
      out[n++] = (uint8_t)decoded[at - shorts];
      i += 2;
      continue;
    }
    int32_t code = e == 'u' ? unicode_escape(r, i, end) : -1;
    if (code < 0) {
      refuse_at(r, i, context, "an escape JSON defines (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)",
                "another");
      return -1;
    }
    i += 6;
    if (code >= 0xDC00 && code <= 0xDFFF) {
      refuse_at(r, i - 6, context, "a character", "a UTF-16 low surrogate with no high one");
      return -1;
    }
    if (code >= 0xD800 && code <= 0xDBFF) {
      int32_t low = unicode_escape(r, i, end);
      if (low < 0xDC00 || low > 0xDFFF) {
        refuse_at(r, i - 6, context, "a UTF-16 high surrogate followed by a \\u low surrogate",
                  "a lone high surrogate");
        return -1;
      }
      code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
      i += 6;
    }
    n += put_utf8(out + n, (uint32_t)code);
  }
  return (int64_t)n;
}

mp_status_t mp_json_read_string(mp_json_reader_t* r, const char* context, char** out,
                                uint64_t* out_size) {
  *out = NULL;
  *out_size = 0;
  if (mp_json_peek(r) != '"') return mp_json_unexpected(r, context, "a string");
  const uint64_t start = r->pos + 1;
  uint64_t i = start;
  for (;;) { /* find its end, refusing raw control characters */
    if (i >= r->size) return refuse_at(r, r->pos, context, "a string", "one that never ends");
    uint8_t c = r->data[i];
    if (c == '"') break;
    if (c < 0x20) {
      char found[64];
      snprintf(found, sizeof found, "a control character (0x%02x) in a string", c);
      return refuse_at(r, i, context, "a character (JSON escapes control characters)", found);
    }
    i += c == '\\' ? 2 : 1;
  }
  uint8_t* s = malloc((size_t)(i - start) + 1);
  if (!s) return mp_out_of_memory("a JSON string");
  int64_t n = decode(r, start, i, context, s);
  if (n < 0) {
    free(s);
    return MP_ERR_FORMAT;
  }
  s[n] = '\0';
  r->pos = i + 1;
  *out = (char*)s;
  *out_size = (uint64_t)n;
  return MP_OK;
}

mp_status_t mp_json_read_u64(mp_json_reader_t* r, const char* context, uint64_t* out) {
  *out = 0;
  int c = mp_json_peek(r);
  const char* expected = "a whole number (0 to 2^64 - 1)";
  if (c == '-') return refuse_at(r, r->pos, context, expected, "a negative number");
  if (!is_digit(c)) return mp_json_unexpected(r, context, expected);
  const uint64_t start = r->pos;
  if (c == '0' && r->size - r->pos > 1 && is_digit(r->data[r->pos + 1]))
    return refuse_at(r, start, context, expected, "a number with a leading zero");
  uint64_t value = 0;
  for (; r->pos < r->size && is_digit(r->data[r->pos]); ++r->pos) {
    unsigned digit = r->data[r->pos] - '0';
    if (value > (UINT64_MAX - digit) / 10)
      return refuse_at(r, start, context, expected, "a number over 2^64 - 1");
    value = value * 10 + digit;
  }
  if (r->pos < r->size &&
      (r->data[r->pos] == '.' || r->data[r->pos] == 'e' || r->data[r->pos] == 'E'))
    return refuse_at(r, start, context, expected, "a number with a fraction or an exponent");
  *out = value;
  return MP_OK;
}

mp_status_t mp_json_end(mp_json_reader_t* r) {
  if (mp_json_peek(r) < 0) return MP_OK;
  return mp_json_unexpected(r, "after the value", "the end of the text (only spaces may follow)");
}
