/* The "cuda" module kind (loadbinary_cuda): one or several binary variants of the same CUDA
 * kernels — SASS (cubin), PTX or fatbin — and a function-info record per kernel; the payload
 * layout and the variant-selection rule are in modpack/kinds/cuda.h.
 *
 * Loading parses and validates the payload only (cuda_payload.c); it never touches the driver,
 * so a library with CUDA modules loads (and `modpack inspect` describes it) on a machine without
 * a GPU. On the first call of a kernel on a device, the variant for that device is chosen
 * (cuda_select.c), loaded with cuModuleLoadData straight from the library mapping (no copy),
 * and every kernel's CUfunction cached for that device. A PTX variant goes through the kernel
 * cache (files/kernel_cache.h): the cubin an earlier process had the driver link from it
 * (cuLink*) is loaded instead of compiling, else it is linked here and kept. Later calls only
 * pack the arguments and launch.
 *
 * Kernels launch asynchronously in the device's primary context, on the calling thread's
 * current stream (mp_device_set_stream; the default stream until set). Copies run on the
 * legacy default stream, which waits for blocking streams only: after launches on a
 * non-blocking stream, synchronize before copying. A buffer whose record dtype is the opaque
 * handle type (kDLOpaqueHandle, shown as "void*") is an untyped pointer and accepts an array
 * of any dtype. */
#include "kinds/cuda/cuda_module.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/registry.h"
#include "files/kernel_cache.h"
#include "kinds/common/kernel_call.h"
#include "kinds/cuda/cuda_select.h"

extern const mp_kind_t mp_cuda_kind; /* this kind's descriptor, at the end */
extern const mp_preflight_api_t mp_cuda_preflight; /* cuda_preflight.c */

_Static_assert(offsetof(mp_cuda_module_t, base) == 0, "the device module base must come first");

static const char* const launch_tags[MP_CUDA_SLOT_COUNT] = {
    "blockIdx.x",  "blockIdx.y",  "blockIdx.z",       "threadIdx.x",
    "threadIdx.y", "threadIdx.z", "dyn_shared_memory"};
/* Above this, a kernel must opt in to more dynamic shared memory (cuFuncSetAttribute). */
enum { DEFAULT_MAX_DYNAMIC_SHARED = 48 * 1024 };

/* ---- destruction ----------------------------------------------------------------------------- */

static void cuda_destroy(void* impl) {
  mp_cuda_module_t* m = impl;
  const mp_cuda_t* cuda = NULL;
  for (int d = 0; d < MP_CUDA_MAX_DEVICES; ++d) {
    for (uint32_t v = 0; m->images[d] && v < m->variant_count; ++v) {
      if (!m->images[d][v]) continue;
      if (!cuda) cuda = mp_cuda(); /* an image was loaded, so the driver is initialised */
      if (!cuda) break;
      /* Unload in the image's own context; every result is ignored, since at process exit
       * the driver may already be shut down (CUDA_ERROR_DEINITIALIZED). */
      CUcontext saved = NULL;
      if (cuda->cu.CtxGetCurrent(&saved) != CUDA_SUCCESS) saved = NULL;
      if (saved != m->contexts[d]) cuda->cu.CtxSetCurrent(m->contexts[d]);
      cuda->cu.ModuleUnload(m->images[d][v]);
      if (saved != m->contexts[d]) cuda->cu.CtxSetCurrent(saved);
    }
    free(m->images[d]);
    free(m->functions[d]);
    free(m->shared_optin[d]);
  }
  mp_cuda_payload_free(m);
  mp_device_module_free(&m->base);
  free(m);
}

/* ---- loading on a device ----------------------------------------------------------------------
 */

