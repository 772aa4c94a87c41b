/* Runs the MLP of deploy.so from C, with no Python: call mlp_forward on host arrays, then
 * check every probability against a plain C forward pass over the same weights (read in place
 * from the library through the runtime). */
#include <math.h>
#include <stdio.h>

#include "modpack/modpack.h"

enum { BATCH = 16, IN = 64, H1 = 128, H2 = 64, OUT = 10 };

static int fail(const char* what) {
  fprintf(stderr, "mlp_opencl (C): %s failed: %s\n", what, mp_error_message());
  return 1;
}

static double gelu(double v) {
  return 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
}

/* y = act(w x + b) for one row; |b| may be NULL, |act| too. */
static void layer(const float* w, const float* b, const double* x, int in, int out, double* y,
                  double (*act)(double)) {
  for (int o = 0; o < out; ++o) {
    double acc = b ? b[o] : 0.0;
    for (int i = 0; i < in; ++i) acc += (double)w[o * in + i] * x[i];
    y[o] = act ? act(acc) : acc;
  }
}

static const float* weight(mp_module_t* root, const char* name) {
  const DLTensor* t = NULL;
  return mp_module_get_array(root, name, 1, &t) == MP_OK ? (const float*)t->data : NULL;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s deploy.so\n", argv[0]);
    return 2;
  }
  mp_module_t* root = NULL;
  if (mp_module_load_from_file(argv[1], 0, &root) != MP_OK) return fail("loading");
  static float x[BATCH][IN], probs[BATCH][OUT];
  for (int b = 0; b < BATCH; ++b)
    for (int i = 0; i < IN; ++i) x[b][i] = (float)sin(0.37 * (b * IN + i));
  int64_t x_shape[2] = {BATCH, IN}, p_shape[2] = {BATCH, OUT};
  DLDataType f32 = {kDLFloat, 32, 1};
  DLDevice cpu = {kDLCPU, 0};
  DLTensor xt = {x, cpu, 2, f32, x_shape, NULL, 0};
  DLTensor pt = {probs, cpu, 2, f32, p_shape, NULL, 0};

  mp_function_t* forward = NULL;
  if (mp_module_get_function(root, "mlp_forward", 0, &forward) != MP_OK) return fail("lookup");
  mp_value_t args[2] = {mp_tensor(&xt), mp_tensor(&pt)}, ret;
  if (mp_function_call(forward, args, 2, &ret) != MP_OK) return fail("mlp_forward");

  const float *w1 = weight(root, "w1"), *b1 = weight(root, "b1"), *w2 = weight(root, "w2"),
              *b2 = weight(root, "b2"), *w3 = weight(root, "w3");
  if (!w1 || !b1 || !w2 || !b2 || !w3) return fail("finding the weights");
  double worst = 0.0;
  for (int b = 0; b < BATCH; ++b) {
    double in[IN], h1[H1], h2[H2], logits[OUT], max = -INFINITY, sum = 0.0;
    for (int i = 0; i < IN; ++i) in[i] = x[b][i];
    layer(w1, b1, in, IN, H1, h1, gelu);
    layer(w2, b2, h1, H1, H2, h2, gelu);
    layer(w3, NULL, h2, H2, OUT, logits, NULL);
    for (int o = 0; o < OUT; ++o) max = logits[o] > max ? logits[o] : max;
    for (int o = 0; o < OUT; ++o) sum += exp(logits[o] - max);
    for (int o = 0; o < OUT; ++o) {
      double error = fabs(probs[b][o] - exp(logits[o] - max) / sum);
      worst = error > worst ? error : worst;
    }
  }
  if (worst > 1e-5) {
    fprintf(stderr, "mlp_opencl (C): probabilities differ by %g\n", worst);
    return 1;
  }
  /* A wrong shape is refused with the host code's own message. */
  int64_t bad_shape[2] = {BATCH, IN - 1};
  DLTensor bad = {x, cpu, 2, f32, bad_shape, NULL, 0};
  mp_value_t bad_args[2] = {mp_tensor(&bad), mp_tensor(&pt)};
  if (mp_function_call(forward, bad_args, 2, &ret) == MP_OK) {
    fprintf(stderr, "mlp_opencl (C): a [%d, %d] input was accepted\n", BATCH, IN - 1);
    return 1;
  }
  printf("refused as it should be: %s\n", mp_error_message());
  printf("mlp_opencl (C): OK, %dx%d probabilities match (max abs error %.1e)\n", BATCH, OUT,
         worst);
  mp_function_release(forward);
  mp_module_release(root);
  return 0;
}
