/* ONNX's recurrent ops, LSTM and GRU, unrolled over the sequence.
 *
 * flowgraph has no loop op, and a plan is static: the sequence length (X's
 * time axis) is known at import wherever only the batch is unknown, so each
 * time step becomes its own few nodes. The input projection of every step
 * is one matmul over [T * B, I] before the loop; a step then costs one
 * [B, H] x [H, G H] matmul, the gate nonlinearities and the state update,
 * about 15 nodes (a 12-step, 2-direction layer: about 400 nodes). The
 * memory planner reuses the per-step buffers, and autodiff differentiates
 * the unrolled graph like any other (back-propagation through time).
 *
 * Refused, naming the attribute or input: activations other than the
 * defaults (LSTM sigmoid, tanh, tanh; GRU sigmoid, tanh), clip,
 * input_forget, peepholes (P), and sequence_lens other than T for every
 * row. */
#include <stdlib.h>
#include <string.h>

#include "schema/onnx/onnx_import.h"

typedef struct rnn_spec {
  int gru;         /* 0: LSTM (gates i o f c), 1: GRU (gates z r h) */
  int gates;       /* 4 or 3 */
  int64_t T, I, H; /* time steps, input size, hidden size */
  int dirs;        /* 1, or 2 when bidirectional */
  int reverse;     /* one direction, run from the last step */
  int layout;      /* 0: X [T, B, I]; 1: X [B, T, I] (opset 14) */
  int64_t lbr;     /* GRU linear_before_reset */
  fg_dtype dtype;
} rnn_spec;

/* The per-direction weights and state. */
typedef struct rnn_dir {
  fg_output w, r;      /* [G H, I], [G H, H] */
  fg_output wb, rb;    /* [G H] each, or FG_NO_OUTPUT without B */
  fg_output h, c;      /* the state entering the next step */
  fg_output r_h, rb_h; /* GRU with linear_before_reset 0: R's and Rb's h rows */
} rnn_dir;

static int is_default_activations(const fgx_node *n, int gru, int dirs) {
  static const char *const lstm[3] = {"Sigmoid", "Tanh", "Tanh"}, *const gru_[2] = {"Sigmoid",
                                                                                    "Tanh"};
  const char *const *want = gru ? gru_ : lstm;
  const size_t per = gru ? 2 : 3;
  for (size_t k = 0; k < n->n_attribute; k++) {
    const Onnx__AttributeProto *a = n->attribute[k];
    if (!a->name || strcmp(a->name, "activations") != 0) continue;
    if (a->n_strings != per * (size_t)dirs) return 0;
    for (size_t i = 0; i < a->n_strings; i++) {
      const char *w = want[i % per];
      if (a->strings[i].len != strlen(w) || memcmp(a->strings[i].data, w, strlen(w)) != 0) return 0;
    }
  }
  return 1;
}

