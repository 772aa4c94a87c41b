/* A device kind's call checked before its driver is touched (kinds/common/kernel_call.h). */
#include "kinds/common/kernel_call.h"

#include "core/error.h"

mp_status_t mp_kernel_call_check(const mp_kernel_ref_t* ref, const mp_value_t* args,
                                 int32_t num_args, const mp_kernel_call_rule_t* rule,
                                 mp_kernel_call_t* call) {
  const mp_kernel_table_t* table = ref->module; /* a device module's state starts with it */
  const mp_kernel_info_t* info = &table->kernels[ref->kernel];
  call->ref = ref;
  call->info = info;
  call->device = -1;
  const mp_value_t* launch_values;
  MP_RETURN_IF_ERROR(mp_kernel_bind(info, args, num_args, call->params, &launch_values));
  if (rule->check_kernel) MP_RETURN_IF_ERROR(rule->check_kernel(call));
  for (uint32_t i = 0; i < info->arg_count; ++i) {
    switch (info->args[i].kind) {
      case MP_KERNEL_ARG_SCALAR:
        MP_RETURN_IF_ERROR(
            mp_kernel_pack_scalar(info, i, call->params[i], &call->scalars[i], &call->sizes[i]));
        break;
      case MP_KERNEL_ARG_LOCAL: { /* OpenCL's alone: the other kinds refuse it at load */
        uint64_t nbytes;
        MP_RETURN_IF_ERROR(mp_kernel_check_local(info, i, call->params[i], &nbytes));
        call->sizes[i] = (size_t)nbytes;
        break;
      }
      case MP_KERNEL_ARG_BUFFER:
        MP_RETURN_IF_ERROR(mp_kernel_check_buffer(info, i, call->params[i]));
        if (rule->check_array) MP_RETURN_IF_ERROR(rule->check_array(call, i));
        break;
      default: /* MP_KERNEL_ARG_NULL: a NULL buffer the caller does not pass */
        break;
    }
  }
  if (rule->device)
    MP_RETURN_IF_ERROR(mp_kernel_check_devices(info, call->params, rule->device,
                                               rule->how_to_create, &call->device));
  return mp_kernel_table_launch(table, ref->kernel, launch_values, rule->defaults, rule->limits,
                                rule->slot_count, call->launch);
}
