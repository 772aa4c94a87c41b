/* The checks every device kind's launch makes before it touches its driver, in one place: the
 * call's values bound to the kernel's record (their count), each argument checked against its
 * parameter (a scalar converted to the parameter's dtype, local memory's size, an array's dtype
 * and layout) with the kind's own checks of each array beside, then the arrays' device and the
 * launch values. A kind then only puts what was checked where its driver wants it (an argument
 * list, a kernarg segment, push constants) and launches. The order of the checks is the order
 * a caller sees failures in: the first that fails is the one reported. */
#ifndef MODPACK_KINDS_COMMON_KERNEL_CALL_H_
#define MODPACK_KINDS_COMMON_KERNEL_CALL_H_

#include <stddef.h>
#include <stdint.h>

#include "kinds/common/kernel_info.h"
#include "kinds/common/kernel_table.h"

typedef struct mp_kernel_call mp_kernel_call_t;

/* What a kind adds to the shared checks. */
typedef struct {
  /* The kind's launch slots (at most MP_KERNEL_MAX_LAUNCH_TAGS, as for every kind's tags): how
   * many, the value of each a call leaves out, the largest each takes (mp_kernel_table_launch). */
  uint32_t slot_count;
  const uint64_t* defaults;
  const uint64_t* limits;
  /* Set: the arrays' device is checked after the arguments, before the launch values
   * (mp_kernel_check_devices, |how_to_create| completing its message). NULL: the kind checks it
   * itself once its driver is loaded. */
  const mp_device_api_t* device;
  const char* how_to_create;
  /* The kind's own checks (each may be NULL): |check_kernel| once the values are bound, before
   * any argument is checked; |check_array| on each array argument after the shared checks of
   * it, before the next argument's. */
  mp_status_t (*check_kernel)(const mp_kernel_call_t* call);
  mp_status_t (*check_array)(const mp_kernel_call_t* call, uint32_t index);
} mp_kernel_call_rule_t;

/* A call, checked. */
struct mp_kernel_call {
  const mp_kernel_ref_t* ref; /* the kernel: its module's state and its index */
  const mp_kernel_info_t* info;
  const mp_value_t* params[MP_KERNEL_MAX_ARGS]; /* by parameter; NULL for MP_KERNEL_ARG_NULL */
  mp_kernel_scalar_t scalars[MP_KERNEL_MAX_ARGS]; /* a scalar argument, converted */
  size_t sizes[MP_KERNEL_MAX_ARGS]; /* a scalar's size in bytes; local memory's bytes */
  int32_t device; /* with the rule's device: the arrays' device, -1 when none; else -1 */
  uint64_t launch[MP_KERNEL_MAX_LAUNCH_TAGS]; /* the launch values, by slot */
};

/* Check the call of the kernel |ref| with |num_args| |args| by the shared checks and |rule|'s,
 * into |call|: the first failure is returned as its check reports it. */
mp_status_t mp_kernel_call_check(const mp_kernel_ref_t* ref, const mp_value_t* args,
                                 int32_t num_args, const mp_kernel_call_rule_t* rule,
                                 mp_kernel_call_t* call);

#endif /* MODPACK_KINDS_COMMON_KERNEL_CALL_H_ */
