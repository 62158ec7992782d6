/* Fused updates (fg_data_parallel_options.fused_update; the op
 * all_reduce_apply_sgd) in one process (label dist): the rewrite, a group of one,
 * two ranks of the in-process communicator (which all-reduce a copy of the
 * gradient, then update), values worked out by hand, and the attributes'
 * refusals. The MPI runs, where the update goes in place over shared
 * memory, are in test_mpi.c (mpi_dp_fused_update_*). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "fgtest.h"
#include "flowgraph/flowgraph.h"
#include "test_dist_util.h"

enum { STEPS = 3, BATCH = 32 };
static const char *const batch_names_xy[2] = {"x", "y"};

/* digits x [?, 64] -> dense 64x2048 (1 MiB of f64: its gradient gets an
 * all_reduce of its own, so its update fuses) -> relu -> dense 2048x10 ->
 * softmax cross-entropy; `opt` at lr 0.05 ("train"). */
static fg_graph *wide_mlp(fg_optimizer_kind opt) {
  return dist_wide_mlp(FG_F64, 64, 2048, opt, "dense1", "dense2");
}

static fg_graph *rewrite(const fg_graph *g, int replicas, int fused) {
  return dist_rewrite_fused(g, replicas, fused);
}

/* Nodes of op `op`; *fused = the fused updates (all_reduce_apply_sgd). */
static int count_op(const fg_graph *g, const char *op, int *fused) {
  int n = 0;
  *fused = 0;
  for (int i = 0; i < fg_graph_num_nodes(g); i++) {
    n += strcmp(fg_node_op(g, i), op) == 0;
    *fused += strcmp(fg_node_op(g, i), "all_reduce_apply_sgd") == 0;
  }
  return n;
}

/* One replica per process: dense1/w's update becomes the fused node (its
 * own name, mean and weighted set, rows and sums as inputs 3 and 4), and
 * its all_reduce goes; the small gradients keep their bucket. Not fused:
 * replicas = 2 (in-process replicas), momentum updates. A saved and
 * reloaded graph keeps it. */
FG_TEST(dist_fused_update_rewrite, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = wide_mlp(FG_OPTIMIZER_SGD);
  fg_graph *plain = rewrite(g, 1, 0), *fused = rewrite(g, 1, 1);
  FG_REQUIRE(plain && fused);
  int f = 0, ar_plain = count_op(plain, "all_reduce", &f),
      ar_fused = count_op(fused, "all_reduce", &f);
  FG_CHECK_INT(ar_fused, ar_plain - 1);
  FG_CHECK_INT(count_op(fused, "apply_sgd", &f), 3);
  FG_CHECK_INT(f, 1);
  FG_CHECK_INT(count_op(plain, "apply_sgd", &f), 4);
  FG_CHECK_INT(f, 0);
  int u = -1;
  for (int i = 0; i < fg_graph_num_nodes(fused) && u < 0; i++)
    if (strcmp(fg_node_op(fused, i), "all_reduce_apply_sgd") == 0) u = i;
  FG_REQUIRE(u >= 0);
  int64_t mean = 0, weighted = 0;
  FG_CHECK(fg_node_attr_int(fused, u, "mean", &mean) == 0 && mean == 1);
  FG_CHECK(fg_node_attr_int(fused, u, "weighted", &weighted) == 0 && weighted == 1);
  FG_CHECK_STR(fg_node_name(fused, fg_node_input(fused, u, 0).node), "dense1/w");
  FG_CHECK_INT(fg_output_dtype(fused, fg_node_input(fused, u, 3)), FG_F64);
  FG_CHECK_STR(fg_node_name(fused, fg_node_input(fused, u, 4).node), "data_parallel/rows");

  fg_graph *two = rewrite(g, 2, 1);
  FG_REQUIRE(two);
  count_op(two, "apply_sgd", &f);
  FG_CHECK_INT(f, 0);
  fg_graph *gm = wide_mlp(FG_OPTIMIZER_MOMENTUM), *mom = rewrite(gm, 1, 1);
  FG_REQUIRE(mom);
  count_op(mom, "apply_sgd", &f);
  FG_CHECK_INT(f, 0);
  FG_CHECK_INT(count_op(mom, "apply_momentum", &f), 4);

  fg_graph *back = dist_save_load(fused, st);
  FG_REQUIRE(back);
  FG_CHECK_INT(count_op(back, "apply_sgd", &f), 3);
  FG_CHECK_INT(f, 1);
  fg_graph_free(back);
  fg_graph_free(mom);
  fg_graph_free(gm);
  fg_graph_free(two);
  fg_graph_free(fused);
  fg_graph_free(plain);
  fg_graph_free(g);
  fg_status_free(st);
}

