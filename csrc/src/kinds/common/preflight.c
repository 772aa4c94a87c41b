/* Parsing a payload's head from a growing prefix, and the kernel cache's answer
 * (kinds/common/preflight.h). */
#include "kinds/common/preflight.h"

#include <stdio.h>
#include <string.h>

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

void mp_preflight_cache_tally_init(mp_preflight_cache_tally_t* tally, const char* unused_detail) {
  memset(tally, 0, sizeof *tally);
  tally->state = "unused";
  snprintf(tally->detail, sizeof tally->detail, "%s", unused_detail);
}

void mp_preflight_cache_tally_add(mp_preflight_cache_tally_t* tally, const char* build,
                                  const char* state, const char* found) {
  bool hit = strcmp(state, "hit") == 0;
  tally->hits += hit;
  if (tally->asked++ == 0 || (!hit && !tally->missed)) { /* the first, or the first not kept */
    tally->state = state;
    snprintf(tally->detail, sizeof tally->detail, "%s: %s", build, found);
    tally->missed = !hit;
  }
}

void mp_preflight_cache_answer(mp_json_t* out, const char* state, const char* detail) {
  mp_json_printf(out, "\"kernel_cache\": {\"state\": \"%s\", \"detail\": ", state);
  mp_json_string(out, detail);
  mp_json_printf(out, "}");
}