/* The variants that define kernel |k|, for messages. */
static void list_variants(const mp_cuda_module_t* m, uint32_t k, char* buffer, size_t capacity) {
  size_t used = 0;
  buffer[0] = '\0';
  for (uint32_t v = 0; v < m->variant_count && used < capacity; ++v) {
    const mp_cuda_variant_t* variant = &m->variants[v];
    if (!mp_cuda_variant_defines(variant, k)) continue;
    int n = snprintf(buffer + used, capacity - used, "%s", used ? ", " : "");
    if (n > 0) used += (size_t)n;
    for (uint32_t a = 0; a < variant->arch_count && used < capacity; ++a) {
      n = snprintf(buffer + used, capacity - used, "%s%s", a ? "+" : "", variant->arches[a]);
      if (n > 0) used += (size_t)n;
    }
    if (used >= capacity) break;
    n = snprintf(buffer + used, capacity - used, " (%s%s%s)",
                 mp_cuda_variant_kind_names[variant->kind], variant->ptx_isa[0] ? ", PTX ISA " : "",
                 variant->ptx_isa);
    if (n > 0) used += (size_t)n;
  }
}

static bool image_rejected(CUresult result) {
  return result == CUDA_ERROR_NO_BINARY_FOR_GPU || result == CUDA_ERROR_UNSUPPORTED_PTX_VERSION ||
         result == CUDA_ERROR_INVALID_IMAGE || result == CUDA_ERROR_INVALID_PTX ||
         result == CUDA_ERROR_JIT_COMPILER_NOT_FOUND;
}

/* The error for a variant the driver refused, naming the fix. */
static mp_status_t load_failed(const mp_cuda_module_t* m, const mp_cuda_t* cuda, int32_t device,
                               uint32_t k, uint32_t v, const char* arch, CUresult result) {
  const mp_cuda_variant_t* variant = &m->variants[v];
  char variants[768];
  list_variants(m, k, variants, sizeof variants);
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
                       (int)device, cc_major, cc_minor, arch,
                       mp_cuda_variant_kind_names[variant->kind], why, cc_major, cc_minor,
                       variants);
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
                       arch, mp_cuda_variant_kind_names[variant->kind], (int)device, cc_major,
                       cc_minor, driver_major, driver_minor, why, (int)result, variants);
  }
}

/* The cubin the driver's JIT makes from |ptx| (|size| bytes with its NUL), linked
 * (cuLinkCreate, cuLinkAddData, cuLinkComplete), loaded into |out| and kept in the cache's
 * |slot|. The link's result is the load's: a PTX the JIT refuses is refused here as
 * cuModuleLoadData would refuse it. */
static CUresult link_ptx(const mp_cuda_t* cuda, const uint8_t* ptx, uint64_t size,
                         mp_kernel_cache_slot_t* slot, CUmodule* out, const char** out_call) {
  CUlinkState state = NULL;
  *out_call = "cuLinkCreate";
  if (cuda->link.Create(0, NULL, NULL, &state) != CUDA_SUCCESS) { /* the JIT, as without */
    *out_call = "cuModuleLoadData";
    return cuda->cu.ModuleLoadData(out, ptx);
  }
  void* cubin = NULL;
  size_t cubin_size = 0;
  *out_call = "cuLinkAddData";
  CUresult result = cuda->link.AddData(state, CU_JIT_INPUT_PTX, (void*)ptx, (size_t)size,
                                       "modpack.ptx", 0, NULL, NULL);
  if (result == CUDA_SUCCESS) {
    *out_call = "cuLinkComplete";
    result = cuda->link.Complete(state, &cubin, &cubin_size);
  }
  if (result == CUDA_SUCCESS) {
    *out_call = "cuModuleLoadData";
    result = cuda->cu.ModuleLoadData(out, cubin);
  }
  if (result == CUDA_SUCCESS) mp_kernel_cache_put(slot, cubin, cubin_size); /* before Destroy */
  cuda->link.Destroy(state);
  return result;
}

/* Load variant |v|'s |image| on |device| (its context current) into |out|: a PTX image through
 * the kernel cache (the cubin kept from an earlier process, else linked and kept), anything
 * else, or PTX with the cache off, with cuModuleLoadData. |*out_call| names the call a failure
 * comes from. */
