/* Order in data-parallel graphs. Where fg_data_parallel puts the optimizer
 * updates: right after their bucket's all_reduce, waiting only for the
 * nodes that read their variable (not for every gradient, as fg_minimize's
 * graph does), while a node that reads a variable after its update in node
 * order still sees the updated value. And which collectives a run with
 * partial fetches includes: every device's, in their order. */
#include "fgtest.h"
#include "test_dist_util.h"

#include <time.h>

static const char *const batch_names[2] = {"x", "y"};

static double dist_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Index of the node named `name`, or of its copy for replica r. */
static int find_r(const fg_graph *g, int r, const char *name) {
  char buf[128];
  if (r > 0) snprintf(buf, sizeof buf, "replica_%d/%s", r, name);
  return fg_graph_find(g, r > 0 ? buf : name);
}

/* The update of `var` in replica r of dg: the apply_* node whose input 0
 * is that replica's copy of the variable. */
static int update_of(const fg_graph *dg, int r, const char *var) {
  int v = find_r(dg, r, var);
  for (int n = 0; n < fg_graph_num_nodes(dg); n++)
    if (strncmp(fg_node_op(dg, n), "apply_", 6) == 0 && fg_node_input(dg, n, 0).node == v) return n;
  return -1;
}

static void check_order(int replicas) {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F32, FG_OPTIMIZER_MOMENTUM, 0.1, NULL, NULL);
  fg_data_parallel_options o;
  fg_data_parallel_options_init(&o);
  o.bucket_bytes = 1; /* one bucket per gradient */
  fg_graph *dg = fg_data_parallel(g, replicas, batch_names, 2, &o, st);
  if (!dg) fprintf(stderr, "%s\n", fg_status_message(st));
  FG_REQUIRE(dg);
  const char *vars[6] = {"dense3/b", "dense3/w", "dense2/b", "dense2/w", "dense1/b", "dense1/w"};
  for (int r = 0; r < replicas; r++) {
    /* The last gradient made: dense1/w's, the matmul that reads x (or
     * replica r's shard of it). */
    int last_grad = -1;
    for (int n = 0; n < fg_graph_num_nodes(dg); n++)
      if (strstr(fg_node_name(dg, n), "gradients/") && strcmp(fg_node_op(dg, n), "matmul") == 0)
        last_grad = n;
    FG_REQUIRE(last_grad >= 0);
    for (int v = 0; v < 6; v++) {
      int u = update_of(dg, r, vars[v]), var = find_r(dg, r, vars[v]);
      FG_REQUIRE(u >= 0 && var >= 0);
      /* Its reduced gradient is an all_reduce; every update but dense1/w's
       * comes before the last gradient is made. */
      const char *op = fg_node_op(dg, u);
      int gi = strcmp(op, "apply_sgd") == 0 ? 1 : strcmp(op, "apply_momentum") == 0 ? 2 : 3;
      int ar = fg_node_input(dg, u, gi).node;
      FG_CHECK(strcmp(fg_node_op(dg, ar), "all_reduce") == 0);
      if (v < 5 && !(u < last_grad))
        FG_FAIL_AT("replica %d: update of %s is node %d, after the last gradient %d", r, vars[v], u,
                   last_grad);
      /* No control input is fg_minimize's group of every gradient; the one
       * group it waits for holds exactly the nodes before it that read its
       * variable. */
      int n_groups = 0;
      for (int k = 0; k < fg_node_num_inputs(dg, u); k++) {
        int c = fg_node_input(dg, u, k).node;
        if (strcmp(fg_node_op(dg, c), "group") != 0) continue;
        n_groups++;
        int readers = 0;
        for (int n = 0; n < u; n++)
          for (int q = 0; q < fg_node_num_inputs(dg, n); q++)
            if (fg_node_input(dg, n, q).node == var) {
              readers++;
              int in_group = 0;
              for (int j = 0; j < fg_node_num_inputs(dg, c); j++)
                in_group |= fg_node_input(dg, c, j).node == n;
              if (!in_group)
                FG_FAIL_AT("replica %d: %s reads %s but the update does not wait for it", r,
                           fg_node_name(dg, n), vars[v]);
              break;
            }
        FG_CHECK_INT(fg_node_num_inputs(dg, c), readers);
        /* A forward reader, and a backward one (the gradient of the layer's
         * input, or sum_to's shape) for all but dense1/w. */
        FG_CHECK_INT(readers, v == 5 ? 1 : 2);
      }
      FG_CHECK_INT(n_groups, 1);
    }
  }
  fg_graph_free(dg);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(dist_dp_updates_follow_their_bucket_1_replica, "dist") { check_order(1); }
FG_TEST(dist_dp_updates_follow_their_bucket_3_replicas, "dist") { check_order(3); }

/* sum(dense3/w^2) of the variable's current value */
static double sum_sq(fg_session *s, const char *var) {
  fg_tensor *t = fg_session_variable(s, var, NULL);
  double acc = 0;
  for (int64_t i = 0; t && i < fg_tensor_num_elements(t); i++) {
    double x = ((double *)fg_tensor_data(t))[i];
    acc += x * x;
  }
  fg_tensor_free(t);
  return acc;
}

/* A node added after fg_minimize that reads dense3/w comes after the
 * update in node order, so it sees the updated weights; the rewrite, which
 * moves updates earlier, must not move this read before the update, nor the
 * update before a read that precedes it. Reference: the sum of squares of
 * the variable read back after the step. */
