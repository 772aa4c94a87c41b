/* A device module's piece of code, in place or decoded once on first use (kinds/common/code.h). */
#include "kinds/common/code.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/code_frame.h"
#include "core/error.h"

/* Decoding is rare (once per piece a device loads) and may be slow for large code: one lock for
 * every module keeps two threads from decoding the same piece twice. */
static pthread_mutex_t decode_lock = PTHREAD_MUTEX_INITIALIZER;

mp_status_t mp_code_open(mp_code_t* code, const uint8_t* stored, uint64_t size, bool framed) {
  code->stored = stored;
  code->stored_size = size;
  code->framed = framed;
  code->owned = NULL;
  if (!framed) {
    code->encoding = MP_CODE_STORED;
    code->raw_size = size;
    code->frame_data = stored;
    atomic_store(&code->raw, stored);
    return MP_OK;
  }
  mp_code_frame_t frame;
  MP_RETURN_IF_ERROR(mp_code_frame_parse(stored, size, &frame));
  code->encoding = frame.encoding;
  code->raw_size = frame.raw_size;
  code->raw_checksum = frame.raw_checksum;
  code->frame_data = frame.data;
  atomic_store(&code->raw, frame.encoding == MP_CODE_STORED ? frame.data : NULL);
  return MP_OK;
}

const uint8_t* mp_code_in_place(const mp_code_t* code) {
  return code->encoding == MP_CODE_STORED ? code->frame_data : NULL;
}

mp_status_t mp_code_get(mp_code_t* code, mp_code_check_t check, void* context,
                        const uint8_t** out_raw) {
  const uint8_t* raw = atomic_load(&code->raw);
  if (raw) {
    *out_raw = raw;
    return MP_OK;
  }
  pthread_mutex_lock(&decode_lock);
  mp_status_t status = MP_OK;
  raw = atomic_load(&code->raw);
  if (!raw) {
    mp_code_frame_t frame = {code->encoding, code->raw_size, code->raw_checksum, code->frame_data,
                             code->stored_size - MP_CODE_FRAME_HEADER_SIZE};
    /* The size was bounded when the frame was opened (by the frame's stored size). */
    uint8_t* buffer = malloc(code->raw_size ? (size_t)code->raw_size : 1);
    if (!buffer) {
      status = mp_out_of_memory("decoded device code");
    } else if ((status = mp_code_frame_decode_into(&frame, buffer)) != MP_OK ||
               (check && (status = check(context, buffer, code->raw_size)) != MP_OK)) {
      free(buffer);
    } else {
      code->owned = buffer;
      raw = buffer;
      atomic_store(&code->raw, raw);
    }
  }
  pthread_mutex_unlock(&decode_lock);
  if (status == MP_OK) *out_raw = raw;
  return status;
}

void mp_code_free(mp_code_t* code) {
  free(code->owned);
  code->owned = NULL;
  atomic_store(&code->raw, NULL);
}

void mp_code_describe(const mp_code_t* code, char* buffer, uint64_t capacity) {
  snprintf(buffer, (size_t)capacity,
           "\"stored_bytes\": %" PRIu64 ", \"raw_bytes\": %" PRIu64 ", \"encoding\": \"%s\"",
           code->stored_size, code->raw_size,
           !code->framed ? "raw" : code->encoding == MP_CODE_ZSTD ? "zstd" : "stored");
}
