/* The "weights" kind: a module whose arrays are those of weight files (modpack/weights.h, or
 * safetensors and GGUF files read in place: weights/foreign_index.h).
 *
 * In a library, its payload (modpack/kinds/weights.h, parsed by library/weights_reference.c) is a
 * reference: each file's name and digest, and the arrays the module hands out, with the dtypes
 * and shapes the library was exported with (and, for a file in another format, their recorded
 * checksums and digests). The loader finds each file (beside the library, or where the load
 * says), refuses another file naming the first difference, and binds the module to it
 * (library/weights_binding.h), so that its weights can be swapped file by file. It lives in the
 * library layer, not with the other kinds, because it needs how the library is being loaded
 * (where weight files are, trusted keys) and the library's other weight modules.
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
#include "files/blob_index.h"
#include "library/library.h"
#include "library/weights_binding.h"
#include "library/weights_kind.h"
#include "library/weights_reference.h"
#include "modpack/kinds/weights.h"

typedef struct {
  mp_weights_ref_t ref;             /* the files and the arrays handed out */
  bool has_digest;                  /* false for a file loaded on its own */
  mp_weights_binding_t** bindings;  /* one per file; NULL for a reference read on its own */
} weights_module_t;

static void destroy(void* impl) {
  weights_module_t* m = impl;
  for (uint64_t f = 0; m->bindings && f < m->ref.file_count; ++f)
    mp_weights_binding_release(m->bindings[f]);
  free(m->bindings);
  mp_weights_ref_free(&m->ref);
  free(m);
}

static const char* format_name(mp_weights_format_t format) {
  return format == MP_WEIGHTS_FORMAT_SAFETENSORS ? "safetensors"
         : format == MP_WEIGHTS_FORMAT_GGUF      ? "gguf"
                                                 : "modpack";
}

/* ---- arrays ----------------------------------------------------------------------------- */

static uint64_t array_count(mp_module_t* self) {
  weights_module_t* m = mp_module_impl(self);
  return m->bindings ? m->ref.count : 0;
}

/* Array |index| of the module in |file| (a version of the file the array is in). */
static mp_status_t array_in(weights_module_t* m, mp_weight_file_t* file, uint64_t index,
                            const DLTensor** out_array) {
  const mp_weights_ref_array_t* a = &m->ref.arrays[index];
  uint64_t at = mp_weight_file_find(file, a->name);
  if (at == UINT64_MAX)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "array '%s' is read from '%s', not from '%s'",
                     a->name, m->ref.files[a->file].name, mp_weight_file_path(file));
  return mp_weights_binding_array(m->bindings[a->file], file, at, out_array);
}

/* Array |index| as the caller reads it: from the version of its file the call keeps. */
static mp_status_t array_now(weights_module_t* m, uint64_t index, const DLTensor** out_array) {
  mp_weight_file_t* file;
  MP_RETURN_IF_ERROR(mp_weights_binding_file(m->bindings[m->ref.arrays[index].file], &file));
  return array_in(m, file, index, out_array);
}

static mp_status_t array_at(mp_module_t* self, uint64_t index, const char** out_name,
                            const DLTensor** out_array) {
  weights_module_t* m = mp_module_impl(self);
  *out_name = m->ref.arrays[index].name;
  return array_now(m, index, out_array);
}

static mp_status_t find_array(mp_module_t* self, const char* name, const DLTensor** out_array) {
  weights_module_t* m = mp_module_impl(self);
  *out_array = NULL;
  if (!m->bindings) return MP_OK;
  uint64_t index = mp_weights_ref_find(&m->ref, name);
  return index == UINT64_MAX ? MP_OK : array_now(m, index, out_array);
}

static void hex(mp_json_t* j, const uint8_t* bytes, size_t n) {
  for (size_t i = 0; i < n; ++i) mp_json_printf(j, "%02x", bytes[i]);
}

/* The description of the file |f| now bound, or nothing. */
static void describe_bound(mp_json_t* j, const weights_module_t* m, uint64_t f) {
  if (!m->bindings) return;
  mp_weight_file_t* file = mp_weights_binding_current(m->bindings[f]);
  mp_json_printf(j, ", \"weight_file\": ");
  uint64_t length = 0;
  mp_weight_file_describe(file, NULL, 0, &length);
  char* text = malloc(length + 1);
  if (text) {
    mp_weight_file_describe(file, text, length + 1, NULL);
    mp_json_printf(j, "%s", text);
    free(text);
  }
  mp_weight_file_release(file);
}