/* Without a communicator the fused node is a plain update (a group of
 * one): the fused rewrite trains exactly as the unrewritten graph. */
FG_TEST(dist_fused_update_group_of_one_is_plain_sgd, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = wide_mlp(FG_OPTIMIZER_SGD), *fused = rewrite(g, 1, 1);
  FG_REQUIRE(fused);
  /* a's apply_sgd updates stay apply_sgd: update_epilogue would add the
   * gradients into the weights in their GEMMs, rounded there. */
  fg_session_options so;
  fg_session_options_init(&so);
  so.passes = "simplify,fold,fold_inference,cse,xent_grad,epilogue,conv_epilogue,grad_epilogue,"
              "fuse,multi_update,dce";
  fg_session *a = fg_session_new(g, &so, st), *b = fg_session_new(fused, NULL, st);
  FG_REQUIRE(a && b);
  dist_check_same_training(a, b, FG_F64, STEPS, BATCH, "dense1/w", "dense2/w");
  fg_session_free(a);
  fg_session_free(b);
  fg_graph_free(fused);
  fg_graph_free(g);
  fg_status_free(st);
}

/* g's replicas = 1 rewrites without and with fused updates, each trained
 * as two in-process ranks: both ranks of the fused one end with the
 * unfused one's dense1/w, bit for bit. */
static void check_two_ranks_bitwise(const fg_graph *g) {
  fg_graph *plain = rewrite(g, 1, 0), *fused = rewrite(g, 1, 1);
  FG_REQUIRE(plain && fused);
  dist_rank_arg p[2], f[2];
  FG_REQUIRE(dist_run_two_ranks(plain, NULL, 10, STEPS, BATCH, p) == 0);
  FG_REQUIRE(dist_run_two_ranks(fused, NULL, 10, STEPS, BATCH, f) == 0);
  const size_t bytes = 64 * 2048 * 8;
  FG_REQUIRE(p[0].w && f[0].w && f[1].w);
  FG_CHECK(memcmp(fg_tensor_data(f[0].w), fg_tensor_data(p[0].w), bytes) == 0);
  FG_CHECK(memcmp(fg_tensor_data(f[1].w), fg_tensor_data(p[0].w), bytes) == 0);
  for (int r = 0; r < 2; r++) {
    fg_tensor_free(p[r].w);
    fg_tensor_free(f[r].w);
  }
  fg_graph_free(fused);
  fg_graph_free(plain);
}

/* The in-process communicator has no fused form: the node all-reduces a
 * copy of the gradient and updates. */
FG_TEST(dist_fused_update_two_ranks_in_process, "dist") {
  fg_graph *g = wide_mlp(FG_OPTIMIZER_SGD);
  check_two_ranks_bitwise(g);
  fg_graph_free(g);
}

/* By hand, on two devices of one process: each holds v = [1, 2, 3] and
 * its own gradient, g0 = [1, 0, -2] on cpu:0 and g1 = [3, 4, 0] on cpu:1;
 * lr 0.5. Mean: both become v - 0.5 [2, 2, -1] = [0, 1, 3.5]; sum (mean
 * = 0): v - 0.5 [4, 4, -2] = [-1, 0, 4]. */
FG_TEST(dist_fused_apply_sgd_by_hand, "dist") {
  for (int mean = 0; mean < 2; mean++) {
    fg_status *st = fg_status_new();
    fg_graph *g = fg_graph_new();
    int64_t three = 3;
    const double v0[3] = {1, 2, 3}, gr[2][3] = {{1, 0, -2}, {3, 4, 0}};
    const char *fetch[2] = {"u0", "u1"};
    for (int r = 0; r < 2; r++) {
      fg_tensor *vt = fg_tensor_from_data(FG_F64, 1, &three, v0, sizeof v0, st);
      fg_tensor *gt = fg_tensor_from_data(FG_F64, 1, &three, gr[r], sizeof gr[r], st);
      dist_fused_sgd_on(g, r, vt, gt, FG_F64, 0.5, mean, fetch[r]);
      fg_tensor_free(vt);
      fg_tensor_free(gt);
    }
    const double want[2][3] = {{-1, 0, 4}, {0, 1, 3.5}};
    dist_check_updates(g, 2, want[mean], 3);
    fg_status_free(st);
  }
}

