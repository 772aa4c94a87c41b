/* The "cuda" module kind (loadbinary_cuda): one or several binary variants of the same CUDA
 * kernels — SASS (cubin), PTX or fatbin — and a function-info record per kernel.
 *
 * Loading parses and validates the payload only; it never touches the driver, so a library
 * with CUDA modules loads (and `modpack inspect` describes it) on a machine without a GPU.
 * On the first call of a kernel on a device, the variant for that device is chosen with the
 * rule in modpack/cuda.h, loaded with cuModuleLoadData straight from the library mapping (no
 * copy), and every kernel's CUfunction cached for that device. Later calls only pack the
 * arguments and launch.
 *
 * Payload (little-endian):
 *   u32 version (=1)  u32 reserved (=0)
 *   u32 variant_count (>= 1), each:
 *       u32 kind (0 cubin, 1 ptx, 2 fatbin)  u32 arch_count (1 for cubin and ptx)
 *       arch_count x {u32 size, bytes}  ("sm_80", "sm_90a", "compute_80", ...)
 *       u64 size
 *   u32 kernel_count, kernel_count function-info records (see kernel_info.c)
 *   then each variant's bytes in order, each starting at the next multiple of 64 bytes from
 *   the start of the payload (zero padding between), and nothing after the last.
 * A cubin starts with the ELF magic, a fatbin with 50 ED 55 BA, and PTX text ends with the NUL
 * that cuModuleLoadData needs (counted in its size).
 *
 * Calling convention of a kernel function: its declared arguments (arrays on a CUDA device for
 * buffers, numbers for scalars) followed by one integer per launch tag: "blockIdx.x|y|z" (grid
 * dimensions), "threadIdx.x|y|z" (block dimensions) and optionally "dyn_shared_memory" (bytes
 * of dynamic shared memory). Kernels are launched asynchronously in the device's primary
 * context, on the calling thread's current stream (mp_device_set_stream; the default stream
 * until set). Copies run on the legacy default stream, which waits for blocking streams only:
 * after launches on a non-blocking stream, synchronize before copying. A buffer whose record
 * dtype is the opaque handle type (kDLOpaqueHandle, shown as "void*") is an untyped pointer
 * (`void*`) and accepts an array of any dtype. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_abi.h"
#include "modpack/cuda.h"

enum { CUDA_PAYLOAD_VERSION = 1, CUDA_VARIANT_ALIGNMENT = 64 };
enum { KIND_CUBIN = 0, KIND_PTX = 1, KIND_FATBIN = 2 };
enum { MAX_ARCHES_PER_VARIANT = 64, MAX_ARCH_NAME = 32, MAX_CANDIDATES = 1024 };
/* Launch slots: grid x, y, z, block x, y, z, dynamic shared memory. */
enum { SLOT_SHARED = 6, SLOT_COUNT = 7 };
/* Above this, a kernel must opt in to more dynamic shared memory (cuFuncSetAttribute). */
enum { DEFAULT_MAX_DYNAMIC_SHARED = 48 * 1024 };

static const char* const kind_names[] = {"cubin", "ptx", "fatbin"};

typedef struct {
  uint32_t kind;
  uint32_t arch_count;
  char** arches;
  const uint8_t* data; /* in the library mapping */
  uint64_t size;
  char ptx_isa[16]; /* PTX ".version", "" when unknown or not PTX */
} cuda_variant_t;

typedef struct {
  uint32_t variant_count;
  cuda_variant_t* variants;
  uint32_t kernel_count;
  mp_kernel_info_t* kernels;
  int8_t (*launch_slots)[MP_MAX_LAUNCH_TAGS];
  pthread_mutex_t lock; /* guards the per-device state below */
  CUmodule modules[MP_CUDA_MAX_DEVICES];
  CUcontext contexts[MP_CUDA_MAX_DEVICES]; /* the context each module was loaded into */
  int32_t loaded_variant[MP_CUDA_MAX_DEVICES];
  CUfunction* functions[MP_CUDA_MAX_DEVICES];  /* [device][kernel] */
  uint32_t* shared_optin[MP_CUDA_MAX_DEVICES]; /* [device][kernel]: opted-in bytes */
} cuda_module_t;

typedef struct {
  cuda_module_t* module;
  uint32_t kernel;
} cuda_function_t;

/* ---- arch names and the selection rule --------------------------------------------------------
 */

typedef struct {
  bool ptx; /* compute_XY rather than sm_XY */
  int32_t major;
  int32_t minor;
  char suffix; /* '\0', 'a' or 'f' */
} arch_t;

