/* Module kinds and the passive registry that knows them.
 *
 * A kind is a type key with its loader (`loadbinary_<type_key>`); a device kind also brings a
 * device (memory, copies, launches' device checks) and the tags of its kernels' launch
 * arguments. The registry stores what it is given and answers lookups; it knows no kind
 * itself. The built-in kinds are one list (kinds/builtin.c) registered by the runtime's entry
 * points (load/load.c, device/device.c); user kinds arrive through mp_loader_register. */
#ifndef MODPACK_CORE_REGISTRY_H_
#define MODPACK_CORE_REGISTRY_H_

#include <stdbool.h>
#include <stdint.h>

#include "core/json.h"
#include "modpack/kind.h"

/* What a device type implements. Memory is addressed by the `data` pointer a DLTensor of that
 * device carries (a cl_mem, a CUdeviceptr); offsets are in bytes from it. Copies are
 * synchronous with respect to the host. */
typedef struct {
  int32_t device_type;      /* its DLDeviceType */
  const char* name;         /* "opencl": device strings ("opencl:0") and mp_device_type_name */
  const char* display_name; /* "OpenCL": messages */
  mp_status_t (*count)(int32_t* out_count);
  mp_status_t (*describe)(int32_t device_id, char* buffer, uint64_t capacity);
  mp_status_t (*alloc)(int32_t device_id, uint64_t nbytes, void** out_data);
  mp_status_t (*free)(int32_t device_id, void* data);
  mp_status_t (*copy_from_host)(int32_t device_id, const void* host, void* data, uint64_t offset,
                                uint64_t nbytes);
  mp_status_t (*copy_to_host)(int32_t device_id, const void* data, uint64_t offset, void* host,
                              uint64_t nbytes);
  mp_status_t (*copy_within)(int32_t device_id, const void* from, uint64_t from_offset, void* to,
                             uint64_t to_offset, uint64_t nbytes);
  mp_status_t (*synchronize)(int32_t device_id);
} mp_device_api_t;

typedef struct mp_kind mp_kind_t;

/* modpack preflight (tools/preflight.c, mp_preflight): which of a module's code a device would
 * get, answered by its kind from the first bytes of its payload, read on demand. */
typedef struct {
  uint64_t size; /* the payload's */
  void* context;
  /* |*out| points at the |size| bytes at |offset| of the payload (valid until the next read);
   * MP_ERR_FORMAT past its end. */
  mp_status_t (*read)(void* context, uint64_t offset, uint64_t size, const uint8_t** out);
  uint32_t entry_flags; /* the blob entry's (MP_FORMAT_ENTRY_CODE_FRAMES: code in frames) */
} mp_payload_reader_t;

typedef struct {
  /* What follows "KIND:" in a device string (|arch|; NULL when nothing does), as the kind's
   * canonical architecture into |canonical| ("" for kinds without one); MP_ERR_INVALID_ARGUMENT
   * naming the form the kind takes. */
  mp_status_t (*parse_device)(const char* arch, char* canonical, size_t capacity);
  /* The canonical architecture of this machine's device |id| (DEVICE "host"). */
  mp_status_t (*host_device)(int32_t id, char* canonical, size_t capacity);
  /* The answer for a device of canonical architecture |arch|, written as JSON members
   * (`"fits": ..., "variant": ..., "reason": ...`), with *out_fits; an error for a payload it
   * cannot read. The choice must be the loader's: the same parser and ranking. */
  mp_status_t (*answer)(const mp_kind_t* kind, const mp_payload_reader_t* payload,
                        const char* arch, mp_json_t* out, bool* out_fits);
  /* Optional: for this machine's device |id| (DEVICE "host"), whether the kernel cache holds
   * what that device would build from the payload (files/kernel_cache.h), as the member
   * `"kernel_cache": {"state": "hit" | "miss" | "off" | "unused", "detail": ...}`. It reads
   * the code the device would build, to hash it as the build's key does. */
  mp_status_t (*kernel_cache)(const mp_kind_t* kind, const mp_payload_reader_t* payload,
                              int32_t id, mp_json_t* out);
} mp_preflight_api_t;

/* A built-in kind. */
struct mp_kind {
  const char* type_key;
  mp_loader_fn_t load;
  const mp_device_api_t* device;  /* NULL for a kind without a device of its own */
  const char* const* launch_tags; /* its kernels' launch arguments, in launch-slot order */
  uint32_t launch_tag_count;
  const mp_preflight_api_t* preflight; /* NULL: its modules need no device code */
  bool code_frames; /* its loader reads payloads whose code is in code frames */
};

/* Register |kind|'s loader (and its device, if any). MP_ERR_ALREADY_EXISTS if the type key or
 * the device type is taken. */
mp_status_t mp_registry_add_kind(const mp_kind_t* kind);
/* Register a loader without a kind descriptor (user kinds). Refuses keys the format does not
 * accept and reserved keys ('_'), naming the rule. */
mp_status_t mp_registry_add_loader(const char* type_key, mp_loader_fn_t fn, void* user_data);
mp_status_t mp_registry_remove_loader(const char* type_key);
/* The loader of |type_key|; MP_ERR_NOT_FOUND listing the registered keys when there is none. */
mp_status_t mp_registry_find_loader(const char* type_key, mp_loader_fn_t* out_fn,
                                    void** out_user_data);
/* Sorted, comma-separated type keys into |buffer|; returns the length the whole list needs. */
uint64_t mp_registry_list_loaders(char* buffer, uint64_t capacity);
/* The kind registered with a descriptor under |type_key|, or NULL. */
const mp_kind_t* mp_registry_find_kind(const char* type_key);
/* The device of a registered kind, by device type or by name; NULL when none. */
const mp_device_api_t* mp_registry_find_device(int32_t device_type);
const mp_device_api_t* mp_registry_find_device_named(const char* name);
/* The registered devices' names, comma-separated ("cuda, opencl"), for messages. */
void mp_registry_list_devices(char* buffer, uint64_t capacity);

#endif /* MODPACK_CORE_REGISTRY_H_ */
