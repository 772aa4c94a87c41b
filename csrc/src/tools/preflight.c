/* mp_preflight (modpack.h): which code a device would get from each module of a library, read
 * with a handful of preads — the seal, the blob's index, and the head of each device module's
 * payload, which its kind's preflight answer parses with the loader's parser and ranks with the
 * loader's rule (mp_kind_t.preflight, kinds/<key>/<key>_preflight.c). Nothing is mapped or run,
 * and every byte read is counted. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/blob.h"
#include "core/bytes.h"
#include "core/error.h"
#include "core/json.h"
#include "core/registry.h"
#include "files/blob_index.h"
#include "files/file.h"
#include "files/seal.h"
#include "load/kinds.h"
#include "modpack/kinds/opencl.h"

/* A device's name as its kind's answer matches it: the longest is an OpenCL device key
 * ("platform/device/driver"), which must reach the answer whole or no binary would match. */
enum { MAX_TARGETS = 64, ARCH = MP_OPENCL_MAX_BINARY_KEY + 1 };

typedef struct {
  int fd;
  const char* path;
  uint64_t bytes, reads;
} counted_t;

static mp_status_t read_at(counted_t* f, void* buffer, uint64_t n, uint64_t offset) {
  f->bytes += n;
  f->reads += 1;
  if (!mp_file_read_at(f->fd, buffer, (size_t)n, offset))
    return mp_errorf(MP_ERR_IO, "cannot read '%s': %s", f->path,
                     errno ? strerror(errno) : "the file shrank");
  return MP_OK;
}

/* A payload read on demand through one window of the file. */
typedef struct {
  counted_t* file;
  uint64_t base; /* the payload's file offset */
  uint64_t size;
  uint8_t* window;
  uint64_t start, length, capacity;
} payload_t;

static mp_status_t payload_read(void* context, uint64_t offset, uint64_t size,
                                const uint8_t** out) {
  payload_t* p = context;
  if (offset > p->size || size > p->size - offset)
    return mp_errorf(MP_ERR_FORMAT, "'%s': a payload of %" PRIu64 " bytes is read at %" PRIu64
                     "+%" PRIu64 ": it is damaged", p->file->path, p->size, offset, size);
  if (offset >= p->start && offset + size <= p->start + p->length) {
    *out = p->window + (offset - p->start);
    return MP_OK;
  }
  /* Extend the window when the read continues it, else start a new one there. */
  bool extend = p->length && offset >= p->start && offset <= p->start + p->length;
  uint64_t start = extend ? p->start : offset;
  uint64_t have = extend ? p->length : 0;
  uint64_t need = offset + size - start;
  if (need > p->capacity) {
    uint8_t* grown = realloc(p->window, (size_t)need);
    if (!grown) return mp_out_of_memory("a payload's head");
    p->window = grown;
    p->capacity = need;
  }
  MP_RETURN_IF_ERROR(read_at(p->file, p->window + have, need - have, p->base + start + have));
  p->start = start;
  p->length = need;
  *out = p->window + (offset - start);
  return MP_OK;
}

typedef struct {
  const mp_kind_t* kind;
  char label[ARCH + 32]; /* "cuda:sm_90", "rocm:0 (gfx90a:sramecc+:xnack-)" */
  char arch[ARCH];
  int32_t id; /* this machine's device (DEVICE "host"), else -1 */
} target_t;

typedef struct {
  target_t targets[MAX_TARGETS];
  uint32_t count;
  char unavailable[8][640]; /* host: kinds whose driver or devices are missing */
  const char* unavailable_type[8];
  uint32_t unavailable_count;
} devices_t;

static const mp_kind_t* kind_of_device(const char* name) {
  for (uint32_t i = 0; mp_builtin_kind(i); ++i) {
    const mp_kind_t* kind = mp_registry_find_kind(mp_builtin_kind(i));
    if (kind && kind->device && kind->preflight && strcmp(kind->device->name, name) == 0)
      return kind;
  }
  return NULL;
}