static bool parse_arch(const char* name, arch_t* out) {
  const char* p;
  if (strncmp(name, "sm_", 3) == 0) {
    out->ptx = false;
    p = name + 3;
  } else if (strncmp(name, "compute_", 8) == 0) {
    out->ptx = true;
    p = name + 8;
  } else {
    return false;
  }
  int digits = 0, number = 0;
  while (p[digits] >= '0' && p[digits] <= '9' && digits < 4) {
    number = number * 10 + (p[digits] - '0');
    ++digits;
  }
  if (digits < 2 || digits > 3 || number < 10) return false;
  p += digits;
  out->suffix = '\0';
  if (*p == 'a' || *p == 'f') out->suffix = *p++;
  if (*p != '\0') return false;
  out->major = number / 10;
  out->minor = number % 10;
  return true;
}

/* How well |a| fits a device of compute capability |major|.|minor|: -1 when it cannot run,
 * else a score where higher is better (tier, then version, then specialisation). */
static int64_t fitness(const arch_t* a, int32_t major, int32_t minor) {
  int64_t version = (int64_t)a->major * 10 + a->minor;
  int64_t special = a->suffix == 'a' ? 2 : a->suffix == 'f' ? 1 : 0;
  if (!a->ptx) {
    if (a->major != major) return -1;
    if (a->minor == minor) return 3000000 + special; /* exact SASS */
    if (a->minor < minor && a->suffix != 'a') return 2000000 + version * 10 + special;
    return -1;
  }
  bool same = a->major == major && a->minor == minor;
  bool not_newer = a->major < major || (a->major == major && a->minor <= minor);
  if (!not_newer) return -1;
  if (a->suffix == 'a' && !same) return -1;
  if (a->suffix == 'f' && a->major != major) return -1;
  return 1000000 + version * 10 + special; /* PTX JIT */
}

/* Candidate indices into |arches| that can run, best first (ties keep the earlier). */
static mp_status_t rank_arches(const char* const* arches, uint32_t count, int32_t major,
                               int32_t minor, uint32_t* order, int64_t* scores,
                               uint32_t* out_usable) {
  uint32_t usable = 0;
  for (uint32_t i = 0; i < count; ++i) {
    arch_t a;
    if (!arches[i] || !parse_arch(arches[i], &a))
      return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                       "'%s' is not a CUDA architecture name (expected sm_XY, sm_XYa, sm_XYf, "
                       "compute_XY, compute_XYa or compute_XYf, e.g. sm_80 or compute_90)",
                       arches[i] ? arches[i] : "(null)");
    int64_t score = fitness(&a, major, minor);
    if (score < 0) continue;
    uint32_t at = usable++;
    while (at > 0 && scores[at - 1] < score) { /* stable insertion: ties keep order */
      scores[at] = scores[at - 1];
      order[at] = order[at - 1];
      --at;
    }
    scores[at] = score;
    order[at] = i;
  }
  *out_usable = usable;
  return MP_OK;
}

static const char* const selection_rule =
    "SASS sm_XY runs on compute capability X.Y and on X.Z with Z > Y (never an 'a' variant "
    "such as sm_90a), PTX compute_XY on any X.Y or newer";

mp_status_t mp_cuda_select_variant(const char* const* arches, uint32_t count, int32_t cc_major,
                                   int32_t cc_minor, int32_t* out_index) {
  *out_index = -1;
  if (count > MAX_CANDIDATES)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "%u variants are too many (at most %d)", count,
                     MAX_CANDIDATES);
  uint32_t order[MAX_CANDIDATES];
  int64_t scores[MAX_CANDIDATES];
  uint32_t usable = 0;
  mp_status_t status = rank_arches(arches, count, cc_major, cc_minor, order, scores, &usable);
  if (status != MP_OK) return status;
  if (usable > 0) {
    *out_index = (int32_t)order[0];
    return MP_OK;
  }
  char list[1024] = "";
  size_t used = 0;
  for (uint32_t i = 0; i < count && used < sizeof list; ++i) {
    int n = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", arches[i]);
    if (n > 0) used += (size_t)n;
  }
  return mp_errorf(MP_ERR_UNAVAILABLE,
                   "no binary for this GPU: no variant runs on compute capability %d.%d "
                   "(variants: %s; %s); rebuild with a target for sm_%d%d or PTX for "
                   "compute_%d%d or lower",
                   (int)cc_major, (int)cc_minor, count ? list : "none", selection_rule,
                   (int)cc_major, (int)cc_minor, (int)cc_major, (int)cc_minor);
}

/* ---- destruction ----------------------------------------------------------------------------- */

