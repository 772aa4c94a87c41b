/* One piece of a device module's code (a CUDA variant, the OpenCL source or a binary, a SPIR-V
 * shader, a ROCm code object) as its kind reads it: in place in the payload, or, when the
 * payload's entry stores code frames (modpack/format.h), a frame decoded the first time a
 * device needs that piece — only that piece, into memory its module frees — and kept.
 *
 * The kind's checks on the code itself (magic numbers, a PTX's NUL) run on the raw bytes: at
 * parse for code in place, after decoding for compressed code (the check given to
 * mp_code_get), so a compressed piece's damage is reported at its first use, never ignored. */
#ifndef MODPACK_KINDS_COMMON_CODE_H_
#define MODPACK_KINDS_COMMON_CODE_H_

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "modpack/modpack.h"

typedef struct {
  const uint8_t* stored; /* the piece as stored in the payload (a frame, or the code) */
  uint64_t stored_size;
  bool framed;
  uint32_t encoding; /* MP_CODE_STORED or MP_CODE_ZSTD (framed); MP_CODE_STORED otherwise */
  uint64_t raw_size; /* the code's size */
  uint64_t raw_checksum;
  const uint8_t* frame_data; /* the frame's data, after its header */
  _Atomic(const uint8_t*) raw; /* the code: in place, or decoded (owned); NULL until decoded */
  uint8_t* owned;
} mp_code_t;

/* What a kind checks on a piece's raw bytes; |context| is the kind's (the variant, say). */
typedef mp_status_t (*mp_code_check_t)(void* context, const uint8_t* raw, uint64_t size);

/* Take the |size| bytes at |stored| as a piece: the code itself, or (|framed|) a frame whose
 * header is checked here. Nothing is decoded. */
mp_status_t mp_code_open(mp_code_t* code, const uint8_t* stored, uint64_t size, bool framed);
/* The code's bytes when they are in place (not compressed), else NULL: what a kind checks at
 * parse. */
const uint8_t* mp_code_in_place(const mp_code_t* code);
/* The code's raw bytes, decoding the frame the first time (thread-safe; |check| runs once on
 * freshly decoded bytes, and a failed check or decode leaves the piece undecoded). */
mp_status_t mp_code_get(mp_code_t* code, mp_code_check_t check, void* context,
                        const uint8_t** out_raw);
/* Frees a decoded copy. */
void mp_code_free(mp_code_t* code);
/* "stored_bytes", "raw_bytes" and "encoding" JSON members for describe (tools show them). */
void mp_code_describe(const mp_code_t* code, char* buffer, uint64_t capacity);

#endif /* MODPACK_KINDS_COMMON_CODE_H_ */