static mp_status_t describe(mp_module_t* self, char* buffer, uint64_t capacity,
                            uint64_t* out_length) {
  weights_module_t* m = mp_module_impl(self);
  mp_json_t j = {buffer, capacity, 0};
  if (buffer && capacity) buffer[0] = '\0';
  /* The first file as "file" (and "digest", "weight_file"), as tools read a module of one. */
  mp_json_printf(&j, "\"file\": ");
  mp_json_string(&j, m->ref.files[0].name);
  if (m->has_digest) {
    mp_json_printf(&j, ", \"digest\": \"sha256:");
    hex(&j, m->ref.files[0].digest, 32);
    mp_json_printf(&j, "\"");
  }
  mp_json_printf(&j, ", \"format\": \"%s\"", format_name(m->ref.files[0].format));
  describe_bound(&j, m, 0);
  mp_json_printf(&j, ", \"files\": [");
  for (uint64_t f = 0; f < m->ref.file_count; ++f) {
    mp_json_printf(&j, "%s{\"file\": ", f ? ", " : "");
    mp_json_string(&j, m->ref.files[f].name);
    mp_json_printf(&j, ", \"format\": \"%s\"", format_name(m->ref.files[f].format));
    if (m->has_digest) {
      mp_json_printf(&j, ", \"digest\": \"sha256:");
      hex(&j, m->ref.files[f].digest, 32);
      mp_json_printf(&j, "\"");
    }
    if (f > 0) describe_bound(&j, m, f);
    mp_json_printf(&j, "}");
  }
  mp_json_printf(&j, "], \"arrays\": [");
  for (uint64_t i = 0; i < m->ref.count; ++i) {
    const mp_weights_ref_array_t* a = &m->ref.arrays[i];
    char dtype[32];
    mp_json_printf(&j, "%s{\"name\": ", i ? ", " : "");
    mp_json_string(&j, a->name);
    mp_json_printf(&j, ", \"dtype\": \"%s\", \"shape\": [",
                   mp_dtype_string(a->dtype, dtype, sizeof dtype));
    for (int32_t d = 0; d < a->ndim; ++d)
      mp_json_printf(&j, "%s%" PRId64, d ? ", " : "", a->shape[d]);
    mp_json_printf(&j, "]");
    if (m->ref.file_count > 1) mp_json_printf(&j, ", \"file\": %u", a->file);
    mp_json_printf(&j, "}");
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

/* ---- binding a reference to its files --------------------------------------------------- */

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

/* What the reference says of file |f| for a binding, in |specs| and |records| (allocated here,
 * freed with free). */
static mp_status_t reference_of(const mp_weights_ref_t* ref, uint64_t f,
                                mp_array_spec_t** specs, mp_weight_record_t** records,
                                mp_weights_reference_t* out) {
  *specs = calloc(ref->count ? ref->count : 1, sizeof **specs);
  *records = calloc(ref->count ? ref->count : 1, sizeof **records);
  if (!*specs || !*records) return mp_out_of_memory("a weights module");
  mp_weights_ref_of_file(ref, f, *specs, *records, out);
  return MP_OK;
}

static mp_status_t bind_file(mp_library_t* library, weights_module_t* m, uint64_t f) {
  const char* name = m->ref.files[f].name;
  char path[PATH_MAX];
  bool nameless;
  MP_RETURN_IF_ERROR(locate(mp_library_path(library), mp_library_settings(library), name, path,
                            sizeof path, &nameless));
  if (nameless) MP_RETURN_IF_ERROR(check_one_file(library, name));
  mp_array_spec_t* specs = NULL;
  mp_weight_record_t* records = NULL;
  mp_weights_reference_t reference;
  mp_status_t status = reference_of(&m->ref, f, &specs, &records, &reference);
  if (status == MP_OK)
    status = mp_weights_binding_get(library, &reference, path, mp_library_settings(library),
                                    &m->bindings[f]);
  free(specs);
  free(records);
  return not_found(status, mp_library_path(library), name, path);
}

static mp_status_t bind(mp_library_t* library, weights_module_t* m) {
  m->bindings = calloc(m->ref.file_count, sizeof *m->bindings);
  if (!m->bindings) return mp_out_of_memory("a weights module");
  for (uint64_t f = 0; f < m->ref.file_count; ++f) MP_RETURN_IF_ERROR(bind_file(library, m, f));
  return MP_OK;
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
  m->has_digest = true;
  mp_status_t status = mp_weights_ref_parse(args->payload, &m->ref);
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

/* The names of the weight files a library's weights modules record, each once. */
typedef struct {
  char** names;
  uint64_t count, capacity;
} file_names_t;

static void file_names_free(file_names_t* n) {
  for (uint64_t i = 0; i < n->count; ++i) free(n->names[i]);
  free(n->names);
}

/* Add |name| unless it is there; *out_known: it was. */
static mp_status_t file_names_add(file_names_t* n, const char* name, bool* out_known) {
  *out_known = false;
  for (uint64_t i = 0; i < n->count && !*out_known; ++i)
    *out_known = strcmp(n->names[i], name) == 0;
  if (*out_known) return MP_OK;
  if (n->count == n->capacity) {
    uint64_t capacity = n->capacity ? 2 * n->capacity : 8;
    char** grown = realloc(n->names, capacity * sizeof *grown);
    if (!grown) return mp_out_of_memory("checking weight files");
    n->names = grown, n->capacity = capacity;
  }
  if (!(n->names[n->count] = strdup(name))) return mp_out_of_memory("checking weight files");
  ++n->count;
  return MP_OK;
}

/* Each file of one weights entry of a library ahead of dlopen: found, opened, checked and held
 * in |held|, so that the loader finds them so after dlopen. */
static mp_status_t precheck_entry(const mp_weights_ref_t* ref, const char* library_path,
                                  const mp_load_settings_t* settings, mp_weight_files_t* held,
                                  file_names_t* names) {
  mp_status_t status = MP_OK;
  for (uint64_t f = 0; status == MP_OK && f < ref->file_count; ++f) {
    const char* name = ref->files[f].name;
    char path[PATH_MAX];
    bool nameless = false, known = false;
    status = locate(library_path, settings, name, path, sizeof path, &nameless);
    uint64_t before = names->count;
    if (status == MP_OK) status = file_names_add(names, name, &known);
    if (status == MP_OK && nameless && before > 0 && !known)
      status = mp_errorf(MP_ERR_INVALID_ARGUMENT,
                         "'%s' refers to several weight files ('%s', '%s', ...): give each one's "
                         "path by its name (weights={'%s': PATH, ...}; C: "
                         "mp_weights_location_t.file_name)",
                         library_path, names->names[0], name, name);
    mp_array_spec_t* specs = NULL;
    mp_weight_record_t* records = NULL;
    mp_weights_reference_t reference;
    if (status == MP_OK) status = reference_of(ref, f, &specs, &records, &reference);
    mp_weight_file_t* file = NULL;
    if (status == MP_OK)
      status = not_found(mp_weights_open_checked(path, &reference, library_path, settings, &file),
                         library_path, name, path);
    free(specs);
    free(records);
    if (status == MP_OK) status = hold(held, file);
  }
  return status;
}

/* Every weights entry of the blob, parsed, for |visit|. */
static mp_status_t each_reference(int fd, const mp_seal_v1_t* seal, mp_blob_t* blob,
                                  const char* library_path,
                                  mp_status_t (*visit)(const mp_weights_ref_t* ref, void* context),
                                  void* context) {
  mp_blob_info_t info;
  mp_blob_info(blob, &info);
  mp_status_t status = MP_OK;
  for (uint64_t i = 0; status == MP_OK && i < info.module_count; ++i) {
    mp_blob_module_t entry;
    mp_blob_module(blob, i, &entry);
    if (strcmp(entry.type_key, MP_WEIGHTS_KIND) != 0) continue;
    uint8_t* payload = NULL;
    mp_weights_ref_t ref = {0};
    status = mp_blob_payload_read(fd, seal, blob, &entry, library_path, &payload);
    if (status == MP_OK)
      status = mp_weights_ref_parse((mp_const_byte_span_t){payload, entry.payload_size}, &ref);
    if (status == MP_OK) status = visit(&ref, context);
    if (status != MP_OK)
      status = mp_error_prefix(status, "'%s': module[%" PRIu64 "] (weights)", library_path, i);
    mp_weights_ref_free(&ref);
    free(payload);
  }
  return status;
}

static mp_status_t collect_names(const mp_weights_ref_t* ref, void* names) {
  bool known;
  for (uint64_t f = 0; f < ref->file_count; ++f)
    MP_RETURN_IF_ERROR(file_names_add(names, ref->files[f].name, &known));
  return MP_OK;
}

typedef struct {
  const char* library_path;
  const mp_load_settings_t* settings;
  mp_weight_files_t* held;
  file_names_t names;
} precheck_t;

static mp_status_t precheck_visit(const mp_weights_ref_t* ref, void* context) {
  precheck_t* p = context;
  return precheck_entry(ref, p->library_path, p->settings, p->held, &p->names);
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
  /* The files the load names, checked against those recorded before any is opened: a
   * misspelt name is refused as such, rather than ignored and the file it was meant for then
   * missing beside the library (each weights payload is then read once more). */
  if (mp_load_settings_names_files(settings)) {
    file_names_t given = {0};
    status = each_reference(fd, seal, blob, library_path, collect_names, &given);
    if (status == MP_OK)
      status = mp_load_settings_check_names(settings, library_path,
                                            (const char* const*)given.names, given.count);
    file_names_free(&given);
  }
  precheck_t p = {library_path, settings, held, {0}};
  if (status == MP_OK) status = each_reference(fd, seal, blob, library_path, precheck_visit, &p);
  file_names_free(&p.names);
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
  m->ref.files = calloc(1, sizeof *m->ref.files);
  m->bindings = calloc(1, sizeof *m->bindings);
  const char* slash = strrchr(path, '/');
  mp_status_t status = MP_OK;
  if (!m->ref.files || !m->bindings ||
      !(m->ref.files[0].name = strdup(slash ? slash + 1 : path)))
    status = mp_out_of_memory("a weights module");
  else
    m->ref.file_count = 1;
  mp_weights_reference_t own = {m->ref.file_count ? m->ref.files[0].name : NULL, NULL, NULL, 0,
                                NULL, 0, NULL};
  if (status == MP_OK) status = mp_weights_binding_get(NULL, &own, path, settings, &m->bindings[0]);
  mp_weight_file_t* file = status == MP_OK ? mp_weights_binding_current(m->bindings[0]) : NULL;
  if (file) {
    m->ref.files[0].format = mp_weight_file_format(file);
    memcpy(m->ref.files[0].digest, mp_weight_file_digest(file), 32);
    m->has_digest = true;
    m->ref.count = mp_weight_file_count(file);
    m->ref.arrays = calloc(m->ref.count ? m->ref.count : 1, sizeof *m->ref.arrays);
    if (!m->ref.arrays) status = mp_out_of_memory("a weights module");
    uint64_t made = 0;
    for (; status == MP_OK && made < m->ref.count; ++made) {
      const mp_weight_array_t* a = mp_weight_file_array(file, made);
      mp_weights_ref_array_t* e = &m->ref.arrays[made];
      e->dtype = a->tensor.dtype;
      e->ndim = a->tensor.ndim;
      memcpy(e->shape, a->tensor.shape, (size_t)a->tensor.ndim * sizeof *e->shape);
      if (!(e->name = strdup(a->name))) status = mp_out_of_memory("a weights module");
    }
    m->ref.count = made; /* what is freed */
    if (status == MP_OK) status = mp_weights_ref_index_names(&m->ref);
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
  if (own && own->bindings && !library) /* a weight file loaded on its own */
    return mp_weights_binding_swap(own->bindings[0], path);
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
  return m && m->bindings;
}

mp_status_t mp_weights_module_array_on(mp_module_t* module, const DLTensor* array,
                                       DLDevice device, const DLTensor** out_array) {
  weights_module_t* m = weights_of(module);
  for (uint64_t f = 0; f < m->ref.file_count; ++f) { /* the file |array| is from */
    mp_weight_file_t* file;
    MP_RETURN_IF_ERROR(mp_weights_binding_file(m->bindings[f], &file));
    if (mp_weight_file_holds(file, array))
      return mp_device_array_cache_get(mp_weight_file_device_arrays(file), array, device,
                                        out_array);
  }
  return mp_errorf(MP_ERR_INVALID_ARGUMENT, "the array is not one of this weights module's");
}

uint64_t mp_weights_file_count(mp_module_t* module) {
  weights_module_t* m = module ? weights_of(module) : NULL;
  return m && m->bindings ? m->ref.file_count : 0;
}

uint64_t mp_weights_array_file(mp_module_t* module, uint64_t index) {
  weights_module_t* m = module ? weights_of(module) : NULL;
  return m && m->bindings && index < m->ref.count ? m->ref.arrays[index].file : UINT64_MAX;
}

mp_status_t mp_weights_current_file(mp_module_t* module, uint64_t file_index,
                                    mp_weight_file_t** out_file) {
  if (!out_file)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_weights_current_file: NULL out_file");
  *out_file = NULL;
  weights_module_t* m = module ? weights_of(module) : NULL;
  if (!m || !m->bindings)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "mp_weights_current_file: not a loaded weights module");
  if (file_index >= m->ref.file_count)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "file index %" PRIu64 " out of range (the module reads %" PRIu64 " files)",
                     file_index, m->ref.file_count);
  *out_file = mp_weights_binding_current(m->bindings[file_index]);
  return MP_OK;
}

mp_status_t mp_weights_current(mp_module_t* module, mp_weight_file_t** out_file) {
  return mp_weights_current_file(module, 0, out_file);
}

mp_status_t mp_weights_array_in(mp_module_t* module, mp_weight_file_t* file, uint64_t index,
                                const char** out_name, const DLTensor** out_array) {
  weights_module_t* m = module ? weights_of(module) : NULL;
  if (!m || !m->bindings || !file || !out_name || !out_array)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_weights_array_in: not a loaded weights module");
  if (index >= m->ref.count)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "array index %" PRIu64 " out of range (%" PRIu64
                     " arrays)", index, m->ref.count);
  *out_name = m->ref.arrays[index].name;
  return array_in(m, file, index, out_array);
}