static CUresult load_image(const mp_cuda_module_t* m, const mp_cuda_t* cuda, int32_t device,
                           uint32_t v, const uint8_t* image, CUmodule* out,
                           const char** out_call) {
  const mp_cuda_variant_t* variant = &m->variants[v];
  *out_call = "cuModuleLoadData";
  if (variant->kind != MP_CUDA_VARIANT_PTX || !cuda->link.Create)
    return cuda->cu.ModuleLoadData(out, image);
  char name[320], driver[32];
  mp_cuda_cache_identity(cuda, device, name, sizeof name, driver, sizeof driver);
  mp_kernel_cache_input_t input = {.kind = "cuda", .code = image,
                                   .code_size = variant->code.raw_size, .options = "",
                                   .device = name, .driver = driver, .what = "cubin"};
  mp_kernel_cache_slot_t slot;
  mp_kernel_cache_open(&slot, &input, m->base.load_flags, m->base.library_path);
  CUresult result;
  if (!slot.enabled) {
    result = cuda->cu.ModuleLoadData(out, image); /* the driver's JIT, as without a cache */
  } else {
    uint8_t* cubin;
    uint64_t size;
    result = CUDA_ERROR_NOT_FOUND;
    if (mp_kernel_cache_get(&slot, &cubin, &size)) {
      result = cuda->cu.ModuleLoadData(out, cubin);
      free(cubin);
      if (result != CUDA_SUCCESS) {
        *out = NULL;
        mp_kernel_cache_refused(&slot, mp_cuda_error_name(result));
      }
    }
    if (result != CUDA_SUCCESS)
      result = link_ptx(cuda, image, variant->code.raw_size, &slot, out, out_call);
  }
  mp_kernel_cache_close(&slot);
  return result;
}

/* |device|'s state, made at its first launch: per variant images, per kernel functions. Its
 * context is current; the caller holds the lock. */
static mp_status_t device_state_locked(mp_cuda_module_t* m, const mp_cuda_t* cuda, int32_t device) {
  if (m->functions[device]) return MP_OK;
  uint32_t kernels = m->base.table.count ? m->base.table.count : 1;
  CUmodule* images = calloc(m->variant_count, sizeof *images);
  CUfunction* functions = calloc(kernels, sizeof *functions);
  uint32_t* optin = calloc(kernels, sizeof *optin);
  if (!images || !functions || !optin) {
    free(images);
    free(functions);
    free(optin);
    return mp_out_of_memory("CUDA functions");
  }
  CUcontext context = NULL;
  cuda->cu.CtxGetCurrent(&context);
  m->contexts[device] = context;
  m->images[device] = images;
  m->shared_optin[device] = optin;
  m->functions[device] = functions;
  return MP_OK;
}

/* Choose the variant for kernel |k| on |device|, load its image (unless loaded for another
 * kernel already) and resolve the kernel. |device|'s context is current; the caller holds the
 * lock. */
