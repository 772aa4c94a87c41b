/* The device API's public face (mp_device_*): one table of operations per device type,
 * dispatched by DLPack device type. The CPU is built in here; every other device comes with
 * its kind (core/registry.h), so this entry point registers the built-in kinds first. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/registry.h"
#include "kinds/builtin.h"
#include "modpack/tensor_span.h"

/* ---- CPU ---------------------------------------------------------------------------------- */

static mp_status_t cpu_count(int32_t* out_count) {
  *out_count = 1;
  return MP_OK;
}

static mp_status_t cpu_describe(int32_t device_id, char* buffer, uint64_t capacity) {
  snprintf(buffer, capacity, "cpu %d", (int)device_id);
  return MP_OK;
}

static mp_status_t cpu_alloc(int32_t device_id, uint64_t nbytes, void** out_data) {
  (void)device_id;
  /* 64-byte alignment, as DLPack recommends for vectorised kernels. */
  if (nbytes > UINT64_MAX - 63)
    return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "cannot allocate %" PRIu64 " bytes", nbytes);
  uint64_t rounded = (nbytes + 63) / 64 * 64;
  *out_data = aligned_alloc(64, rounded ? rounded : 64);
  if (!*out_data)
    return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "cannot allocate %" PRIu64 " bytes on the CPU",
                     nbytes);
  return MP_OK;
}

static mp_status_t cpu_free(int32_t device_id, void* data) {
  (void)device_id;
  free(data);
  return MP_OK;
}

static mp_status_t cpu_copy_from_host(int32_t device_id, const void* host, void* data,
                                      uint64_t offset, uint64_t nbytes) {
  (void)device_id;
  memcpy((uint8_t*)data + offset, host, nbytes);
  return MP_OK;
}

static mp_status_t cpu_copy_to_host(int32_t device_id, const void* data, uint64_t offset,
                                    void* host, uint64_t nbytes) {
  (void)device_id;
  memcpy(host, (const uint8_t*)data + offset, nbytes);
  return MP_OK;
}

static mp_status_t cpu_copy_within(int32_t device_id, const void* from, uint64_t from_offset,
                                   void* to, uint64_t to_offset, uint64_t nbytes) {
  (void)device_id;
  memmove((uint8_t*)to + to_offset, (const uint8_t*)from + from_offset, nbytes);
  return MP_OK;
}

static mp_status_t cpu_synchronize(int32_t device_id) {
  (void)device_id;
  return MP_OK;
}

static const mp_device_api_t cpu_device = {
    .device_type = kDLCPU,
    .name = "cpu",
    .display_name = "CPU",
    .count = cpu_count,
    .describe = cpu_describe,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_from_host = cpu_copy_from_host,
    .copy_to_host = cpu_copy_to_host,
    .copy_within = cpu_copy_within,
    .synchronize = cpu_synchronize,
};

/* ---- dispatch ----------------------------------------------------------------------------- */

/* The API of |device_type|, or NULL with an error naming the supported types. */
static const mp_device_api_t* device_api(int32_t device_type) {
  if (device_type == kDLCPU) return &cpu_device;
  mp_kinds_register_builtin();
  const mp_device_api_t* api = mp_registry_find_device(device_type);
  if (!api) {
    char names[256];
    mp_registry_list_devices(names, sizeof names);
    mp_errorf(MP_ERR_INVALID_ARGUMENT,
              "device type %d is not supported by this runtime (supported: cpu=%d, %s)",
              (int)device_type, kDLCPU, names);
  }
  return api;
}

const char* mp_device_type_name(int32_t device_type) {
  if (device_type == kDLCPU) return cpu_device.name;
  mp_kinds_register_builtin();
  const mp_device_api_t* api = mp_registry_find_device(device_type);
  return api ? api->name : NULL;
}

mp_status_t mp_device_type_from_name(const char* name, int32_t* out_device_type) {
  *out_device_type = 0;
  if (!name) return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_device_type_from_name: NULL name");
  mp_kinds_register_builtin();
  const mp_device_api_t* api =
      strcmp(name, cpu_device.name) == 0 ? &cpu_device : mp_registry_find_device_named(name);
  if (!api) {
    char names[256];
    mp_registry_list_devices(names, sizeof names);
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "unknown device type '%s' (supported: cpu, %s)", name,
                     names);
  }
  *out_device_type = api->device_type;
  return MP_OK;
}

