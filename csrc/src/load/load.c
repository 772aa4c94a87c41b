/* The loading entry points: mp_module_load_from_file (validate the file, dlopen it, rebuild
 * its tree or return the live one), mp_module_load_from_payload (one loader on a payload, for
 * tools), and the public face of the loader registry. Each first registers the built-in
 * kinds, so the registry itself knows none. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* realpath, PATH_MAX */
#endif
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/crypto.h"
#include "core/error.h"
#include "core/once.h"
#include "core/registry.h"
#include "core/trace.h"
#include "files/file.h"
#include "files/seal.h"
#include "files/signatures.h"
#include "kinds/builtin.h"
#include "library/library.h"
#include "library/overlays.h"
#include "library/weights_binding.h"
#include "library/weights_kind.h"
#include "load/file_check.h"
#include "load/kinds.h"
#include "load/tree.h"
#include "load/verified_library.h"
#include "weights/weight_file.h"

/* A live tree uses the weight files it was loaded with: a load naming others, or a name it
 * does not use, is refused (they would be ignored). */
static mp_status_t check_live_weights(mp_library_t* library, const mp_load_settings_t* settings) {
  MP_RETURN_IF_ERROR(mp_weights_binding_check_given(library, settings));
  for (uint64_t i = 0; i < settings->num_weights; ++i) {
    const mp_weights_location_t* w = &settings->weights[i];
    mp_weights_binding_t* binding;
    if (mp_weights_binding_find(library, w->file_name, &binding) != MP_OK) {
      mp_error_clear();
      continue; /* a nameless location, for a tree of several files or none */
    }
    mp_weight_file_t* file = mp_weights_binding_current(binding);
    char wanted[PATH_MAX];
    bool same = realpath(w->path, wanted) && strcmp(wanted, mp_weight_file_path(file)) == 0;
    mp_status_t status = same ? MP_OK : mp_errorf(
        MP_ERR_INVALID_ARGUMENT,
        "'%s' is loaded already, reading the weight file '%s', not '%s': use the loaded tree's "
        "swap_weights, or drop the tree before loading it with other weights",
        mp_library_path(library), mp_weight_file_path(file), w->path);
    mp_weight_file_release(file);
    mp_weights_binding_release(binding);
    MP_RETURN_IF_ERROR(status);
  }
  if (!mp_overlays_same(mp_library_overlays(library), (const char* const*)settings->overlays,
                        settings->num_overlays))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "'%s' is loaded already, with other overlays than this load gives: use the "
                     "loaded tree's swap_overlays (C: mp_module_swap_overlays), or drop the tree "
                     "before loading it with other overlays",
                     mp_library_path(library));
  return MP_OK;
}

/* The tree of an opened library: the live one, or one built anew as |settings| say (taken
 * over). |mapped_from_file|: the library's image is a mapping of its own file (not of a
 * verified copy), whose holes its checks may then skip. Caller holds the lock. */
static mp_status_t tree_of(mp_library_t* library, bool existing, mp_load_settings_t* settings,
                           const mp_seal_v1_t* seal, bool mapped_from_file,
                           mp_module_t** out_module) {
  uint32_t flags = settings->flags;
  if (existing) {
    mp_module_t* root = mp_library_live_root(library);
    if (root) {
      mp_status_t status = check_live_weights(library, settings);
      mp_load_settings_free(settings);
      if (status != MP_OK) {
        mp_module_release(root);
        return status;
      }
      *out_module = root;
      return MP_OK;
    }
    /* Parts of the old tree may live on but its root is gone: build a new tree over the same
     * library (its "library" node is reused if it survives). */
  }
  mp_library_set_settings(library, settings);
  mp_const_byte_span_t bytes;
  bool has_blob;
  MP_RETURN_IF_ERROR(mp_library_locate_blob(library, seal, &bytes, &has_blob));
  int holes_fd = mapped_from_file && seal ? mp_library_file(library) : -1;
  MP_RETURN_IF_ERROR(has_blob ? mp_tree_build(library, bytes, flags, holes_fd,
                                              seal ? seal->blob_offset : 0, out_module)
                              : mp_tree_host_only(library, out_module));
  mp_library_set_root(library, *out_module);
  /* A sealed library's weight files were checked before dlopen, names too; this is for one
   * loaded unsealed. */
  const mp_load_settings_t* kept = mp_library_settings(library);
  mp_status_t status = mp_weights_binding_check_given(library, kept);
  mp_overlays_t* overlays = NULL;
  if (status == MP_OK)
    status = mp_overlays_open(*out_module, (const char* const*)kept->overlays,
                              kept->num_overlays, kept, &overlays);
  if (status != MP_OK) {
    mp_module_release(*out_module);
    *out_module = NULL;
    return status;
  }
  mp_overlays_install(mp_library_overlays(library), overlays);
  return MP_OK;
}

