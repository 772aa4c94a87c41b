/* What the device kinds' preflight answers share (modpack preflight: tools/preflight.c): parsing
 * a payload's head from a growing prefix read on demand, and the kernel cache's answer. */
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

/* The kernel cache's answer for a module built in several pieces (CUDA's PTX variants, Vulkan's
 * pipelines), tallied a build at a time: "hit" only when every build is kept, else the state of
 * the first that is not, with its name. */
typedef struct {
  const char* state; /* "unused" (and |detail| as given to init) until a build is added */
  char detail[1024];
  uint32_t asked, hits;
  bool missed;
} mp_preflight_cache_tally_t;

void mp_preflight_cache_tally_init(mp_preflight_cache_tally_t* tally, const char* unused_detail);
/* Build |build|'s probe (mp_kernel_cache_probe's |state| and |found|). */
void mp_preflight_cache_tally_add(mp_preflight_cache_tally_t* tally, const char* build,
                                  const char* state, const char* found);

/* The answer's "kernel_cache": {"state": ..., "detail": ...} member. */
void mp_preflight_cache_answer(mp_json_t* out, const char* state, const char* detail);

#endif /* MODPACK_KINDS_COMMON_PREFLIGHT_H_ */
