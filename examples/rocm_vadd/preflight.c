/* rocm_vadd from C: which code object each device named on the command line would get from the
 * library, through the runtime's public mp_preflight (modpack/modpack.h). Nothing of the library
 * is mapped or run, so this works on any machine.
 *
 *   rocm_vadd_preflight deploy.so rocm:gfx90a:sramecc+:xnack- rocm:gfx1100
 *
 * Prints each answer as JSON, then "fits"/"does not fit" and the bytes read; exits 0 when every
 * device gets code, 1 when one does not, 2 for a bad DEVICE or file. */
#include <stdio.h>
#include <stdlib.h>

#include "modpack/modpack.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s LIBRARY DEVICE...\n", argv[0]);
    return 2;
  }
  int status = 0;
  for (int i = 2; i < argc; ++i) {
    mp_preflight_result_t result = {.struct_size = sizeof result};
    uint64_t needed = 0;
    char* json = malloc(1 << 16);
    if (!json) return 2;
    if (mp_preflight(argv[1], argv[i], json, 1 << 16, &needed, &result) != MP_OK) {
      fprintf(stderr, "rocm_vadd_preflight: %s: %s\n", argv[i], mp_error_message());
      free(json);
      return 2;
    }
    printf("%s\n%s: %s (read %llu bytes in %llu reads)\n", json, argv[i],
           result.fits ? "fits" : "does not fit", (unsigned long long)result.bytes_read,
           (unsigned long long)result.reads);
    if (!result.fits) status = 1;
    free(json);
  }
  return status;
}