mp_status_t mp_module_swap_overlays(mp_module_t* module, const char* const* paths,
                                    uint64_t count) {
  mp_library_t* library = module ? mp_module_library(module) : NULL;
  if (!library || (count > 0 && !paths))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_module_swap_overlays: %s",
                     library ? "NULL paths" : "the module is not from a loaded library");
  for (uint64_t i = 0; i < count; ++i)
    if (!paths[i])
      return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                       "mp_module_swap_overlays: overlay %" PRIu64 " has no path", i);
  /* Checked as the tree was loaded: its flags and keys. */
  mp_library_lock();
  mp_module_t* root = mp_library_live_root(library);
  const mp_load_settings_t* kept = mp_library_settings(library);
  mp_load_settings_t settings = {.flags = kept->flags, .num_keys = kept->num_keys};
  memcpy(settings.keys, kept->keys, sizeof settings.keys);
  mp_library_unlock();
  if (!root) return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_module_swap_overlays: the tree is gone");
  mp_overlays_t* overlays = NULL;
  mp_status_t status = mp_overlays_open(root, paths, count, &settings, &overlays);
  mp_module_release(root);
  if (status == MP_OK) mp_overlays_install(mp_library_overlays(library), overlays);
  return status;
}

/* Load the library open as |fd| (the caller's until this returns; kept while loaded), known
 * in messages as |path|; for a signed library, |verified| holds the windows its copy leaves to
 * the file (NULL otherwise). Under the library lock. */
static mp_status_t load_fd(int fd, mp_file_id_t id, const char* path,
                           mp_load_settings_t* settings, mp_verified_library_t* verified,
                           mp_module_t** out_module) {
  double clock = mp_trace_now_ms();
  mp_seal_v1_t seal;
  bool sealed;
  mp_status_t checked = mp_file_check_before_dlopen(fd, path, &id, settings->flags, false, &seal,
                                                       &sealed);
  if (checked != MP_OK) {
    close(fd);
    return checked;
  }
  if (sealed) id.digest_low = seal.digest_low, id.digest_high = seal.digest_high;
  mp_trace_phase(path, "file check", &clock, sealed ? "sealed" : "unsealed");
  /* Weight files before any code of the library runs (its constructors run in dlopen); a
   * live tree has its own already. */
  mp_weight_files_t held = {0};
  if (sealed && !mp_library_is_live(&id)) {
    checked = mp_weights_precheck(fd, &seal, path, settings, &held);
    if (checked != MP_OK) {
      mp_weight_files_release(&held);
      close(fd);
      return checked;
    }
    if (held.count) mp_trace_phase(path, "weight files", &clock, "");
  }
  mp_library_t* library;
  bool existing;
  mp_status_t status = mp_library_open(path, fd, &id, &library, &existing);
  if (status != MP_OK) {
    mp_weight_files_release(&held);
    return status;
  }
  mp_trace_phase(path, "dlopen", &clock, "");
  if (verified && !existing) { /* a verified copy is a file of its own: never an existing one */
    status = mp_verified_library_place(verified, library);
    mp_trace_phase(path, "place payloads", &clock, "");
  }
  if (status == MP_OK)
    status = tree_of(library, existing, settings, sealed ? &seal : NULL, verified == NULL,
                     out_module);
  mp_library_release(library); /* the modules hold it now (or it goes, on failure) */
  mp_weight_files_release(&held); /* the tree's bindings hold them now */
  return status;
}

static mp_once_t kinds_registered = MP_ONCE_INIT;

static void register_all_kinds(void) {
  mp_kinds_register_builtin();
  (void)mp_registry_add_kind(&mp_weights_kind); /* the library layer's own kind */
}

void mp_load_register_kinds(void) {
  mp_once(&kinds_registered, register_all_kinds);
}

