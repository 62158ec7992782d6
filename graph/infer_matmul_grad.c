/* Shape inference and FLOPs of the gradient epilogue ops (the
 * grad_epilogue pass makes them, executor/passes/epilogue_grad.c):
 *
 * fused_matmul_relu_grad(a, b, y): op(a) @ op(b) where y > 0, else 0; the
 * product follows matmul's rules (2-D or batched, transposes, broadcast
 * batch dims) and y, relu's output, has the product's dtype and exact
 * shape (no broadcasting: it is the mask of each product element).
 *
 * matmul_bias_grad(a, dz): dw = a^T @ dz and db = the sum of dz's rows,
 * a [R, K] and dz [R, N] of one float dtype: the weight and bias
 * gradients of a dense layer x @ w + b. */
#include "graph/infer_common.h"

int fgi_infer_fused_matmul_relu_grad(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                                     fg_status *status) {
  char s1[FGI_STR], s2[FGI_STR];
  if (fgi_infer_matmul(node, in, out, status) != 0) return -1;
  const fg_tinfo *y = &in[2];
  if (y->dtype != in[0].dtype)
    return fgi_fail(node, status, "input 2 (y) dtype %s differs from input 0's %s",
                    fg_dtype_name(y->dtype), fg_dtype_name(in[0].dtype));
  int same = y->rank == out[0].rank;
  for (int i = 0; same && i < y->rank; i++)
    same = y->dims[i] < 0 || out[0].dims[i] < 0 || y->dims[i] == out[0].dims[i];
  if (!same)
    return fgi_fail(node, status, "input 2 (y) shape %s must be the product's shape %s",
                    fgi_shape(y, s1), fgi_shape(&out[0], s2));
  /* A dim the product leaves unknown is y's, when y knows it. */
  for (int i = 0; i < y->rank; i++)
    if (out[0].dims[i] < 0) out[0].dims[i] = y->dims[i];
  return 0;
}

/* matmul's 2*M*N*K, and one compare per output element. */
int64_t fgi_flops_fused_matmul_relu_grad(const fg_node *node, const fg_tinfo *in,
                                         const fg_tinfo *out) {
  int64_t mm = fgi_flops_matmul(node, in, out), e = fgi_elements(&out[0]);
  if (mm < 0 || e < 0) return -1;
  return mm > INT64_MAX - e ? INT64_MAX : mm + e;
}

int fgi_infer_matmul_bias_grad(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                               fg_status *status) {
  char s1[FGI_STR], s2[FGI_STR];
  const fg_tinfo *a = &in[0], *dz = &in[1];
  if (!fg_dtype_is_float(a->dtype) || dz->dtype != a->dtype)
    return fgi_fail(node, status,
                    "inputs 0 (a) and 1 (dz) must be f32 or f64 of one dtype, got %s and %s",
                    fg_dtype_name(a->dtype), fg_dtype_name(dz->dtype));
  if (a->rank != 2 || dz->rank != 2 ||
      (a->dims[0] >= 0 && dz->dims[0] >= 0 && a->dims[0] != dz->dims[0]))
    return fgi_fail(node, status,
                    "input 0 (a) shape %s and input 1 (dz) shape %s must be [R, K] and [R, N]",
                    fgi_shape(a, s1), fgi_shape(dz, s2));
  out[0].dtype = out[1].dtype = a->dtype;
  out[0].rank = 2, out[1].rank = 1;
  out[0].dims[0] = a->dims[1], out[0].dims[1] = dz->dims[1];
  out[1].dims[0] = dz->dims[1];
  return fgi_check_bytes(node, &out[0], status);
}

/* The product's 2*K*N*R, and one add per element of dz. */
int64_t fgi_flops_matmul_bias_grad(const fg_node *node, const fg_tinfo *in, const fg_tinfo *out) {
  (void)node;
  int64_t e = fgi_elements(&in[1]), k = in[0].dims[1], n = fgi_elements(&out[0]);
  if (e < 0 || k < 0 || n < 0) return -1;
  int64_t mm = fgi_mul_sat(fgi_mul_sat(e, k), 2);
  return mm > INT64_MAX - e ? INT64_MAX : mm + e;
}
