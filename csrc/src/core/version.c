/* The runtime's version, from the one place it is written (modpack/modpack.h). */
#include "modpack/modpack.h"

void mp_get_version(mp_version_t* out_version) {
  out_version->major = MP_VERSION_MAJOR;
  out_version->minor = MP_VERSION_MINOR;
  out_version->patch = MP_VERSION_PATCH;
}
