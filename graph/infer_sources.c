/* Shape inference for nodes without inputs: placeholder, constant, variable
 * and fill. Their shapes come from attributes, which a file may set to
 * anything, so rank, sign and byte size are all checked here (a negative dimension,
 * a rank above the maximum or a byte size past 64 bits is an invalid graph). */
#include <string.h>

#include "graph/infer_common.h"

/* Reads the "shape" attribute into out (rank and dims). `allow_unknown0`
 * lets dim 0 be FG_DIM_UNKNOWN (placeholders: the batch size comes from the
 * feed). */
static int shape_attr(const fg_node *n, int allow_unknown0, fg_tinfo *out, fg_status *st) {
  const int64_t *dims;
  int count;
  char s[FGI_STR];
  if (fgi_attr_ints(n, "shape", 1, &dims, &count, st)) return -1;
  if (count > FG_MAX_RANK)
    return fgi_fail(n, st, "shape %s has rank %d, above the maximum %d", fgi_ints(dims, count, s),
                    count, FG_MAX_RANK);
  for (int i = 0; i < count; i++) {
    if (dims[i] >= 0) continue;
    if (dims[i] == FG_DIM_UNKNOWN && i == 0 && allow_unknown0) continue;
    if (dims[i] == FG_DIM_UNKNOWN && allow_unknown0)
      return fgi_fail(n, st,
                      "shape %s has an unknown (-1) dimension at dim %d; only dim 0 may "
                      "be unknown",
                      fgi_ints(dims, count, s), i);
    return fgi_fail(n, st, "shape %s has negative dimension %lld at dim %d",
                    fgi_ints(dims, count, s), (long long)dims[i], i);
  }
  out->rank = count;
  if (count) memcpy(out->dims, dims, (size_t)count * sizeof dims[0]);
  return 0;
}

int fgi_infer_placeholder(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                          fg_status *status) {
  (void)in;
  fg_dtype dt;
  if (fgi_attr_dtype(node, "dtype", &dt, status)) return -1;
  if (shape_attr(node, 1, &out[0], status)) return -1;
  out[0].dtype = dt;
  return fgi_check_bytes(node, &out[0], status);
}

/* constant and variable: the value attribute is the output (for a variable,
 * its initial value, whose dtype and shape the current value keeps). */
int fgi_infer_constant(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  (void)in;
  const fg_tensor *t = fgi_attr_tensor(node, "value", status);
  if (!t) return -1;
  int rank = fg_tensor_rank(t);
  const int64_t *dims = fg_tensor_dims(t);
  if (rank < 0 || rank > FG_MAX_RANK || (rank > 0 && !dims))
    return fgi_fail(node, status, "value tensor has invalid rank %d", rank);
  if (!fgi_dtype_valid(fg_tensor_dtype(t)))
    return fgi_fail(node, status, "value tensor has invalid dtype %d", (int)fg_tensor_dtype(t));
  out[0].dtype = fg_tensor_dtype(t);
  out[0].rank = rank;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0)
      return fgi_fail(node, status, "value tensor has negative dimension %lld at dim %d",
                      (long long)dims[i], i);
    out[0].dims[i] = dims[i];
  }
  return 0;
}

int fgi_infer_fill(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  (void)in;
  fg_dtype dt;
  double v;
  if (fgi_attr_dtype(node, "dtype", &dt, status)) return -1;
  if (shape_attr(node, 0, &out[0], status)) return -1;
  /* Absent value: zeros, as the kernel parameter defaults to 0. */
  if (fgi_attr_float(node, "value", 0.0, &v, status)) return -1;
  out[0].dtype = dt;
  return fgi_check_bytes(node, &out[0], status);
}

/* random_uniform, random_normal, truncated_normal: a fill's dtype and
 * shape (f32 or f64 only: the values are drawn as floats), plus their
 * distribution's parameters, refused here so a file meets the builders'
 * rules. */
int fgi_infer_random(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  (void)in;
  fg_dtype dt;
  int64_t seed, stream;
  if (fgi_attr_dtype(node, "dtype", &dt, status)) return -1;
  if (dt != FG_F32 && dt != FG_F64)
    return fgi_fail(node, status, "attribute 'dtype' = %s; random values are f32 or f64",
                    fg_dtype_name(dt));
  if (shape_attr(node, 0, &out[0], status)) return -1;
  if (fgi_attr_int(node, "seed", 0, 0, &seed, status)) return -1;
  if (fgi_attr_int(node, "stream", 0, -1, &stream, status)) return -1;
  if (stream < -1 || stream > (int64_t)UINT32_MAX)
    return fgi_fail(node, status, "attribute 'stream' = %lld is outside [0, 2^32) and not -1",
                    (long long)stream);
  if (node->op == FG_OP_RANDOM_UNIFORM) {
    double lo, hi;
    if (fgi_attr_float(node, "low", 0.0, &lo, status)) return -1;
    if (fgi_attr_float(node, "high", 1.0, &hi, status)) return -1;
    if (!(lo < hi))
      return fgi_fail(node, status, "attribute 'low' = %g must be below 'high' = %g", lo, hi);
  } else {
    double mean, sd;
    if (fgi_attr_float(node, "mean", 0.0, &mean, status)) return -1;
    if (fgi_attr_float(node, "stddev", 1.0, &sd, status)) return -1;
    if (!(sd > 0)) return fgi_fail(node, status, "attribute 'stddev' = %g must be > 0", sd);
  }
  out[0].dtype = dt;
  return fgi_check_bytes(node, &out[0], status);
}

/* The stream: the attribute, or for -1 the 32-bit FNV-1a hash of the
 * node's name (names are unique in a graph and saved with it, so a loaded
 * graph draws what the built one drew). */
int fgi_parse_random(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *status) {
  (void)in;
  int64_t stream;
  if (fgi_attr_int(node, "stream", 0, -1, &stream, status)) return -1;
  if (stream == -1) {
    uint32_t h = 2166136261u;
    for (const char *c = node->name ? node->name : ""; *c; c++)
      h = (h ^ (uint8_t)*c) * 16777619u;
    stream = h;
  }
  p->random.stream = stream;
  return 0;
}
