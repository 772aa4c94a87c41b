/* The "weights" kind (library/weights_kind.c): its descriptor, registered by the load layer with
 * the built-in kinds, and a weight file opened on its own as a module. */
#ifndef MODPACK_LIBRARY_WEIGHTS_KIND_H_
#define MODPACK_LIBRARY_WEIGHTS_KIND_H_

#include "core/registry.h"
#include "library/load_settings.h"
#include "modpack/kinds/weights.h"
#include "weights/weight_file.h"

extern const mp_kind_t mp_weights_kind;

/* The weight file at |path| (resolved) as a module handing out all its arrays, opened and
 * checked as |settings| say. */
mp_status_t mp_weights_module_open(const char* path, const mp_load_settings_t* settings,
                                   mp_module_t** out_module);

/* Whether |module| is a weights module (loaded, with a file). */
bool mp_weights_module_owns(mp_module_t* module);
/* |array| (one of weights module |module|'s, from the file the caller reads) on |device|:
 * copied once per file, so a swap's new file is copied anew and an old file's copies go with
 * it. */
mp_status_t mp_weights_module_array_on(mp_module_t* module, const DLTensor* array,
                                       DLDevice device, const DLTensor** out_array);

/* Weight files held open for a while. */
typedef struct {
  mp_weight_file_t** files;
  uint64_t count;
} mp_weight_files_t;
void mp_weight_files_release(mp_weight_files_t* files);

/* Before the sealed library at |library_path| (open as |fd|, its blob where the checked |seal|
 * says) is mapped: every weight file its blob refers to found as |settings| say, checked and
 * held in |held| (until the tree is built), so that a missing or different file is refused
 * before any of its code (constructors included) runs, and the loader finds the same files
 * open and checked after dlopen. */
mp_status_t mp_weights_precheck(int fd, const mp_seal_v1_t* seal, const char* library_path,
                                const mp_load_settings_t* settings, mp_weight_files_t* held);

#endif /* MODPACK_LIBRARY_WEIGHTS_KIND_H_ */