/* Attributes and shapes; -1 after fgx_fail. */
static int rnn_read_spec(fgx_ctx *c, const fgx_node *n, int gru, rnn_spec *s) {
  memset(s, 0, sizeof *s);
  s->gru = gru, s->gates = gru ? 3 : 4;
  const char *dir;
  int64_t hidden, v;
  double clip;
  if (fgx_attr_string(c, n, "direction", "forward", &dir) < 0 ||
      fgx_attr_int(c, n, "hidden_size", 0, &hidden) < 0 ||
      fgx_attr_int(c, n, "layout", 0, &v) < 0 || fgx_attr_float(c, n, "clip", 0, &clip) < 0)
    return -1;
  s->layout = (int)v;
  if (strcmp(dir, "forward") && strcmp(dir, "reverse") && strcmp(dir, "bidirectional"))
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "attribute direction is \"%s\"; ONNX allows forward, reverse, bidirectional",
                    dir);
  s->dirs = strcmp(dir, "bidirectional") == 0 ? 2 : 1;
  s->reverse = strcmp(dir, "reverse") == 0;
  if (v != 0 && v != 1)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute layout is %lld; ONNX allows 0 or 1",
                    (long long)v);
  if (clip != 0)
    return fgx_fail(c, n, FG_UNIMPLEMENTED, "attribute clip (%g) is not supported", clip);
  if (!is_default_activations(n, gru, s->dirs))
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "attribute activations: only the defaults (%s) are supported",
                    gru ? "Sigmoid, Tanh" : "Sigmoid, Tanh, Tanh");
  if (!gru) {
    if (fgx_attr_int(c, n, "input_forget", 0, &v) < 0) return -1;
    if (v != 0)
      return fgx_fail(c, n, FG_UNIMPLEMENTED, "attribute input_forget=1 is not supported");
    if (fgx_has_input(n, 7))
      return fgx_fail(c, n, FG_UNIMPLEMENTED, "input 7 (P, peephole weights) is not supported");
  } else if (fgx_attr_int(c, n, "linear_before_reset", 0, &s->lbr) < 0) {
    return -1;
  }
  int rank;
  int64_t xd[FGX_MAX_DIMS], wd[FGX_MAX_DIMS];
  if (fgx_input_info(c, n, 0, &s->dtype, &rank, xd) < 0) return -1;
  if (rank != 3)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "input 0 (X) has rank %d; LSTM and GRU take rank 3",
                    rank);
  s->T = xd[s->layout ? 1 : 0], s->I = xd[2];
  if (s->T < 1 || s->I < 1)
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "input 0 (X) needs a known sequence length and input size to unroll the "
                    "steps (got %lld and %lld)",
                    (long long)s->T, (long long)s->I);
  fg_dtype wt;
  if (fgx_input_info(c, n, 1, &wt, &rank, wd) < 0) return -1;
  s->H = wd[1] / s->gates;
  if (rank != 3 || wd[0] != s->dirs || wd[1] != s->gates * s->H || wd[2] != s->I || s->H < 1 ||
      (hidden && hidden != s->H))
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "input 1 (W) must be [%d, %d * hidden_size, %lld]; got rank %d [%lld, %lld, "
                    "%lld], hidden_size %lld",
                    s->dirs, s->gates, (long long)s->I, rank, (long long)wd[0], (long long)wd[1],
                    (long long)(rank > 2 ? wd[2] : 0), (long long)hidden);
  return 0;
}

/* sequence_lens, when given, must say every row runs all T steps. */
static int rnn_check_lens(fgx_ctx *c, const fgx_node *n, const rnn_spec *s) {
  if (!fgx_has_input(n, 4)) return 0;
  const int64_t *lens;
  int64_t m;
  if (fgx_input_ints(c, n, 4, &lens, &m) < 0) return -1;
  for (int64_t i = 0; i < m; i++)
    if (lens[i] != s->T)
      return fgx_fail(c, n, FG_UNIMPLEMENTED,
                      "input 4 (sequence_lens) holds %lld for row %lld; only sequences of the "
                      "full length %lld are supported",
                      (long long)lens[i], (long long)i, (long long)s->T);
  return 0;
}

/* Row block d of a [dirs, ...] input, as a tensor of rank-1 dims `dims`. */
static fg_output dir_slice(fg_graph *g, fg_output x, int d, int rank, const int64_t *dims) {
  int64_t begin[3] = {d, 0, 0}, size[3] = {1, -1, -1};
  return fg_reshape(g, fg_slice(g, x, rank + 1, begin, size), rank, dims);
}

/* Columns [k H, (k + 1) H) of a [.., G H] tensor's last axis (rank 1 or 2). */
static fg_output cols(fg_graph *g, fg_output x, int rank, int64_t k, int64_t H) {
  int64_t begin[2] = {0, k * H}, size[2] = {-1, H};
  if (rank == 1) begin[0] = k * H, size[0] = H;
  return fg_slice(g, x, rank, begin, size);
}