static void cuda_destroy(void* impl) {
  cuda_module_t* m = impl;
  const mp_cuda_t* cuda = NULL;
  for (int d = 0; d < MP_CUDA_MAX_DEVICES; ++d) {
    if (m->modules[d]) {
      if (!cuda) cuda = mp_cuda(); /* a module was loaded, so the driver is initialised */
      if (!cuda) break;
      /* Unload in the module's own context; every result is ignored, since at process exit
       * the driver may already be shut down (CUDA_ERROR_DEINITIALIZED). */
      CUcontext saved = NULL;
      if (cuda->cu.CtxGetCurrent(&saved) != CUDA_SUCCESS) saved = NULL;
      if (saved != m->contexts[d]) cuda->cu.CtxSetCurrent(m->contexts[d]);
      cuda->cu.ModuleUnload(m->modules[d]);
      if (saved != m->contexts[d]) cuda->cu.CtxSetCurrent(saved);
    }
    free(m->functions[d]);
    free(m->shared_optin[d]);
  }
  for (uint32_t v = 0; m->variants && v < m->variant_count; ++v) {
    for (uint32_t a = 0; m->variants[v].arches && a < m->variants[v].arch_count; ++a)
      free(m->variants[v].arches[a]);
    free(m->variants[v].arches);
  }
  free(m->variants);
  for (uint32_t k = 0; m->kernels && k < m->kernel_count; ++k) mp_kernel_info_free(&m->kernels[k]);
  free(m->kernels);
  free(m->launch_slots);
  pthread_mutex_destroy(&m->lock);
  free(m);
}

/* ---- loading on a device ----------------------------------------------------------------------
 */

/* "sm_80 (cubin), compute_80 (ptx, PTX ISA 9.0), sm_90+sm_100 (fatbin)" */
static void list_variants(const cuda_module_t* m, char* buffer, size_t capacity) {
  size_t used = 0;
  buffer[0] = '\0';
  for (uint32_t v = 0; v < m->variant_count && used < capacity; ++v) {
    const cuda_variant_t* variant = &m->variants[v];
    int n = snprintf(buffer + used, capacity - used, "%s", v ? ", " : "");
    if (n > 0) used += (size_t)n;
    for (uint32_t a = 0; a < variant->arch_count && used < capacity; ++a) {
      n = snprintf(buffer + used, capacity - used, "%s%s", a ? "+" : "", variant->arches[a]);
      if (n > 0) used += (size_t)n;
    }
    if (used >= capacity) break;
    n = snprintf(buffer + used, capacity - used, " (%s%s%s)", kind_names[variant->kind],
                 variant->ptx_isa[0] ? ", PTX ISA " : "", variant->ptx_isa);
    if (n > 0) used += (size_t)n;
  }
}

static bool image_rejected(CUresult result) {
  return result == CUDA_ERROR_NO_BINARY_FOR_GPU || result == CUDA_ERROR_UNSUPPORTED_PTX_VERSION ||
         result == CUDA_ERROR_INVALID_IMAGE || result == CUDA_ERROR_INVALID_PTX ||
         result == CUDA_ERROR_JIT_COMPILER_NOT_FOUND;
}

/* The error for a variant the driver refused, naming the fix. */
static mp_status_t load_failed(const cuda_module_t* m, const mp_cuda_t* cuda, int32_t device,
                               uint32_t v, const char* arch, CUresult result) {
  const cuda_variant_t* variant = &m->variants[v];
  char variants[768];
  list_variants(m, variants, sizeof variants);
  int driver_major = cuda->driver_version / 1000, driver_minor = cuda->driver_version % 1000 / 10;
  const char* text = mp_cuda_error_string(result);
  char why[256];
  snprintf(why, sizeof why, "%s%s%s%s", mp_cuda_error_name(result), text[0] ? " (" : "", text,
           text[0] ? ")" : "");
  int cc_major = cuda->cc_major[device], cc_minor = cuda->cc_minor[device];
  switch (result) {
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
      return mp_errorf(MP_ERR_UNAVAILABLE,
                       "PTX newer than the driver: the %s PTX variant (PTX ISA %s) was made by a "
                       "newer CUDA toolkit than this driver (CUDA %d.%d) can compile, %s; update "
                       "the NVIDIA driver, or add SASS for this GPU (target sm_%d%d) or PTX from "
                       "an older toolkit (variants: %s)",
                       arch, variant->ptx_isa[0] ? variant->ptx_isa : "unknown", driver_major,
                       driver_minor, why, cc_major, cc_minor, variants);
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
      return mp_errorf(MP_ERR_UNAVAILABLE,
                       "no binary for this GPU: CUDA device %d (compute capability %d.%d) cannot "
                       "run the %s %s variant, %s; rebuild with a target for sm_%d%d or add PTX, "
                       "or update the driver if the binary comes from a newer CUDA toolkit "
                       "(variants: %s)",
                       (int)device, cc_major, cc_minor, arch, kind_names[variant->kind], why,
                       cc_major, cc_minor, variants);
    case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
      return mp_errorf(MP_ERR_UNAVAILABLE,
                       "the driver's PTX JIT compiler (libnvidia-ptxjitcompiler.so) is missing, "
                       "so the %s PTX variant cannot be compiled, %s; install the full NVIDIA "
                       "driver or add SASS for this GPU (target sm_%d%d) (variants: %s)",
                       arch, why, cc_major, cc_minor, variants);
    default:
      return mp_errorf(MP_ERR_RUNTIME,
                       "loading the %s %s variant on CUDA device %d (compute capability %d.%d, "
                       "driver for CUDA %d.%d) failed: %s [code %d] (variants: %s)",
                       arch, kind_names[variant->kind], (int)device, cc_major, cc_minor,
                       driver_major, driver_minor, why, (int)result, variants);
  }
}

