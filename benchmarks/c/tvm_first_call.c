/* tvm_first_call: the TVM counterpart of first_call.c, through the tvm-ffi C API only
 * (libtvm_ffi.so; a TVM LLVM host library needs nothing else).
 *
 *   tvm_first_call LIB.so scalar|array [ITERATIONS]
 *
 * Loads with the global "ffi.ModuleLoadFromFile", looks up with "ffi.ModuleGetFunction"
 * (query_imports = true) and calls with TVMFFIFunctionCall, as tvm-ffi's stable C ABI example
 * does; prints one JSON line with the same fields as first_call.c. */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tvm/ffi/c_api.h"

enum { N = 1024 };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char* what) {
  fprintf(stderr, "tvm_first_call: %s failed\n", what);
  return 1;
}

static int get_global(const char* name, TVMFFIObjectHandle* out) {
  TVMFFIByteArray bytes = {name, strlen(name)};
  return TVMFFIFunctionGetGlobal(&bytes, out) != 0 || *out == NULL;
}

static TVMFFIAny none(void) {
  TVMFFIAny a;
  memset(&a, 0, sizeof a);
  a.type_index = kTVMFFINone;
  return a;
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

  TVMFFIAny args[3];
  memset(args, 0, sizeof args);
  int32_t num_args;
  if (scalar) {
    args[0].type_index = kTVMFFIInt;
    args[0].v_int64 = 41;
    num_args = 1;
  } else {
    args[0].type_index = kTVMFFIDLTensorPtr;
    args[0].v_ptr = &tx;
    args[1].type_index = kTVMFFIDLTensorPtr;
    args[1].v_ptr = &tout;
    num_args = 2;
  }

  TVMFFIObjectHandle load = NULL, get_function = NULL;
  if (get_global("ffi.ModuleLoadFromFile", &load)) return fail("finding ffi.ModuleLoadFromFile");
  if (get_global("ffi.ModuleGetFunction", &get_function))
    return fail("finding ffi.ModuleGetFunction");

  double t0 = now_s();
  TVMFFIAny call[3];
  memset(call, 0, sizeof call);
  call[0].type_index = kTVMFFIRawStr;
  call[0].v_c_str = argv[1];
  TVMFFIAny mod = none();
  if (TVMFFIFunctionCall(load, call, 1, &mod) != 0) return fail("load");
  double t1 = now_s();
  memset(call, 0, sizeof call);
  call[0] = mod;
  call[1].type_index = kTVMFFIRawStr;
  call[1].v_c_str = scalar ? "add_one_scalar" : "add_one";
  call[2].type_index = kTVMFFIBool;
  call[2].v_int64 = 1;
  TVMFFIAny fn = none();
  if (TVMFFIFunctionCall(get_function, call, 3, &fn) != 0 || fn.type_index < kTVMFFIStaticObjectBegin)
    return fail("lookup");
  double t2 = now_s();
  TVMFFIAny ret = none();
  if (TVMFFIFunctionCall(fn.v_obj, args, num_args, &ret) != 0) return fail("first call");
  double t3 = now_s();
  int ok = scalar ? (ret.type_index == kTVMFFIInt && ret.v_int64 == 42) : (out[N - 1] == N);

  double t4 = now_s();
  for (long i = 0; i < iterations; ++i) {
    ret = none();
    if (TVMFFIFunctionCall(fn.v_obj, args, num_args, &ret) != 0) return fail("call");
  }
  double t5 = now_s();

  printf("{\"load_s\": %.9g, \"lookup_s\": %.9g, \"first_call_s\": %.9g, "
         "\"lookup_and_first_call_s\": %.9g, \"steady_call_s\": %.9g, \"ok\": %s}\n",
         t1 - t0, t2 - t1, t3 - t2, t3 - t1, (t5 - t4) / (double)iterations,
         ok ? "true" : "false");
  TVMFFIObjectDecRef(fn.v_obj);
  TVMFFIObjectDecRef(mod.v_obj);
  TVMFFIObjectDecRef(get_function);
  TVMFFIObjectDecRef(load);
  return ok ? 0 : 1;
}
