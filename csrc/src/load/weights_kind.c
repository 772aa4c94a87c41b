/* The "weights" kind: a module whose arrays are those of a weight file (modpack/weights.h).
 *
 * In a library, its payload (modpack/kinds/weights.h) is a reference: the file's name, its
 * content digest and the arrays the module hands out, with the dtypes and shapes the library
 * was exported with. The loader finds the file (beside the library, or where the load says),
 * refuses another file naming the first difference, and binds the module to it
 * (load/weights_binding.h), so that its weights can be swapped. It lives in the load layer,
 * not with the other kinds, because it needs how the library is being loaded (where weight
 * files are, trusted keys) and the library's other weight modules.
 *
 * On its own (mp_weights_load), the same module hands out every array of one file. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup */
#endif
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/json.h"
#include "core/module.h"
#include "device/array_cache.h"
#include "load/blob_index.h"
#include "load/library.h"
#include "load/weights_binding.h"
#include "load/weights_kind.h"
#include "modpack/kinds/weights.h"

#define HEADER_FIELD(field) offsetof(mp_weights_ref_header_v1_t, field)
#define RECORD_FIELD(field) offsetof(mp_weights_ref_record_v1_t, field)

typedef struct {
  char* name;
  DLDataType dtype; /* as the library was exported with */
  int32_t ndim;
  int64_t shape[MP_WEIGHTS_MAX_NDIM];
} expected_array_t;

typedef struct {
  char* file_name;
  uint8_t digest[32];
  bool has_digest; /* false for a file loaded on its own */
  uint64_t count;
  expected_array_t* arrays; /* the arrays the module hands out, in order */
  uint64_t* by_name;        /* their indices sorted by name */
  mp_weights_binding_t* binding; /* NULL for a reference read on its own (tools) */
} weights_module_t;

static void destroy(void* impl) {
  weights_module_t* m = impl;
  for (uint64_t i = 0; m->arrays && i < m->count; ++i) free(m->arrays[i].name);
  free(m->arrays);
  free(m->by_name);
  free(m->file_name);
  mp_weights_binding_release(m->binding);
  free(m);
}

/* ---- arrays ----------------------------------------------------------------------------- */

static uint64_t array_count(mp_module_t* self) {
  weights_module_t* m = mp_module_impl(self);
  return m->binding ? m->count : 0;
}

/* Array |index| of the module in |file|. */
static mp_status_t array_in(weights_module_t* m, mp_weight_file_t* file, uint64_t index,
                            const DLTensor** out_array) {
  uint64_t at = mp_weight_file_find(file, m->arrays[index].name);
  if (at == UINT64_MAX) /* swaps keep the names: not reachable unless the runtime is wrong */
    return mp_errorf(MP_ERR_INTERNAL, "array '%s' vanished from '%s'", m->arrays[index].name,
                     mp_weight_file_path(file));
  return mp_weights_binding_array(m->binding, file, at, out_array);
}

static mp_status_t array_at(mp_module_t* self, uint64_t index, const char** out_name,
                            const DLTensor** out_array) {
  weights_module_t* m = mp_module_impl(self);
  *out_name = m->arrays[index].name;
  mp_weight_file_t* file;
  MP_RETURN_IF_ERROR(mp_weights_binding_file(m->binding, &file));
  return array_in(m, file, index, out_array);
}

static mp_status_t find_array(mp_module_t* self, const char* name, const DLTensor** out_array) {
  weights_module_t* m = mp_module_impl(self);
  *out_array = NULL;
  if (!m->binding) return MP_OK;
  uint64_t low = 0, high = m->count;
  while (low < high) {
    uint64_t mid = low + (high - low) / 2;
    int order = strcmp(m->arrays[m->by_name[mid]].name, name);
    if (order == 0) {
      mp_weight_file_t* file;
      MP_RETURN_IF_ERROR(mp_weights_binding_file(m->binding, &file));
      return array_in(m, file, m->by_name[mid], out_array);
    }
    if (order < 0) low = mid + 1;
    else high = mid;
  }
  return MP_OK;
}