static mp_status_t parse_devices(const char* device, devices_t* out) {
  memset(out, 0, sizeof *out);
  static const char forms[] =
      "cuda:sm_XY (e.g. cuda:sm_90), rocm:TARGET_ID (e.g. rocm:gfx90a:xnack-), opencl, vulkan, "
      "vulkan:N, or host (this machine's devices)";
  if (!device || !*device)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "no DEVICE given: name one as %s", forms);
  if (strcmp(device, "host") == 0) {
    for (uint32_t i = 0; mp_builtin_kind(i); ++i) {
      const mp_kind_t* kind = mp_registry_find_kind(mp_builtin_kind(i));
      if (!kind || !kind->device || !kind->preflight) continue;
      int32_t count = 0;
      mp_status_t status = kind->device->count(&count);
      if (status != MP_OK || count <= 0) {
        if (out->unavailable_count < 8) {
          uint32_t u = out->unavailable_count++;
          out->unavailable_type[u] = kind->device->name;
          snprintf(out->unavailable[u], sizeof out->unavailable[u], "%s",
                   status != MP_OK ? mp_error_message() : "no device");
        }
        mp_error_clear();
        continue;
      }
      for (int32_t d = 0; d < count && out->count < MAX_TARGETS; ++d) {
        target_t* t = &out->targets[out->count];
        char arch[ARCH];
        MP_RETURN_IF_ERROR(kind->preflight->host_device(d, arch, sizeof arch));
        t->kind = kind;
        t->id = d;
        memcpy(t->arch, arch, sizeof arch);
        /* A kind whose devices are named by their index (vulkan:0) shows it once. */
        char index[16];
        snprintf(index, sizeof index, "%d", (int)d);
        bool shown = arch[0] && strcmp(arch, index) != 0;
        snprintf(t->label, sizeof t->label, "%s:%d%s%s%s", kind->device->name, (int)d,
                 shown ? " (" : "", shown ? arch : "", shown ? ")" : "");
        ++out->count;
      }
    }
    return MP_OK;
  }
  char name[32];
  size_t n = strcspn(device, ":");
  if (n >= sizeof name)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "unknown DEVICE '%s': name one as %s", device,
                     forms);
  memcpy(name, device, n);
  name[n] = '\0';
  const mp_kind_t* kind = kind_of_device(name);
  if (!kind)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "unknown DEVICE '%s' ('%s' is no device type "
                     "modpack knows): name one as %s", device, name, forms);
  target_t* t = &out->targets[0];
  MP_RETURN_IF_ERROR(kind->preflight->parse_device(device[n] ? device + n + 1 : NULL, t->arch,
                                                   sizeof t->arch));
  t->kind = kind;
  t->id = -1;
  snprintf(t->label, sizeof t->label, "%s%s%s", name, t->arch[0] ? ":" : "", t->arch);
  out->count = 1;
  return MP_OK;
}

