/* When a training step's updates run (executor/plan_order.h, fg_minimize):
 * each update waits for the nodes of the step that read its variable and
 * for nothing else; the plan moves it up to just after them, so a late
 * layer's gradient is dead before an early layer's exists; a wait that is
 * only a control input keeps no tensor alive; and a variable's reads and
 * writes keep their node order however far an update moves. */
#include <flowgraph/dist.h>
#include <flowgraph/flowgraph.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fgtest.h"

#include "graph/graph_internal.h"
#include "graph/op_table.h"

#define CHECK_NAME(a, b)                                                                           \
  do {                                                                                             \
    if (strcmp((a), (b)) != 0) FG_FAIL_AT("%s is \"%s\", expected \"%s\"", #a, (a), (b));          \
  } while (0)

/* x [8,4] -> mm1 = x W1 [4,6] -> add1 (+ b1) -> relu -> mm2 = h W2 [6,3] ->
 * logits (+ b2) -> softmax cross-entropy, trained with SGD; and eval_w1 =
 * W1 * 2, which the training step does not run. */
static fg_graph *two_layers_with(const char **target, int adam_l2) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {8, 4}, yd[1] = {8}, w1d[2] = {4, 6}, b1d[1] = {6}, w2d[2] = {6, 3}, b2d[1] = {3};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output y = fg_placeholder(g, "y", FG_I32, 1, yd);
  fg_tensor *w1 = fg_tensor_new(FG_F32, 2, w1d, NULL), *b1 = fg_tensor_new(FG_F32, 1, b1d, NULL);
  fg_tensor *w2 = fg_tensor_new(FG_F32, 2, w2d, NULL), *b2 = fg_tensor_new(FG_F32, 1, b2d, NULL);
  for (int i = 0; i < 24; i++)
    ((float *)fg_tensor_data(w1))[i] = 0.05f * (float)(i % 7) - 0.1f;
  for (int i = 0; i < 18; i++)
    ((float *)fg_tensor_data(w2))[i] = 0.04f * (float)(i % 5) - 0.08f;
  fg_output W1 = fg_variable(g, "W1", w1), B1 = fg_variable(g, "b1", b1);
  fg_output W2 = fg_variable(g, "W2", w2), B2 = fg_variable(g, "b2", b2);
  fg_tensor_free(w1);
  fg_tensor_free(b1);
  fg_tensor_free(w2);
  fg_tensor_free(b2);
  fg_output mm1 = fg_set_name(g, fg_matmul(g, x, W1, 0, 0), "mm1");
  fg_output h = fg_relu(g, fg_set_name(g, fg_add(g, mm1, B1), "add1"));
  fg_output mm2 = fg_set_name(g, fg_matmul(g, h, W2, 0, 0), "mm2");
  fg_output logits = fg_set_name(g, fg_add(g, mm2, B2), "logits");
  fg_output loss = fg_set_name(g, fg_softmax_cross_entropy(g, logits, y), "loss");
  fg_set_name(g, fg_mul(g, W1, fg_scalar(g, FG_F32, 2.0)), "eval_w1");
  fg_optimizer_config c;
  fg_optimizer_config_init(&c, adam_l2 ? FG_OPTIMIZER_ADAM : FG_OPTIMIZER_SGD);
  if (adam_l2) c.weight_decay = 0.01; /* coupled, as torch.optim.Adam */
  fg_output t = fg_minimize(g, loss, NULL, 0, &c, NULL);
  *target = t.node >= 0 ? fg_node_name(g, t.node) : NULL;
  return g;
}

static fg_graph *two_layers(const char **target) { return two_layers_with(target, 0); }

/* The update node of variable `var`. */
static int update_of(const fg_graph *g, const char *var) {
  const int v = fg_graph_find(g, var);
  for (int i = 0; v >= 0 && i < g->n_nodes; i++)
    if (strncmp(fg_node_op(g, i), "apply_", 6) == 0 && g->nodes[i].inputs[0].node == v) return i;
  return -1;
}

