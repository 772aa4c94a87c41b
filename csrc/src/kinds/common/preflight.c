/* Parsing a payload's head from a growing prefix (kinds/common/preflight.h). */
#include "kinds/common/preflight.h"

#include "core/error.h"

mp_status_t mp_preflight_parse_head(const mp_payload_reader_t* payload, uint64_t start,
                                    mp_status_t (*parse)(void* state, mp_const_byte_span_t head),
                                    void (*reset)(void* state), void* state) {
  if (start > payload->size)
    return mp_errorf(MP_ERR_FORMAT, "the payload ends before byte %llu",
                     (unsigned long long)start);
  uint64_t left = payload->size - start;
  uint64_t want = left < MP_PREFLIGHT_FIRST_READ ? left : MP_PREFLIGHT_FIRST_READ;
  for (;;) {
    const uint8_t* bytes;
    MP_RETURN_IF_ERROR(payload->read(payload->context, start, want, &bytes));
    mp_status_t status = parse(state, (mp_const_byte_span_t){bytes, want});
    if (status == MP_OK || want == left || want >= MP_PREFLIGHT_MAX_HEAD) return status;
    reset(state);
    want = want * 2 < left ? want * 2 : left;
    if (want > MP_PREFLIGHT_MAX_HEAD) want = MP_PREFLIGHT_MAX_HEAD;
  }
}
