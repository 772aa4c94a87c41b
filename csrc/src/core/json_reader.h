/* Reading JSON from untrusted bytes, one token at a time, for the one place the runtime meets
 * JSON it did not write: a safetensors file's header (weights/safetensors.c). The runtime has
 * no JSON library to depend on (core/json.h only writes), and a general parser would be more
 * than this needs and more to trust.
 *
 * This is a pull reader, not a parser: its caller asks for what the format expects next (an
 * object's '{', a string, a whole number) and gets it or a refusal, so the caller's schema
 * decides the nesting and nothing here recurses. A value the schema does not expect (an array
 * where a number should be) is refused where it starts, so no input, however deeply nested,
 * costs more than one pass. Each read is bounded by what remains of the input, checked in
 * subtraction form; a string is decoded into an allocation no larger than its text.
 *
 * It reads RFC 8259 JSON strictly: whitespace is space, tab, CR and LF; strings hold no raw
 * control characters, escapes are the eight short ones and \uXXXX (a surrogate pair becomes
 * one 4-byte UTF-8 sequence; a lone surrogate is refused); the input must be UTF-8 as a whole
 * (mp_json_reader_init checks). Numbers are read only where a whole number 0..2^64-1 is
 * expected: a sign, a fraction, an exponent or a leading zero is refused there. */
#ifndef MODPACK_CORE_JSON_READER_H_
#define MODPACK_CORE_JSON_READER_H_

#include <stdbool.h>
#include <stdint.h>

#include "modpack/modpack.h"

typedef struct {
  const uint8_t* data;
  uint64_t size;
  uint64_t pos;
  /* For messages: what the text is, e.g. "'model.safetensors': its JSON header". A refusal
   * reads "<what> is not the JSON expected at byte <pos> (<context>): expected <x>, found <y>",
   * or with a subject "(<context> '<subject>')". */
  const char* what;
  /* The name of the item being read, which the caller sets and clears (NULL: none), so that
   * nothing is formatted unless a refusal needs it; shown cut to its first 200 bytes. */
  const char* subject;
} mp_json_reader_t;

/* A reader over |size| bytes at |data| (not copied: they must outlive it); MP_ERR_FORMAT,
 * naming the byte, when they are not UTF-8. */
mp_status_t mp_json_reader_init(mp_json_reader_t* r, const uint8_t* data, uint64_t size,
                                const char* what);

/* The next byte after whitespace (whitespace is consumed), or -1 at the end. */
int mp_json_peek(mp_json_reader_t* r);

/* Consume |c| (one of the structural characters {}[]:,) if it comes next; true if it did. */
bool mp_json_accept(mp_json_reader_t* r, char c);

/* Consume |c|, or refuse: "expected |expected|" in |context| (both name what the caller was
 * reading, e.g. context "tensor 'w'", expected "',' or '}'"). */
mp_status_t mp_json_expect(mp_json_reader_t* r, char c, const char* context, const char* expected);

/* Consume the literal null if it comes next; true if it did. */
bool mp_json_accept_null(mp_json_reader_t* r);

/* A string, decoded to UTF-8 into a new allocation (*out, NUL-terminated, freed by the
 * caller) of *out_size bytes: it may hold NUL bytes (from \u0000), which the caller refuses
 * where they matter. */
mp_status_t mp_json_read_string(mp_json_reader_t* r, const char* context, char** out,
                                uint64_t* out_size);

/* A whole number 0..2^64-1. */
mp_status_t mp_json_read_u64(mp_json_reader_t* r, const char* context, uint64_t* out);

/* Only whitespace remains. */
mp_status_t mp_json_end(mp_json_reader_t* r);

/* The refusal at the reader's position: "expected |expected|", and what is found there. */
mp_status_t mp_json_unexpected(mp_json_reader_t* r, const char* context, const char* expected);

#endif /* MODPACK_CORE_JSON_READER_H_ */