/* Choose, load and resolve every kernel for |device|, whose context is current. Caller holds
 * the lock. */
static mp_status_t load_locked(cuda_module_t* m, const mp_cuda_t* cuda, int32_t device) {
  /* One candidate per (variant, arch): a fatbin takes part with each arch it holds. */
  const char* arches[MAX_CANDIDATES];
  uint32_t owner[MAX_CANDIDATES];
  uint32_t count = 0;
  for (uint32_t v = 0; v < m->variant_count; ++v)
    for (uint32_t a = 0; a < m->variants[v].arch_count && count < MAX_CANDIDATES; ++a) {
      arches[count] = m->variants[v].arches[a];
      owner[count++] = v;
    }
  uint32_t order[MAX_CANDIDATES];
  int64_t scores[MAX_CANDIDATES];
  uint32_t usable = 0;
  int32_t cc_major = cuda->cc_major[device], cc_minor = cuda->cc_minor[device];
  mp_status_t status = rank_arches(arches, count, cc_major, cc_minor, order, scores, &usable);
  if (status != MP_OK) return status;
  if (usable == 0) {
    char variants[768];
    list_variants(m, variants, sizeof variants);
    return mp_errorf(MP_ERR_UNAVAILABLE,
                     "no binary for this GPU: CUDA device %d has compute capability %d.%d and "
                     "no variant of this CUDA module runs on it (variants: %s; %s); rebuild "
                     "with a target for sm_%d%d or PTX for compute_%d%d or lower",
                     (int)device, (int)cc_major, (int)cc_minor, variants, selection_rule,
                     (int)cc_major, (int)cc_minor, (int)cc_major, (int)cc_minor);
  }
  /* Try the candidates best first; a variant the driver refuses as an image falls through to
   * the next one (say, SASS the driver cannot read, then PTX). If none loads, the error is the
   * first refusal, which names the fix, followed by the later ones. */
  CUmodule module = NULL;
  int32_t chosen = -1;
  char error[3072] = "";
  size_t error_length = 0;
  mp_status_t first_status = MP_OK;
  bool tried[MAX_CANDIDATES] = {false};
  for (uint32_t r = 0; r < usable && !module; ++r) {
    uint32_t v = owner[order[r]];
    if (tried[v]) continue; /* a fatbin is tried once, whatever arch made it a candidate */
    tried[v] = true;
    CUresult result = cuda->cu.ModuleLoadData(&module, m->variants[v].data);
    if (result == CUDA_SUCCESS) {
      chosen = (int32_t)v;
      break;
    }
    module = NULL;
    if (!image_rejected(result))
      return mp_cuda_fail(result, "loading a CUDA module (cuModuleLoadData)");
    int n;
    if (first_status == MP_OK) {
      first_status = load_failed(m, cuda, device, v, arches[order[r]], result);
      n = snprintf(error, sizeof error, "%s", mp_error_message());
    } else {
      n = snprintf(
          error + error_length, sizeof error - error_length,
          "; then the %s %s variant was refused too: %s%s", arches[order[r]],
          kind_names[m->variants[v].kind], mp_cuda_error_name(result),
          result == CUDA_ERROR_UNSUPPORTED_PTX_VERSION ? " (PTX newer than the driver)" : "");
    }
    if (n > 0) error_length += (size_t)n;
    if (error_length >= sizeof error) error_length = sizeof error - 1;
  }
  if (!module) return mp_error_set(first_status, error);

  CUfunction* functions = calloc(m->kernel_count ? m->kernel_count : 1, sizeof *functions);
  uint32_t* optin = calloc(m->kernel_count ? m->kernel_count : 1, sizeof *optin);
  if (!functions || !optin) {
    free(functions);
    free(optin);
    cuda->cu.ModuleUnload(module);
    return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (uint32_t k = 0; k < m->kernel_count; ++k) {
    CUresult result = cuda->cu.ModuleGetFunction(&functions[k], module, m->kernels[k].name);
    if (result != CUDA_SUCCESS) {
      const cuda_variant_t* variant = &m->variants[chosen];
      mp_status_t s = mp_errorf(
          result == CUDA_ERROR_NOT_FOUND ? MP_ERR_NOT_FOUND : MP_ERR_RUNTIME,
          "CUDA kernel '%s' is declared in the module's function info but its %s %s variant "
          "does not define it (%s); kernels need C linkage (extern \"C\") so their names are "
          "not mangled",
          m->kernels[k].name, variant->arches[0], kind_names[variant->kind],
          mp_cuda_error_name(result));
      free(functions);
      free(optin);
      cuda->cu.ModuleUnload(module);
      return s;
    }
  }
  CUcontext context = NULL;
  cuda->cu.CtxGetCurrent(&context);
  m->functions[device] = functions;
  m->shared_optin[device] = optin;
  m->contexts[device] = context;
  m->loaded_variant[device] = chosen;
  m->modules[device] = module;
  return MP_OK;
}

/* ---- calling ----------------------------------------------------------------------------------
 */

typedef union {
  mp_kernel_scalar_t scalar;
  CUdeviceptr pointer;
} cuda_arg_t;

static mp_status_t call_kernel(void* self, const mp_value_t* args, int32_t num_args,
                               mp_value_t* out_ret) {
  (void)out_ret;
  cuda_function_t* f = self;
  cuda_module_t* m = f->module;
  const mp_kernel_info_t* info = &m->kernels[f->kernel];
  mp_status_t counted = mp_kernel_check_count(info, num_args);
  if (counted != MP_OK) return counted;
  /* Checks that need no driver first: kinds, dtypes, launch dimensions. */
  cuda_arg_t values[MP_MAX_KERNEL_ARGS];
  void* params[MP_MAX_KERNEL_ARGS];
  for (uint32_t i = 0; i < info->arg_count; ++i) {
    params[i] = &values[i];
    mp_status_t status = info->args[i].kind == MP_ARG_SCALAR
                             ? mp_kernel_pack_scalar(info, i, &args[i], &values[i].scalar, NULL)
                             : mp_kernel_check_buffer(info, i, &args[i]);
    if (status != MP_OK) return status;
  }
  uint64_t launch[SLOT_COUNT] = {1, 1, 1, 1, 1, 1, 0};
  for (uint32_t t = 0; t < info->launch_count; ++t) {
    const mp_value_t* v = &args[info->arg_count + t];
    int8_t slot = m->launch_slots[f->kernel][t];
    int64_t limit = slot == SLOT_SHARED ? INT32_MAX : UINT32_MAX;
    if (v->type_code != MP_TYPE_INT || v->v_int64 < 0 || v->v_int64 > limit)
      return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                       "%s: launch argument %u (%s) must be an int in [0, %lld]", info->name,
                       info->arg_count + t, info->launch_tags[t], (long long)limit);
    launch[slot] = (uint64_t)v->v_int64;
  }
  if (!launch[3] || !launch[4] || !launch[5])
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "%s: block dimensions (threadIdx.x|y|z) must be positive, got %" PRIu64
                     " %" PRIu64 " %" PRIu64,
                     info->name, launch[3], launch[4], launch[5]);

  /* Now the driver, and the device: that of the first array argument. */
  const mp_cuda_t* cuda = mp_cuda();
  if (!cuda) return mp_error_code();
  int32_t device = -1;
  mp_status_t checked = mp_kernel_check_devices(info, args, kDLCUDA,
                                                "modpack.array(x, device=\"cuda:0\") or pass a "
                                                "CUDA array through DLPack",
                                                &device);
  if (checked != MP_OK) return checked;
  for (uint32_t i = 0; i < info->arg_count; ++i)
    if (info->args[i].kind == MP_ARG_BUFFER)
      values[i].pointer =
          (CUdeviceptr)(uintptr_t)args[i].v_tensor->data + args[i].v_tensor->byte_offset;
  if (device < 0) { /* no array: the current context's device, else device 0 */
    CUdevice current;
    device = 0;
    if (cuda->cu.CtxGetDevice(&current) == CUDA_SUCCESS)
      for (int32_t d = 0; d < cuda->device_count; ++d)
        if (cuda->devices[d] == current) device = d;
  }
  if (!launch[0] || !launch[1] || !launch[2]) return MP_OK; /* an empty grid: nothing to run */

  CUcontext saved;
  mp_status_t status = mp_cuda_enter(device, &saved);
  if (status != MP_OK) return status;
  pthread_mutex_lock(&m->lock);
  status = m->modules[device] ? MP_OK : load_locked(m, cuda, device);
  CUfunction function = status == MP_OK ? m->functions[device][f->kernel] : NULL;
  if (status == MP_OK && launch[SLOT_SHARED] > DEFAULT_MAX_DYNAMIC_SHARED &&
      m->shared_optin[device][f->kernel] < launch[SLOT_SHARED]) {
    CUresult result = cuda->cu.FuncSetAttribute(
        function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)launch[SLOT_SHARED]);
    if (result == CUDA_SUCCESS) {
      m->shared_optin[device][f->kernel] = (uint32_t)launch[SLOT_SHARED];
    } else {
      char what[160];
      snprintf(what, sizeof what,
               "%s: allowing %" PRIu64
               " bytes of dynamic shared memory "
               "(cuFuncSetAttribute; the device's opt-in limit may be lower)",
               info->name, launch[SLOT_SHARED]);
      status = mp_cuda_fail(result, what);
    }
  }
  pthread_mutex_unlock(&m->lock);
  if (status == MP_OK) {
    CUresult result = cuda->cu.LaunchKernel(
        function, (unsigned)launch[0], (unsigned)launch[1], (unsigned)launch[2],
        (unsigned)launch[3], (unsigned)launch[4], (unsigned)launch[5],
        (unsigned)launch[SLOT_SHARED], mp_device_get_stream((DLDevice){kDLCUDA, device}),
        info->arg_count ? params : NULL, NULL);
    if (result != CUDA_SUCCESS) {
      char what[256];
      snprintf(what, sizeof what,
               "%s: CUDA launch (grid %" PRIu64 ",%" PRIu64 ",%" PRIu64 " block %" PRIu64
               ",%" PRIu64 ",%" PRIu64 " dynamic shared %" PRIu64 " bytes)",
               info->name, launch[0], launch[1], launch[2], launch[3], launch[4], launch[5],
               launch[SLOT_SHARED]);
      status = mp_cuda_fail(result, what);
    }
  }
  mp_cuda_leave(saved);
  return status;
}