/* A path, never a library name (dlopen would search the library path for "deploy.so"). */
static mp_status_t resolve(const char* path, char resolved[PATH_MAX]) {
  if (!realpath(path, resolved))
    return mp_errorf(errno == ENOENT ? MP_ERR_NOT_FOUND : MP_ERR_IO, "cannot open '%s': %s", path,
                     strerror(errno));
  return MP_OK;
}

static mp_status_t load_signed(const char* resolved, mp_load_settings_t* settings,
                               mp_module_t** out_module);

mp_status_t mp_module_load(const char* path, const mp_load_options_t* options,
                           mp_module_t** out_module) {
  if (!out_module) return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_module_load: NULL out_module");
  *out_module = NULL;
  if (!path) return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_module_load: NULL path");
  mp_load_settings_t settings; /* the options first: a wrong one is wrong whatever the file */
  MP_RETURN_IF_ERROR(mp_load_settings_copy(options, 0, &settings));
  char resolved[PATH_MAX];
  mp_status_t resolved_status = resolve(path, resolved);
  if (resolved_status != MP_OK) {
    mp_load_settings_free(&settings);
    return resolved_status;
  }
  if (settings.num_keys > 0) return load_signed(resolved, &settings, out_module);
  mp_load_register_kinds();
  mp_library_lock();
  int fd;
  mp_file_id_t id;
  mp_status_t status = mp_file_open(resolved, &fd, &id);
  if (status == MP_OK) status = load_fd(fd, id, resolved, &settings, NULL, out_module);
  mp_library_unlock();
  mp_load_settings_free(&settings); /* a no-op when the library took it */
  return status;
}

mp_status_t mp_module_load_from_file(const char* path, uint32_t flags, mp_module_t** out_module) {
  mp_load_options_t options = {.struct_size = sizeof options, .flags = flags};
  return mp_module_load(path, &options, out_module);
}

mp_status_t mp_trusted_key_from_pem(const char* pem, uint64_t length, mp_trusted_key_t* out_key) {
  if (!out_key) return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_trusted_key_from_pem: NULL out_key");
  return mp_crypto_ed25519_key_from_pem(pem, length, out_key->public_key);
}

mp_status_t mp_module_load_signed(const char* path, const mp_trusted_key_t* keys, uint64_t num_keys,
                                  uint32_t flags, mp_module_t** out_module) {
  if (!out_module)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_module_load_signed: NULL out_module");
  *out_module = NULL;
  if (!path || (num_keys > 0 && !keys))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_module_load_signed: NULL path or keys");
  if (num_keys == 0)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "mp_module_load_signed: no trusted keys: every library would be refused");
  mp_load_options_t options = {.struct_size = sizeof options, .flags = flags,
                               .trusted_keys = keys, .num_trusted_keys = num_keys};
  return mp_module_load(path, &options, out_module);
}

static mp_status_t load_signed(const char* resolved, mp_load_settings_t* settings,
                               mp_module_t** out_module) {
  mp_verified_library_t verified;
  mp_status_t status = mp_verified_library_make(resolved, settings->keys, settings->num_keys,
                                                settings->flags & MP_LOAD_PRIVATE_COPY, &verified);
  if (status != MP_OK) {
    mp_load_settings_free(settings);
    return status;
  }
  if (mp_trace_enabled()) {
    char detail[128];
    snprintf(detail, sizeof detail, "SHA-256 over %" PRIu64 " bytes, %.2f GB/s, %" PRIu64
             " payload windows left in the file", verified.hashed,
             verified.hash_ms > 0 ? (double)verified.hashed / verified.hash_ms / 1e6 : 0.0,
             verified.window_count);
    double start = mp_trace_now_ms() - verified.hash_ms;
    mp_trace_phase(resolved, "signature", &start, detail);
  }
  /* The signature covered every byte, payloads included: their checksums would add nothing. */
  settings->flags |= MP_LOAD_SKIP_PAYLOAD_CHECKSUMS;
  mp_load_register_kinds();
  mp_library_lock();
  status = load_fd(verified.fd, verified.id, resolved, settings, &verified, out_module);
  mp_library_unlock();
  mp_load_settings_free(settings);
  mp_verified_library_discard(&verified);
  return status;
}

/* Whether the file at |path| starts as a weight file does. */
static bool is_weight_file(const char* path) {
  int fd;
  mp_file_id_t id;
  if (mp_file_open(path, &fd, &id) != MP_OK) {
    mp_error_clear();
    return false;
  }
  uint8_t magic[8];
  bool weights = id.size >= sizeof magic && mp_file_read_at(fd, magic, sizeof magic, 0) &&
                 memcmp(magic, MP_WEIGHTS_MAGIC, sizeof magic) == 0;
  close(fd);
  return weights;
}