static mp_status_t load_kernel_locked(mp_cuda_module_t* m, const mp_cuda_t* cuda, int32_t device,
                                      uint32_t k) {
  MP_RETURN_IF_ERROR(device_state_locked(m, cuda, device));
  CUmodule* images = m->images[device];
  /* One candidate per (variant, arch): a fatbin takes part with each arch it holds. */
  const char* arches[MP_CUDA_MAX_VARIANTS];
  uint32_t owner[MP_CUDA_MAX_VARIANTS];
  uint32_t count = mp_cuda_candidates(m, k, arches, owner);
  uint32_t order[MP_CUDA_MAX_VARIANTS];
  int64_t scores[MP_CUDA_MAX_VARIANTS];
  uint32_t usable = 0;
  int32_t cc_major = cuda->cc_major[device], cc_minor = cuda->cc_minor[device];
  MP_RETURN_IF_ERROR(
      mp_cuda_rank_arches(arches, count, cc_major, cc_minor, order, scores, &usable));
  if (usable == 0) {
    char variants[768];
    list_variants(m, k, variants, sizeof variants);
    return mp_errorf(MP_ERR_UNAVAILABLE,
                     "no binary for this GPU: CUDA device %d has compute capability %d.%d and "
                     "no variant of this CUDA module runs on it (variants: %s; %s); rebuild "
                     "with a target for sm_%d%d or PTX for compute_%d%d or lower",
                     (int)device, (int)cc_major, (int)cc_minor, variants, mp_cuda_selection_rule,
                     (int)cc_major, (int)cc_minor, (int)cc_major, (int)cc_minor);
  }
  /* Try the candidates best first; a variant the driver refuses as an image falls through to
   * the next one (say, SASS the driver cannot read, then PTX). If none loads, the error is the
   * first refusal, which names the fix, followed by the later ones. */
  int32_t chosen = -1;
  char error[3072] = "";
  size_t error_length = 0;
  mp_status_t first_status = MP_OK;
  bool tried[MP_CUDA_MAX_VARIANTS] = {false};
  for (uint32_t r = 0; r < usable && chosen < 0; ++r) {
    uint32_t v = owner[order[r]];
    if (tried[v]) continue; /* a fatbin is tried once, whatever arch made it a candidate */
    tried[v] = true;
    if (images[v]) { /* loaded for another kernel */
      chosen = (int32_t)v;
      break;
    }
    const uint8_t* image;
    MP_RETURN_IF_ERROR(mp_cuda_variant_image(m, v, &image));
    const char* call;
    CUresult result = load_image(m, cuda, device, v, image, &images[v], &call);
    if (result == CUDA_SUCCESS) {
      chosen = (int32_t)v;
      break;
    }
    images[v] = NULL;
    if (!image_rejected(result)) {
      char what[64];
      snprintf(what, sizeof what, "loading a CUDA module (%s)", call);
      return mp_cuda_fail(result, what);
    }
    int n;
    if (first_status == MP_OK) {
      first_status = load_failed(m, cuda, device, k, v, arches[order[r]], result);
      n = snprintf(error, sizeof error, "%s", mp_error_message());
    } else {
      n = snprintf(
          error + error_length, sizeof error - error_length,
          "; then the %s %s variant was refused too: %s%s", arches[order[r]],
          mp_cuda_variant_kind_names[m->variants[v].kind], mp_cuda_error_name(result),
          result == CUDA_ERROR_UNSUPPORTED_PTX_VERSION ? " (PTX newer than the driver)" : "");
    }
    if (n > 0) error_length += (size_t)n;
    if (error_length >= sizeof error) error_length = sizeof error - 1;
  }
  if (chosen < 0) return mp_error_set(first_status, error);

  const mp_kernel_info_t* info = &m->base.table.kernels[k];
  CUresult result =
      cuda->cu.ModuleGetFunction(&m->functions[device][k], images[chosen], mp_kernel_symbol(info));
  if (result != CUDA_SUCCESS) {
    const mp_cuda_variant_t* variant = &m->variants[chosen];
    m->functions[device][k] = NULL;
    return mp_errorf(result == CUDA_ERROR_NOT_FOUND ? MP_ERR_NOT_FOUND : MP_ERR_RUNTIME,
                     "CUDA kernel '%s' is declared in the module's function info but its %s %s "
                     "variant does not define the symbol '%s' (%s); a C++ kernel needs C linkage "
                     "(extern \"C\") or its name expression (name_expressions=)",
                     info->name, variant->arches[0], mp_cuda_variant_kind_names[variant->kind],
                     mp_kernel_symbol(info), mp_cuda_error_name(result));
  }
  return MP_OK;
}

/* ---- calling ----------------------------------------------------------------------------------
 */

typedef union {
  mp_kernel_scalar_t scalar;
  CUdeviceptr pointer;
} cuda_arg_t;

static const uint64_t launch_defaults[MP_CUDA_SLOT_COUNT] = {1, 1, 1, 1, 1, 1, 0};
static const uint64_t launch_limits[MP_CUDA_SLOT_COUNT] = {
    UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX, INT32_MAX};
/* The arrays' device is checked once the driver is loaded (below). */
static const mp_kernel_call_rule_t call_rule = {
    .slot_count = MP_CUDA_SLOT_COUNT,
    .defaults = launch_defaults,
    .limits = launch_limits,
};

