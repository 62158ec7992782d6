/* Initialisers as torch.nn.init computes them (torch 1.13):
 * - fans (_calculate_fan_in_and_fan_out): rank >= 2; fan_in = dims[1] *
 *   receptive field, fan_out = dims[0] * receptive field, the receptive
 *   field being the product of dims[2:] (1 for a linear weight [out, in]);
 * - kaiming_uniform_(a, mode, 'leaky_relu'): gain = sqrt(2 / (1 + a^2)),
 *   bound = gain * sqrt(3 / fan); kaiming_normal_: std = gain / sqrt(fan);
 * - xavier_uniform_(gain): bound = gain * sqrt(6 / (fan_in + fan_out));
 *   xavier_normal_: std = gain * sqrt(2 / (fan_in + fan_out)).
 * A tensor with no elements draws nothing (torch warns and returns it). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "flowgraph/graph.h"
#include "graph/infer_common.h"
#include "graph/init.h"

uint32_t fg_name_stream(const char *name) {
  uint32_t h = 2166136261u;
  for (const char *c = name ? name : ""; *c; c++)
    h = (h ^ (uint8_t)*c) * 16777619u;
  return h;
}

int fg_init_fans(int rank, const int64_t *dims, int64_t *fan_in, int64_t *fan_out) {
  if (rank < 2 || rank > FG_MAX_RANK || !dims) return -1;
  int64_t rf = 1;
  for (int d = 2; d < rank; d++)
    rf *= dims[d];
  if (fan_in) *fan_in = dims[1] * rf;
  if (fan_out) *fan_out = dims[0] * rf;
  return 0;
}

double fg_init_gain(const char *nonlinearity, double param) {
  if (!nonlinearity) return NAN;
  static const char *const ones[] = {"linear",           "conv1d",           "conv2d",
                                     "conv3d",           "conv_transpose1d", "conv_transpose2d",
                                     "conv_transpose3d", "sigmoid"};
  for (size_t i = 0; i < sizeof ones / sizeof ones[0]; i++)
    if (strcmp(nonlinearity, ones[i]) == 0) return 1.0;
  if (strcmp(nonlinearity, "tanh") == 0) return 5.0 / 3.0;
  if (strcmp(nonlinearity, "relu") == 0) return sqrt(2.0);
  if (strcmp(nonlinearity, "leaky_relu") == 0) return sqrt(2.0 / (1.0 + param * param));
  if (strcmp(nonlinearity, "selu") == 0) return 3.0 / 4.0;
  return NAN;
}

static const char *kind_name(int k) {
  static const char *const names[] = {"zeros",          "ones",           "constant",
                                      "uniform",        "normal",         "kaiming_uniform",
                                      "kaiming_normal", "xavier_uniform", "xavier_normal"};
  return k >= 0 && k <= FG_INIT_XAVIER_NORMAL ? names[k] : "?";
}

/* dtype and shape of a variable without a value. */
static int read_shape(const fg_node *n, fg_init_spec *s, fg_status *st) {
  const int64_t *dims;
  int count;
  char b[FGI_STR];
  if (fgi_attr_dtype(n, "dtype", &s->dtype, st)) return -1;
  if (fgi_attr_ints(n, "shape", 1, &dims, &count, st)) return -1;
  if (count > FG_MAX_RANK)
    return fgi_fail(n, st, "shape %s has rank %d, above the maximum %d", fgi_ints(dims, count, b),
                    count, FG_MAX_RANK);
  for (int i = 0; i < count; i++)
    if (dims[i] < 0)
      return fgi_fail(n, st, "shape %s has negative dimension %lld at dim %d",
                      fgi_ints(dims, count, b), (long long)dims[i], i);
  s->rank = count;
  if (count) memcpy(s->dims, dims, (size_t)count * sizeof dims[0]);
  return 0;
}