/* A weight file's signatures sign its content digest: when one by a trusted key holds, the
 * arrays must match their digests too for the file to be the one signed. */
static mp_status_t check_weight_file_signatures(const char* path, const mp_trusted_key_t* keys,
                                                uint64_t num_keys, mp_signature_info_t* infos,
                                                uint64_t capacity, uint64_t* out_count) {
  mp_weight_file_t* file;
  MP_RETURN_IF_ERROR(mp_weight_file_open(path, &file));
  bool trusted;
  mp_status_t status =
      mp_weight_file_signatures(file, keys, num_keys, infos, capacity, out_count, &trusted);
  if (status == MP_OK && trusted) status = mp_weight_file_check(file, MP_WEIGHTS_CHECK_DIGESTS);
  mp_weight_file_release(file);
  return status;
}

mp_status_t mp_signatures_check_file(const char* path, const mp_trusted_key_t* keys,
                                     uint64_t num_keys, mp_signature_info_t* out_infos,
                                     uint64_t capacity, uint64_t* out_count) {
  if (!path || !out_count || (num_keys > 0 && !keys))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_signatures_check_file: NULL argument");
  *out_count = 0;
  if (is_weight_file(path))
    return check_weight_file_signatures(path, keys, num_keys, out_infos, capacity, out_count);
  return mp_verified_library_check(path, keys, num_keys, out_infos, capacity, out_count);
}

/* A description made by export_library is well formed; anything else (a pointer to the wrong
 * thing, another version of the layout) is refused before use. */
static mp_status_t check_system_lib(const mp_system_lib_t* lib) {
  if (!lib)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "mp_module_load_system_lib: NULL library (pass modpack_system_lib_NAME())");
  if (lib->magic != MP_SYSTEM_LIB_MAGIC)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "mp_module_load_system_lib: not a system library description (magic %#x); "
                     "pass what modpack_system_lib_NAME() returns",
                     (unsigned)lib->magic);
  if (lib->version != MP_SYSTEM_LIB_VERSION)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "system library description version %u, this runtime reads version %d: "
                     "export it again with this modpack",
                     (unsigned)lib->version, MP_SYSTEM_LIB_VERSION);
  if (!lib->name || (lib->blob_size > 0 && !lib->blob) ||
      lib->num_symbols > MP_SYSTEM_LIB_MAX_SYMBOLS || (lib->num_symbols > 0 && !lib->symbols))
    return mp_errorf(MP_ERR_FORMAT, "system library '%s': its description is malformed",
                     lib->name ? lib->name : "(no name)");
  for (uint64_t i = 0; i < lib->num_symbols; ++i)
    if (!lib->symbols[i].name || !lib->symbols[i].address)
      return mp_errorf(MP_ERR_FORMAT, "system library '%s': symbol %" PRIu64 " is malformed",
                       lib->name, i);
  return MP_OK;
}

mp_status_t mp_module_load_system_lib(const mp_system_lib_t* lib, mp_module_t** out_module) {
  if (!out_module)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_module_load_system_lib: NULL out_module");
  *out_module = NULL;
  MP_RETURN_IF_ERROR(check_system_lib(lib));
  mp_load_register_kinds();
  mp_library_lock();
  mp_library_t* library;
  bool existing;
  mp_load_settings_t settings = {0};
  mp_status_t status = mp_library_open_system(lib, &library, &existing);
  if (status == MP_OK) {
    status = tree_of(library, existing, &settings, NULL, false, out_module);
    mp_library_release(library); /* the modules hold it now (or it goes, on failure) */
  }
  mp_library_unlock();
  return status;
}

mp_status_t mp_module_load_from_memory(const void* data, uint64_t size, uint32_t flags,
                                       mp_module_t** out_module) {
  mp_load_options_t options = {.struct_size = sizeof options, .flags = flags};
  return mp_module_load_memory(data, size, &options, out_module);
}

