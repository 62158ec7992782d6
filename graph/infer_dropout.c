/* Shape inference for the training mode (training_flag), dropout and its
 * gradient, and variables (a value, or an initialiser: graph/init.c). */
#include <string.h>

#include "graph/infer_common.h"
#include "graph/init.h"

int fgi_infer_training_flag(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                            fg_status *status) {
  (void)node, (void)in, (void)status;
  out[0].dtype = FG_BOOL;
  out[0].rank = 0;
  return 0;
}

/* dropout(x, training) and dropout_grad(dy, training): x's dtype and shape;
 * training a bool scalar; p in [0, 1) (p = 1 would divide by zero: torch
 * returns zeros there, a graph asks for it by mistake more often). */
int fgi_infer_dropout(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  char b[FGI_STR];
  const char *x = node->op == FG_OP_DROPOUT ? "x" : "dy";
  if (in[0].dtype != FG_F32 && in[0].dtype != FG_F64)
    return fgi_fail(node, status, "input '%s' is %s; dropout takes f32 or f64", x,
                    fg_dtype_name(in[0].dtype));
  if (in[1].dtype != FG_BOOL || in[1].rank != 0)
    return fgi_fail(node, status, "input 'training' is %s %s; it must be a bool scalar",
                    fg_dtype_name(in[1].dtype), fgi_shape(&in[1], b));
  double p;
  int64_t stream, replica;
  if (fgi_attr_float(node, "p", 0.5, &p, status)) return -1;
  if (!(p >= 0 && p < 1)) return fgi_fail(node, status, "attribute 'p' = %g is outside [0, 1)", p);
  if (fgi_attr_int(node, "stream", 0, -1, &stream, status)) return -1;
  if (stream < -1 || stream > (int64_t)UINT32_MAX)
    return fgi_fail(node, status, "attribute 'stream' = %lld is outside [0, 2^32) and not -1",
                    (long long)stream);
  if (fgi_attr_int(node, "replica", 0, 0, &replica, status)) return -1;
  if (replica < 0 || replica > 0xFFFF)
    return fgi_fail(node, status, "attribute 'replica' = %lld is outside [0, 2^16)",
                    (long long)replica);
  out[0] = in[0];
  return 0;
}

int fgi_parse_dropout(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *status) {
  (void)in;
  int64_t stream;
  if (fgi_attr_int(node, "stream", 0, -1, &stream, status)) return -1;
  p->dropout.stream = stream == -1 ? (int64_t)fg_name_stream(node->name) : stream;
  return 0;
}

/* A variable: its value's dtype and shape, or its initialiser's. A saved
 * checkpoint holds both (the trained value wins): they must agree. */
int fgi_infer_variable(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  const int has_value = fg_attrs_find(&node->attrs, "value") != NULL;
  const int has_init = fg_attrs_find(&node->attrs, "init") != NULL;
  if (has_value && fgi_infer_constant(node, in, out, status)) return -1;
  if (!has_init) {
    if (!has_value) return fgi_fail(node, status, "has neither 'value' nor 'init'");
    return 0;
  }
  fg_init_spec s;
  if (fg_init_read(node, &s, status)) return -1;
  fg_tinfo t;
  memset(&t, 0, sizeof t);
  t.dtype = s.dtype;
  t.rank = s.rank;
  memcpy(t.dims, s.dims, sizeof t.dims);
  if (has_value) {
    char a[FGI_STR], b[FGI_STR];
    int same = t.dtype == out[0].dtype && t.rank == out[0].rank;
    for (int d = 0; same && d < t.rank; d++)
      same = t.dims[d] == out[0].dims[d];
    if (!same)
      return fgi_fail(node, status,
                      "value is %s %s but the initialiser's dtype and shape are %s %s",
                      fg_dtype_name(out[0].dtype), fgi_shape(&out[0], a), fg_dtype_name(t.dtype),
                      fgi_shape(&t, b));
    return 0;
  }
  out[0] = t;
  return fgi_check_bytes(node, &out[0], status);
}
