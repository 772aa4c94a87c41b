/* What the device kinds' preflight answers share (modpack preflight: tools/preflight.c): parsing
 * a payload's head from a growing prefix read on demand, and JSON pieces. */
#ifndef MODPACK_KINDS_COMMON_PREFLIGHT_H_
#define MODPACK_KINDS_COMMON_PREFLIGHT_H_

#include "core/registry.h"

enum {
  MP_PREFLIGHT_FIRST_READ = 1024,   /* the first prefix of a payload's head */
  MP_PREFLIGHT_MAX_HEAD = 1 << 20, /* a head is never read past this */
};

/* Run |parse| on the first bytes of |payload| from |start|: MP_PREFLIGHT_FIRST_READ of them,
 * then twice as many while it fails and more is left (calling |reset| on |state| between tries),
 * up to MP_PREFLIGHT_MAX_HEAD. The last failure is the answer when the head does not parse. */
mp_status_t mp_preflight_parse_head(const mp_payload_reader_t* payload, uint64_t start,
                                    mp_status_t (*parse)(void* state, mp_const_byte_span_t head),
                                    void (*reset)(void* state), void* state);

#endif /* MODPACK_KINDS_COMMON_PREFLIGHT_H_ */
