/* c_embed: load a deployable library made by modpack from plain C — no Python involved.
 *
 *   ./c_embed deploy.so
 *
 * Prints the module tree, calls the library's `affine` host function (out = x * w + b) on
 * eight floats, then reads the const arrays "weights" and "bias" straight out of the loaded
 * library and checks the result against the same formula computed here. Last, a call with a
 * too short output array, which the function's declared signature refuses before it runs. */
#include <math.h> /* NAN */
#include <stdio.h>

#include "modpack/modpack.h"

enum { N = 8 };

/* One line per module: its type key and, for modules carrying arrays, their names and
 * shapes; imports indented below. */
static void print_tree(mp_module_t* module, int depth) {
  printf("%*s- %s", 2 * depth, "", mp_module_type_key(module));
  uint64_t arrays = mp_module_array_count(module);
  for (uint64_t i = 0; i < arrays; ++i) {
    const char* name;
    const DLTensor* array;
    if (mp_module_array_at(module, i, &name, &array) != MP_OK) continue;
    printf("%s %s(", i == 0 ? " " : ",", name);
    for (int32_t d = 0; d < array->ndim; ++d)
      printf("%s%lld", d ? ", " : "", (long long)array->shape[d]);
    printf(")");
  }
  printf("\n");
  uint64_t count = mp_module_import_count(module);
  for (uint64_t i = 0; i < count; ++i) print_tree(mp_module_import_at(module, i), depth + 1);
}

/* A compact 1-D float32 CPU tensor over |data|. */
static DLTensor float_vector(float* data, int64_t* shape) {
  DLTensor t = {0};
  t.data = data;
  t.device.device_type = kDLCPU;
  t.device.device_id = 0;
  t.ndim = 1;
  t.dtype.code = kDLFloat;
  t.dtype.bits = 32;
  t.dtype.lanes = 1;
  t.shape = shape;
  t.strides = NULL;
  t.byte_offset = 0;
  return t;
}

static int is_float32_vector(const DLTensor* t, int64_t n) {
  return t->device.device_type == kDLCPU && t->ndim == 1 && t->shape[0] == n &&
         t->dtype.code == kDLFloat && t->dtype.bits == 32 && t->dtype.lanes == 1 &&
         (t->strides == NULL || t->strides[0] == 1);
}

static const float* tensor_floats(const DLTensor* t) {
  return (const float*)((const char*)t->data + t->byte_offset);
}

static int fail(const char* what) {
  const char* message = mp_error_message();
  fprintf(stderr, "c_embed: %s failed: %s\n", what, message[0] ? message : "(no message)");
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DEPLOY.so\n", argv[0]);
    return 2;
  }
  mp_version_t version;
  mp_get_version(&version);
  printf("modpack runtime %d.%d.%d (format %d.%d)\n", version.major, version.minor, version.patch,
         MP_FORMAT_MAJOR, MP_FORMAT_MINOR);

  mp_module_t* root = NULL;
  if (mp_module_load_from_file(argv[1], 0, &root) != MP_OK) return fail("loading the library");
  printf("module tree of %s:\n", argv[1]);
  print_tree(root, 0);

  int status = 1;
  mp_function_t* affine = NULL;
  if (mp_module_get_function(root, "affine", 1, &affine) != MP_OK) {
    fail("looking up 'affine'");
    goto done;
  }

  float x[N], out[N];
  for (int i = 0; i < N; ++i) {
    x[i] = (float)i / (float)(N - 1); /* linspace(0, 1, 8) */
    out[i] = NAN;                     /* so an output never written cannot pass */
  }
  int64_t shape[1] = {N};
  DLTensor x_tensor = float_vector(x, shape);
  DLTensor out_tensor = float_vector(out, shape);
  mp_value_t args[2] = {mp_tensor(&x_tensor), mp_tensor(&out_tensor)};
  mp_value_t ret;
  if (mp_function_call(affine, args, 2, &ret) != MP_OK) {
    fail("calling 'affine'");
    goto done;
  }

  /* The weights and bias, read in place from the loaded library (no copies). */
  const DLTensor* weights = NULL;
  const DLTensor* bias = NULL;
  if (mp_module_get_array(root, "weights", 1, &weights) != MP_OK) {
    fail("finding array 'weights'");
    goto done;
  }
  if (mp_module_get_array(root, "bias", 1, &bias) != MP_OK) {
    fail("finding array 'bias'");
    goto done;
  }
  if (!is_float32_vector(weights, N) || !is_float32_vector(bias, N)) {
    fprintf(stderr, "c_embed: 'weights' and 'bias' must be compact float32 vectors of %d\n", N);
    goto done;
  }
  const float* w = tensor_floats(weights);
  const float* b = tensor_floats(bias);

  printf("affine(x) =");
  for (int i = 0; i < N; ++i) printf(" %.3f", out[i]);
  printf("\n");
  int mismatches = 0;
  for (int i = 0; i < N; ++i) {
    float expected = x[i] * w[i] + b[i];
    float diff = out[i] - expected;
    if (!(diff <= 1e-6f && diff >= -1e-6f)) { /* also false for NaN */
      fprintf(stderr, "c_embed: out[%d] = %.9g, expected %.9g\n", i, out[i], expected);
      ++mismatches;
    }
  }
  if (mismatches) {
    fprintf(stderr, "c_embed: %d of %d elements differ\n", mismatches, N);
    goto done;
  }

  int64_t short_shape[1] = {N / 2};
  DLTensor short_out = float_vector(out, short_shape);
  mp_value_t wrong[2] = {mp_tensor(&x_tensor), mp_tensor(&short_out)};
  if (mp_function_call(affine, wrong, 2, &ret) != MP_ERR_INVALID_ARGUMENT) {
    fprintf(stderr, "c_embed: a call with a short output array was not refused\n");
    goto done;
  }
  printf("refused: %s\n", mp_error_message());
  printf("c_embed: OK\n");
  status = 0;

done:
  mp_function_release(affine);
  mp_module_release(root);
  return status;
}