static mp_status_t cuda_get_function(mp_module_t* self, const char* name,
                                     mp_function_t** out_function) {
  cuda_module_t* m = mp_module_impl(self);
  for (uint32_t k = 0; k < m->kernel_count; ++k) {
    if (strcmp(m->kernels[k].name, name) != 0) continue;
    cuda_function_t* f = malloc(sizeof *f);
    if (!f) return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
    f->module = m;
    f->kernel = k;
    return mp_function_create(call_kernel, f, free, self, out_function);
  }
  return MP_OK;
}

/* ---- parsing ----------------------------------------------------------------------------------
 */

static mp_status_t launch_slot(const char* kernel, const char* tag, int8_t* out) {
  static const char* const tags[SLOT_COUNT] = {"blockIdx.x",       "blockIdx.y",  "blockIdx.z",
                                               "threadIdx.x",      "threadIdx.y", "threadIdx.z",
                                               "dyn_shared_memory"};
  for (int8_t i = 0; i < SLOT_COUNT; ++i) {
    if (strcmp(tag, tags[i]) == 0) {
      *out = i;
      return MP_OK;
    }
  }
  return mp_errorf(MP_ERR_FORMAT,
                   "cuda payload: kernel %s has unknown launch tag '%s' (expected "
                   "blockIdx.x|y|z, threadIdx.x|y|z or dyn_shared_memory)",
                   kernel, tag);
}