/* The names of the nodes update u waits for (its control input's
 * inputs), sorted, joined by spaces. */
static void waits_of(const fg_graph *g, int u, char *out, size_t size) {
  const fg_node *nd = &g->nodes[u];
  out[0] = '\0';
  FG_REQUIRE(nd->n_inputs == 4); /* var, grad, lr, control */
  const fg_node *c = &g->nodes[nd->inputs[3].node];
  FG_REQUIRE(strcmp(fg_op_table[c->op].name, "group") == 0);
  const char *names[8];
  int n = 0;
  for (int k = 0; k < c->n_inputs && n < 8; k++)
    names[n++] = g->nodes[c->inputs[k].node].name;
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
      const char *t = names[j];
      names[j] = names[j - 1];
      names[j - 1] = t;
    }
  for (int i = 0; i < n; i++) {
    strncat(out, names[i], size - strlen(out) - 1);
    if (i + 1 < n) strncat(out, " ", size - strlen(out) - 1);
  }
}

FG_TEST(minimize_update_waits_for_its_readers_only, "") {
  const char *target;
  fg_graph *g = two_layers(&target);
  FG_REQUIRE(target);
  char w[256];
  /* W1: the forward matmul only (nobody needs x's gradient, the one
   * gradient node that would read W1); not eval_w1, which the step does
   * not run. */
  waits_of(g, update_of(g, "W1"), w, sizeof w);
  CHECK_NAME(w, "mm1");
  /* A bias: its add, and its gradient's sum_to, which takes the bias as
   * its target shape (a read, as far as the graph says). */
  waits_of(g, update_of(g, "b1"), w, sizeof w);
  FG_CHECK(strncmp(w, "add1 gradients/sum_to_", 22) == 0 && !strchr(w + 5, ' '));
  waits_of(g, update_of(g, "b2"), w, sizeof w);
  FG_CHECK(strncmp(w, "gradients/sum_to_", 17) == 0 && strstr(w, " logits") &&
           strlen(strstr(w, " logits")) == 7);
  /* W2: the forward matmul and the gradient's dh = dmm2 W2^T. */
  const fg_node *u = &g->nodes[update_of(g, "W2")];
  const fg_node *c = &g->nodes[u->inputs[3].node];
  FG_REQUIRE(c->n_inputs == 2);
  int fwd = strcmp(g->nodes[c->inputs[0].node].name, "mm2") == 0 ? 0 : 1;
  CHECK_NAME(g->nodes[c->inputs[fwd].node].name, "mm2");
  const fg_node *dh = &g->nodes[c->inputs[1 - fwd].node];
  CHECK_NAME(fg_op_table[dh->op].name, "matmul");
  FG_CHECK(strncmp(dh->name, "gradients/", 10) == 0);
  FG_CHECK_INT(dh->inputs[1].node, fg_graph_find(g, "W2"));
  fg_graph_free(g);
}

static void batch(fg_tensor **x, fg_tensor **y) {
  int64_t xd[2] = {8, 4}, yd[1] = {8};
  *x = fg_tensor_new(FG_F32, 2, xd, NULL);
  *y = fg_tensor_new(FG_I32, 1, yd, NULL);
  for (int i = 0; i < 32; i++)
    ((float *)fg_tensor_data(*x))[i] = 0.1f * (float)(i % 9) - 0.4f;
  for (int i = 0; i < 8; i++)
    ((int32_t *)fg_tensor_data(*y))[i] = i % 3;
}

/* The default passes but multi_update, which would make the updates one
 * node: these tests are about where each single update goes. */
static fg_session *session_on(fg_graph *g, int threads, fg_status *st) {
  fg_session_options o;
  fg_session_options_init(&o);
  o.num_threads = threads;
  o.passes = "simplify,fold,fold_inference,cse,xent_grad,epilogue,grad_epilogue,fuse,dce";
  return fg_session_new(g, &o, st);
}

static int step_of(const fg_plan_info *pi, int node) {
  for (int s = 0; s < pi->n_steps; s++)
    if (pi->step_nodes[s] == node) return s;
  return -1;
}