/* Direction d's weights, biases and initial state. */
static void rnn_dir_init(fgx_ctx *c, const fgx_node *n, const rnn_spec *s, int d, rnn_dir *D) {
  fg_graph *g = fgx_graph(c);
  const int64_t GH = s->gates * s->H, wdims[2] = {GH, s->I}, rdims[2] = {GH, s->H};
  const int64_t bdims[1] = {2 * GH}, hdims[2] = {-1, s->H};
  D->w = dir_slice(g, fgx_input(c, n, 1), d, 2, wdims);
  D->r = dir_slice(g, fgx_input(c, n, 2), d, 2, rdims);
  D->wb = D->rb = D->h = D->c = D->r_h = D->rb_h = FG_NO_OUTPUT;
  if (fgx_has_input(n, 3)) {
    fg_output b = dir_slice(g, fgx_input(c, n, 3), d, 1, bdims);
    int64_t lo[1] = {0}, hi[1] = {GH}, len[1] = {GH};
    D->wb = fg_slice(g, b, 1, lo, len);
    D->rb = fg_slice(g, b, 1, hi, len);
  }
  if (s->gru && !s->lbr) {
    int64_t begin[2] = {2 * s->H, 0}, size[2] = {s->H, -1};
    D->r_h = fg_slice(g, D->r, 2, begin, size);
    if (D->rb.node >= 0) D->rb_h = cols(g, D->rb, 1, 2, s->H);
  }
  /* initial_h (input 5) and initial_c (6): [dirs, B, H], or [B, dirs, H]
   * with layout 1. */
  for (int k = 0; k < (s->gru ? 1 : 2); k++) {
    if (!fgx_has_input(n, 5 + k)) continue;
    fg_output st = fgx_input(c, n, 5 + k);
    if (s->layout) {
      int64_t perm[3] = {1, 0, 2};
      st = fg_transpose(g, st, 3, perm);
    }
    *(k ? &D->c : &D->h) = dir_slice(g, st, d, 2, hdims);
  }
}

/* One LSTM step: gates = xw + h R^T (+ the recurrent bias), order i o f c. */
static void lstm_step(fg_graph *g, const rnn_spec *s, rnn_dir *D, fg_output xw) {
  fg_output gates = fg_add(g, xw, fg_matmul(g, D->h, D->r, 0, 1));
  fg_output q[4];
  int64_t sizes[4] = {s->H, s->H, s->H, s->H};
  fg_split(g, gates, 1, sizes, 4, q);
  fg_output i = fg_sigmoid(g, q[0]), o = fg_sigmoid(g, q[1]), f = fg_sigmoid(g, q[2]);
  fg_output cand = fg_tanh(g, q[3]);
  D->c = fg_add(g, fg_mul(g, f, D->c), fg_mul(g, i, cand));
  D->h = fg_mul(g, o, fg_tanh(g, D->c));
}

/* One GRU step, order z r h: h' = (1 - z) hc + z h. */
static void gru_step(fg_graph *g, const rnn_spec *s, rnn_dir *D, fg_output xw) {
  fg_output hr = fg_matmul(g, D->h, D->r, 0, 1); /* [B, 3H] */
  if (D->rb.node >= 0) hr = fg_add(g, hr, D->rb);
  fg_output x3[3], h3[3];
  int64_t sizes[3] = {s->H, s->H, s->H};
  fg_split(g, xw, 1, sizes, 3, x3);
  fg_split(g, hr, 1, sizes, 3, h3);
  fg_output z = fg_sigmoid(g, fg_add(g, x3[0], h3[0]));
  fg_output r = fg_sigmoid(g, fg_add(g, x3[1], h3[1]));
  fg_output inner;
  if (s->lbr) {
    inner = fg_mul(g, r, h3[2]); /* r (h Rh^T + Rbh) */
  } else {
    inner = fg_matmul(g, fg_mul(g, r, D->h), D->r_h, 0, 1); /* (r h) Rh^T + Rbh */
    if (D->rb_h.node >= 0) inner = fg_add(g, inner, D->rb_h);
  }
  fg_output hc = fg_tanh(g, fg_add(g, x3[2], inner));
  fg_output one = fg_scalar(g, s->dtype, 1.0);
  D->h = fg_add(g, fg_mul(g, fg_sub(g, one, z), hc), fg_mul(g, z, D->h));
}

