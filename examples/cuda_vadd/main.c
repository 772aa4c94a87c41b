/* Runs the cuda_vadd deploy.so from C, with no Python: load the library (which needs no GPU),
 * describe its CUDA module, then — if a CUDA device is there — allocate device arrays through
 * the runtime's device API, call the host function `vadd_host` (which launches the CUDA kernel
 * through the module context), copy back and check every element.
 *
 *   ./cuda_vadd deploy.so
 *
 * Exit status: 0 when the result matches, 77 when the machine has no usable CUDA GPU (the
 * runtime's message says why), 1 on any other failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modpack/modpack.h"

#define N 4096
#define SKIPPED 77

static int fail(const char* what) {
  fprintf(stderr, "cuda_vadd (C): %s failed: %s\n", what, mp_error_message());
  return 1;
}

/* The loaded CUDA module among the root's imports, or NULL. */
static mp_module_t* find_cuda_module(mp_module_t* root) {
  for (uint64_t i = 0; i < mp_module_import_count(root); ++i) {
    mp_module_t* m = mp_module_import_at(root, i);
    if (strcmp(mp_module_type_key(m), "cuda") == 0) return m;
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s deploy.so\n", argv[0]);
    return 2;
  }
  mp_module_t* root = NULL;
  if (mp_module_load_from_file(argv[1], 0, &root) != MP_OK) return fail("loading");
  mp_module_t* cuda = find_cuda_module(root);
  if (!cuda) {
    fprintf(stderr, "cuda_vadd (C): %s has no cuda module\n", argv[1]);
    return 1;
  }
  static char description[16384];
  if (mp_module_describe(cuda, description, sizeof description, NULL) != MP_OK)
    return fail("describe");
  printf("loaded %s; cuda module: %s\n", argv[1], description);

  int32_t count = 0;
  if (mp_device_count(kDLCUDA, &count) != MP_OK || count == 0) {
    printf("cuda_vadd (C): cannot launch here: %s\n",
           count == 0 && mp_error_message()[0] == '\0' ? "no CUDA device" : mp_error_message());
    mp_module_release(root);
    return SKIPPED;
  }
  DLDevice gpu = {kDLCUDA, 0}, cpu = {kDLCPU, 0};
  char name[256];
  if (mp_device_name(gpu, name, sizeof name) == MP_OK) printf("device: %s\n", name);

  static float a[N], b[N], out[N];
  for (int i = 0; i < N; ++i) {
    a[i] = (float)i * 0.5f;
    b[i] = 1.0f - (float)i;
    out[i] = -1.0f;
  }
  int64_t shape[1] = {N};
  DLDataType f32 = {kDLFloat, 32, 1};
  DLTensor host_a = {a, cpu, 1, f32, shape, NULL, 0};
  DLTensor host_b = {b, cpu, 1, f32, shape, NULL, 0};
  DLTensor host_out = {out, cpu, 1, f32, shape, NULL, 0};
  DLTensor *dev_a = NULL, *dev_b = NULL, *dev_out = NULL;
  if (mp_array_empty(shape, 1, f32, gpu, &dev_a) != MP_OK ||
      mp_array_empty(shape, 1, f32, gpu, &dev_b) != MP_OK ||
      mp_array_empty(shape, 1, f32, gpu, &dev_out) != MP_OK)
    return fail("allocating CUDA arrays");
  if (mp_array_copy(&host_a, dev_a) != MP_OK || mp_array_copy(&host_b, dev_b) != MP_OK)
    return fail("copying inputs to the GPU");

  mp_function_t* vadd_host = NULL;
  if (mp_module_get_function(root, "vadd_host", 0, &vadd_host) != MP_OK) return fail("lookup");
  mp_value_t args[3] = {mp_tensor(dev_a), mp_tensor(dev_b), mp_tensor(dev_out)};
  mp_value_t ret;
  if (mp_function_call(vadd_host, args, 3, &ret) != MP_OK) return fail("vadd_host");
  if (mp_array_copy(dev_out, &host_out) != MP_OK) return fail("copying the result back");
  for (int i = 0; i < N; ++i) {
    if (out[i] != a[i] + b[i]) {
      fprintf(stderr, "cuda_vadd (C): out[%d] = %g, expected %g\n", i, out[i], a[i] + b[i]);
      return 1;
    }
  }
  printf("cuda_vadd (C): OK, %d elements match\n", N);
  mp_function_release(vadd_host);
  mp_array_release(dev_a);
  mp_array_release(dev_b);
  mp_array_release(dev_out);
  mp_module_release(root);
  return 0;
}
