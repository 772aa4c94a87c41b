/* How a library or a weight file was asked to be loaded (mp_load_options_t, modpack.h), kept
 * as an owned copy: the flags, the trusted keys and where weight files are, which the weights
 * kind needs when it builds its modules and when their weights are swapped later. */
#ifndef MODPACK_LIBRARY_LOAD_SETTINGS_H_
#define MODPACK_LIBRARY_LOAD_SETTINGS_H_

#include <stdbool.h>
#include <stdint.h>

#include "modpack/modpack.h"

enum { MP_MAX_TRUSTED_KEYS = 16 };

typedef struct {
  uint32_t flags; /* MP_LOAD_* */
  mp_trusted_key_t keys[MP_MAX_TRUSTED_KEYS];
  uint64_t num_keys; /* > 0: a signed load */
  mp_weights_location_t* weights; /* owned copies */
  uint64_t num_weights;
  char* weights_folder; /* owned; NULL: beside the library */
  char** overlays;      /* owned copies of the overlays' paths (library/overlays.h) */
  uint64_t num_overlays;
} mp_load_settings_t;

/* Copy |options| (NULL: none) into |out|, with |flags| added to its flags; checks the struct
 * and its counts, and refuses the flags of signed loads (MP_LOAD_PRIVATE_COPY,
 * MP_LOAD_VERIFY_ON_FIRST_USE) without trusted keys. */
mp_status_t mp_load_settings_copy(const mp_load_options_t* options, uint32_t flags,
                                  mp_load_settings_t* out);
void mp_load_settings_free(mp_load_settings_t* settings);

/* The path the settings give for the weight file the library records as |file_name| (one
 * given without a name matches any), or NULL. */
const char* mp_load_settings_weights_path(const mp_load_settings_t* settings,
                                          const char* file_name);

/* Whether the settings give a weight file by name (mp_weights_location_t.file_name). */
bool mp_load_settings_names_files(const mp_load_settings_t* settings);

/* Every weight file the settings give by name is one of the |count| |names| the library at
 * |library_path| records: else MP_ERR_INVALID_ARGUMENT naming it, listing |names| and the one
 * it was most likely meant as (a misspelt name would be ignored, the file it was meant for
 * looked for beside the library). */
mp_status_t mp_load_settings_check_names(const mp_load_settings_t* settings,
                                         const char* library_path, const char* const* names,
                                         uint64_t count);

#endif /* MODPACK_LIBRARY_LOAD_SETTINGS_H_ */