static void read_ptx_isa(cuda_variant_t* v) {
  /* ".version X.Y" comes right after the header comments. */
  uint64_t limit = v->size < 8192 ? v->size : 8192;
  const char* text = (const char*)v->data;
  for (uint64_t i = 0; i + 9 < limit; ++i) {
    if (memcmp(text + i, ".version", 8) != 0 || (i > 0 && text[i - 1] != '\n')) continue;
    uint64_t j = i + 8, n = 0;
    while (j < limit && (text[j] == ' ' || text[j] == '\t')) ++j;
    while (j < limit && n + 1 < sizeof v->ptx_isa &&
           ((text[j] >= '0' && text[j] <= '9') || text[j] == '.'))
      v->ptx_isa[n++] = text[j++];
    v->ptx_isa[n] = '\0';
    return;
  }
}

static mp_status_t parse_variant_header(mp_reader_t* r, uint32_t index, cuda_variant_t* v) {
  if (!mp_read_u32(r, &v->kind) || !mp_read_u32(r, &v->arch_count))
    return mp_reader_error(r, "variant header");
  if (v->kind > KIND_FATBIN)
    return mp_errorf(MP_ERR_FORMAT,
                     "cuda payload: variant %u has unknown kind %u (0 cubin, 1 ptx, "
                     "2 fatbin)",
                     index, v->kind);
  if (v->arch_count == 0 || v->arch_count > MAX_ARCHES_PER_VARIANT ||
      (v->kind != KIND_FATBIN && v->arch_count != 1))
    return mp_errorf(MP_ERR_FORMAT, "cuda payload: %s variant %u lists %u architectures",
                     kind_names[v->kind], index, v->arch_count);
  v->arches = calloc(v->arch_count, sizeof *v->arches);
  if (!v->arches) return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t a = 0; a < v->arch_count; ++a) {
    uint32_t size;
    const uint8_t* bytes;
    if (!mp_read_u32(r, &size) || size == 0 || size >= MAX_ARCH_NAME ||
        !mp_read_bytes(r, size, &bytes))
      return mp_reader_error(r, "variant architecture");
    v->arches[a] = malloc((size_t)size + 1);
    if (!v->arches[a]) return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
    memcpy(v->arches[a], bytes, size);
    v->arches[a][size] = '\0';
    arch_t parsed;
    if (strlen(v->arches[a]) != size || !parse_arch(v->arches[a], &parsed))
      return mp_errorf(MP_ERR_FORMAT,
                       "cuda payload: variant %u names architecture '%s', which is "
                       "not sm_XY[a|f] or compute_XY[a|f]",
                       index, v->arches[a]);
    if ((v->kind == KIND_CUBIN && parsed.ptx) || (v->kind == KIND_PTX && !parsed.ptx))
      return mp_errorf(MP_ERR_FORMAT, "cuda payload: %s variant %u is labelled '%s'",
                       kind_names[v->kind], index, v->arches[a]);
  }
  if (!mp_read_u64(r, &v->size) || v->size == 0) return mp_reader_error(r, "variant size");
  return MP_OK;
}