static const fg_plan_tensor *tensor_of(const fg_plan_info *pi, int node) {
  for (int t = 0; t < pi->n_tensors; t++)
    if (pi->tensors[t].node == node && pi->tensors[t].output == 0) return &pi->tensors[t];
  return NULL;
}

/* With SGD, and with Adam and coupled weight decay (its L2 term is inside
 * apply_adam: as nodes made after every gradient it held the updates to
 * the step's tail). The gradient is input 1 of apply_sgd, 3 of apply_adam;
 * the wait is the last input. */
FG_TEST(plan_moves_updates_up_and_control_keeps_nothing_alive, "") {
  for (int run = 0; run < 4; run++) {
    const int threads = 1 + run % 2, adam = run / 2, gi = adam ? 3 : 1;
    const char *target;
    fg_graph *g = two_layers_with(&target, adam);
    FG_REQUIRE(target);
    fg_status *st = fg_status_new();
    fg_session *s = session_on(g, threads, st);
    FG_REQUIRE(s);
    fg_tensor *x, *y;
    batch(&x, &y);
    fg_feed feeds[2] = {{"x", x}, {"y", y}};
    fg_plan_info *pi = fg_session_plan_info(s, feeds, 2, NULL, 0, &target, 1, st);
    FG_REQUIRE(pi);
    const int u1 = update_of(g, "W1"), u2 = update_of(g, "W2");
    const int dw1 = g->nodes[u1].inputs[gi].node, dw2 = g->nodes[u2].inputs[gi].node;
    /* W2's update runs before W1's gradient is computed (node order put
     * every update after the last gradient), and W2's gradient is dead by
     * then: the two can share bytes. */
    FG_CHECK(step_of(pi, u2) >= 0 && step_of(pi, u2) < step_of(pi, dw1));
    const fg_plan_tensor *t1 = tensor_of(pi, dw1), *t2 = tensor_of(pi, dw2);
    FG_REQUIRE(t1 && t2);
    FG_CHECK_INT(t2->last_step, step_of(pi, u2));
    FG_CHECK(t2->last_step < t1->first_step);
    /* mm2's output is read by logits only: the group W2's update waits on
     * reads no bytes, so mm2 dies at logits, not at that group (which comes
     * after dh, later). */
    const int grp = g->nodes[u2].inputs[g->nodes[u2].n_inputs - 1].node;
    FG_CHECK_STR_CONTAINS(fg_node_op(g, grp), "group");
    if (step_of(pi, fg_graph_find(g, "mm2")) >= 0) {
      const fg_plan_tensor *m2 = tensor_of(pi, fg_graph_find(g, "mm2"));
      FG_REQUIRE(m2);
      FG_CHECK_INT(m2->last_step, step_of(pi, fg_graph_find(g, "logits")));
      FG_CHECK(step_of(pi, grp) > m2->last_step);
    } else {
      /* The epilogue pass ran mm2 inside logits (one fused_matmul), and
       * the group waits on logits instead: still no bytes kept alive,
       * logits dies at its last reader, before the group. */
      const fg_plan_tensor *lg = tensor_of(pi, fg_graph_find(g, "logits"));
      FG_REQUIRE(lg);
      FG_CHECK(step_of(pi, grp) > lg->last_step);
    }
    fg_plan_info_free(pi);
    fg_tensor_free(x);
    fg_tensor_free(y);
    fg_session_free(s);
    fg_status_free(st);
    fg_graph_free(g);
  }
}

/* r1 = V * 2, then assign(V, 5), then r2 = V * 3, all in one run. The
 * assign's inputs are ready at the start, but it must not move ahead of
 * r1, which comes before it in node order: r1 = 2, r2 = 15. */