/* The library's seal and blob index, read with counted preads. */
static mp_status_t read_index(counted_t* f, uint64_t file_size, bool located, mp_seal_v1_t* seal,
                              uint8_t** out_index, mp_blob_t** out_blob) {
  uint8_t raw[MP_SEAL_SIZE];
  uint64_t sealed_size = 0;
  mp_status_t status = MP_OK;
  if (located) { /* a blob the caller located (blob_size 0: none): no seal read */
    if (seal->blob_offset > file_size || seal->blob_size > file_size - seal->blob_offset)
      return mp_errorf(MP_ERR_FORMAT, "'%s' is %" PRIu64 " bytes: it holds no blob of %" PRIu64
                       " bytes at offset %" PRIu64, f->path, file_size, seal->blob_size,
                       seal->blob_offset);
  } else {
    status = mp_seal_read_fd(f->fd, file_size, f->path, seal, raw, &sealed_size);
    /* mp_seal_read_fd reads the trailer, and a signed file's signature trailer and seal too;
     * for a seal note, the file's head (files/seal.h). */
    f->bytes += MP_SEAL_SIZE + (sealed_size && sealed_size < file_size ? 32 + MP_SEAL_SIZE : 0);
    f->reads += sealed_size && sealed_size < file_size ? 3 : 1;
    if (status == MP_OK && seal->version == MP_SEAL_VERSION) {
      f->bytes += file_size < MP_SEAL_NOTE_HEAD ? file_size : MP_SEAL_NOTE_HEAD;
      f->reads += 1;
    }
  }
  if (status == MP_ERR_NOT_FOUND)
    return mp_error_prefix(MP_ERR_FORMAT, "preflight reads a library through its seal");
  MP_RETURN_IF_ERROR(status);
  *out_index = NULL;
  *out_blob = NULL;
  if (seal->blob_size == 0) return MP_OK; /* host code only */
  uint8_t header[MP_FORMAT_HEADER_SIZE];
  if (seal->blob_size < sizeof header)
    return mp_errorf(MP_ERR_FORMAT, "'%s' is damaged: its blob is %" PRIu64 " bytes", f->path,
                     seal->blob_size);
  MP_RETURN_IF_ERROR(read_at(f, header, sizeof header, seal->blob_offset));
  uint64_t index_size = mp_load_le64(header + offsetof(mp_format_header_v1_t, index_size));
  if (index_size < sizeof header || index_size > seal->blob_size || index_size > MP_BLOB_INDEX_MAX)
    return mp_errorf(MP_ERR_FORMAT, "'%s' is damaged: its blob index claims %" PRIu64 " bytes",
                     f->path, index_size);
  uint8_t* index = malloc((size_t)index_size);
  if (!index) return mp_out_of_memory("a blob index");
  memcpy(index, header, sizeof header);
  status = index_size > sizeof header ? read_at(f, index + sizeof header,
                                                index_size - sizeof header,
                                                seal->blob_offset + sizeof header)
                                      : MP_OK;
  if (status == MP_OK)
    status = mp_blob_parse_index((mp_const_byte_span_t){index, index_size}, seal->blob_size,
                                 out_blob);
  if (status != MP_OK) {
    free(index);
    return status == MP_ERR_IO ? status
                               : mp_error_prefix(status, "'%s': %s", f->path, MP_BLOB_SYMBOL);
  }
  *out_index = index;
  return MP_OK;
}

static void json_devices(mp_json_t* j, const devices_t* d) {
  mp_json_printf(j, "\"devices\": [");
  for (uint32_t i = 0; i < d->count; ++i) {
    mp_json_printf(j, "%s{\"device\": ", i ? ", " : "");
    mp_json_string(j, d->targets[i].label);
    mp_json_printf(j, ", \"type\": \"%s\", \"arch\": ", d->targets[i].kind->device->name);
    if (d->targets[i].arch[0])
      mp_json_string(j, d->targets[i].arch);
    else
      mp_json_printf(j, "null");
    mp_json_printf(j, "}");
  }
  mp_json_printf(j, "], \"unavailable\": [");
  for (uint32_t i = 0; i < d->unavailable_count; ++i) {
    mp_json_printf(j, "%s{\"type\": \"%s\", \"message\": ", i ? ", " : "", d->unavailable_type[i]);
    mp_json_string(j, d->unavailable[i]);
    mp_json_printf(j, "}");
  }
  mp_json_printf(j, "]");
}