/* Bad attributes and inputs of all_reduce_apply_sgd (and the attributes
 * plain apply_sgd does not have), refused when the node is built, naming
 * it. */
static void check_sgd_refused(const char *op, const char *const *names, const int64_t *vals,
                              int n_attrs, int n_in, fg_dtype rows_dt, const char *want) {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t three = 3, two = 2;
  fg_tensor *vt = fg_tensor_new(FG_F32, 1, &three, st), *sums = fg_tensor_new(FG_F64, 1, &two, st);
  fg_output in[5] = {fg_variable(g, "v", vt), fg_scalar(g, FG_F32, 1), fg_scalar(g, FG_F32, 0.1),
                     fg_scalar(g, rows_dt, 4), fg_constant(g, "sums", sums)};
  in[1] = fg_constant(g, "grad", vt);
  fg_attrs *a = fg_attrs_new();
  for (int i = 0; i < n_attrs; i++)
    fg_attrs_set_int(a, names[i], vals[i]);
  dist_check_update_refused(g, op, in, n_in, a, want);
  fg_attrs_free(a);
  fg_tensor_free(vt);
  fg_tensor_free(sums);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(dist_fused_apply_sgd_bad_attributes, "dist,badinput") {
  const char *ar[] = {"weighted", "mean"}, *old[] = {"all_reduce", "weighted"};
  const int64_t two[] = {2}, one[] = {1}, mean2[] = {0, 3}, old_ar[] = {1, 0};
  const char *fused = "all_reduce_apply_sgd";
  check_sgd_refused(fused, ar, two, 1, 3, FG_F64, "attribute 'weighted' = 2 must be 0 or 1");
  check_sgd_refused(fused, ar, one, 1, 3, FG_F64, "weighted = 1 needs 5 inputs");
  check_sgd_refused(fused, ar, one, 1, 5, FG_F32,
                    "input 3 (rows) must be an f64 scalar and input 4 an f64 [2], got f32 []");
  check_sgd_refused(fused, ar, mean2, 2, 3, FG_F64, "attribute 'mean' = 3 must be 0 or 1");
  /* Plain apply_sgd has no attributes: the old all_reduce = 1 form and a
   * lone weighted are refused as any undeclared attribute is. */
  check_sgd_refused("apply_sgd", old, old_ar, 2, 3, FG_F64,
                    "unknown attribute 'all_reduce'; apply_sgd accepts: none");
  check_sgd_refused("apply_sgd", ar, one, 1, 3, FG_F64,
                    "unknown attribute 'weighted'; apply_sgd accepts: none");
}

/* Micro-batches then data parallelism, as `flowgraph train --dist mpi
 * --micro-batches 2` composes them: the update reads the micro-batches'
 * combined gradient, still fused, still the unfused rewrite's bits. */
FG_TEST(dist_fused_update_after_micro_batches, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = wide_mlp(FG_OPTIMIZER_SGD);
  fg_graph *mg = fg_micro_batch(g, 2, batch_names_xy, 2, FG_DP_LOSS_MEAN, st);
  FG_REQUIRE(mg);
  fg_graph *fused = rewrite(mg, 1, 1);
  FG_REQUIRE(fused);
  int f = 0;
  count_op(fused, "apply_sgd", &f);
  FG_CHECK_INT(f, 1);
  check_two_ranks_bitwise(mg);
  fg_graph_free(fused);
  fg_graph_free(mg);
  fg_graph_free(g);
  fg_status_free(st);
}

/* Collectives keep node order on every rank whatever a run fetches. By
 * hand: X0 = all_reduce(x = 1000; sum), then F = all_reduce_apply_sgd(v =
 * 1, g = 10, lr 0.5; sum). Rank 0 also fetches P = v + X0, a reader
 * of v that waits for X0 (so F, which writes v, must follow it there);
 * rank 1 does not. Both must pair X0 with X0: X0 = 2000, v = 1 - 0.5 * 20
 * = -9. (F used to move ahead of X0 on rank 1 only, pairing rank 0's X0
 * with rank 1's gradient: X0 = 1010, v = -504, no error.) */
typedef struct fetch_arg {
  fg_graph *g;
  fg_comm *c;
  int rank, rc;
  double x0, v;
} fetch_arg;

static void *fetch_thread(void *p) {
  fetch_arg *a = p;
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(a->g, NULL, st);
  const char *f0[2] = {"X0", "P"}, *target = "F";
  fg_tensor *out[2] = {NULL, NULL}, *v = NULL;
  a->rc = !s || fg_session_set_comm(s, a->c, st) != 0 ||
          fg_session_run(s, NULL, 0, f0, a->rank == 0 ? 2 : 1, out, &target, 1, st) != 0 ||
          !(v = fg_session_variable(s, "v", st));
  if (!a->rc) {
    a->x0 = ((const double *)fg_tensor_data(out[0]))[0];
    a->v = ((const double *)fg_tensor_data(v))[0];
  } else {
    fprintf(stderr, "rank %d: %s\n", a->rank, fg_status_message(st));
  }
  fg_tensor_free(out[0]);
  fg_tensor_free(out[1]);
  fg_tensor_free(v);
  fg_session_free(s);
  fg_status_free(st);
  return NULL;
}

FG_TEST(dist_fused_update_keeps_collective_order_across_fetches, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t three = 3;
  const double vv[3] = {1, 1, 1}, gg[3] = {10, 10, 10}, xx[3] = {1000, 1000, 1000};
  fg_tensor *vt = fg_tensor_from_data(FG_F64, 1, &three, vv, sizeof vv, st);
  fg_tensor *gt = fg_tensor_from_data(FG_F64, 1, &three, gg, sizeof gg, st);
  fg_tensor *xt = fg_tensor_from_data(FG_F64, 1, &three, xx, sizeof xx, st);
  fg_output v = fg_variable(g, "v", vt), x = fg_constant(g, "x", xt);
  fg_attrs *sum = fg_attrs_new(), *a = fg_attrs_new();
  fg_attrs_set_int(sum, "mean", 0);
  fg_output x0 = fg_op(g, "all_reduce", "X0", &x, 1, sum);
  fg_set_name(g, fg_add(g, v, x0), "P");
  fg_attrs_set_int(a, "mean", 0);
  fg_output in[3] = {v, fg_constant(g, "g", gt), fg_scalar(g, FG_F64, 0.5)};
  fg_op(g, "all_reduce_apply_sgd", "F", in, 3, a);
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  fg_comm *h[2];
  FG_REQUIRE(fg_comm_inproc_group(2, 10, h, st) == 0);
  fetch_arg args[2];
  pthread_t th[2];
  for (int r = 0; r < 2; r++) {
    args[r] = (fetch_arg){g, h[r], r, -1, 0, 0};
    pthread_create(&th[r], NULL, fetch_thread, &args[r]);
  }
  for (int r = 0; r < 2; r++)
    pthread_join(th[r], NULL);
  for (int r = 0; r < 2; r++) {
    FG_CHECK_INT(args[r].rc, 0);
    FG_CHECK(args[r].x0 == 2000);
    FG_CHECK(args[r].v == -9);
    h[r]->ops->free(h[r]);
  }
  fg_attrs_free(sum);
  fg_attrs_free(a);
  fg_tensor_free(vt);
  fg_tensor_free(gt);
  fg_tensor_free(xt);
  fg_graph_free(g);
  fg_status_free(st);
}

/* The other order, micro-batches of a data-parallel graph: refused alike
 * with and without fused updates, naming the update (the fused node's
 * rows and sums are data, not control inputs to multiply), also where an
 * update takes its gradient's factors (dist_deep_mlp: its input 1 is then
 * a forward tensor). */
FG_TEST(dist_fused_update_then_micro_batches_refused_alike, "dist,badinput") {
  fg_graph *models[2] = {wide_mlp(FG_OPTIMIZER_SGD), dist_deep_mlp()};
  for (int k = 0; k < 2; k++) {
    for (int fused = 0; fused < 2; fused++) {
      fg_status *st = fg_status_new();
      fg_graph *dg = rewrite(models[k], 1, fused);
      FG_REQUIRE(dg);
      FG_CHECK(fg_micro_batch(dg, 2, batch_names_xy, 2, FG_DP_LOSS_MEAN, st) == NULL);
      FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
      FG_CHECK_STR_CONTAINS(fg_status_message(st), "fg_micro_batch: the gradient of update '");
      fg_graph_free(dg);
      fg_status_free(st);
    }
    fg_graph_free(models[k]);
  }
}