mp_status_t mp_module_load_memory(const void* data, uint64_t size, const mp_load_options_t* options,
                                  mp_module_t** out_module) {
  if (!out_module)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_module_load_memory: NULL out_module");
  *out_module = NULL;
  if (!data && size > 0)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_module_load_from_memory: NULL data");
  mp_load_settings_t settings;
  MP_RETURN_IF_ERROR(mp_load_settings_copy(options, 0, &settings));
  if (settings.num_keys > 0) {
    mp_load_settings_free(&settings);
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "signed loads read a file: write the library to a file and load that with "
                     "trusted keys");
  }
  int fd;
  mp_file_id_t id;
  mp_status_t copied = mp_file_from_memory(data, size, &fd, &id);
  if (copied != MP_OK) {
    mp_load_settings_free(&settings);
    return copied;
  }
  /* The name messages and mp_library_path give it: no path, so the size and the copy's inode
   * (which tells two loads of the same bytes apart). */
  char name[64];
  snprintf(name, sizeof name, "<library in memory: %" PRIu64 " bytes, copy %" PRIu64 ">", size,
           id.inode);
  mp_load_register_kinds();
  mp_library_lock();
  mp_status_t status = load_fd(fd, id, name, &settings, NULL, out_module);
  mp_library_unlock();
  mp_load_settings_free(&settings);
  return status;
}

mp_status_t mp_module_load_from_payload(const char* type_key, mp_const_byte_span_t payload,
                                        mp_module_t** out_module) {
  return mp_module_load_from_entry(type_key, payload, 0, out_module);
}

mp_status_t mp_module_load_from_entry(const char* type_key, mp_const_byte_span_t payload,
                                      uint32_t entry_flags, mp_module_t** out_module) {
  *out_module = NULL;
  if (!type_key)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_module_load_from_payload: NULL type key");
  mp_load_register_kinds();
  mp_loader_fn_t loader;
  void* user_data;
  MP_RETURN_IF_ERROR(mp_registry_find_loader(type_key, &loader, &user_data));
  const mp_kind_t* kind = mp_registry_find_kind(type_key);
  if ((entry_flags & ~(uint32_t)MP_FORMAT_KNOWN_ENTRY_FLAGS) ||
      ((entry_flags & MP_FORMAT_ENTRY_CODE_FRAMES) && (!kind || !kind->code_frames)))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "entry flags 0x%x for a %s payload (only the built-in device kinds store "
                     "code frames)",
                     entry_flags, type_key);
  mp_loader_args_t args = {
      .type_key = type_key, .payload = payload, .library = NULL, .entry_flags = entry_flags};
  mp_error_clear();
  mp_status_t status = loader(user_data, &args, out_module);
  if (status == MP_OK && !*out_module)
    return mp_errorf(MP_ERR_INTERNAL, "the %s loader returned no module", type_key);
  if (status != MP_OK && mp_error_message()[0] == '\0')
    mp_errorf(status, "the %s loader failed with status %d", type_key, (int)status);
  return status;
}

/* ---- the loader registry's public face ----------------------------------------------------- */

mp_status_t mp_loader_register(const char* type_key, mp_loader_fn_t fn, void* user_data) {
  mp_load_register_kinds(); /* so a user's key cannot take a built-in kind's, or "weights" */
  return mp_registry_add_loader(type_key, fn, user_data);
}

mp_status_t mp_loader_unregister(const char* type_key) {
  mp_load_register_kinds();
  return mp_registry_remove_loader(type_key);
}

uint64_t mp_loader_list(char* buffer, uint64_t capacity) {
  mp_load_register_kinds();
  return mp_registry_list_loaders(buffer, capacity);
}

const char* mp_kind_launch_tag(const char* type_key, uint32_t index) {
  if (!type_key) return NULL;
  mp_load_register_kinds();
  const mp_kind_t* kind = mp_registry_find_kind(type_key);
  return kind && index < kind->launch_tag_count ? kind->launch_tags[index] : NULL;
}

/* ---- weight files on their own ------------------------------------------------------------ */

mp_status_t mp_weights_load(const char* path, const mp_load_options_t* options,
                            mp_module_t** out_module) {
  if (!out_module) return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_weights_load: NULL out_module");
  *out_module = NULL;
  if (!path) return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_weights_load: NULL path");
  char resolved[PATH_MAX];
  MP_RETURN_IF_ERROR(resolve(path, resolved));
  mp_load_settings_t settings;
  MP_RETURN_IF_ERROR(mp_load_settings_copy(options, 0, &settings));
  mp_load_register_kinds();
  mp_status_t status = mp_weights_module_open(resolved, &settings, out_module);
  mp_load_settings_free(&settings);
  return status;
}
