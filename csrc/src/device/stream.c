/* The calling thread's current stream per device (mp_device_set_stream / _get_stream): a
 * device kind launches its kernels on it. Per thread, so no lock. */
#include "core/error.h"

enum { STREAM_DEVICE_TYPES = 16, STREAM_DEVICES = 64 };
static _Thread_local void* current_streams[STREAM_DEVICE_TYPES][STREAM_DEVICES];

static bool stream_slot(DLDevice device) {
  int32_t type = (int32_t)device.device_type;
  return type >= 0 && type < STREAM_DEVICE_TYPES && device.device_id >= 0 &&
         device.device_id < STREAM_DEVICES;
}

mp_status_t mp_device_set_stream(DLDevice device, void* stream, void** out_previous) {
  if (out_previous) *out_previous = NULL;
  if (!stream_slot(device))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "no stream slot for device type %d, id %d",
                     (int)device.device_type, (int)device.device_id);
  if (out_previous) *out_previous = current_streams[device.device_type][device.device_id];
  current_streams[device.device_type][device.device_id] = stream;
  return MP_OK;
}

void* mp_device_get_stream(DLDevice device) {
  return stream_slot(device) ? current_streams[device.device_type][device.device_id] : NULL;
}