static mp_status_t describe(mp_module_t* self, char* buffer, uint64_t capacity,
                            uint64_t* out_length) {
  weights_module_t* m = mp_module_impl(self);
  mp_json_t j = {buffer, capacity, 0};
  if (buffer && capacity) buffer[0] = '\0';
  mp_json_printf(&j, "\"file\": ");
  mp_json_string(&j, m->file_name);
  if (m->has_digest) {
    mp_json_printf(&j, ", \"digest\": \"sha256:");
    for (int i = 0; i < 32; ++i) mp_json_printf(&j, "%02x", m->digest[i]);
    mp_json_printf(&j, "\"");
  }
  if (m->binding) {
    mp_weight_file_t* file = mp_weights_binding_current(m->binding);
    mp_json_printf(&j, ", \"weight_file\": ");
    uint64_t length = 0;
    mp_weight_file_describe(file, NULL, 0, &length);
    char* text = malloc(length + 1);
    if (text) {
      mp_weight_file_describe(file, text, length + 1, NULL);
      mp_json_printf(&j, "%s", text);
      free(text);
    }
    mp_weight_file_release(file);
  }
  mp_json_printf(&j, ", \"arrays\": [");
  for (uint64_t i = 0; i < m->count; ++i) {
    const expected_array_t* a = &m->arrays[i];
    char dtype[32];
    mp_json_printf(&j, "%s{\"name\": ", i ? ", " : "");
    mp_json_string(&j, a->name);
    mp_json_printf(&j, ", \"dtype\": \"%s\", \"shape\": [",
                   mp_dtype_string(a->dtype, dtype, sizeof dtype));
    for (int32_t d = 0; d < a->ndim; ++d)
      mp_json_printf(&j, "%s%" PRId64, d ? ", " : "", a->shape[d]);
    mp_json_printf(&j, "]}");
  }
  mp_json_printf(&j, "]");
  if (out_length) *out_length = j.length;
  return MP_OK;
}

static const mp_module_vtable_t vtable = {
    .array_count = array_count,
    .array_at = array_at,
    .destroy = destroy,
    .describe = describe,
};

static int by_name(const void* a, const void* b, void* module) {
  const weights_module_t* m = module;
  return strcmp(m->arrays[*(const uint64_t*)a].name, m->arrays[*(const uint64_t*)b].name);
}

/* Sort the names for lookups; refuse two arrays of one name. */
static mp_status_t index_names(weights_module_t* m) {
  m->by_name = malloc((m->count ? m->count : 1) * sizeof *m->by_name);
  if (!m->by_name) return mp_out_of_memory("a weights module");
  for (uint64_t i = 0; i < m->count; ++i) m->by_name[i] = i;
  qsort_r(m->by_name, m->count, sizeof *m->by_name, by_name, m);
  for (uint64_t i = 1; i < m->count; ++i)
    if (strcmp(m->arrays[m->by_name[i - 1]].name, m->arrays[m->by_name[i]].name) == 0)
      return mp_errorf(MP_ERR_FORMAT, "weights payload: two arrays are named '%s'",
                       m->arrays[m->by_name[i]].name);
  return MP_OK;
}

/* ---- the reference payload ---------------------------------------------------------------- */

/* A string of the payload: |size| bytes at |offset|, in bounds, UTF-8 without NUL. */
static char* payload_string(mp_const_byte_span_t p, uint64_t offset, uint64_t size) {
  if (size == 0 || !mp_in_bounds(offset, size, p.size) || memchr(p.data + offset, 0, size) ||
      mp_utf8_invalid_at(p.data + offset, size) < size)
    return NULL;
  char* s = malloc(size + 1);
  if (s) {
    memcpy(s, p.data + offset, size);
    s[size] = '\0';
  }
  return s;
}