/* The bounds or std of the kinds that scale by fans. */
static int scaled(const fg_node *n, fg_init_spec *s, fg_status *st) {
  char b[FGI_STR];
  int64_t fi, fo;
  if (fg_init_fans(s->rank, s->dims, &fi, &fo) != 0)
    return fgi_fail(n, st,
                    "init %s needs rank >= 2 to compute fan in and fan out (as torch.nn.init); "
                    "shape is %s",
                    kind_name(s->kind), fgi_ints(s->dims, s->rank, b));
  int kaiming = s->kind == FG_INIT_KAIMING_UNIFORM || s->kind == FG_INIT_KAIMING_NORMAL;
  int uniform = s->kind == FG_INIT_KAIMING_UNIFORM || s->kind == FG_INIT_XAVIER_UNIFORM;
  s->mean = 0;
  if (fi == 0 || fo == 0) { /* no elements: nothing is drawn */
    s->lo = -1, s->hi = 1, s->std = 1;
    return 0;
  }
  double sd;
  if (kaiming) {
    double gain = sqrt(2.0 / (1.0 + s->a * s->a));
    double fan = (double)(s->fan_out ? fo : fi);
    sd = gain / sqrt(fan);
    if (uniform) s->hi = gain * sqrt(3.0 / fan);
  } else {
    double gain = s->a == 0 ? 1.0 : s->a;
    if (gain < 0)
      return fgi_fail(n, st, "init %s: gain (init_a) = %g must be > 0 (0 means 1)",
                      kind_name(s->kind), s->a);
    sd = gain * sqrt(2.0 / (double)(fi + fo));
    if (uniform) s->hi = gain * sqrt(6.0 / (double)(fi + fo));
  }
  s->std = sd;
  if (uniform) s->lo = -s->hi;
  return 0;
}

int fg_init_read(const fg_node *n, fg_init_spec *s, fg_status *st) {
  memset(s, 0, sizeof *s);
  int64_t kind, fan_out, seed, stream;
  if (fgi_attr_int(n, "init", 1, 0, &kind, st)) return -1;
  if (kind < FG_INIT_ZEROS || kind > FG_INIT_XAVIER_NORMAL)
    return fgi_fail(n, st, "attribute 'init' = %lld is no initialiser kind (0 to %d)",
                    (long long)kind, (int)FG_INIT_XAVIER_NORMAL);
  s->kind = (int)kind;
  if (read_shape(n, s, st)) return -1;
  if (fgi_attr_float(n, "init_a", 0.0, &s->a, st) || fgi_attr_float(n, "init_b", 0.0, &s->b, st))
    return -1;
  if (fgi_attr_int(n, "init_fan_out", 0, 0, &fan_out, st) ||
      fgi_attr_int(n, "seed", 0, 0, &seed, st) || fgi_attr_int(n, "stream", 0, -1, &stream, st))
    return -1;
  if (fan_out != 0 && fan_out != 1)
    return fgi_fail(n, st, "attribute 'init_fan_out' = %lld must be 0 or 1", (long long)fan_out);
  if (stream < -1 || stream > (int64_t)UINT32_MAX)
    return fgi_fail(n, st, "attribute 'stream' = %lld is outside [0, 2^32) and not -1",
                    (long long)stream);
  s->fan_out = (int)fan_out;
  s->seed = seed;
  s->stream = stream == -1 ? fg_name_stream(n->name) : (uint32_t)stream;
  int draws = s->kind >= FG_INIT_UNIFORM;
  if (draws && s->dtype != FG_F32 && s->dtype != FG_F64)
    return fgi_fail(n, st, "init %s draws floats; dtype %s is not f32 or f64", kind_name(s->kind),
                    fg_dtype_name(s->dtype));
  switch (s->kind) {
  case FG_INIT_ZEROS: s->fill = 0; break;
  case FG_INIT_ONES: s->fill = 1; break;
  case FG_INIT_CONSTANT:
    s->fill = s->a;
    /* Converting a double an integer type cannot hold is undefined in C. */
    if ((s->dtype == FG_I32 && !(s->a == floor(s->a) && fabs(s->a) <= 2147483647.0)) ||
        (s->dtype == FG_I64 && !(s->a == floor(s->a) && fabs(s->a) <= 9007199254740992.0)))
      return fgi_fail(n, st, "init constant: value (init_a) = %g is not an integer %s holds", s->a,
                      fg_dtype_name(s->dtype));
    break;
  case FG_INIT_UNIFORM:
    if (!(s->a < s->b))
      return fgi_fail(n, st, "init uniform: low (init_a) = %g must be below high (init_b) = %g",
                      s->a, s->b);
    s->lo = s->a, s->hi = s->b;
    break;
  case FG_INIT_NORMAL:
    if (!(s->b > 0)) return fgi_fail(n, st, "init normal: std (init_b) = %g must be > 0", s->b);
    s->mean = s->a, s->std = s->b;
    break;
  default: return scaled(n, s, st);
  }
  return 0;
}