static void reader_after_update(int replicas) {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F64, FG_OPTIMIZER_SGD, 0.5, NULL, NULL);
  int w3 = fg_graph_find(g, "dense3/w");
  FG_REQUIRE(w3 >= 0);
  fg_output w = {w3, 0};
  fg_set_name(g, fg_reduce_sum(g, fg_mul(g, w, w), NULL, 0, 0), "wsum");
  fg_graph *run = g;
  if (replicas > 0) {
    fg_data_parallel_options o;
    fg_data_parallel_options_init(&o);
    o.bucket_bytes = 1;
    run = fg_data_parallel(g, replicas, batch_names, 2, &o, st);
    if (!run) fprintf(stderr, "%s\n", fg_status_message(st));
    FG_REQUIRE(run);
  }
  fg_session *s = fg_session_new(run, NULL, st);
  FG_REQUIRE(s);
  double before = sum_sq(s, "dense3/w");
  for (int step = 0; step < 2; step++) {
    fg_tensor *x, *y, *out = NULL;
    FG_REQUIRE(dist_batch(FG_F64, 40 * step, 40, &x, &y) == 0);
    fg_feed feeds[2] = {{"x", x}, {"y", y}};
    /* Replicas' copies of other nodes carry a "replica_R/" prefix. */
    const char *fetch = replicas > 1 ? "replica_1/wsum" : "wsum", *target = "train";
    int rc = fg_session_run(s, feeds, 2, &fetch, 1, &out, &target, 1, st);
    if (rc) fprintf(stderr, "%s\n", fg_status_message(st));
    FG_REQUIRE(rc == 0);
    double after = sum_sq(s, "dense3/w"), got = ((double *)fg_tensor_data(out))[0];
    /* The step changed the weights, and wsum is the new ones'. */
    FG_CHECK(fabs(after - before) > 1e-6 * after);
    FG_CHECK_NEAR(got, after, 1e-12 * after);
    before = after;
    fg_tensor_free(out);
    fg_tensor_free(x);
    fg_tensor_free(y);
  }
  fg_session_free(s);
  if (run != g) fg_graph_free(run);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(dist_dp_reader_after_update_single_device, "dist") { reader_after_update(0); }
FG_TEST(dist_dp_reader_after_update_1_replica, "dist") { reader_after_update(1); }
FG_TEST(dist_dp_reader_after_update_2_replicas, "dist") { reader_after_update(2); }

/* Fetching one replica's reduced gradient alone: devices' collectives pair
 * by order, so the plan runs every replica's first k all_reduce steps, not
 * only that replica's (which would wait for the others until the
 * deadline). The value is the full batch's gradient, which the
 * single-device graph computes. */
FG_TEST(dist_dp_fetch_one_replicas_reduced_gradient, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F64, FG_OPTIMIZER_SGD, 0.1, NULL, NULL);
  fg_data_parallel_options o;
  fg_data_parallel_options_init(&o);
  o.bucket_bytes = 1;
  fg_graph *dg = fg_data_parallel(g, 3, batch_names, 2, &o, st);
  FG_REQUIRE(dg);
  fg_session_options so;
  fg_session_options_init(&so);
  so.dist_timeout_s = 20;
  fg_session *s1 = fg_session_new(g, NULL, st), *sn = fg_session_new(dg, &so, st);
  FG_REQUIRE(s1 && sn);
  fg_tensor *x, *y;
  FG_REQUIRE(dist_batch(FG_F64, 0, 30, &x, &y) == 0);
  fg_feed feeds[2] = {{"x", x}, {"y", y}};
  for (int k = 0; k < 6; k++) {
    for (int r = 0; r < 3; r += 2) {
      char ar[96];
      snprintf(ar, sizeof ar, "replica_%d/data_parallel/all_reduce_%d", r, k);
      int id = fg_graph_find(dg, ar);
      FG_REQUIRE(id >= 0);
      /* Its input 0: replica r's copy of a gradient node of g. */
      const char *gname = strchr(fg_node_name(dg, fg_node_input(dg, id, 0).node), '/') + 1;
      fg_tensor *got = NULL, *want = NULL;
      const char *fetch = ar;
      double t0 = dist_now();
      int rc = fg_session_run(sn, feeds, 2, &fetch, 1, &got, NULL, 0, st);
      if (rc) fprintf(stderr, "%s\n", fg_status_message(st));
      FG_REQUIRE(rc == 0);
      FG_CHECK(dist_now() - t0 < 10);
      FG_REQUIRE(fg_session_run(s1, feeds, 2, &gname, 1, &want, NULL, 0, st) == 0);
      FG_REQUIRE(fg_tensor_num_elements(got) == fg_tensor_num_elements(want));
      double worst = 0, scale = 0;
      for (int64_t i = 0; i < fg_tensor_num_elements(got); i++) {
        double a = ((double *)fg_tensor_data(got))[i], b = ((double *)fg_tensor_data(want))[i];
        worst = fmax(worst, fabs(a - b));
        scale = fmax(scale, fabs(b));
      }
      if (!(scale > 0 && worst <= 1e-12 * scale))
        FG_FAIL_AT("%s vs %s: differs by %g (scale %g)", ar, gname, worst, scale);
      fg_tensor_free(got);
      fg_tensor_free(want);
    }
  }
  fg_tensor_free(x);
  fg_tensor_free(y);
  fg_session_free(s1);
  fg_session_free(sn);
  fg_graph_free(dg);
  fg_graph_free(g);
  fg_status_free(st);
}
