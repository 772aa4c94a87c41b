/* What a loaded library's blob carries besides its modules (format 1.2): its metadata and its
 * self-tests, handed out as views into the blob, which lives in the library's mapping as long
 * as any module of it does (library/library.h, mp_module_metadata in modpack.h).
 *
 * Why kept at load: the blob is parsed once, while the tree is built, and is not at hand
 * afterwards; the two views are all that is kept of it. */
#include "core/module.h"
#include "library/library.h"
#include "library/library_state.h"

void mp_library_keep_extras(mp_library_t* library, const mp_blob_t* blob) {
  if (library->extras_known) return; /* read by now, perhaps on another thread: never rewritten */
  mp_blob_metadata(blob, &library->metadata);
  mp_blob_selftests(blob, &library->selftests);
  library->extras_known = true;
}

static mp_const_byte_span_t no_bytes(void) {
  return (mp_const_byte_span_t){NULL, 0};
}

void mp_module_metadata(const mp_module_t* module, mp_const_byte_span_t* out_metadata) {
  const mp_library_t* library = module ? mp_module_library(module) : NULL;
  *out_metadata = library ? library->metadata : no_bytes();
}

void mp_module_selftests(const mp_module_t* module, mp_const_byte_span_t* out_selftests) {
  const mp_library_t* library = module ? mp_module_library(module) : NULL;
  *out_selftests = library ? library->selftests : no_bytes();
}
