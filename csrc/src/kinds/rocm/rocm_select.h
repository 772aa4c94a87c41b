/* AMD GPU target IDs ("gfx90a:sramecc+:xnack-", "gfx11-generic") and the rule that picks a code
 * object for a device (modpack/kinds/rocm.h states it; mp_rocm_select_variant is its public
 * face, and the loader and modpack preflight rank with mp_rocm_rank_targets). */
#ifndef MODPACK_KINDS_ROCM_SELECT_H_
#define MODPACK_KINDS_ROCM_SELECT_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "modpack/kinds/rocm.h"

/* A feature's setting: built for (or, for a device, running with) it on or off, or either
 * (a device: not stated, or not supported by its processor). */
enum { MP_ROCM_ANY = 0, MP_ROCM_ON = 1, MP_ROCM_OFF = 2 };

typedef struct {
  char processor[32]; /* "gfx90a", "gfx11-generic" */
  bool generic;
  uint8_t sramecc; /* MP_ROCM_ANY, _ON, _OFF */
  uint8_t xnack;
} mp_rocm_target_t;

/* The rule in one sentence, for messages. */
extern const char* const mp_rocm_selection_rule;

/* Parses a target ID (an "amdgcn-amd-amdhsa--" prefix is allowed). False, with the reason in
 * |why|, for anything else. */
bool mp_rocm_parse_target(const char* text, mp_rocm_target_t* out, char* why, size_t why_size);
/* The canonical text of |t| ("gfx90a:sramecc+:xnack-"). */
void mp_rocm_target_string(const mp_rocm_target_t* t, char* buffer, size_t capacity);
/* How well code object target |code| fits |device|: -1 when it cannot run (the reason in
 * |why|, may be NULL), else a score (higher is better), with what made it fit in |why|. */
int64_t mp_rocm_fitness(const mp_rocm_target_t* code, const mp_rocm_target_t* device, char* why,
                        size_t why_size);
/* The indices into |targets| that run on |device|, best first (ties keep the earlier), into
 * |order| (|count| long); MP_ERR_INVALID_ARGUMENT for a name that is not a target ID. */
mp_status_t mp_rocm_rank_targets(const char* const* targets, uint32_t count,
                                 const mp_rocm_target_t* device, uint32_t* order,
                                 uint32_t* out_usable);
/* Parses a device's target ID: a processor, not a generic target. */
mp_status_t mp_rocm_parse_device(const char* text, mp_rocm_target_t* out);

#endif /* MODPACK_KINDS_ROCM_SELECT_H_ */
