/* ONNX MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool onto
 * flowgraph's pooling ops (NCHW, torch.nn.functional's semantics).
 *
 * - 1-D pools run as 2-D ones of height 1; 3-D and higher are refused.
 * - ONNX's strides default to 1 (flowgraph's to the kernel), so they are
 *   always passed.
 * - auto_pad SAME_* becomes explicit pads giving ceil(in / stride) outputs
 *   (ceil_mode then plays no part); VALID is no padding.
 * - ceil_mode follows PyTorch, which exports it: the last window must start
 *   inside the input or its leading padding. ONNX's text formula would also
 *   keep a window that starts in the trailing padding; such a window holds
 *   no input element.
 * - flowgraph's pools take pads up to half the kernel (PyTorch's limit).
 *   Larger pads, which ONNX allows, pad the input explicitly first: with
 *   the dtype's lowest finite value for MaxPool (flowgraph's pad takes
 *   finite values only), with zeros for AveragePool, whose count_include_pad=0
 *   then divides the window sums of x by those of ones padded alike.
 * - MaxPool's Indices output is refused; storage_order only concerns it. */
#include <float.h>
#include <string.h>

#include "flowgraph/graph.h"
#include "schema/onnx/onnx_map_nn.h"

typedef struct pool_geo {
  int ns;               /* spatial axes: 1 or 2 */
  int64_t kernel[2];    /* kernel_shape */
  int64_t strides[2];   /* strides */
  int64_t dilations[2]; /* dilations (MaxPool) */
  int64_t pads[4];      /* begins, then ends */
  int64_t ceil_mode;    /* ceil_mode */
  int64_t cip;          /* count_include_pad (AveragePool) */
} pool_geo;

static int flag_attr(fgx_ctx *c, const fgx_node *n, const char *name, int64_t *v) {
  if (fgx_attr_int(c, n, name, 0, v) < 0) return -1;
  if (*v != 0 && *v != 1)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute '%s' = %lld must be 0 or 1", name,
                    (long long)*v);
  return 0;
}

/* X's rank (3 or 4) and spatial sizes. */
static int pool_x(fgx_ctx *c, const fgx_node *n, int *ns, int64_t *in) {
  fg_dtype dt;
  int rank;
  int64_t xd[FGX_MAX_DIMS];
  char b1[256];
  if (fgx_input_info(c, n, 0, &dt, &rank, xd) < 0) return -1;
  if (rank < 3)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "input 0 (X) shape %s has rank %d; it must be [N, C, spatial...], rank >= 3",
                    nnx_fmt(xd, rank, b1, sizeof b1), rank);
  *ns = rank - 2;
  if (*ns > 2)
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "%d-D pooling (input 0 (X) shape %s) is not supported: flowgraph pools 1-D "
                    "and 2-D inputs only",
                    *ns, nnx_fmt(xd, rank, b1, sizeof b1));
  for (int k = 0; k < *ns; k++) {
    in[k] = xd[2 + k];
    if (in[k] > NNX_ATTR_MAX)
      return fgx_fail(c, n, FG_UNIMPLEMENTED, "input 0 (X) spatial size %lld is above %lld",
                      (long long)in[k], (long long)NNX_ATTR_MAX);
  }
  return 0;
}

static int pool_attrs(fgx_ctx *c, const fgx_node *n, int is_max, pool_geo *p) {
  int64_t in[2] = {-1, -1}, order;
  int has_k, mode;
  memset(p, 0, sizeof *p);
  if (pool_x(c, n, &p->ns, in) < 0) return -1;
  const int ns = p->ns;
  if (nnx_ints(c, n, "kernel_shape", ns, 1, 1, p->kernel, &has_k) < 0) return -1;
  if (!has_k) return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute 'kernel_shape' is required");
  if (nnx_ints(c, n, "strides", ns, 1, 1, p->strides, NULL) < 0 ||
      nnx_ints(c, n, "dilations", ns, 1, 1, p->dilations, NULL) < 0 ||
      nnx_ints(c, n, "pads", 2 * ns, 0, 0, p->pads, NULL) < 0 ||
      flag_attr(c, n, "ceil_mode", &p->ceil_mode) < 0 || nnx_auto_pad(c, n, &mode) < 0)
    return -1;
  if (is_max) {
    if (flag_attr(c, n, "storage_order", &order) < 0) return -1;
    if (fgx_has_output(n, 1))
      return fgx_fail(c, n, FG_UNIMPLEMENTED,
                      "output 1 (Indices) is not supported: flowgraph's max_pool2d gives no "
                      "indices");
  } else {
    if (flag_attr(c, n, "count_include_pad", &p->cip) < 0) return -1;
    for (int k = 0; k < ns; k++)
      if (p->dilations[k] != 1)
        return fgx_fail(c, n, FG_UNIMPLEMENTED,
                        "attribute 'dilations' %lld on spatial axis %d: flowgraph's avg_pool2d "
                        "has no dilation",
                        (long long)p->dilations[k], k);
  }
  if (mode == NNX_PAD_NOTSET) return 0;
  p->ceil_mode = 0;
  for (int k = 0; k < ns; k++) {
    p->pads[k] = p->pads[ns + k] = 0;
    if (mode == NNX_PAD_VALID) continue;
    int64_t ext = p->dilations[k] * (p->kernel[k] - 1) + 1;
    if (nnx_same_pads(c, n, mode == NNX_PAD_SAME_UPPER, in[k], ext, p->strides[k], k, &p->pads[k],
                      &p->pads[ns + k]) < 0)
      return -1;
  }
  return 0;
}