static mp_status_t call_kernel(void* self, const mp_value_t* args, int32_t num_args,
                               mp_value_t* out_ret) {
  (void)out_ret;
  const mp_kernel_ref_t* f = self;
  mp_cuda_module_t* m = f->module;
  /* Checks that need no driver first: kinds, dtypes, launch dimensions. */
  mp_kernel_call_t call;
  MP_RETURN_IF_ERROR(mp_kernel_call_check(f, args, num_args, &call_rule, &call));
  const mp_kernel_info_t* info = call.info;
  const mp_value_t* const* bound = call.params;
  const uint64_t* launch = call.launch;
  cuda_arg_t values[MP_KERNEL_MAX_ARGS];
  void* params[MP_KERNEL_MAX_ARGS];
  for (uint32_t i = 0; i < info->arg_count; ++i) {
    params[i] = &values[i];
    values[i].pointer = 0; /* NULL unless an array is given */
    if (info->args[i].kind == MP_KERNEL_ARG_SCALAR) values[i].scalar = call.scalars[i];
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
  MP_RETURN_IF_ERROR(mp_kernel_check_devices(info, bound, &mp_cuda_device,
                                             "modpack.array(x, device=\"cuda:0\") or pass a "
                                             "CUDA array through DLPack",
                                             &device));
  for (uint32_t i = 0; i < info->arg_count; ++i)
    if (info->args[i].kind == MP_KERNEL_ARG_BUFFER && bound[i]->type_code == MP_TYPE_DLTENSOR)
      values[i].pointer =
          (CUdeviceptr)(uintptr_t)bound[i]->v_tensor->data + bound[i]->v_tensor->byte_offset;
  if (device < 0) { /* no array: the current context's device, else device 0 */
    CUdevice current;
    device = 0;
    if (cuda->cu.CtxGetDevice(&current) == CUDA_SUCCESS)
      for (int32_t d = 0; d < cuda->device_count; ++d)
        if (cuda->devices[d] == current) device = d;
  }
  if (!launch[0] || !launch[1] || !launch[2]) return MP_OK; /* an empty grid: nothing to run */

  CUcontext saved;
  MP_RETURN_IF_ERROR(mp_cuda_enter(device, &saved));
  pthread_mutex_lock(&m->base.lock);
  mp_status_t status = m->functions[device] && m->functions[device][f->kernel]
                           ? MP_OK
                           : load_kernel_locked(m, cuda, device, f->kernel);
  CUfunction function = status == MP_OK ? m->functions[device][f->kernel] : NULL;
  if (status == MP_OK && launch[MP_CUDA_SLOT_SHARED] > DEFAULT_MAX_DYNAMIC_SHARED &&
      m->shared_optin[device][f->kernel] < launch[MP_CUDA_SLOT_SHARED]) {
    CUresult result =
        cuda->cu.FuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  (int)launch[MP_CUDA_SLOT_SHARED]);
    if (result == CUDA_SUCCESS) {
      m->shared_optin[device][f->kernel] = (uint32_t)launch[MP_CUDA_SLOT_SHARED];
    } else {
      char what[160];
      snprintf(what, sizeof what,
               "%s: allowing %" PRIu64
               " bytes of dynamic shared memory "
               "(cuFuncSetAttribute; the device's opt-in limit may be lower)",
               info->name, launch[MP_CUDA_SLOT_SHARED]);
      status = mp_cuda_fail(result, what);
    }
  }
  pthread_mutex_unlock(&m->base.lock);
  if (status == MP_OK) {
    CUresult result = cuda->cu.LaunchKernel(
        function, (unsigned)launch[0], (unsigned)launch[1], (unsigned)launch[2],
        (unsigned)launch[3], (unsigned)launch[4], (unsigned)launch[5],
        (unsigned)launch[MP_CUDA_SLOT_SHARED], mp_device_get_stream((DLDevice){kDLCUDA, device}),
        info->arg_count ? params : NULL, NULL);
    if (result != CUDA_SUCCESS) {
      char what[256];
      snprintf(what, sizeof what,
               "%s: CUDA launch (grid %" PRIu64 ",%" PRIu64 ",%" PRIu64 " block %" PRIu64
               ",%" PRIu64 ",%" PRIu64 " dynamic shared %" PRIu64 " bytes)",
               info->name, launch[0], launch[1], launch[2], launch[3], launch[4], launch[5],
               launch[MP_CUDA_SLOT_SHARED]);
      status = mp_cuda_fail(result, what);
    }
  }
  mp_cuda_leave(saved);
  return status;
}