/* Module |index|: its kind's answer for each device of its type. */
static mp_status_t answer_module(counted_t* f, const mp_seal_v1_t* seal, const mp_blob_t* blob,
                                 uint64_t index, const devices_t* devices, mp_json_t* j,
                                 int* out_state) {
  mp_blob_module_t m;
  MP_RETURN_IF_ERROR(mp_blob_module(blob, index, &m));
  mp_json_printf(j, "{\"index\": %" PRIu64 ", \"type_key\": ", index);
  mp_json_string(j, m.type_key);
  mp_json_printf(j, ", \"size\": %" PRIu64 ", ", m.payload_size);
  const mp_kind_t* kind = mp_registry_find_kind(m.type_key);
  *out_state = 0; /* 0 no device code, 1 fits, 2 no code, 3 other device */
  if (strcmp(m.type_key, MP_LIB_TYPE_KEY) == 0 || !kind || !kind->preflight) {
    const char* reason = strcmp(m.type_key, MP_LIB_TYPE_KEY) == 0
                             ? "the library's host code, which runs on the CPU"
                         : kind || strcmp(m.type_key, "weights") == 0
                             ? "arrays or references to them: no device code"
                             : "a kind this runtime has no built-in loader for: a load needs "
                               "its loader registered first";
    mp_json_printf(j, "\"status\": \"%s\", \"reason\": ",
                   kind || strcmp(m.type_key, MP_LIB_TYPE_KEY) == 0 ||
                           strcmp(m.type_key, "weights") == 0
                       ? "no-device-code"
                       : "unknown-kind");
    mp_json_string(j, reason);
    mp_json_printf(j, ", \"answers\": []}");
    return MP_OK;
  }
  payload_t p = {f, seal->blob_offset + m.payload_offset, m.payload_size, NULL, 0, 0, 0};
  mp_payload_reader_t reader = {m.payload_size, &p, payload_read,
                                mp_blob_module_flags(blob, index)};
  bool any = false, all = true;
  mp_status_t status = MP_OK;
  mp_json_printf(j, "\"answers\": [");
  for (uint32_t t = 0; t < devices->count && status == MP_OK; ++t) {
    if (devices->targets[t].kind != kind) continue;
    mp_json_printf(j, "%s{\"device\": ", any ? ", " : "");
    mp_json_string(j, devices->targets[t].label);
    mp_json_printf(j, ", ");
    bool fits = false;
    status = kind->preflight->answer(kind, &reader, devices->targets[t].arch, j, &fits);
    if (status == MP_OK && fits && devices->targets[t].id >= 0 && kind->preflight->kernel_cache) {
      mp_json_printf(j, ", ");
      status = kind->preflight->kernel_cache(kind, &reader, devices->targets[t].id, j);
    }
    mp_json_printf(j, "}");
    any = true;
    all &= fits;
  }
  free(p.window);
  if (status != MP_OK)
    return mp_error_prefix(status, "'%s': module %" PRIu64 " (%s)", f->path, index, m.type_key);
  mp_json_printf(j, "], ");
  if (!any) {
    *out_state = 3;
    mp_json_printf(j, "\"status\": \"other-device\", \"reason\": ");
    char why[160];
    snprintf(why, sizeof why, "a %s module: it runs on %s devices only", m.type_key,
             kind->device ? kind->device->display_name : m.type_key);
    mp_json_string(j, why);
  } else {
    *out_state = all ? 1 : 2;
    mp_json_printf(j, "\"status\": \"%s\", \"reason\": null", all ? "fits" : "no-code");
  }
  mp_json_printf(j, "}");
  return MP_OK;
}

static mp_status_t preflight(const char* path, bool located, uint64_t blob_offset,
                             uint64_t blob_size, const char* device, char* buffer,
                             uint64_t capacity, uint64_t* out_length,
                             mp_preflight_result_t* out_result);

mp_status_t mp_preflight(const char* path, const char* device, char* buffer, uint64_t capacity,
                         uint64_t* out_length, mp_preflight_result_t* out_result) {
  return preflight(path, false, 0, 0, device, buffer, capacity, out_length, out_result);
}

mp_status_t mp_preflight_blob(const char* path, uint64_t blob_offset, uint64_t blob_size,
                              const char* device, char* buffer, uint64_t capacity,
                              uint64_t* out_length, mp_preflight_result_t* out_result) {
  return preflight(path, true, blob_offset, blob_size, device, buffer, capacity, out_length,
                   out_result);
}