static mp_status_t parse_record(mp_const_byte_span_t p, uint64_t i, expected_array_t* a) {
  const uint8_t* r = p.data + sizeof(mp_weights_ref_header_v1_t) + i * 32;
  uint32_t name_size = mp_load_le32(r + RECORD_FIELD(name_size));
  uint32_t ndim = mp_load_le32(r + RECORD_FIELD(ndim));
  uint64_t shape_offset = mp_load_le64(r + RECORD_FIELD(shape_offset));
  a->dtype = (DLDataType){r[RECORD_FIELD(dtype_code)], r[RECORD_FIELD(dtype_bits)],
                          mp_load_le16(r + RECORD_FIELD(dtype_lanes))};
  if (mp_load_le32(r + RECORD_FIELD(reserved)) != 0 || name_size > MP_WEIGHTS_MAX_NAME ||
      ndim > MP_WEIGHTS_MAX_NDIM || !mp_in_bounds(shape_offset, (uint64_t)ndim * 8, p.size) ||
      !mp_dtype_is_valid(a->dtype))
    return mp_errorf(MP_ERR_FORMAT, "weights payload: array record %" PRIu64 " is malformed", i);
  a->ndim = (int32_t)ndim;
  for (uint32_t d = 0; d < ndim; ++d) {
    uint64_t extent = mp_load_le64(p.data + shape_offset + 8 * d);
    if (extent > (uint64_t)INT64_MAX)
      return mp_errorf(MP_ERR_FORMAT,
                       "weights payload: array record %" PRIu64 " has a shape that overflows", i);
    a->shape[d] = (int64_t)extent;
  }
  /* Last: a record is owned by the module (and freed with it) once it has its name. */
  a->name = payload_string(p, mp_load_le64(r + RECORD_FIELD(name_offset)), name_size);
  if (!a->name)
    return mp_errorf(MP_ERR_FORMAT,
                     "weights payload: array record %" PRIu64 "'s name is out of bounds or not "
                     "UTF-8",
                     i);
  return MP_OK;
}

static mp_status_t parse_reference(mp_const_byte_span_t p, weights_module_t* m) {
  if (p.size < sizeof(mp_weights_ref_header_v1_t))
    return mp_errorf(MP_ERR_FORMAT, "weights payload of %" PRIu64 " bytes is shorter than its "
                     "header", p.size);
  uint32_t version = mp_load_le32(p.data + HEADER_FIELD(version));
  if (version != MP_WEIGHTS_REF_VERSION)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "weights payload version %u is not supported (this runtime reads %d): "
                     "upgrade modpack",
                     version, MP_WEIGHTS_REF_VERSION);
  if (mp_load_le32(p.data + HEADER_FIELD(reserved)) != 0 ||
      mp_load_le32(p.data + HEADER_FIELD(reserved2)) != 0)
    return mp_errorf(MP_ERR_FORMAT, "weights payload: reserved header fields are not 0");
  memcpy(m->digest, p.data + HEADER_FIELD(digest), 32);
  m->has_digest = true;
  uint32_t name_size = mp_load_le32(p.data + HEADER_FIELD(file_name_size));
  m->file_name = name_size <= MP_WEIGHTS_REF_MAX_FILE_NAME
                     ? payload_string(p, mp_load_le64(p.data + HEADER_FIELD(file_name_offset)),
                                      name_size)
                     : NULL;
  if (!m->file_name || strchr(m->file_name, '/') || strcmp(m->file_name, ".") == 0 ||
      strcmp(m->file_name, "..") == 0)
    return mp_errorf(MP_ERR_FORMAT,
                     "weights payload: the weight file's name is not a file name of 1 to %d "
                     "bytes",
                     MP_WEIGHTS_REF_MAX_FILE_NAME);
  uint64_t count = mp_load_le64(p.data + HEADER_FIELD(array_count));
  if (count > (p.size - sizeof(mp_weights_ref_header_v1_t)) / sizeof(mp_weights_ref_record_v1_t))
    return mp_errorf(MP_ERR_FORMAT, "weights payload: %" PRIu64 " array records do not fit in %"
                     PRIu64 " bytes", count, p.size);
  m->arrays = calloc(count ? count : 1, sizeof *m->arrays);
  if (!m->arrays) return mp_out_of_memory("a weights module");
  for (; m->count < count; ++m->count)
    MP_RETURN_IF_ERROR(parse_record(p, m->count, &m->arrays[m->count]));
  return index_names(m);
}

