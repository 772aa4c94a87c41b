/* mlp_host.c: the host code of a 3-layer MLP, written the way a model compiler generates it.
 * Shapes are baked in, the batch is not; every intermediate lives in a workspace of the
 * device's pool; the weights are the const module's arrays, fetched on the device (uploaded
 * once, then cached by the library); each step checks its status and gives up on failure
 * (the call then fails with the first error). Runs on OpenCL device 0.
 *
 *   probs = softmax(W3 act(W2 act(W1 x + b1) + b2))      x: [batch, 64], probs: [batch, 10]
 */
#include "modpack/backend.h"

enum { IN = 64, H1 = 128, H2 = 64, OUT = 10, WG = 64 }; /* WG: the kernels' -DWG */

static const DLDataType kF32 = {kDLFloat, 32, 1};

/* A float32 matrix over a workspace. */
static DLTensor matrix(void* data, DLDevice device, int64_t* shape) {
  DLTensor t = {data, device, 2, kF32, shape, NULL, 0};
  return t;
}

static mp_status_t dense(DLTensor* x, const DLTensor* w, const DLTensor* bias, DLTensor* y) {
  static void* kernel; /* a handle stays valid while the library is loaded */
  mp_status_t s;
  if (!kernel && (s = mp_backend_get_function("dense", &kernel)) != MP_OK) return s;
  int64_t batch = x->shape[0], in = x->shape[1], out = y->shape[1];
  mp_value_t args[] = {
      mp_tensor(x), mp_tensor((DLTensor*)w), bias ? mp_tensor((DLTensor*)bias) : mp_none(),
      mp_tensor(y), mp_int(in), mp_int(out), mp_local_memory(WG * sizeof(float)),
      /* global: a work-group per output and row; local: WG */
      mp_int(out * WG), mp_int(batch), mp_int(1), mp_int(WG), mp_int(1), mp_int(1)};
  mp_value_t ret;
  return mp_backend_call(kernel, args, 13, &ret);
}

static mp_status_t activate(DLTensor* x) {
  static void* kernel; /* a handle stays valid while the library is loaded */
  mp_status_t s;
  if (!kernel && (s = mp_backend_get_function("activate", &kernel)) != MP_OK) return s;
  int64_t n = x->shape[0] * x->shape[1];
  mp_value_t args[] = {mp_tensor(x), mp_int(n), mp_int(n), mp_int(1), mp_int(1),
                       mp_int(0),    mp_int(0), mp_int(0)};
  mp_value_t ret;
  return mp_backend_call(kernel, args, 8, &ret);
}

static mp_status_t softmax(DLTensor* logits, DLTensor* probs) {
  static void* kernel;
  mp_status_t s;
  if (!kernel && (s = mp_backend_get_function("softmax_rows", &kernel)) != MP_OK) return s;
  int64_t rows = logits->shape[0], cols = logits->shape[1];
  mp_value_t args[] = {mp_tensor(logits), mp_tensor(probs), mp_int(cols),
                       mp_local_memory(WG * sizeof(float)),
                       mp_int(rows * WG), mp_int(1), mp_int(1), mp_int(WG), mp_int(1), mp_int(1)};
  mp_value_t ret;
  return mp_backend_call(kernel, args, 10, &ret);
}

/* The layers, on workspaces |t|: x, h1, h2, logits, probs. */
enum { T_X, T_H1, T_H2, T_LOGITS, T_PROBS, T_COUNT };
static void run_layers(const DLTensor* x, DLTensor* probs, DLTensor* t, DLDevice dev) {
  const DLTensor *w1, *b1, *w2, *b2, *w3;
  if (mp_backend_get_array_on("w1", dev, &w1) != MP_OK) return;
  if (mp_backend_get_array_on("b1", dev, &b1) != MP_OK) return;
  if (mp_backend_get_array_on("w2", dev, &w2) != MP_OK) return;
  if (mp_backend_get_array_on("b2", dev, &b2) != MP_OK) return;
  if (mp_backend_get_array_on("w3", dev, &w3) != MP_OK) return;
  if (mp_backend_copy(x, &t[T_X]) != MP_OK) return;
  if (dense(&t[T_X], w1, b1, &t[T_H1]) != MP_OK) return;
  if (activate(&t[T_H1]) != MP_OK) return;
  if (dense(&t[T_H1], w2, b2, &t[T_H2]) != MP_OK) return;
  if (activate(&t[T_H2]) != MP_OK) return;
  if (dense(&t[T_H2], w3, NULL, &t[T_LOGITS]) != MP_OK) return; /* no bias: NULL */
  if (softmax(&t[T_LOGITS], &t[T_PROBS]) != MP_OK) return;
  mp_backend_copy(&t[T_PROBS], probs);
}

/* mlp_forward(x, probs): x and probs on the CPU or on the OpenCL device; their shapes are
 * checked against the signature below before this runs. */
static void mlp_forward(const DLTensor* x, DLTensor* probs) {
  const DLDevice dev = {kDLOpenCL, 0};
  const int64_t batch = x->shape[0];
  int64_t shapes[T_COUNT][2] = {{batch, IN}, {batch, H1}, {batch, H2}, {batch, OUT}, {batch, OUT}};
  void* workspaces[T_COUNT];
  DLTensor t[T_COUNT];
  int allocated = 0;
  for (; allocated < T_COUNT; ++allocated) {
    uint64_t nbytes = (uint64_t)(shapes[allocated][0] * shapes[allocated][1]) * sizeof(float);
    if (mp_backend_alloc_workspace(dev, nbytes, &workspaces[allocated]) != MP_OK) break;
    t[allocated] = matrix(workspaces[allocated], dev, shapes[allocated]);
  }
  if (allocated == T_COUNT) run_layers(x, probs, t, dev);
  while (allocated-- > 0) mp_backend_free_workspace(dev, workspaces[allocated]);
}
MP_EXPORT_TYPED_VOID_FUNC(mlp_forward,
                          "x: float32[batch, 64] cpu opencl, probs: float32[batch, 10] cpu opencl",
                          const DLTensor*, DLTensor*)