/* Runs direction d over the sequence; ys gets its T outputs in time order. */
static void rnn_run_dir(fgx_ctx *c, const rnn_spec *s, fg_output x, int d, rnn_dir *D,
                        fg_output *ys) {
  fg_graph *g = fgx_graph(c);
  const int64_t GH = s->gates * s->H, flat[2] = {-1, s->I}, seq[3] = {s->T, -1, GH};
  const int64_t step[2] = {-1, GH};
  fg_output xw = fg_matmul(g, fg_reshape(g, x, 2, flat), D->w, 0, 1);
  if (D->wb.node >= 0) xw = fg_add(g, xw, D->wb);
  /* The LSTM's recurrent bias adds to every gate alike; the GRU's h rows
   * may sit inside r (gru_step), so it adds there. */
  if (!s->gru && D->rb.node >= 0) xw = fg_add(g, xw, D->rb);
  if (s->gru && !s->lbr && D->rb.node >= 0) {
    /* Rb's z and r rows add to the gates here; its h rows in gru_step. */
    D->rb = fg_concat(g,
                      (fg_output[]){cols(g, D->rb, 1, 0, s->H), cols(g, D->rb, 1, 1, s->H),
                                    fg_zeros_like(g, cols(g, D->rb, 1, 2, s->H))},
                      3, 0);
  }
  xw = fg_reshape(g, xw, 3, seq);
  const int backward = d == 1 || s->reverse;
  for (int64_t k = 0; k < s->T; k++) {
    const int64_t t = backward ? s->T - 1 - k : k;
    int64_t begin[3] = {t, 0, 0}, size[3] = {1, -1, -1};
    fg_output xt = fg_reshape(g, fg_slice(g, xw, 3, begin, size), 2, step);
    if (D->h.node < 0) D->h = fg_zeros_like(g, cols(g, xt, 2, 0, s->H));
    if (!s->gru && D->c.node < 0) D->c = fg_zeros_like(g, cols(g, xt, 2, 0, s->H));
    if (s->gru)
      gru_step(g, s, D, xt);
    else
      lstm_step(g, s, D, xt);
    ys[t] = D->h;
  }
}

static int map_rnn(fgx_ctx *c, const fgx_node *n, int gru) {
  rnn_spec s;
  if (rnn_read_spec(c, n, gru, &s) < 0 || rnn_check_lens(c, n, &s) < 0) return -1;
  fg_graph *g = fgx_graph(c);
  fg_output x = fgx_input(c, n, 0);
  if (s.layout) {
    int64_t perm[3] = {1, 0, 2};
    x = fg_transpose(g, x, 3, perm);
  }
  fg_output per_dir[2], last_h[2], last_c[2];
  fg_output *ys = calloc((size_t)s.T, sizeof *ys);
  if (!ys) return fgx_fail(c, n, FG_RESOURCE_EXHAUSTED, "out of memory");
  for (int d = 0; d < s.dirs; d++) {
    rnn_dir D;
    rnn_dir_init(c, n, &s, d, &D);
    rnn_run_dir(c, &s, x, d, &D, ys);
    per_dir[d] = fg_stack(g, ys, (int)s.T, 0); /* [T, B, H] */
    last_h[d] = D.h, last_c[d] = D.c;
  }
  free(ys);
  /* Y [T, dirs, B, H] (layout 1: [B, T, dirs, H]); Y_h, Y_c [dirs, B, H]
   * (layout 1: [B, dirs, H]). */
  fg_output y = fg_stack(g, per_dir, s.dirs, 1);
  fg_output yh = fg_stack(g, last_h, s.dirs, 0);
  fg_output yc = gru ? FG_NO_OUTPUT : fg_stack(g, last_c, s.dirs, 0);
  if (s.layout) {
    int64_t p4[4] = {2, 0, 1, 3}, p3[3] = {1, 0, 2};
    y = fg_transpose(g, y, 4, p4);
    yh = fg_transpose(g, yh, 3, p3);
    if (!gru) yc = fg_transpose(g, yc, 3, p3);
  }
  fg_output outs[3] = {y, yh, yc};
  for (int i = 0; i < (gru ? 2 : 3); i++)
    if (fgx_has_output(n, i) && fgx_set_output(c, n, i, outs[i]) < 0) return -1;
  return 0;
}

static int map_lstm(fgx_ctx *c, const fgx_node *n) { return map_rnn(c, n, 0); }
static int map_gru(fgx_ctx *c, const fgx_node *n) { return map_rnn(c, n, 1); }

const fgx_op fgx_ops_rnn[] = {{"LSTM", map_lstm}, {"GRU", map_gru}, {NULL, NULL}};