/* ---- binding a reference to its file ---------------------------------------------------- */

/* Where the weight file |file_name| that the library at |library_path| records is: where the
 * load says, else beside the library. *out_nameless: the load gave it without a name. */
static mp_status_t locate(const char* library_path, const mp_load_settings_t* settings,
                          const char* file_name, char* out, size_t capacity, bool* out_nameless) {
  const char* given = mp_load_settings_weights_path(settings, file_name);
  *out_nameless = false;
  int n;
  if (given) {
    for (uint64_t i = 0; i < settings->num_weights; ++i)
      if (settings->weights[i].path == given) *out_nameless = !settings->weights[i].file_name;
    n = snprintf(out, capacity, "%s", given);
  } else if (settings->weights_folder) {
    n = snprintf(out, capacity, "%s/%s", settings->weights_folder, file_name);
  } else {
    const char* slash = strrchr(library_path, '/');
    if (library_path[0] != '/' || !slash)
      return mp_errorf(MP_ERR_NOT_FOUND,
                       "%s refers to the weight file '%s' and was not loaded from a file: say "
                       "where the weight file is (load_module_from_bytes(..., weights=PATH); C: "
                       "mp_module_load_memory with mp_load_options_t.weights)",
                       library_path, file_name);
    n = snprintf(out, capacity, "%.*s/%s", (int)(slash - library_path), library_path, file_name);
  }
  if (n < 0 || (size_t)n >= capacity)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "the path of '%s' is too long", file_name);
  return MP_OK;
}

/* A missing file: say where it was looked for, and how to say where it is. */
static mp_status_t not_found(mp_status_t status, const char* library_path, const char* file_name,
                             const char* path) {
  if (status != MP_ERR_NOT_FOUND) return status;
  return mp_error_prefix(status,
                         "'%s' refers to the weight file '%s', looked for at '%s' (put it beside "
                         "the library, or give its path: load_module(..., weights=PATH); C: "
                         "mp_load_options_t.weights)",
                         library_path, file_name, path);
}

/* A nameless location ("the library's weight file") is for a library with one weight file. */
static mp_status_t check_one_file(mp_library_t* library, const char* file_name) {
  const char* other = mp_weights_binding_other_file(library, file_name);
  if (!other) return MP_OK;
  return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                   "'%s' refers to several weight files ('%s', '%s', ...): give each one's path "
                   "by its name (weights={'%s': PATH, ...}; C: mp_weights_location_t.file_name)",
                   mp_library_path(library), other, file_name, file_name);
}

/* The arrays the module hands out, as specs (the strings and shapes stay the module's). */
static mp_array_spec_t* specs_of(const weights_module_t* m) {
  mp_array_spec_t* specs = calloc(m->count ? m->count : 1, sizeof *specs);
  for (uint64_t i = 0; specs && i < m->count; ++i)
    specs[i] = (mp_array_spec_t){m->arrays[i].name, m->arrays[i].dtype, m->arrays[i].ndim,
                                 m->arrays[i].shape};
  return specs;
}

static mp_status_t bind(mp_library_t* library, weights_module_t* m) {
  char path[PATH_MAX];
  bool nameless;
  MP_RETURN_IF_ERROR(locate(mp_library_path(library), mp_library_settings(library),
                            m->file_name, path, sizeof path, &nameless));
  if (nameless) MP_RETURN_IF_ERROR(check_one_file(library, m->file_name));
  mp_array_spec_t* specs = specs_of(m);
  if (!specs) return mp_out_of_memory("a weights module");
  mp_status_t status = mp_weights_binding_get(library, m->file_name, m->digest, specs, m->count,
                                              path, mp_library_settings(library), &m->binding);
  free(specs);
  return not_found(status, mp_library_path(library), m->file_name, path);
}