FG_TEST(plan_order_keeps_a_variables_reads_and_writes, "") {
  for (int threads = 1; threads <= 2; threads++) {
    fg_graph *g = fg_graph_new();
    int64_t d[1] = {1};
    fg_tensor *one = fg_tensor_new(FG_F32, 1, d, NULL), *five = fg_tensor_new(FG_F32, 1, d, NULL);
    *(float *)fg_tensor_data(one) = 1.0f;
    *(float *)fg_tensor_data(five) = 5.0f;
    fg_output v = fg_variable(g, "v", one);
    fg_set_name(g, fg_mul(g, v, fg_scalar(g, FG_F32, 2.0)), "r1");
    fg_set_name(g, fg_assign(g, v, fg_constant(g, "five", five)), "set");
    fg_set_name(g, fg_mul(g, v, fg_scalar(g, FG_F32, 3.0)), "r2");
    fg_tensor_free(one);
    fg_tensor_free(five);
    fg_status *st = fg_status_new();
    fg_session *s = session_on(g, threads, st);
    FG_REQUIRE(s);
    const char *fetch[2] = {"r1", "r2"}, *tgt = "set";
    fg_tensor *out[2] = {NULL, NULL};
    FG_REQUIRE(fg_session_run(s, NULL, 0, fetch, 2, out, &tgt, 1, st) == 0);
    FG_CHECK_NEAR(*(float *)fg_tensor_data(out[0]), 2.0, 0);
    FG_CHECK_NEAR(*(float *)fg_tensor_data(out[1]), 15.0, 0);
    fg_tensor_free(out[0]);
    fg_tensor_free(out[1]);
    /* The variable now holds 5: the next run's r1 reads it. */
    FG_REQUIRE(fg_session_run(s, NULL, 0, fetch, 1, out, NULL, 0, st) == 0);
    FG_CHECK_NEAR(*(float *)fg_tensor_data(out[0]), 10.0, 0);
    fg_tensor_free(out[0]);
    fg_session_free(s);
    fg_status_free(st);
    fg_graph_free(g);
  }
}

/* late[id] = 1 for every node of g that waits, through its inputs, for an
 * all_reduce (the rewritten graph lists every node after its inputs). */
static void mark_after_collectives(const fg_graph *g, char *late) {
  for (int id = 0; id < g->n_nodes; id++) {
    late[id] = 0;
    const fg_node *nd = &g->nodes[id];
    for (int k = 0; k < nd->n_inputs; k++) {
      const int p = nd->inputs[k].node;
      if (late[p] || (nd->op != FG_OP_ALL_REDUCE && g->nodes[p].op == FG_OP_ALL_REDUCE))
        late[id] = 1;
    }
  }
}

/* The two-layer MLP data-parallel for processes (fg_data_parallel with 1
 * replica, a bucket per gradient, run here without a communicator, where
 * every all_reduce is the identity). A bucket's all_reduce finishes when
 * the slowest rank reaches it, so whatever waits for one (W2's update, a
 * bias bucket's slices) goes after everything that does not: W1's
 * gradient comes before W2's update, and no step that waits for no
 * collective reuses bytes a step that does last touched. The rewrite
 * lists W2's update before W1's gradient, and the memory plan laid W1's
 * gradient over bytes W2's update read: a scheduling edge, so on an MPI
 * rank the last gradient's matmul waited for the peer's arrival at the
 * earlier bucket. The results stay those of node order: 3 steps on 1
 * and 2 threads against the graph before the rewrite. */
