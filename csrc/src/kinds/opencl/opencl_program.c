/* Building OpenCL programs for a device (kinds/opencl/opencl_program.h), and
 * mp_opencl_build_binary, which prebuilds one for an opencl module to carry. */
#include "kinds/opencl/opencl_program.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kinds/opencl/opencl_module.h"
#include "modpack/kinds/opencl.h"

/* The build error, with the compiler's log. The log's size is queried first: OpenCL rejects a
 * buffer smaller than the log (CL_INVALID_VALUE), so a fixed buffer would lose long logs, which
 * are the ones that matter. The message carries the log's first bytes (the first errors) and
 * says how much was left out. */
static mp_status_t build_failed(const mp_opencl_t* cl, cl_program program, int32_t device,
                                const char* options, cl_int err) {
  enum { MAX_SHOWN_LOG = 3000 };
  cl_device_id dev = cl->devices[device];
  size_t size = 0;
  char* log = NULL;
  if (cl->cl.GetProgramBuildInfo(program, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &size) ==
          CL_SUCCESS &&
      size > 0 && (log = malloc(size + 1)) != NULL) {
    if (cl->cl.GetProgramBuildInfo(program, dev, CL_PROGRAM_BUILD_LOG, size, log, NULL) ==
        CL_SUCCESS) {
      log[size] = '\0';
    } else {
      log[0] = '\0';
    }
  }
  size_t length = log ? strlen(log) : 0;
  while (length > 0 && (log[length - 1] == '\n' || log[length - 1] == ' ')) --length;
  size_t shown = length;
  if (shown > MAX_SHOWN_LOG) {
    shown = MAX_SHOWN_LOG;
    while (shown > 0 && ((unsigned char)log[shown] & 0xC0u) == 0x80u) --shown; /* whole UTF-8 */
  }
  const char* text = shown ? log : "(empty)";
  char more[64] = "";
  if (shown < length) snprintf(more, sizeof more, "\n... (%zu more bytes)", length - shown);
  mp_status_t status =
      mp_errorf(MP_ERR_RUNTIME,
                "OpenCL program failed to build for device %d (%s)%s%s%s: %s "
                "(%d)\nbuild log:\n%.*s%s",
                (int)device, cl->device_keys[device], options[0] ? " with options '" : "", options,
                options[0] ? "'" : "", mp_cl_error_name(err), (int)err,
                (int)(shown ? shown : strlen(text)), text, more);
  free(log);
  return status;
}

static mp_status_t program_binary(const mp_opencl_t* cl, cl_program program, cl_device_id dev,
                                  uint8_t* buffer, uint64_t capacity, uint64_t* out_size);

void mp_opencl_cache_input(const mp_opencl_t* cl, int32_t device, const uint8_t* source,
                           uint64_t source_size, const char* options, char* driver,
                           size_t driver_capacity, mp_kernel_cache_input_t* out_input) {
  driver[0] = '\0';
  if (cl->cl.GetDeviceInfo(cl->devices[device], CL_DRIVER_VERSION, driver_capacity - 1, driver,
                           NULL) != CL_SUCCESS)
    driver[0] = '\0';
  driver[driver_capacity - 1] = '\0';
  *out_input = (mp_kernel_cache_input_t){
      .kind = "opencl",
      .code = source,
      .code_size = source_size,
      .options = options,
      .device = cl->device_keys[device], /* "platform/device/driver" */
      .driver = driver,
      .what = "program binary",
  };
}

/* |program| from the binary at |data|, built for |dev|; NULL when the driver refuses it. */
static cl_program from_binary(const mp_opencl_t* cl, cl_device_id dev, const uint8_t* data,
                              size_t size, const char* options, cl_int* out_err) {
  cl_int binary_status = CL_SUCCESS;
  const unsigned char* bytes = data;
  cl_program program =
      cl->cl.CreateProgramWithBinary(cl->context, 1, &dev, &size, &bytes, &binary_status, out_err);
  if (program && (*out_err = cl->cl.BuildProgram(program, 1, &dev, options, NULL, NULL)) !=
                     CL_SUCCESS) {
    cl->cl.ReleaseProgram(program);
    program = NULL;
  }
  return program;
}