static mp_status_t check_variant_bytes(uint32_t index, cuda_variant_t* v) {
  static const uint8_t elf[4] = {0x7f, 'E', 'L', 'F'}, fatbin[4] = {0x50, 0xed, 0x55, 0xba};
  const char* arch = v->arches[0];
  if (v->kind == KIND_CUBIN && (v->size < 4 || memcmp(v->data, elf, 4) != 0))
    return mp_errorf(MP_ERR_FORMAT,
                     "cuda payload: cubin variant %u (%s) does not start with the "
                     "ELF magic",
                     index, arch);
  if (v->kind == KIND_FATBIN && (v->size < 4 || memcmp(v->data, fatbin, 4) != 0))
    return mp_errorf(MP_ERR_FORMAT,
                     "cuda payload: fatbin variant %u does not start with the "
                     "fatbin magic 50 ED 55 BA",
                     index);
  if (v->kind == KIND_PTX) {
    if (v->data[v->size - 1] != '\0')
      return mp_errorf(MP_ERR_FORMAT, "cuda payload: PTX variant %u (%s) is not NUL-terminated",
                       index, arch);
    read_ptx_isa(v);
  }
  return MP_OK;
}

static mp_status_t parse(cuda_module_t* m, mp_const_byte_span_t payload) {
  mp_reader_t r = {payload.data, payload.size, 0, "cuda payload"};
  uint32_t version, reserved, count;
  if (!mp_read_u32(&r, &version) || !mp_read_u32(&r, &reserved))
    return mp_reader_error(&r, "header");
  if (version != CUDA_PAYLOAD_VERSION)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "cuda payload version %u is not supported (this runtime "
                     "reads %d); upgrade modpack",
                     version, CUDA_PAYLOAD_VERSION);
  if (reserved != 0)
    return mp_errorf(MP_ERR_FORMAT, "cuda payload: reserved header field is not 0");
  if (!mp_read_u32(&r, &count) || count == 0 || count > r.size / 16)
    return mp_reader_error(&r, "variant count");
  if (count > MAX_CANDIDATES)
    return mp_errorf(MP_ERR_FORMAT, "cuda payload: %u variants (at most %d)", count,
                     MAX_CANDIDATES);
  m->variants = calloc(count, sizeof *m->variants);
  if (!m->variants) return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t v = 0; v < count; ++v) {
    m->variant_count = v + 1;
    mp_status_t status = parse_variant_header(&r, v, &m->variants[v]);
    if (status != MP_OK) return status;
  }
  if (!mp_read_u32(&r, &count) || count > r.size / 8) return mp_reader_error(&r, "kernel count");
  m->kernels = calloc(count ? count : 1, sizeof *m->kernels);
  m->launch_slots = calloc(count ? count : 1, sizeof *m->launch_slots);
  if (!m->kernels || !m->launch_slots) return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t k = 0; k < count; ++k) {
    mp_status_t status = mp_kernel_info_read(&r, &m->kernels[k]);
    if (status != MP_OK) return status;
    m->kernel_count = k + 1;
    const mp_kernel_info_t* info = &m->kernels[k];
    bool seen[SLOT_COUNT] = {false};
    for (uint32_t t = 0; t < info->launch_count; ++t) {
      status = launch_slot(info->name, info->launch_tags[t], &m->launch_slots[k][t]);
      if (status != MP_OK) return status;
      if (seen[m->launch_slots[k][t]])
        return mp_errorf(MP_ERR_FORMAT, "cuda payload: kernel %s has launch tag '%s' twice",
                         info->name, info->launch_tags[t]);
      seen[m->launch_slots[k][t]] = true;
    }
    for (uint32_t j = 0; j < k; ++j)
      if (strcmp(m->kernels[j].name, info->name) == 0)
        return mp_errorf(MP_ERR_FORMAT, "cuda payload: kernel %s is declared twice", info->name);
  }
  /* The variants' bytes, each 64-byte aligned within the payload, read in place. */
  for (uint32_t v = 0; v < m->variant_count; ++v) {
    cuda_variant_t* variant = &m->variants[v];
    uint64_t padding =
        (CUDA_VARIANT_ALIGNMENT - r.pos % CUDA_VARIANT_ALIGNMENT) % CUDA_VARIANT_ALIGNMENT;
    const uint8_t* pad;
    if (!mp_read_bytes(&r, padding, &pad)) return mp_reader_error(&r, "variant padding");
    for (uint64_t i = 0; i < padding; ++i)
      if (pad[i] != 0)
        return mp_errorf(MP_ERR_FORMAT, "cuda payload: nonzero padding before variant %u", v);
    if (!mp_read_bytes(&r, variant->size, &variant->data))
      return mp_reader_error(&r, "variant bytes");
    mp_status_t status = check_variant_bytes(v, variant);
    if (status != MP_OK) return status;
  }
  if (r.pos != r.size)
    return mp_errorf(MP_ERR_FORMAT, "cuda payload has %" PRIu64 " unexpected trailing bytes",
                     r.size - r.pos);
  return MP_OK;
}