static mp_status_t make_module(weights_module_t* m, mp_module_t** out_module) {
  MP_RETURN_IF_ERROR(mp_module_create(MP_WEIGHTS_KIND, &vtable, m, out_module));
  mp_module_set_array_finder(*out_module, find_array);
  return MP_OK;
}

static mp_status_t load_reference(void* user_data, const mp_loader_args_t* args,
                                  mp_module_t** out_module) {
  (void)user_data;
  weights_module_t* m = calloc(1, sizeof *m);
  if (!m) return mp_out_of_memory("a weights module");
  mp_status_t status = parse_reference(args->payload, m);
  if (status == MP_OK && args->library) status = bind(args->library, m);
  if (status != MP_OK) {
    destroy(m);
    return status;
  }
  return make_module(m, out_module);
}

/* One weights entry of a library checked ahead of dlopen: its file opened, checked and held
 * in |settings|, so that the loader finds it so after dlopen. */
static mp_status_t hold(mp_weight_files_t* held, mp_weight_file_t* file) {
  mp_weight_file_t** grown = realloc(held->files, (held->count + 1) * sizeof *grown);
  if (!grown) {
    mp_weight_file_release(file);
    return mp_out_of_memory("checking weight files");
  }
  held->files = grown;
  held->files[held->count++] = file;
  return MP_OK;
}

void mp_weight_files_release(mp_weight_files_t* held) {
  for (uint64_t i = 0; i < held->count; ++i) mp_weight_file_release(held->files[i]);
  free(held->files);
  held->files = NULL;
  held->count = 0;
}

static mp_status_t precheck_entry(mp_const_byte_span_t payload, const char* library_path,
                                  const mp_load_settings_t* settings, mp_weight_files_t* held,
                                  const char** names, uint64_t* name_count) {
  weights_module_t* m = calloc(1, sizeof *m);
  if (!m) return mp_out_of_memory("a weights module");
  mp_status_t status = parse_reference(payload, m);
  char path[PATH_MAX];
  bool nameless = false;
  if (status == MP_OK)
    status = locate(library_path, settings, m->file_name, path, sizeof path, &nameless);
  bool known = false;
  for (uint64_t i = 0; status == MP_OK && i < *name_count && !known; ++i)
    known = strcmp(names[i], m->file_name) == 0;
  if (status == MP_OK && nameless && *name_count > 0 && !known)
    status = mp_errorf(MP_ERR_INVALID_ARGUMENT,
                       "'%s' refers to several weight files ('%s', '%s', ...): give each one's "
                       "path by its name (weights={'%s': PATH, ...}; C: "
                       "mp_weights_location_t.file_name)",
                       library_path, names[0], m->file_name, m->file_name);
  mp_array_spec_t* specs = status == MP_OK ? specs_of(m) : NULL;
  if (status == MP_OK && !specs) status = mp_out_of_memory("a weights module");
  mp_weight_file_t* file = NULL;
  if (status == MP_OK)
    status = not_found(mp_weights_open_checked(path, m->file_name, m->digest, specs, m->count,
                                               library_path, settings, &file),
                       library_path, m->file_name, path);
  free(specs);
  if (status == MP_OK) status = hold(held, file);
  if (status == MP_OK && !known) names[(*name_count)++] = strdup(m->file_name);
  destroy(m);
  return status;
}

/* The weight files the load gives by name checked against those the blob's weights modules
 * record, before any is opened: a misspelt name is refused as such, rather than ignored and
 * the file it was meant for then missing beside the library. Only for a load that names files
 * (each weights module's payload is read once more). */