static mp_status_t check_device(DLDevice device, const mp_device_api_t** out_api) {
  const mp_device_api_t* api = device_api(device.device_type);
  if (!api) return mp_error_code();
  int32_t count = 0;
  MP_RETURN_IF_ERROR(api->count(&count));
  if (device.device_id < 0 || device.device_id >= count)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "%s device %d does not exist (%d available)",
                     api->name, (int)device.device_id, (int)count);
  *out_api = api;
  return MP_OK;
}

mp_status_t mp_device_count(int32_t device_type, int32_t* out_count) {
  *out_count = 0;
  const mp_device_api_t* api = device_api(device_type);
  return api ? api->count(out_count) : mp_error_code();
}

mp_status_t mp_device_name(DLDevice device, char* buffer, uint64_t capacity) {
  const mp_device_api_t* api = NULL;
  mp_status_t status = check_device(device, &api);
  return status == MP_OK ? api->describe(device.device_id, buffer, capacity) : status;
}

mp_status_t mp_device_alloc(DLDevice device, uint64_t nbytes, void** out_data) {
  *out_data = NULL;
  const mp_device_api_t* api = NULL;
  mp_status_t status = check_device(device, &api);
  return status == MP_OK ? api->alloc(device.device_id, nbytes, out_data) : status;
}

mp_status_t mp_device_free(DLDevice device, void* data) {
  if (!data) return MP_OK;
  const mp_device_api_t* api = device_api(device.device_type);
  return api ? api->free(device.device_id, data) : mp_error_code();
}

mp_status_t mp_device_copy(const void* from, uint64_t from_offset, DLDevice from_device, void* to,
                           uint64_t to_offset, DLDevice to_device, uint64_t nbytes) {
  if (nbytes == 0) return MP_OK;
  /* Both ranges addressable before any device sees them (modpack/tensor_span.h's rules). */
  const void* ends[2] = {from, to};
  const uint64_t offsets[2] = {from_offset, to_offset};
  for (int side = 0; side < 2; ++side) {
    if (!ends[side])
      return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_device_copy: the %s pointer is NULL",
                       side ? "destination" : "source");
    if (!mp_byte_range_fits(ends[side], offsets[side], nbytes))
      return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                       "mp_device_copy: %" PRIu64 " bytes at offset %" PRIu64 " of the %s (%p) "
                       "leave the address space (an offset or a size over %td bytes, or an "
                       "address that wraps)",
                       nbytes, offsets[side], side ? "destination" : "source", ends[side],
                       (ptrdiff_t)PTRDIFF_MAX);
  }
  const mp_device_api_t *from_api = NULL, *to_api = NULL;
  mp_status_t status = check_device(from_device, &from_api);
  if (status == MP_OK) status = check_device(to_device, &to_api);
  if (status != MP_OK) return status;
  bool from_host = from_device.device_type == kDLCPU, to_host = to_device.device_type == kDLCPU;
  if (from_host && to_host) return cpu_copy_within(0, from, from_offset, to, to_offset, nbytes);
  if (from_host)
    return to_api->copy_from_host(to_device.device_id, (const uint8_t*)from + from_offset, to,
                                  to_offset, nbytes);
  if (to_host)
    return from_api->copy_to_host(from_device.device_id, from, from_offset,
                                  (uint8_t*)to + to_offset, nbytes);
  if (from_device.device_type == to_device.device_type &&
      from_device.device_id == to_device.device_id)
    return from_api->copy_within(from_device.device_id, from, from_offset, to, to_offset, nbytes);
  return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                   "copies between %s:%d and %s:%d go through the host: copy to a CPU array first",
                   from_api->name, (int)from_device.device_id, to_api->name,
                   (int)to_device.device_id);
}

mp_status_t mp_device_synchronize(DLDevice device) {
  const mp_device_api_t* api = NULL;
  mp_status_t status = check_device(device, &api);
  return status == MP_OK ? api->synchronize(device.device_id) : status;
}