/* The program from |source|, built. */
static mp_status_t from_source(const mp_opencl_t* cl, int32_t device, const char* source,
                               uint64_t source_size, const char* options,
                               cl_program* out_program) {
  cl_device_id dev = cl->devices[device];
  cl_int err = CL_SUCCESS;
  size_t length = source_size;
  cl_program program = cl->cl.CreateProgramWithSource(cl->context, 1, &source, &length, &err);
  if (!program)
    return mp_errorf(MP_ERR_RUNTIME, "cannot create an OpenCL program: %s (%d)",
                     mp_cl_error_name(err), (int)err);
  err = cl->cl.BuildProgram(program, 1, &dev, options, NULL, NULL);
  if (err != CL_SUCCESS) {
    mp_status_t status = build_failed(cl, program, device, options, err);
    cl->cl.ReleaseProgram(program);
    return status;
  }
  *out_program = program;
  return MP_OK;
}

void mp_opencl_program_keep(const mp_opencl_t* cl, int32_t device, cl_program program,
                            mp_kernel_cache_slot_t* slot) {
  uint64_t size = 0;
  uint8_t* binary = NULL;
  cl_device_id dev = cl->devices[device];
  /* A failure here costs only the next process its build. */
  if (program_binary(cl, program, dev, NULL, 0, &size) == MP_OK && size &&
      (binary = malloc((size_t)size)) != NULL &&
      program_binary(cl, program, dev, binary, size, &size) == MP_OK)
    mp_kernel_cache_put(slot, binary, size);
  else
    mp_error_clear();
  free(binary);
  mp_kernel_cache_close(slot);
}

mp_status_t mp_opencl_program_build(const mp_opencl_t* cl, int32_t device, const char* source,
                                    uint64_t source_size, const char* options,
                                    mp_opencl_binary_t* binaries, uint32_t binary_count,
                                    uint32_t load_flags, const char* library_path,
                                    mp_kernel_cache_slot_t* slot, bool* out_keep,
                                    cl_program* out_program) {
  *out_program = NULL;
  *out_keep = false;
  cl_int err = CL_SUCCESS;
  cl_program program = NULL;
  cl_device_id dev = cl->devices[device];
  for (uint32_t b = 0; b < binary_count && !program; ++b) {
    if (!mp_opencl_binary_for(binaries[b].key, cl->device_keys[device])) continue;
    const uint8_t* raw;
    MP_RETURN_IF_ERROR_PREFIX(mp_code_get(&binaries[b].code, NULL, NULL, &raw),
                              "opencl module: the program binary for '%s'", binaries[b].key);
    /* A stale binary (NULL): the source, below. */
    program = from_binary(cl, dev, raw, (size_t)binaries[b].code.raw_size, options, &err);
  }
  if (program) {
    *out_program = program;
    return MP_OK;
  }
  char driver[128];
  mp_kernel_cache_input_t input;
  mp_opencl_cache_input(cl, device, (const uint8_t*)source, source_size, options, driver,
                        sizeof driver, &input);
  mp_kernel_cache_open(slot, &input, load_flags, library_path);
  uint8_t* cached;
  uint64_t cached_size;
  if (mp_kernel_cache_get(slot, &cached, &cached_size)) {
    program = from_binary(cl, dev, cached, (size_t)cached_size, options, &err);
    free(cached);
    if (!program) mp_kernel_cache_refused(slot, mp_cl_error_name(err));
  }
  mp_status_t status = MP_OK;
  if (!program) {
    status = from_source(cl, device, source, source_size, options, &program);
    *out_keep = status == MP_OK && slot->enabled;
  }
  if (!*out_keep) mp_kernel_cache_close(slot);
  if (status == MP_OK) *out_program = program;
  return status;
}

/* ---- prebuilt binaries --------------------------------------------------------------------- */

