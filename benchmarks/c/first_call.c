/* first_call: load a modpack library from C and time the first call of a host function.
 *
 *   first_call LIB.so scalar|array [ITERATIONS]
 *
 * Times (CLOCK_MONOTONIC) mp_module_load_from_file, mp_module_get_function, the first
 * mp_function_call, and the mean of ITERATIONS further calls; prints one JSON line.
 * "scalar" calls add_one_scalar(41) (expects 42); "array" calls add_one(x, out) on 1024
 * float32 values. */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "modpack/modpack.h"

enum { N = 1024 };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char* what) {
  fprintf(stderr, "first_call: %s failed: %s\n", what, mp_error_message());
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 3 || (strcmp(argv[2], "scalar") != 0 && strcmp(argv[2], "array") != 0)) {
    fprintf(stderr, "usage: %s LIB.so scalar|array [ITERATIONS]\n", argv[0]);
    return 2;
  }
  int scalar = strcmp(argv[2], "scalar") == 0;
  long iterations = argc > 3 ? atol(argv[3]) : 100000;
  if (iterations < 1) iterations = 1;

  /* out does not start a multiple of 4 KiB after x: a loop storing out[i] after loading x[i]
   * would otherwise stall on the CPU's 4 KiB address aliasing, and the array rows would time
   * where the program's arrays happen to land rather than the call (the same in both programs). */
  static float storage[2 * N + 512];
  float* x = storage;
  float* out = storage + N + 512; /* 2 KiB further: half a page apart */
  for (int i = 0; i < N; ++i) x[i] = (float)i;
  int64_t shape[1] = {N};
  DLTensor tx, tout;
  memset(&tx, 0, sizeof tx);
  tx.data = x;
  tx.device.device_type = kDLCPU;
  tx.ndim = 1;
  tx.dtype.code = kDLFloat;
  tx.dtype.bits = 32;
  tx.dtype.lanes = 1;
  tx.shape = shape;
  tout = tx;
  tout.data = out;

  mp_value_t args[2];
  memset(args, 0, sizeof args);
  int32_t num_args;
  if (scalar) {
    args[0].type_code = MP_TYPE_INT;
    args[0].v_int64 = 41;
    num_args = 1;
  } else {
    args[0].type_code = MP_TYPE_DLTENSOR;
    args[0].v_tensor = &tx;
    args[1].type_code = MP_TYPE_DLTENSOR;
    args[1].v_tensor = &tout;
    num_args = 2;
  }

  double t0 = now_s();
  mp_module_t* root = NULL;
  if (mp_module_load_from_file(argv[1], 0, &root) != MP_OK) return fail("load");
  double t1 = now_s();
  mp_function_t* fn = NULL;
  if (mp_module_get_function(root, scalar ? "add_one_scalar" : "add_one", 1, &fn) != MP_OK)
    return fail("lookup");
  double t2 = now_s();
  mp_value_t ret;
  if (mp_function_call(fn, args, num_args, &ret) != MP_OK) return fail("first call");
  double t3 = now_s();
  int ok = scalar ? (ret.type_code == MP_TYPE_INT && ret.v_int64 == 42) : (out[N - 1] == N);

  double t4 = now_s();
  for (long i = 0; i < iterations; ++i) {
    if (mp_function_call(fn, args, num_args, &ret) != MP_OK) return fail("call");
  }
  double t5 = now_s();

  printf("{\"load_s\": %.9g, \"lookup_s\": %.9g, \"first_call_s\": %.9g, "
         "\"lookup_and_first_call_s\": %.9g, \"steady_call_s\": %.9g, \"ok\": %s}\n",
         t1 - t0, t2 - t1, t3 - t2, t3 - t1, (t5 - t4) / (double)iterations,
         ok ? "true" : "false");
  mp_function_release(fn);
  mp_module_release(root);
  return ok ? 0 : 1;
}