static mp_status_t check_given_names(int fd, const mp_seal_v1_t* seal, mp_blob_t* blob,
                                     uint64_t module_count, const char* library_path,
                                     const mp_load_settings_t* settings) {
  char** names = calloc(module_count ? module_count : 1, sizeof *names);
  if (!names) return mp_out_of_memory("checking weight files");
  uint64_t count = 0;
  mp_status_t status = MP_OK;
  for (uint64_t i = 0; status == MP_OK && i < module_count; ++i) {
    mp_blob_module_t entry;
    mp_blob_module(blob, i, &entry);
    if (strcmp(entry.type_key, MP_WEIGHTS_KIND) != 0) continue;
    weights_module_t* m = calloc(1, sizeof *m);
    uint8_t* payload = NULL;
    status = m ? mp_blob_payload_read(fd, seal, blob, &entry, library_path, &payload)
               : mp_out_of_memory("checking weight files");
    if (status == MP_OK)
      status = parse_reference((mp_const_byte_span_t){payload, entry.payload_size}, m);
    bool seen = false;
    for (uint64_t j = 0; status == MP_OK && j < count && !seen; ++j)
      seen = strcmp(names[j], m->file_name) == 0;
    if (status == MP_OK && !seen) names[count++] = m->file_name, m->file_name = NULL;
    if (status != MP_OK)
      status = mp_error_prefix(status, "'%s': module[%" PRIu64 "] (weights)", library_path, i);
    free(payload);
    if (m) destroy(m);
  }
  if (status == MP_OK)
    status = mp_load_settings_check_names(settings, library_path, (const char* const*)names,
                                          count);
  for (uint64_t i = 0; i < count; ++i) free(names[i]);
  free(names);
  return status;
}

mp_status_t mp_weights_precheck(int fd, const mp_seal_v1_t* seal, const char* library_path,
                                const mp_load_settings_t* settings, mp_weight_files_t* held) {
  if (seal->blob_size == 0) /* host code only: no module, no weight file */
    return mp_load_settings_check_names(settings, library_path, NULL, 0);
  uint8_t* index = NULL;
  mp_blob_t* blob = NULL;
  mp_status_t status = mp_blob_index_read(fd, seal, library_path, &index, &blob);
  if (status != MP_OK) { /* no blob, or an index too large to read ahead: the loader checks */
    mp_error_clear();
    return MP_OK;
  }
  mp_blob_info_t info;
  mp_blob_info(blob, &info);
  if (mp_load_settings_names_files(settings))
    status = check_given_names(fd, seal, blob, info.module_count, library_path, settings);
  const char** names = calloc(info.module_count ? info.module_count : 1, sizeof *names);
  uint64_t name_count = 0;
  if (!names && status == MP_OK) status = mp_out_of_memory("checking weight files");
  for (uint64_t i = 0; status == MP_OK && i < info.module_count; ++i) {
    mp_blob_module_t entry;
    mp_blob_module(blob, i, &entry);
    if (strcmp(entry.type_key, MP_WEIGHTS_KIND) != 0) continue;
    uint8_t* payload = NULL;
    status = mp_blob_payload_read(fd, seal, blob, &entry, library_path, &payload);
    if (status == MP_OK)
      status = precheck_entry((mp_const_byte_span_t){payload, entry.payload_size}, library_path,
                              settings, held, names, &name_count);
    if (status != MP_OK)
      status = mp_error_prefix(status, "'%s': module[%" PRIu64 "] (weights)", library_path, i);
    free(payload);
  }
  for (uint64_t i = 0; i < name_count; ++i) free((char*)names[i]);
  free(names);
  mp_blob_free(blob);
  free(index);
  return status;
}

const mp_kind_t mp_weights_kind = {
    .type_key = MP_WEIGHTS_KIND,
    .load = load_reference,
};

/* ---- a weight file on its own, swapping, versions -------------------------------------- */