/* The binary of |program| (built) for |dev|. CL_PROGRAM_BINARY_SIZES and CL_PROGRAM_BINARIES
 * hold one entry per device of the program, in the order of CL_PROGRAM_DEVICES: a program
 * created from source over the whole context has every device of the context, so with several
 * devices the first entry need not be |dev|'s (and a one-entry buffer is too small). A NULL
 * entry in the CL_PROGRAM_BINARIES array tells OpenCL to skip that device. */
static mp_status_t program_binary(const mp_opencl_t* cl, cl_program program, cl_device_id dev,
                                  uint8_t* buffer, uint64_t capacity, uint64_t* out_size) {
  cl_uint count = 0;
  cl_int err = cl->cl.GetProgramInfo(program, CL_PROGRAM_NUM_DEVICES, sizeof count, &count, NULL);
  if (err != CL_SUCCESS || count == 0)
    return mp_errorf(MP_ERR_RUNTIME, "cannot list the devices of an OpenCL program: %s (%d)",
                     mp_cl_error_name(err), (int)err);
  cl_device_id* devices = calloc(count, sizeof *devices);
  size_t* sizes = calloc(count, sizeof *sizes);
  unsigned char** binaries = calloc(count, sizeof *binaries);
  mp_status_t status = MP_OK;
  cl_uint index = count;
  if (!devices || !sizes || !binaries) {
    status = mp_out_of_memory("program binary sizes");
  } else if ((err = cl->cl.GetProgramInfo(program, CL_PROGRAM_DEVICES, count * sizeof *devices,
                                          devices, NULL)) != CL_SUCCESS) {
    status = mp_errorf(MP_ERR_RUNTIME, "cannot list the devices of an OpenCL program: %s (%d)",
                       mp_cl_error_name(err), (int)err);
  } else {
    index = 0;
    while (index < count && devices[index] != dev) ++index;
    if (index == count)
      status = mp_errorf(MP_ERR_INTERNAL, "the OpenCL program does not list its device");
  }
  if (status == MP_OK &&
      ((err = cl->cl.GetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, count * sizeof *sizes, sizes,
                                    NULL)) != CL_SUCCESS ||
       sizes[index] == 0))
    status = mp_errorf(MP_ERR_UNAVAILABLE, "the OpenCL driver offers no program binary (%s)",
                       mp_cl_error_name(err));
  if (status == MP_OK) {
    *out_size = sizes[index];
    if (buffer && capacity >= sizes[index]) {
      binaries[index] = buffer; /* the other entries stay NULL: not copied */
      err = cl->cl.GetProgramInfo(program, CL_PROGRAM_BINARIES, count * sizeof *binaries, binaries,
                                  NULL);
      if (err != CL_SUCCESS)
        status = mp_errorf(MP_ERR_RUNTIME, "cannot read the OpenCL program binary: %s (%d)",
                           mp_cl_error_name(err), (int)err);
    }
  }
  free(devices);
  free(sizes);
  free(binaries);
  return status;
}

mp_status_t mp_opencl_build_binary(const char* source, uint64_t source_size,
                                   const char* build_options, int32_t device_id, uint8_t* buffer,
                                   uint64_t capacity, uint64_t* out_size) {
  *out_size = 0;
  const mp_opencl_t* cl = mp_opencl();
  if (!cl) return mp_error_code();
  if (device_id < 0 || (cl_uint)device_id >= cl->device_count)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "OpenCL device %d does not exist (%u available)",
                     (int)device_id, cl->device_count);
  cl_program program;
  /* The cache is not asked: a binary to carry is the driver's build, whatever was kept. */
  mp_kernel_cache_slot_t slot;
  bool keep;
  MP_RETURN_IF_ERROR(mp_opencl_program_build(cl, device_id, source, source_size,
                                             build_options ? build_options : "", NULL, 0,
                                             MP_LOAD_NO_KERNEL_CACHE, NULL, &slot, &keep,
                                             &program));
  mp_status_t status =
      program_binary(cl, program, cl->devices[device_id], buffer, capacity, out_size);
  cl->cl.ReleaseProgram(program);
  return status;
}
