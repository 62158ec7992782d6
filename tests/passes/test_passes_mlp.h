/* The dense networks the pass tests train: layers as nn.Linear (matmul
 * by w<l>, then + b<l>), relu between them, softmax cross-entropy over
 * labels (i * label_mul) % classes, one optimizer step per run; and their
 * training with the passes on and off. */
#ifndef TEST_PASSES_MLP_H
#define TEST_PASSES_MLP_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <flowgraph/flowgraph.h>
#include <flowgraph/profile.h>

#include "test_passes_util.h"

enum { MLP_MAX_LAYERS = 4 };

typedef struct mlp_spec {
  int n_layers;                       /* at most MLP_MAX_LAYERS */
  int64_t widths[MLP_MAX_LAYERS + 1]; /* inputs, then each layer's outputs */
  int64_t batch;                      /* the runs' rows; the graph's dim when known */
  int unknown_batch;                  /* the placeholders' batch dim is unknown (-1) */
  int label_mul;                      /* label of row i: (i * label_mul) % classes */
  fg_optimizer_config opt;
} mlp_spec;

/* A tensor of `scale` * sin(0.37 (i + 1) + salt) values. */
static inline fg_tensor *f32_tensor(int rank, const int64_t *dims, float scale, int salt) {
  fg_tensor *t = fg_tensor_new(FG_F32, rank, dims, NULL);
  float *p = fg_tensor_data(t);
  for (int64_t i = 0; i < fg_tensor_num_elements(t); i++)
    p[i] = scale * sinf(0.37f * (float)(i + 1) + (float)salt);
  return t;
}

/* The network of m, its training step in *target (NULL on failure). */
static inline fg_graph *mlp_build(const mlp_spec *m, const char **target) {
  fg_graph *g = fg_graph_new();
  const int64_t rows = m->unknown_batch ? -1 : m->batch;
  const int64_t xd[2] = {rows, m->widths[0]}, yd[1] = {rows};
  fg_output h = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output y = fg_placeholder(g, "y", FG_I32, 1, yd);
  for (int l = 0; l < m->n_layers; l++) {
    const int64_t wd[2] = {m->widths[l], m->widths[l + 1]}, bd[1] = {m->widths[l + 1]};
    fg_tensor *w = f32_tensor(2, wd, 0.4f, l), *b = f32_tensor(1, bd, 0.1f, 10 + l);
    char wn[16], bn[16];
    snprintf(wn, sizeof wn, "w%d", l);
    snprintf(bn, sizeof bn, "b%d", l);
    h = fg_add(g, fg_matmul(g, h, fg_variable(g, wn, w), 0, 0), fg_variable(g, bn, b));
    if (l + 1 < m->n_layers) h = fg_relu(g, h);
    fg_tensor_free(w);
    fg_tensor_free(b);
  }
  fg_output loss = fg_set_name(g, fg_softmax_cross_entropy(g, h, y), "loss");
  fg_output t = fg_minimize(g, loss, NULL, 0, &m->opt, NULL);
  *target = t.node >= 0 ? fg_node_name(g, t.node) : NULL;
  return g;
}

/* How mlp_train runs: device (NULL: the CPU), threads, passes off or on,
 * and how many steps. */
typedef struct mlp_run {
  const char *device;
  int threads, no_passes, steps;
} mlp_run;

/* r->steps steps of m's network g: each step's loss into losses, the
 * variables after them into vars (w0, b0, w1, ...; 2 * n_layers), and the
 * plan of a step into *plan when plan is not NULL (the caller frees it). */
static inline void mlp_train(fg_graph *g, const mlp_spec *m, const char *target, const mlp_run *r,
                             float *losses, fg_tensor **vars, fg_plan_info **plan) {
  fg_status *st = fg_status_new();
  fg_session_options so;
  fg_session_options_init(&so);
  so.num_threads = r->threads;
  so.no_passes = r->no_passes;
  so.passes = r->no_passes ? NULL : test_pass_list;
  so.device = r->device;
  fg_session *s = fg_session_new(g, &so, st);
  const int64_t xd[2] = {m->batch, m->widths[0]}, yd[1] = {m->batch};
  fg_tensor *x = f32_tensor(2, xd, 1.5f, 7), *y = fg_tensor_new(FG_I32, 1, yd, NULL);
  for (int64_t i = 0; i < m->batch; i++)
    ((int32_t *)fg_tensor_data(y))[i] = (int32_t)((i * m->label_mul) % m->widths[m->n_layers]);
  fg_feed feeds[2] = {{"x", x}, {"y", y}};
  const char *fetch = "loss";
  for (int i = 0; s && i < r->steps; i++) {
    fg_tensor *l = NULL;
    if (fg_session_run(s, feeds, 2, &fetch, 1, &l, &target, 1, st) != 0) break;
    losses[i] = *(float *)fg_tensor_data(l);
    fg_tensor_free(l);
  }
  if (!s || fg_status_code(st) != FG_OK) fprintf(stderr, "mlp_train: %s\n", fg_status_message(st));
  for (int i = 0; i < 2 * m->n_layers; i++) {
    char name[16];
    snprintf(name, sizeof name, "%c%d", i % 2 ? 'b' : 'w', i / 2);
    vars[i] = s ? fg_session_variable(s, name, st) : NULL;
  }
  if (plan) *plan = s ? fg_session_plan_info(s, feeds, 2, &fetch, 1, &target, 1, st) : NULL;
  fg_tensor_free(x), fg_tensor_free(y);
  fg_session_free(s);
  fg_status_free(st);
}

/* Plan steps whose node is of op `op` in g (the source op, whatever a
 * pass made of it). */
static inline int mlp_count_source_op(const fg_plan_info *pi, const fg_graph *g, const char *op) {
  int n = pi ? 0 : -1;
  for (int i = 0; pi && i < pi->n_steps; i++)
    n += strcmp(fg_node_op(g, pi->step_nodes[i]), op) == 0;
  return n;
}

/* Plan steps that run `op` (as profiles name it: what a pass made). */
static inline int mlp_count_step_op(const fg_plan_info *pi, const char *op) {
  int n = pi ? 0 : -1;
  for (int i = 0; pi && i < pi->n_steps; i++)
    n += strcmp(pi->step_ops[i], op) == 0;
  return n;
}

/* 1 when the n tensors of a and b hold the same bytes (NULLs fail). */
static inline int mlp_same_tensors(fg_tensor *const *a, fg_tensor *const *b, int n) {
  for (int i = 0; i < n; i++)
    if (!a[i] || !b[i] || fg_tensor_num_bytes(a[i]) != fg_tensor_num_bytes(b[i]) ||
        memcmp(fg_tensor_data(a[i]), fg_tensor_data(b[i]), fg_tensor_num_bytes(a[i])) != 0)
      return 0;
  return 1;
}

static inline void mlp_free_tensors(fg_tensor **t, int n) {
  for (int i = 0; i < n; i++)
    fg_tensor_free(t[i]);
}

#endif