FG_TEST(plan_defers_what_waits_for_a_collective, "dist") {
  for (int threads = 1; threads <= 2; threads++) {
    const char *target;
    fg_graph *g0 = two_layers(&target);
    FG_REQUIRE(target);
    fg_status *st = fg_status_new();
    fg_data_parallel_options o;
    fg_data_parallel_options_init(&o);
    o.bucket_bytes = 1;
    const char *bi[2] = {"x", "y"};
    fg_graph *g = fg_data_parallel(g0, 1, bi, 2, &o, st);
    FG_REQUIRE(g);
    const char *dp_target = fg_graph_metadata(g, "train_target");
    FG_REQUIRE(dp_target);
    fg_session *s = session_on(g, threads, st), *s0 = session_on(g0, threads, st);
    FG_REQUIRE(s && s0);
    fg_tensor *x, *y;
    batch(&x, &y);
    fg_feed feeds[2] = {{"x", x}, {"y", y}};
    fg_plan_info *pi = fg_session_plan_info(s, feeds, 2, NULL, 0, &dp_target, 1, st);
    FG_REQUIRE(pi);
    char *late = calloc((size_t)g->n_nodes, 1);
    FG_REQUIRE(late);
    mark_after_collectives(g, late);
    const int u2 = update_of(g, "W2"), u1 = update_of(g, "W1");
    FG_REQUIRE(u1 >= 0 && u2 >= 0 && late[u1] && late[u2]);
    /* W1's gradient: the matmul feeding W1's bucket. */
    int dw1 = g->nodes[u1].inputs[1].node;
    while (g->nodes[dw1].op != FG_OP_MATMUL && g->nodes[dw1].n_inputs > 0)
      dw1 = g->nodes[dw1].inputs[0].node;
    FG_REQUIRE(g->nodes[dw1].op == FG_OP_MATMUL && !late[dw1]);
    FG_CHECK(step_of(pi, dw1) < step_of(pi, u2));
    int late_steps = 0;
    for (int i = 0; i < pi->n_steps; i++) {
      late_steps += late[pi->step_nodes[i]];
      /* Every step that waits for no collective comes first. */
      if (i > 0 && late[pi->step_nodes[i - 1]] && !late[pi->step_nodes[i]])
        FG_FAIL_AT("step %d (%s) follows a step after a collective", i,
                   fg_node_name(g, pi->step_nodes[i]));
    }
    FG_CHECK(late_steps >= 4); /* 4 updates at least */
    for (int a = 0; a < pi->n_tensors; a++)
      for (int b = 0; b < pi->n_tensors; b++) {
        const fg_plan_tensor *A = &pi->tensors[a], *B = &pi->tensors[b];
        if (A->offset < 0 || B->offset < 0 || A->bytes == 0 || B->bytes == 0 || A->last_step < 0 ||
            A->last_step >= B->first_step || B->first_step < 0)
          continue;
        if (A->offset + (int64_t)A->bytes <= B->offset ||
            B->offset + (int64_t)B->bytes <= A->offset)
          continue;
        if (late[pi->step_nodes[A->last_step]] && !late[pi->step_nodes[B->first_step]])
          FG_FAIL_AT("%s reuses the bytes of %s, last read after a collective", B->name, A->name);
      }
    /* Same losses and variables as the graph before the rewrite. */
    const char *loss = "loss";
    for (int step = 0; step < 3; step++) {
      fg_tensor *l0 = NULL, *l1 = NULL;
      FG_REQUIRE(fg_session_run(s0, feeds, 2, &loss, 1, &l0, &target, 1, st) == 0);
      FG_REQUIRE(fg_session_run(s, feeds, 2, &loss, 1, &l1, &dp_target, 1, st) == 0);
      FG_CHECK_NEAR(*(float *)fg_tensor_data(l1), *(float *)fg_tensor_data(l0), 0);
      fg_tensor_free(l0);
      fg_tensor_free(l1);
    }
    const char *vars[4] = {"W1", "b1", "W2", "b2"};
    for (int v = 0; v < 4; v++) {
      fg_tensor *a = fg_session_variable(s0, vars[v], st), *b = fg_session_variable(s, vars[v], st);
      FG_REQUIRE(a && b);
      for (int64_t i = 0; i < fg_tensor_num_elements(a); i++)
        FG_CHECK_NEAR(((float *)fg_tensor_data(b))[i], ((float *)fg_tensor_data(a))[i], 0);
      fg_tensor_free(a);
      fg_tensor_free(b);
    }
    free(late);
    fg_plan_info_free(pi);
    fg_tensor_free(x);
    fg_tensor_free(y);
    fg_session_free(s);
    fg_session_free(s0);
    fg_status_free(st);
    fg_graph_free(g);
    fg_graph_free(g0);
  }
}
