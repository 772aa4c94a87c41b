/* A stand-in libamdhip64.so for the tests (the conftest fixture `stub_hip` builds it): the HIP
 * runtime's error paths, and what modpack asks of it. It never runs a kernel.
 *
 * hipInit reports $STUB_HIPINIT_RESULT (default 100, hipErrorNoDevice). With 0 it has one device
 * per comma-separated target ID in $STUB_TARGETS (default "gfx90a:sramecc+:xnack-"), reported
 * through hipGetDevicePropertiesR0600 (gcnArchName at byte 1160, as HIP 6 lays it out).
 *
 * Memory is host memory (hipMalloc is malloc; copies are memcpy), so device arrays can be
 * made, filled and read back. Each allocation is logged to $STUB_LOG ("malloc 0x... N").
 * hipModuleLoadData logs the target ID the code object's metadata names ("load gfx90a:xnack-")
 * and refuses it (hipErrorNoBinaryForGpu) when it is in $STUB_REFUSE (comma-separated);
 * hipModuleGetFunction logs the name; hipModuleLaunchKernel logs the grid, block, LDS bytes,
 * stream, and the argument buffer (HIP_LAUNCH_PARAM_BUFFER_POINTER) byte for byte in hex, as
 * many bytes as HIP_LAUNCH_PARAM_BUFFER_SIZE says. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int hipError_t;

static int env(const char* name, int fallback) {
  const char* s = getenv(name);
  return s ? atoi(s) : fallback;
}
static hipError_t result(void) { return env("STUB_HIPINIT_RESULT", 100); }
static void log_line(const char* text) {
  FILE* log = getenv("STUB_LOG") ? fopen(getenv("STUB_LOG"), "a") : NULL;
  if (log) fputs(text, log), fclose(log);
}
static const char* targets(void) {
  const char* t = getenv("STUB_TARGETS");
  return t && *t ? t : "gfx90a:sramecc+:xnack-";
}
/* Target |index| of $STUB_TARGETS into |out|; the number of targets when |index| < 0. */
static int target_at(int index, char* out, size_t capacity) {
  const char* p = targets();
  for (int i = 0;; ++i) {
    size_t n = strcspn(p, ",");
    if (i == index) {
      snprintf(out, capacity, "%.*s", (int)n, p);
      return 1;
    }
    if (!p[n]) return i + 1;
    p += n + 1;
  }
}

hipError_t hipInit(unsigned int flags) { (void)flags; return result(); }
hipError_t hipDriverGetVersion(int* version) { *version = 60241134; return 0; }
const char* hipGetErrorName(hipError_t e) {
  return e == 100 ? "hipErrorNoDevice" : e == 209 ? "hipErrorNoBinaryForGpu"
       : e == 35 ? "hipErrorInsufficientDriver" : "hipErrorUnknown";
}
const char* hipGetErrorString(hipError_t e) {
  return e == 100 ? "no ROCm-capable device is detected" : "stub";
}
hipError_t hipGetDeviceCount(int* count) {
  *count = result() == 0 ? target_at(-1, NULL, 0) : 0;
  return result();
}
hipError_t hipGetDevicePropertiesR0600(void* properties, int device) {
  char* p = properties;
  snprintf(p, 256, "Stub AMD GPU");
  target_at(device, p + 1160, 256);
  return 0;
}
static int current_device;
hipError_t hipSetDevice(int device) { current_device = device; return 0; }
hipError_t hipGetDevice(int* device) { *device = current_device; return 0; }
hipError_t hipMalloc(void** pointer, size_t nbytes) {
  *pointer = calloc(1, nbytes);
  char line[96];
  snprintf(line, sizeof line, "malloc %p %zu\n", *pointer, nbytes);
  log_line(line);
  return *pointer ? 0 : 2;
}
hipError_t hipFree(void* pointer) { free(pointer); return 0; }
hipError_t hipMemcpy(void* to, const void* from, size_t nbytes, int kind) {
  (void)kind;
  memcpy(to, from, nbytes);
  return 0;
}
hipError_t hipDeviceSynchronize(void) { return 0; }

static int module_token;
hipError_t hipModuleLoadData(void** module, const void* image) {
  const unsigned char* elf = image;
  /* The file ends with the section headers: e_shoff + e_shnum * e_shentsize. */
  uint64_t shoff;
  uint16_t shentsize, shnum;
  memcpy(&shoff, elf + 40, 8);
  memcpy(&shentsize, elf + 58, 2);
  memcpy(&shnum, elf + 60, 2);
  size_t size = (size_t)(shoff + (uint64_t)shnum * shentsize);
  static const char prefix[] = "amdgcn-amd-amdhsa--";
  const char* at = memmem(image, size, prefix, sizeof prefix - 1);
  char target[64] = "?";
  if (at) {
    at += sizeof prefix - 1;
    size_t n = 0;
    while (n + 1 < sizeof target && ((at[n] >= 'a' && at[n] <= 'z') || (at[n] >= '0' &&
           at[n] <= '9') || at[n] == ':' || at[n] == '+' || at[n] == '-'))
      ++n;
    memcpy(target, at, n);
    target[n] = '\0';
  }
  char line[128];
  snprintf(line, sizeof line, "load %s\n", target);
  log_line(line);
  const char* refuse = getenv("STUB_REFUSE");
  if (refuse) {
    char list[512];
    snprintf(list, sizeof list, ",%s,", refuse);
    char needle[80];
    snprintf(needle, sizeof needle, ",%s,", target);
    if (strstr(list, needle)) return 209;
  }
  *module = &module_token;
  return 0;
}
hipError_t hipModuleUnload(void* module) { (void)module; return 0; }
hipError_t hipModuleGetFunction(void** function, void* module, const char* name) {
  (void)module;
  char line[1200];
  snprintf(line, sizeof line, "function %s\n", name);
  log_line(line);
  *function = &module_token;
  return 0;
}
hipError_t hipModuleLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned shared, void* stream,
                                 void** params, void** extra) {
  (void)f;
  char line[8192];
  int n = snprintf(line, sizeof line,
                   "launch grid %u %u %u block %u %u %u shared %u stream %p params %s", gx, gy, gz,
                   bx, by, bz, shared, stream, params ? "set" : "none");
  if (extra && extra[0] == (void*)1 && extra[2] == (void*)2 && extra[4] == (void*)3) {
    const unsigned char* buffer = extra[1];
    size_t size = *(size_t*)extra[3];
    n += snprintf(line + n, sizeof line - (size_t)n, " buffer %zu ", size);
    for (size_t i = 0; i < size && n + 3 < (int)sizeof line; ++i)
      n += snprintf(line + n, sizeof line - (size_t)n, "%02x", buffer[i]);
  } else {
    n += snprintf(line + n, sizeof line - (size_t)n, " no buffer");
  }
  snprintf(line + n, sizeof line - (size_t)n, "\n");
  log_line(line);
  return 0;
}