/* ---- listing and describing ------------------------------------------------------------------ */

static uint64_t cuda_function_count(mp_module_t* self) {
  return ((cuda_module_t*)mp_module_impl(self))->kernel_count;
}

static const char* cuda_function_name(mp_module_t* self, uint64_t index) {
  return ((cuda_module_t*)mp_module_impl(self))->kernels[index].name;
}

/* The variants (arch, kind, size; a fatbin's arches under "contains"; PTX's ISA version) and
 * the kernels' signatures and launch tags. */
static mp_status_t cuda_describe(mp_module_t* self, char* buffer, uint64_t capacity) {
  cuda_module_t* m = mp_module_impl(self);
  mp_json_t j = {buffer, capacity, 0};
  mp_json_printf(&j, "\"variants\": [");
  for (uint32_t v = 0; v < m->variant_count; ++v) {
    const cuda_variant_t* variant = &m->variants[v];
    char arch[MAX_ARCHES_PER_VARIANT * MAX_ARCH_NAME] = "";
    size_t used = 0;
    for (uint32_t a = 0; a < variant->arch_count; ++a) {
      int n = snprintf(arch + used, sizeof arch - used, "%s%s", a ? "+" : "", variant->arches[a]);
      if (n > 0) used += (size_t)n;
    }
    mp_json_printf(&j, "%s{\"arch\": ", v ? ", " : "");
    mp_json_string(&j, arch);
    mp_json_printf(&j, ", \"kind\": \"%s\", \"size\": %" PRIu64, kind_names[variant->kind],
                   variant->size);
    if (variant->kind == KIND_PTX) {
      mp_json_printf(&j, ", \"ptx_isa\": ");
      mp_json_string(&j, variant->ptx_isa);
    }
    if (variant->kind == KIND_FATBIN) {
      mp_json_printf(&j, ", \"contains\": [");
      for (uint32_t a = 0; a < variant->arch_count; ++a) {
        mp_json_printf(&j, "%s", a ? ", " : "");
        mp_json_string(&j, variant->arches[a]);
      }
      mp_json_printf(&j, "]");
    }
    mp_json_printf(&j, "}");
  }
  mp_json_printf(&j, "], \"kernels\": [");
  for (uint32_t k = 0; k < m->kernel_count; ++k) mp_json_kernel_info(&j, &m->kernels[k], k > 0);
  mp_json_printf(&j, "]");
  return MP_OK;
}

static const mp_module_vtable_t cuda_vtable = {
    .get_function = cuda_get_function,
    .destroy = cuda_destroy,
    .function_count = cuda_function_count,
    .function_name = cuda_function_name,
    .describe = cuda_describe,
};

mp_status_t mp_load_cuda(void* user_data, const mp_loader_args_t* args, mp_module_t** out_module) {
  (void)user_data;
  cuda_module_t* m = calloc(1, sizeof *m);
  if (!m) return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
  pthread_mutex_init(&m->lock, NULL);
  for (int d = 0; d < MP_CUDA_MAX_DEVICES; ++d) m->loaded_variant[d] = -1;
  mp_status_t status = parse(m, args->payload);
  if (status != MP_OK) {
    cuda_destroy(m);
    return status;
  }
  /* No driver call here: loading succeeds without a GPU; the first launch reports it. */
  return mp_module_create("cuda", &cuda_vtable, m, out_module);
}