static mp_status_t preflight(const char* path, bool located, uint64_t blob_offset,
                             uint64_t blob_size, const char* device, char* buffer,
                             uint64_t capacity, uint64_t* out_length,
                             mp_preflight_result_t* out_result) {
  if (!path || !out_result || out_result->struct_size < sizeof *out_result || (!buffer && capacity))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_preflight: NULL argument, or a result whose "
                     "struct_size is not sizeof(mp_preflight_result_t)");
  mp_load_register_kinds();
  out_result->fits = 0;
  out_result->bytes_read = out_result->reads = 0;
  devices_t* devices = malloc(sizeof *devices);
  if (!devices) return mp_out_of_memory("a preflight");
  mp_status_t status = parse_devices(device, devices);
  if (status != MP_OK) {
    free(devices);
    return status;
  }
  int fd;
  mp_file_id_t id;
  status = mp_file_open(path, &fd, &id);
  if (status != MP_OK) {
    free(devices);
    return status;
  }
  counted_t f = {fd, path, 0, 0};
  mp_seal_v1_t seal = {0};
  seal.blob_offset = blob_offset;
  seal.blob_size = blob_size;
  uint8_t* index = NULL;
  mp_blob_t* blob = NULL;
  status = read_index(&f, id.size, located, &seal, &index, &blob);
  mp_json_t j = {buffer, capacity, 0};
  if (status == MP_OK) {
    mp_json_printf(&j, "{\"path\": ");
    mp_json_string(&j, path);
    mp_json_printf(&j, ", \"device\": ");
    mp_json_string(&j, device);
    mp_json_printf(&j, ", ");
    json_devices(&j, devices);
    mp_json_printf(&j, ", \"modules\": [");
    mp_blob_info_t info = {0};
    if (blob) mp_blob_info(blob, &info);
    bool no_code = false, some_fit = false, device_modules = false;
    char kinds[256] = "";
    size_t used = 0;
    for (uint64_t i = 0; blob && i < info.module_count && status == MP_OK; ++i) {
      int state = 0;
      mp_json_printf(&j, "%s", i ? ", " : "");
      status = answer_module(&f, &seal, blob, i, devices, &j, &state);
      no_code |= state == 2;
      some_fit |= state == 1;
      if (state >= 1) {
        mp_blob_module_t m;
        mp_blob_module(blob, i, &m);
        if (!device_modules || !strstr(kinds, m.type_key)) {
          int n = snprintf(kinds + used, used < sizeof kinds ? sizeof kinds - used : 0, "%s%s",
                           used ? ", " : "", m.type_key);
          if (n > 0) used += (size_t)n;
        }
        device_modules = true;
      }
    }
    bool fits = !no_code && (!device_modules || some_fit);
    char reason[512];
    if (no_code)
      snprintf(reason, sizeof reason, "a module has no code for %s", device);
    else if (!fits)
      snprintf(reason, sizeof reason, "no module of this library runs on %s (its device "
               "modules: %s)", devices->count ? device : "this machine's devices", kinds);
    else
      snprintf(reason, sizeof reason, "%s", device_modules ? "every device module of its type "
               "has code for it" : "the library has no device code");
    mp_json_printf(&j, "], \"fits\": %s, \"reason\": ", fits ? "true" : "false");
    mp_json_string(&j, reason);
    out_result->fits = fits;
  }
  out_result->bytes_read = f.bytes;
  out_result->reads = f.reads;
  if (status == MP_OK) {
    mp_json_printf(&j, ", \"read\": {\"bytes\": %" PRIu64 ", \"reads\": %" PRIu64 "}}", f.bytes,
                   f.reads);
    if (out_length) *out_length = j.length;
  }
  if (blob) mp_blob_free(blob);
  free(index);
  close(fd);
  free(devices);
  return status;
}
