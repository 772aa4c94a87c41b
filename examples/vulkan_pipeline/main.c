/* Runs the Vulkan pipeline of deploy.so from C, with no Python: allocate Vulkan arrays through
 * the runtime's device API, call the host function, copy back and check every element against
 * the weights read from the library. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "modpack/modpack.h"

#define N 4096

static int fail(const char* what) {
  fprintf(stderr, "vulkan_pipeline (C): %s failed: %s\n", what, mp_error_message());
  return 1;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s deploy.so\n", argv[0]);
    return 2;
  }
  mp_module_t* root = NULL;
  if (mp_module_load_from_file(argv[1], 0, &root) != MP_OK) return fail("loading");

  static float a[N], b[N], out[N];
  for (int i = 0; i < N; ++i) {
    a[i] = (float)i * 0.25f;
    b[i] = 1.0f - (float)i * 0.5f;
  }
  int64_t shape[1] = {N};
  DLDataType f32 = {kDLFloat, 32, 1};
  DLDevice cpu = {kDLCPU, 0}, gpu = {kDLVulkan, 0};
  DLTensor host_a = {a, cpu, 1, f32, shape, NULL, 0};
  DLTensor host_b = {b, cpu, 1, f32, shape, NULL, 0};
  DLTensor host_out = {out, cpu, 1, f32, shape, NULL, 0};
  DLTensor *dev_a = NULL, *dev_b = NULL, *dev_out = NULL;
  if (mp_array_empty(shape, 1, f32, gpu, &dev_a) != MP_OK ||
      mp_array_empty(shape, 1, f32, gpu, &dev_b) != MP_OK ||
      mp_array_empty(shape, 1, f32, gpu, &dev_out) != MP_OK)
    return fail("allocating Vulkan arrays");
  if (mp_array_copy(&host_a, dev_a) != MP_OK || mp_array_copy(&host_b, dev_b) != MP_OK)
    return fail("copying inputs to the device");

  mp_function_t* pipeline = NULL;
  if (mp_module_get_function(root, "pipeline", 0, &pipeline) != MP_OK) return fail("lookup");
  mp_value_t args[3] = {mp_tensor(dev_a), mp_tensor(dev_b), mp_tensor(dev_out)};
  mp_value_t ret;
  double t0 = now();
  if (mp_function_call(pipeline, args, 3, &ret) != MP_OK) return fail("pipeline");
  double first = now() - t0;
  t0 = now();
  for (int r = 0; r < 20; ++r)
    if (mp_function_call(pipeline, args, 3, &ret) != MP_OK) return fail("pipeline");
  double steady = (now() - t0) / 20;
  if (mp_array_copy(dev_out, &host_out) != MP_OK) return fail("copying the result back");

  const DLTensor *scale = NULL, *w = NULL;
  if (mp_module_get_array(root, "scale", 1, &scale) != MP_OK ||
      mp_module_get_array(root, "w", 1, &w) != MP_OK)
    return fail("finding the weights");
  float factor = ((const float*)scale->data)[0];
  const float* weights = w->data;
  for (int i = 0; i < N; ++i) {
    float expected = (a[i] * factor + b[i]) * weights[i];
    if (fabsf(out[i] - expected) > 1e-4f * (1.0f + fabsf(expected))) {
      fprintf(stderr, "vulkan_pipeline (C): out[%d] = %g, expected %g\n", i, out[i], expected);
      return 1;
    }
  }
  char device[256];
  mp_device_name(gpu, device, sizeof device);
  printf("device: %s\n", device);
  printf("first call %.1f ms, then %.3f ms a call\n", first * 1e3, steady * 1e3);
  printf("vulkan_pipeline (C): OK, %d elements match\n", N);
  mp_function_release(pipeline);
  mp_array_release(dev_a);
  mp_array_release(dev_b);
  mp_array_release(dev_out);
  mp_module_release(root);
  return 0;
}