mp_status_t mp_weights_module_open(const char* path, const mp_load_settings_t* settings,
                                   mp_module_t** out_module) {
  *out_module = NULL;
  weights_module_t* m = calloc(1, sizeof *m);
  if (!m) return mp_out_of_memory("a weights module");
  const char* slash = strrchr(path, '/');
  m->file_name = strdup(slash ? slash + 1 : path);
  mp_status_t status = m->file_name ? MP_OK : mp_out_of_memory("a weights module");
  if (status == MP_OK)
    status = mp_weights_binding_get(NULL, m->file_name, NULL, NULL, 0, path, settings,
                                    &m->binding);
  mp_weight_file_t* file = status == MP_OK ? mp_weights_binding_current(m->binding) : NULL;
  if (file) {
    m->count = mp_weight_file_count(file);
    m->arrays = calloc(m->count ? m->count : 1, sizeof *m->arrays);
    if (!m->arrays) status = mp_out_of_memory("a weights module");
    for (uint64_t i = 0; status == MP_OK && i < m->count; ++i) {
      const mp_weight_array_t* a = mp_weight_file_array(file, i);
      expected_array_t* e = &m->arrays[i];
      e->name = strdup(a->name);
      e->dtype = a->tensor.dtype;
      e->ndim = a->tensor.ndim;
      memcpy(e->shape, a->tensor.shape, (size_t)a->tensor.ndim * sizeof *e->shape);
      if (!e->name) status = mp_out_of_memory("a weights module");
    }
    if (status == MP_OK) status = index_names(m);
    memcpy(m->digest, mp_weight_file_digest(file), 32);
    m->has_digest = true;
    mp_weight_file_release(file);
  }
  if (status != MP_OK) {
    destroy(m);
    return status;
  }
  return make_module(m, out_module);
}

/* The weights module behind |module|, or NULL. */
static weights_module_t* weights_of(mp_module_t* module) {
  const char* key = mp_module_type_key(module);
  return key && strcmp(key, MP_WEIGHTS_KIND) == 0 ? mp_module_impl(module) : NULL;
}

mp_status_t mp_module_swap_weights(mp_module_t* module, const char* file_name, const char* path) {
  if (!module || !path)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_module_swap_weights: NULL module or path");
  weights_module_t* own = weights_of(module);
  mp_weights_binding_t* binding = NULL;
  mp_library_t* library = mp_module_library(module);
  if (own && own->binding && !library) /* a weight file loaded on its own */
    return mp_weights_binding_swap(own->binding, path);
  if (!library)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "mp_module_swap_weights: the module is not from a loaded library or a "
                     "weight file");
  mp_library_lock();
  mp_status_t status = mp_weights_binding_find(library, file_name, &binding);
  mp_library_unlock();
  MP_RETURN_IF_ERROR(status);
  status = mp_weights_binding_swap(binding, path);
  mp_weights_binding_release(binding);
  return status;
}

bool mp_weights_module_owns(mp_module_t* module) {
  weights_module_t* m = module ? weights_of(module) : NULL;
  return m && m->binding;
}

mp_status_t mp_weights_module_array_on(mp_module_t* module, const DLTensor* array,
                                       DLDevice device, const DLTensor** out_array) {
  weights_module_t* m = weights_of(module);
  mp_weight_file_t* file;
  MP_RETURN_IF_ERROR(mp_weights_binding_file(m->binding, &file)); /* the one |array| is from */
  return mp_device_array_cache_get(mp_weight_file_device_arrays(file), array, device, out_array);
}

mp_status_t mp_weights_current(mp_module_t* module, mp_weight_file_t** out_file) {
  if (!out_file) return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_weights_current: NULL out_file");
  *out_file = NULL;
  weights_module_t* m = module ? weights_of(module) : NULL;
  if (!m || !m->binding)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_weights_current: not a loaded weights module");
  *out_file = mp_weights_binding_current(m->binding);
  return MP_OK;
}

mp_status_t mp_weights_array_in(mp_module_t* module, mp_weight_file_t* file, uint64_t index,
                                const char** out_name, const DLTensor** out_array) {
  weights_module_t* m = module ? weights_of(module) : NULL;
  if (!m || !m->binding || !file || !out_name || !out_array)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_weights_array_in: not a loaded weights module");
  if (index >= m->count)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "array index %" PRIu64 " out of range (%" PRIu64
                     " arrays)", index, m->count);
  *out_name = m->arrays[index].name;
  return array_in(m, file, index, out_array);
}