/* The 2-D options of a pool of rank-4 x ([N, C, 1, L] for 1-D). */
static fg_pool2d_opts opts_2d(const pool_geo *p) {
  fg_pool2d_opts o;
  memset(&o, 0, sizeof o);
  const int one = p->ns == 1; /* 1-D: height 1, the axis is the width */
  for (int k = 0; k < 2; k++) {
    int s = one ? k - 1 : k; /* the ONNX spatial axis, or -1 for the added height */
    o.kernel[k] = s < 0 ? 1 : p->kernel[s];
    o.strides[k] = s < 0 ? 1 : p->strides[s];
    o.dilations[k] = s < 0 ? 1 : p->dilations[s];
    o.pads[k] = s < 0 ? 0 : p->pads[s];
    o.pads[2 + k] = s < 0 ? 0 : p->pads[p->ns + s];
  }
  o.ceil_mode = (int)p->ceil_mode;
  o.count_include_pad = (int)p->cip;
  return o;
}

/* Pads beyond half the kernel: pad x first (see the file's comment). */
static fg_output pool_padded(fgx_ctx *c, fg_output x, int is_max, fg_pool2d_opts *o) {
  fg_graph *g = fgx_graph(c);
  const int64_t pads[8] = {0, 0, o->pads[0], o->pads[1], 0, 0, o->pads[2], o->pads[3]};
  memset(o->pads, 0, sizeof o->pads);
  if (is_max) {
    const double lowest = fg_output_dtype(g, x) == FG_F64 ? -DBL_MAX : -FLT_MAX;
    return fg_max_pool2d(g, fg_pad(g, x, pads, "constant", lowest), o);
  }
  fg_output sum = fg_avg_pool2d(g, fg_pad(g, x, pads, "constant", 0.0), o);
  if (o->count_include_pad) return sum;
  fg_output ones = fg_pad(g, fg_ones_like(g, x), pads, "constant", 0.0);
  return fg_div(g, sum, fg_avg_pool2d(g, ones, o));
}

static int pool_common(fgx_ctx *c, const fgx_node *n, int is_max) {
  pool_geo p;
  if (pool_attrs(c, n, is_max, &p) < 0) return -1;
  fg_pool2d_opts o = opts_2d(&p);
  int big = 0;
  for (int k = 0; k < 4; k++)
    big |= o.pads[k] > o.kernel[k % 2] / 2;
  if (big && o.ceil_mode)
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "ceil_mode 1 with pads above half the kernel is not supported");
  fg_output x = fgx_input(c, n, 0);
  if (x.node < 0) return -1;
  fg_graph *g = fgx_graph(c);
  static const int64_t ax2 = 2;
  if (p.ns == 1) x = fg_unsqueeze(g, x, &ax2, 1);
  fg_output y = big      ? pool_padded(c, x, is_max, &o)
                : is_max ? fg_max_pool2d(g, x, &o)
                         : fg_avg_pool2d(g, x, &o);
  if (p.ns == 1) y = fg_squeeze(g, y, &ax2, 1);
  return nnx_set(c, n, 0, y);
}

int nnx_map_max_pool(fgx_ctx *c, const fgx_node *n) { return pool_common(c, n, 1); }
int nnx_map_avg_pool(fgx_ctx *c, const fgx_node *n) { return pool_common(c, n, 0); }

/* Rank 4 uses flowgraph's global pools; other ranks (>= 3) reduce over
 * every spatial axis, keeping them as 1s. */
static int global_pool(fgx_ctx *c, const fgx_node *n, int is_max) {
  fg_dtype dt;
  int rank;
  int64_t xd[FGX_MAX_DIMS], axes[FGX_MAX_DIMS];
  char b1[256];
  if (fgx_input_info(c, n, 0, &dt, &rank, xd) < 0) return -1;
  if (rank < 3)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "input 0 (X) shape %s has rank %d; it must be [N, C, spatial...], rank >= 3",
                    nnx_fmt(xd, rank, b1, sizeof b1), rank);
  fg_output x = fgx_input(c, n, 0);
  if (x.node < 0) return -1;
  fg_graph *g = fgx_graph(c);
  if (rank == 4)
    return nnx_set(c, n, 0, is_max ? fg_global_max_pool(g, x) : fg_global_avg_pool(g, x));
  for (int k = 2; k < rank; k++)
    axes[k - 2] = k;
  return nnx_set(c, n, 0,
                 is_max ? fg_reduce_max(g, x, axes, rank - 2, 1)
                        : fg_reduce_mean(g, x, axes, rank - 2, 1));
}

int nnx_map_global_avg_pool(fgx_ctx *c, const fgx_node *n) { return global_pool(c, n, 0); }
int nnx_map_global_max_pool(fgx_ctx *c, const fgx_node *n) { return global_pool(c, n, 1); }
