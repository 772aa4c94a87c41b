/* A stand-in libcuda.so.1 for the tests (the conftest fixture `stub_driver` builds it): the
 * driver's error paths, and what the runtime asks of the driver. It never runs anything.
 *
 * cuInit reports $STUB_CUINIT_RESULT (default 100, CUDA_ERROR_NO_DEVICE): a driver without
 * devices, or with 34 the toolkit's stub library. With 0 it has one device of compute
 * capability $STUB_CC that refuses every module image — cubins and fatbins with
 * $STUB_SASS_RESULT (default 209, CUDA_ERROR_NO_BINARY_FOR_GPU), PTX with $STUB_PTX_RESULT
 * (default 222, CUDA_ERROR_UNSUPPORTED_PTX_VERSION) — logging each image it is offered to
 * $STUB_LOG. It has no memory (801, CUDA_ERROR_NOT_SUPPORTED), and a launch aborts.
 *
 * With $STUB_ACCEPT=1 it accepts every image instead and logs each function looked up and
 * each launch (grid, block, shared memory and the first $STUB_PARAMS parameters).
 *
 * Its linker (cuLinkCreate_v2, cuLinkAddData_v2, cuLinkComplete, cuLinkDestroy) takes PTX
 * ("link ptx TARGET", refused with $STUB_PTX_RESULT unless accepting) and makes a fake cubin:
 * an ELF header for the device's SM followed by "stub cubin from ptx TARGET, fnv1a HASH" (the
 * hash of the PTX's bytes), logged as "linked cubin sm_XY from ptx TARGET". Loading that cubin
 * logs "cubin sm_XY linked from ptx TARGET": what was linked, and what a kernel cache stored and
 * loaded, tell apart in the log. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef int CUresult;
static int env(const char* name, int fallback) {
  const char* s = getenv(name);
  return s ? atoi(s) : fallback;
}
static CUresult result(void) { return env("STUB_CUINIT_RESULT", 100); }
/* With $STUB_ACCEPT=1 images load, and functions and launches are logged instead. */
static int accepting(void) { return env("STUB_ACCEPT", 0); }
static void log_line(const char* text) {
  FILE* log = getenv("STUB_LOG") ? fopen(getenv("STUB_LOG"), "a") : NULL;
  if (log) fputs(text, log), fclose(log);
}
CUresult cuInit(unsigned int flags) { (void)flags; return result(); }
CUresult cuDriverGetVersion(int* version) { *version = 12040; return 0; }
CUresult cuDeviceGetCount(int* count) { *count = result() == 0; return result(); }
CUresult cuGetErrorName(CUresult e, const char** s) {
  *s = e == 100 ? "CUDA_ERROR_NO_DEVICE" : e == 34 ? "CUDA_ERROR_STUB_LIBRARY"
     : e == 209 ? "CUDA_ERROR_NO_BINARY_FOR_GPU" : e == 222 ? "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"
     : e == 801 ? "CUDA_ERROR_NOT_SUPPORTED" : "CUDA_ERROR_X";
  return 0;
}
CUresult cuGetErrorString(CUresult e, const char** s) {
  *s = e == 100 ? "no CUDA-capable device is detected" : "stub";
  return 0;
}
CUresult cuDeviceGet(int* device, int ordinal) { *device = ordinal; return 0; }
CUresult cuDeviceGetAttribute(int* value, int attribute, int device) {
  (void)device;
  const char* cc = getenv("STUB_CC");
  int major = 9, minor = 0;
  if (cc) sscanf(cc, "%d.%d", &major, &minor);
  *value = attribute == 75 ? major : attribute == 76 ? minor : 0;
  return 0;
}
CUresult cuDeviceGetName(char* name, int length, int device) {
  (void)device;
  snprintf(name, (size_t)length, "Stub GPU");
  return 0;
}
static int context_token;
static void* current;
CUresult cuDevicePrimaryCtxRetain(void** context, int device) {
  (void)device;
  *context = &context_token;
  return 0;
}
CUresult cuCtxSetCurrent(void* context) { current = context; return 0; }
CUresult cuCtxGetCurrent(void** context) { *context = current; return 0; }
CUresult cuCtxGetDevice(int* device) { *device = 0; return current ? 0 : 201; }
CUresult cuCtxSynchronize(void) { return 0; }
CUresult cuMemAlloc_v2(unsigned long long* p, size_t n) { (void)p; (void)n; return 801; }
CUresult cuMemFree_v2(unsigned long long p) { (void)p; return 801; }
CUresult cuMemcpyHtoD_v2(unsigned long long d, const void* h, size_t n) {
  (void)d; (void)h; (void)n; return 801;
}
CUresult cuMemcpyDtoH_v2(void* h, unsigned long long d, size_t n) {
  (void)d; (void)h; (void)n; return 801;
}
CUresult cuMemcpyDtoD_v2(unsigned long long d, unsigned long long s, size_t n) {
  (void)d; (void)s; (void)n; return 801;
}
/* A fake cubin (from the linker): 64 bytes of ELF header, then this text. */
static const char stub_cubin_text[] = "stub cubin from ptx ";
enum { STUB_ELF_HEADER = 64 };
CUresult cuModuleLoadData(void** module, const void* image) {
  const unsigned char* bytes = image;
  FILE* log = getenv("STUB_LOG") ? fopen(getenv("STUB_LOG"), "a") : NULL;
  CUresult r;
  if (memcmp(bytes, "\x7f" "ELF", 4) == 0) {
    /* The SM number: e_flags byte 1 from ELF ABI version 8 on, byte 0 before. */
    const char* text = (const char*)bytes + STUB_ELF_HEADER;
    int fake = strncmp(text, stub_cubin_text, sizeof stub_cubin_text - 1) == 0;
    if (log) fprintf(log, "cubin sm_%u%s%.*s\n", (unsigned)(bytes[8] >= 8 ? bytes[49] : bytes[48]),
                     fake ? " linked from ptx " : "",
                     fake ? (int)strcspn(text + sizeof stub_cubin_text - 1, ",") : 0,
                     fake ? text + sizeof stub_cubin_text - 1 : "");
    r = env("STUB_SASS_RESULT", 209);
  } else if (memcmp(bytes, "\x50\xed\x55\xba", 4) == 0) {
    if (log) fprintf(log, "fatbin\n");
    r = env("STUB_SASS_RESULT", 209);
  } else {
    const char* target = strstr(image, ".target ");
    if (log) fprintf(log, "ptx %.*s\n", target ? (int)strcspn(target + 8, "\n") : 0,
                     target ? target + 8 : "");
    r = env("STUB_PTX_RESULT", 222);
  }
  if (log) fclose(log);
  *module = accepting() ? (void*)&context_token : NULL;
  return accepting() ? 0 : r;
}
CUresult cuModuleUnload(void* module) { (void)module; return 0; }
/* The linker: one PTX input, a fake cubin out. */
typedef struct {
  char target[64];
  unsigned long long hash;
  int added;
  unsigned char* cubin;
} link_t;
CUresult cuLinkCreate_v2(unsigned n, int* options, void** values, void** state) {
  (void)n; (void)options; (void)values;
  *state = calloc(1, sizeof(link_t));
  return *state ? 0 : 2;
}
CUresult cuLinkAddData_v2(void* state, int type, void* data, size_t size, const char* name,
                          unsigned n, int* options, void** values) {
  (void)name; (void)n; (void)options; (void)values;
  link_t* link = state;
  if (type != 1) return 1; /* CU_JIT_INPUT_PTX only */
  const char* target = strstr(data, ".target ");
  snprintf(link->target, sizeof link->target, "%.*s",
           target ? (int)strcspn(target + 8, "\n") : 0, target ? target + 8 : "");
  char line[128];
  snprintf(line, sizeof line, "link ptx %s\n", link->target);
  log_line(line);
  if (!accepting()) return env("STUB_PTX_RESULT", 222);
  link->hash = 14695981039346656037ull;
  for (size_t i = 0; i < size; ++i)
    link->hash = (link->hash ^ ((unsigned char*)data)[i]) * 1099511628211ull;
  link->added = 1;
  return 0;
}
CUresult cuLinkComplete(void* state, void** cubin, size_t* size) {
  link_t* link = state;
  if (!link->added) return 1;
  const char* cc = getenv("STUB_CC");
  int major = 9, minor = 0;
  if (cc) sscanf(cc, "%d.%d", &major, &minor);
  char text[160];
  int n = snprintf(text, sizeof text, "%s%s, fnv1a %016llx", stub_cubin_text, link->target,
                   link->hash);
  link->cubin = calloc(1, STUB_ELF_HEADER + (size_t)n + 1);
  if (!link->cubin) return 2;
  memcpy(link->cubin, "\x7f" "ELF", 4);
  link->cubin[8] = 8; /* ELF ABI version 8: the SM in e_flags byte 1 */
  link->cubin[49] = (unsigned char)(major * 10 + minor);
  memcpy(link->cubin + STUB_ELF_HEADER, text, (size_t)n + 1);
  *cubin = link->cubin;
  *size = STUB_ELF_HEADER + (size_t)n + 1;
  char line[128];
  snprintf(line, sizeof line, "linked cubin sm_%d%d from ptx %s\n", major, minor, link->target);
  log_line(line);
  return 0;
}
CUresult cuLinkDestroy(void* state) {
  link_t* link = state;
  free(link->cubin);
  free(link);
  return 0;
}
CUresult cuModuleGetFunction(void** f, void* m, const char* n) {
  (void)m;
  if (!accepting()) return 500;
  char line[1200];
  snprintf(line, sizeof line, "function %s\n", n);
  log_line(line);
  *f = &context_token;
  return 0;
}
CUresult cuFuncSetAttribute(void* f, int a, int v) { (void)f; (void)a; (void)v; return 0; }
CUresult cuLaunchKernel(void* f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e,
                        unsigned g, unsigned h, void* s, void** p, void** x) {
  (void)f; (void)s; (void)x;
  if (!accepting()) abort(); /* modules never load, so nothing can be launched */
  /* Each parameter as 8 bytes (the runtime keeps each in an 8-byte slot). */
  char line[512];
  int n = snprintf(line, sizeof line, "launch grid %u %u %u block %u %u %u shared %u params",
                   a, b, c, d, e, g, h);
  for (int i = 0; i < env("STUB_PARAMS", 0); ++i) {
    long long v;
    memcpy(&v, p[i], sizeof v);
    n += snprintf(line + n, sizeof line - (size_t)n, " %lld", v);
  }
  snprintf(line + n, sizeof line - (size_t)n, "\n");
  log_line(line);
  return 0;
}
