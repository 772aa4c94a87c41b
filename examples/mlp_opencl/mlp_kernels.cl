/* mlp_kernels.cl: the kernels of a small multilayer perceptron, in the styles OpenCL projects
 * use. The element type and the work-group size come from build options, a typedef names the
 * element type, the activation is chosen with #if, and the reductions go through __local
 * memory. Build options:
 *
 *   -DREAL=float -DWG=64 -DACTIVATION=0   (0: ReLU, 1: GELU, tanh approximation)
 */
#ifndef REAL
#error "build with -DREAL=<element type>"
#endif
#ifndef WG
#define WG 64
#endif
#define RELU 0
#define GELU 1

typedef REAL real_t;

/* A tree reduction over the work-group's WG values in |scratch|; |op| combines two. */
#define REDUCE(scratch, lid, op)                                   \
  for (int stride = WG / 2; stride > 0; stride >>= 1) {            \
    if ((lid) < stride)                                             \
      (scratch)[lid] = op((scratch)[lid], (scratch)[(lid) + stride]); \
    barrier(CLK_LOCAL_MEM_FENCE);                                   \
  }
#define ADD(a, b) ((a) + (b))

__kernel void dense(__global const real_t* restrict x, __global const real_t* restrict w,
                    __global const real_t* restrict bias, __global real_t* restrict y,
                    const int in_features, const int out_features, __local real_t* partial);

/* y[b, o] = dot(x[b, :], w[o, :]) + bias[o] (no bias when |bias| is NULL). One work-group per
 * output feature and batch row; its WG work-items split the dot product. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void dense(__global const real_t* restrict x, __global const real_t* restrict w,
           __global const real_t* restrict bias, __global real_t* restrict y,
           const int in_features, const int out_features, __local real_t* partial) {
  const int o = get_group_id(0), b = get_global_id(1), lid = get_local_id(0);
  real_t acc = 0;
  for (int i = lid; i < in_features; i += WG)
    acc += x[b * in_features + i] * w[o * in_features + i];
  partial[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  REDUCE(partial, lid, ADD)
  if (lid == 0) y[b * out_features + o] = partial[0] + (bias ? bias[o] : (real_t)0);
}

/* The activation, in place. */
#if ACTIVATION == RELU
__kernel void activate(__global real_t* x, const int n) {
  const int i = get_global_id(0);
  if (i < n) x[i] = fmax(x[i], (real_t)0);
}
#elif ACTIVATION == GELU
__kernel void activate(__global real_t* x, const int n) {
  const int i = get_global_id(0);
  if (i < n) {
    const real_t v = x[i];
    const real_t inner = (real_t)0.7978845608028654 * (v + (real_t)0.044715 * v * v * v);
    x[i] = (real_t)0.5 * v * ((real_t)1 + tanh(inner));
  }
}
#else
#error "ACTIVATION must be 0 (ReLU) or 1 (GELU)"
#endif

/* probs[r, :] = softmax(logits[r, :]), one work-group per row: the row's maximum, then the sum
 * of exponentials, each reduced through local memory. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void softmax_rows(__global const real_t* restrict logits, __global real_t* restrict probs,
                  const int cols, __local real_t* scratch) {
  const int row = get_group_id(0), lid = get_local_id(0);
  __global const real_t* in = logits + row * cols;
  __global real_t* out = probs + row * cols;
  real_t m = -INFINITY;
  for (int c = lid; c < cols; c += WG) m = fmax(m, in[c]);
  scratch[lid] = m;
  barrier(CLK_LOCAL_MEM_FENCE);
  REDUCE(scratch, lid, fmax)
  m = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE); /* everyone has read the maximum before scratch is reused */
  real_t s = 0;
  for (int c = lid; c < cols; c += WG) s += exp(in[c] - m);
  scratch[lid] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  REDUCE(scratch, lid, ADD)
  s = scratch[0];
  for (int c = lid; c < cols; c += WG) out[c] = exp(in[c] - m) / s;
}