/* ---- describing and loading -------------------------------------------------------------------
 */

/* The variants (arch, kind, offset in the payload and size, so tools can write the code out; a
 * fatbin's arches under "contains"; PTX's ISA version; the kernels an image defines when not
 * all) and the kernels' signatures and launch tags. */
static mp_status_t cuda_describe(mp_module_t* self, char* buffer, uint64_t capacity,
                                 uint64_t* out_length) {
  mp_cuda_module_t* m = mp_module_impl(self);
  mp_json_t j = {buffer, capacity, 0};
  mp_json_printf(&j, "\"head_bytes\": %" PRIu64 ", \"variants\": [", m->head_size);
  for (uint32_t v = 0; v < m->variant_count; ++v) {
    const mp_cuda_variant_t* variant = &m->variants[v];
    char arch[MP_CUDA_MAX_ARCHES_PER_VARIANT * MP_CUDA_MAX_ARCH_NAME] = "";
    size_t used = 0;
    for (uint32_t a = 0; a < variant->arch_count; ++a) {
      int n = snprintf(arch + used, sizeof arch - used, "%s%s", a ? "+" : "", variant->arches[a]);
      if (n > 0) used += (size_t)n;
    }
    mp_json_printf(&j, "%s{\"arch\": ", v ? ", " : "");
    mp_json_string(&j, arch);
    mp_json_printf(&j, ", \"kind\": \"%s\", \"offset\": %" PRIu64 ", \"size\": %" PRIu64,
                   mp_cuda_variant_kind_names[variant->kind],
                   (uint64_t)(variant->data - m->base.payload), variant->size);
    char code[160];
    mp_code_describe(&variant->code, code, sizeof code);
    mp_json_printf(&j, ", %s", code);
    if (variant->kind == MP_CUDA_VARIANT_PTX) {
      mp_json_printf(&j, ", \"ptx_isa\": ");
      mp_json_string(&j, variant->ptx_isa);
    }
    if (variant->kind == MP_CUDA_VARIANT_FATBIN) {
      mp_json_printf(&j, ", \"contains\": [");
      for (uint32_t a = 0; a < variant->arch_count; ++a) {
        mp_json_printf(&j, "%s", a ? ", " : "");
        mp_json_string(&j, variant->arches[a]);
      }
      mp_json_printf(&j, "]");
    }
    if (variant->kernel_count) { /* an image of some kernels only */
      mp_json_printf(&j, ", \"kernels\": [");
      for (uint32_t i = 0; i < variant->kernel_count; ++i) {
        mp_json_printf(&j, "%s", i ? ", " : "");
        mp_json_string(&j, m->base.table.kernels[variant->kernels[i]].name);
      }
      mp_json_printf(&j, "]");
    }
    mp_json_printf(&j, "}");
  }
  mp_json_printf(&j, "], ");
  mp_kernel_table_describe(&j, &m->base.table);
  *out_length = j.length;
  return MP_OK;
}

static const mp_module_vtable_t cuda_vtable = {
    .get_function = mp_kernel_table_get_function,
    .destroy = cuda_destroy,
    .function_count = mp_kernel_table_function_count,
    .function_name = mp_kernel_table_function_name,
    .describe = cuda_describe,
};

static const mp_device_loader_t cuda_loader = {
    .kind = &mp_cuda_kind,
    .vtable = &cuda_vtable,
    .call = call_kernel,
    .state_size = sizeof(mp_cuda_module_t),
    .parse = mp_cuda_payload_parse,
};

static mp_status_t load_cuda(void* user_data, const mp_loader_args_t* args,
                             mp_module_t** out_module) {
  (void)user_data;
  return mp_device_module_load(&cuda_loader, args, out_module);
}

const mp_kind_t mp_cuda_kind = {
    .type_key = "cuda",
    .load = load_cuda,
    .device = &mp_cuda_device,
    .launch_tags = launch_tags,
    .launch_tag_count = MP_CUDA_SLOT_COUNT,
    .preflight = &mp_cuda_preflight,
    .code_frames = true,
};
