/* The in-process distributed layer: data parallelism on cpu:N replicas
 * against one device, model parallelism, partitions, placement rules,
 * device checks (a device that does not exist is refused) and the in-process communicator.
 * Reference values come from the single-device run of the same graph (an independent code path: no
 * shard, no all_reduce, one thread) or by hand. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/comm/comm_inproc.h"
#include "executor/cuda_backend.h"
#include "fgtest.h"
#include "graph/graph_internal.h"
#include "graph/op_table.h"
#include "test_dist_util.h"

#define STEPS 6
#define BATCH 64

static const char *const batch_names[2] = {"x", "y"};

/* Trains the single-device graph and its data-parallel rewrite on the same
 * batches (sizes `batches`, NULL: BATCH) and compares per-step losses and
 * final variables. */
static void compare_dp_batches(fg_dtype dt, fg_optimizer_kind opt, double lr, int replicas,
                               int64_t bucket, double tol, const int *batches) {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(dt, opt, lr, NULL, NULL);
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  fg_data_parallel_options o;
  fg_data_parallel_options_init(&o);
  if (bucket) o.bucket_bytes = bucket;
  fg_graph *dg = fg_data_parallel(g, replicas, batch_names, 2, &o, st);
  if (!dg) fprintf(stderr, "%s\n", fg_status_message(st));
  FG_REQUIRE(dg);
  fg_session *s1, *sn;
  FG_REQUIRE(dist_dp_sessions(g, dg, replicas, &s1, &sn, st) == 0);
  double l1[STEPS], ln[STEPS];
  FG_REQUIRE(dist_train_batches(s1, dt, STEPS, batches, BATCH, l1, st) == 0);
  int rc = dist_train_batches(sn, dt, STEPS, batches, BATCH, ln, st);
  if (rc) fprintf(stderr, "%s\n", fg_status_message(st));
  FG_REQUIRE(rc == 0);
  for (int k = 0; k < STEPS; k++)
    FG_CHECK_NEAR(ln[k], l1[k], tol);
  FG_CHECK(l1[STEPS - 1] < l1[0]); /* it learns */
  dist_check_dp_vars(sn, s1, replicas, tol);
  fg_session_free(s1);
  fg_session_free(sn);
  fg_graph_free(dg);
  fg_graph_free(g);
  fg_status_free(st);
}

static void compare_dp(fg_dtype dt, fg_optimizer_kind opt, double lr, int replicas, int64_t bucket,
                       double tol) {
  compare_dp_batches(dt, opt, lr, replicas, bucket, tol, NULL);
}

/* Uneven shards: batches that do not divide by the replicas (61 rows over
 * 4 = 16+15+15+15; 7 over 4 = 2+2+2+1), mixed with ones that do, in one
 * session. The row-weighted mean keeps every step the full batch's. */
static const int uneven[STEPS] = {61, 64, 7, 33, 4, 50};

FG_TEST(dist_dp_uneven_batches_f32_3_replicas, "dist") {
  compare_dp_batches(FG_F32, FG_OPTIMIZER_ADAM, 2e-3, 3, 0, 1e-5, uneven);
}
FG_TEST(dist_dp_uneven_batches_f32_4_replicas_buckets, "dist") {
  compare_dp_batches(FG_F32, FG_OPTIMIZER_SGD, 0.1, 4, 40000, 1e-5, uneven);
}
FG_TEST(dist_dp_uneven_batches_f64_4_replicas, "dist") {
  compare_dp_batches(FG_F64, FG_OPTIMIZER_MOMENTUM, 0.05, 4, 0, 1e-12, uneven);
}

FG_TEST(dist_dp_digits_f32_1_replica, "dist") {
  compare_dp(FG_F32, FG_OPTIMIZER_ADAM, 2e-3, 1, 0, 1e-5);
}
FG_TEST(dist_dp_digits_f32_2_replicas, "dist") {
  compare_dp(FG_F32, FG_OPTIMIZER_ADAM, 2e-3, 2, 0, 1e-5);
}
FG_TEST(dist_dp_digits_f32_4_replicas, "dist") {
  compare_dp(FG_F32, FG_OPTIMIZER_ADAM, 2e-3, 4, 0, 1e-5);
}
FG_TEST(dist_dp_digits_f32_4_replicas_sgd, "dist") {
  compare_dp(FG_F32, FG_OPTIMIZER_SGD, 0.1, 4, 0, 1e-5);
}
FG_TEST(dist_dp_digits_f64_2_replicas, "dist") {
  compare_dp(FG_F64, FG_OPTIMIZER_ADAM, 2e-3, 2, 0, 1e-12);
}
FG_TEST(dist_dp_digits_f64_4_replicas, "dist") {
  compare_dp(FG_F64, FG_OPTIMIZER_MOMENTUM, 0.05, 4, 0, 1e-12);
}

/* Bucket sizes change how gradients are fused, never the numbers: the
 * mean of each element is the same sum in the same rank order. */
FG_TEST(dist_dp_bucket_sizes_bitwise_equal, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F32, FG_OPTIMIZER_ADAM, 2e-3, NULL, NULL);
  int64_t sizes[3] = {1, 0, (int64_t)1 << 40};
  int want_buckets[3] = {6, 1, 1};
  double losses[3][STEPS];
  fg_session *ss[3];
  fg_graph *gs[3];
  for (int i = 0; i < 3; i++) {
    fg_data_parallel_options o;
    fg_data_parallel_options_init(&o);
    if (sizes[i]) o.bucket_bytes = sizes[i];
    gs[i] = fg_data_parallel(g, 2, batch_names, 2, &o, st);
    FG_REQUIRE(gs[i]);
    FG_CHECK_INT(atoi(fg_graph_metadata(gs[i], "data_parallel_buckets")), want_buckets[i]);
    int n_ar = 0;
    for (int n = 0; n < fg_graph_num_nodes(gs[i]); n++)
      n_ar += strcmp(fg_node_op(gs[i], n), "all_reduce") == 0;
    /* One all_reduce per bucket and replica, and each replica's row
     * count ("data_parallel/rows"). */
    FG_CHECK_INT(n_ar, 2 * (want_buckets[i] + 1));
    ss[i] = fg_session_new(gs[i], NULL, st);
    FG_REQUIRE(ss[i]);
    FG_REQUIRE(dist_train(ss[i], FG_F32, STEPS, BATCH, losses[i], st) == 0);
  }
  for (int i = 1; i < 3; i++) {
    FG_CHECK(memcmp(losses[i], losses[0], sizeof losses[0]) == 0);
    FG_CHECK(dist_var_diff(ss[i], "dense1/w", ss[0], "dense1/w") == 0.0);
    FG_CHECK(dist_var_diff(ss[i], "dense3/b", ss[0], "dense3/b") == 0.0);
  }
  /* A 40 KB cap splits the 6 gradients (32 KB, 512 B, 32 KB, 256 B,
   * 2560 B, 40 B in ready order dense3 first) into more than one bucket. */
  fg_data_parallel_options o;
  fg_data_parallel_options_init(&o);
  o.bucket_bytes = 40000;
  fg_graph *mid = fg_data_parallel(g, 2, batch_names, 2, &o, st);
  FG_REQUIRE(mid);
  int nb = atoi(fg_graph_metadata(mid, "data_parallel_buckets"));
  FG_CHECK(nb > 1 && nb < 6);
  fg_graph_free(mid);
  for (int i = 0; i < 3; i++) {
    fg_session_free(ss[i]);
    fg_graph_free(gs[i]);
  }
  fg_graph_free(g);
  fg_status_free(st);
}

/* The bucket's all_reduce depends only on its own gradients (and the
 * previous bucket's all_reduce), not on the rest of the backward pass. */
FG_TEST(dist_dp_bucket_depends_only_on_its_gradients, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, NULL, NULL);
  fg_data_parallel_options o;
  fg_data_parallel_options_init(&o);
  o.bucket_bytes = 1;
  fg_graph *dg = fg_data_parallel(g, 1, NULL, 0, &o, st);
  FG_REQUIRE(dg);
  /* Bucket 0 is the first gradient ready: dense3's (the last layer). Its
   * ancestors must not include dense1's weight gradient (made later). */
  int ar0 = fg_graph_find(dg, "data_parallel/all_reduce_0");
  FG_REQUIRE(ar0 >= 0);
  int n = fg_graph_num_nodes(dg);
  char *anc = calloc((size_t)n, 1);
  anc[ar0] = 1;
  for (int i = n - 1; i >= 0; i--)
    if (anc[i])
      for (int k = 0; k < fg_node_num_inputs(dg, i); k++)
        anc[fg_node_input(dg, i, k).node] = 1;
  int w1 = fg_graph_find(dg, "dense1/w"), first_grad_on_w1 = -1;
  for (int i = 0; i < n && first_grad_on_w1 < 0; i++)
    if (strncmp(fg_node_name(dg, i), "gradients", 9) == 0 &&
        strcmp(fg_node_op(dg, i), "matmul") == 0)
      for (int k = 0; k < fg_node_num_inputs(dg, i); k++)
        if (fg_node_input(dg, i, k).node == fg_graph_find(dg, "x")) first_grad_on_w1 = i;
  FG_REQUIRE(w1 >= 0 && first_grad_on_w1 >= 0);
  FG_CHECK(!anc[first_grad_on_w1]);
  /* And the update of dense1/w reads a reduced gradient. */
  int last_ar = -1;
  for (int i = 0; i < n; i++)
    if (strcmp(fg_node_op(dg, i), "all_reduce") == 0) last_ar = i;
  FG_CHECK(last_ar > ar0);
  free(anc);
  fg_graph_free(dg);
  fg_graph_free(g);
  fg_status_free(st);
}

/* The rewritten graph is an ordinary graph: it saves, loads, and the
 * loaded copy trains to the same bits. */
FG_TEST(dist_dp_save_load_round_trip, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F32, FG_OPTIMIZER_ADAM, 2e-3, NULL, NULL);
  fg_graph *dg = fg_data_parallel(g, 2, batch_names, 2, NULL, st);
  FG_REQUIRE(dg);
  void *buf = NULL;
  size_t size = 0;
  FG_REQUIRE(fg_graph_save_memory(dg, &buf, &size, st) == 0);
  fg_graph *lg = fg_graph_load_memory(buf, size, st);
  free(buf);
  FG_REQUIRE(lg);
  FG_CHECK_INT(fg_graph_num_nodes(lg), fg_graph_num_nodes(dg));
  int ar = fg_graph_find(lg, "replica_1/data_parallel/all_reduce_0");
  FG_REQUIRE(ar >= 0);
  FG_CHECK(strcmp(fg_node_op(lg, ar), "all_reduce") == 0);
  FG_CHECK(strcmp(fg_node_device_explicit(lg, ar), "cpu:1") == 0);
  /* Unplaced stays unplaced through the file. */
  FG_CHECK(fg_node_device_explicit(lg, fg_graph_find(lg, "x")) == NULL);
  FG_CHECK(strcmp(fg_node_op(lg, fg_graph_find(lg, "replica_1/x/shard")), "shard") == 0);
  fg_session *a = fg_session_new(dg, NULL, st), *b = fg_session_new(lg, NULL, st);
  FG_REQUIRE(a && b);
  double la[3], lb[3];
  FG_REQUIRE(dist_train(a, FG_F32, 3, BATCH, la, st) == 0);
  FG_REQUIRE(dist_train(b, FG_F32, 3, BATCH, lb, st) == 0);
  FG_CHECK(memcmp(la, lb, sizeof la) == 0);
  FG_CHECK(dist_var_diff(a, "dense2/w", b, "dense2/w") == 0.0);
  fg_session_free(a);
  fg_session_free(b);
  fg_graph_free(lg);
  fg_graph_free(dg);
  fg_graph_free(g);
  fg_status_free(st);
}

/* fg_session_save on a multi-device session writes every replica's
 * variables; loading resumes bit for bit. */
FG_TEST(dist_dp_session_save_resumes, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F64, FG_OPTIMIZER_ADAM, 2e-3, NULL, NULL);
  fg_graph *dg = fg_data_parallel(g, 2, batch_names, 2, NULL, st);
  FG_REQUIRE(dg);
  fg_session *a = fg_session_new(dg, NULL, st);
  FG_REQUIRE(a);
  double l[4];
  FG_REQUIRE(dist_train(a, FG_F64, 2, BATCH, l, st) == 0);
  char dir[256], path[300];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_dist"));
  snprintf(path, sizeof path, "%s/dp.fgb", dir);
  FG_REQUIRE(fg_session_save(a, path, st) == 0);
  fg_graph *lg = fg_graph_load(path, st);
  FG_REQUIRE(lg);
  fg_session *b = fg_session_new(lg, NULL, st);
  FG_REQUIRE(b);
  FG_CHECK(dist_var_diff(a, "replica_1/dense1/w", b, "replica_1/dense1/w") == 0.0);
  double la[2], lb[2];
  FG_REQUIRE(dist_train(a, FG_F64, 2, BATCH, la, st) == 0);
  FG_REQUIRE(dist_train(b, FG_F64, 2, BATCH, lb, st) == 0);
  FG_CHECK(memcmp(la, lb, sizeof la) == 0);
  fg_session_free(a);
  fg_session_free(b);
  fg_graph_free(lg);
  fgt_rmtree(dir);
  fg_graph_free(dg);
  fg_graph_free(g);
  fg_status_free(st);
}

/* Model parallelism: layers 1-2 on cpu:0, layer 3 and the loss on cpu:1. */
static void model_parallel(fg_dtype dt) {
  fg_status *st = fg_status_new();
  fg_graph *g1 = dist_mlp(dt, FG_OPTIMIZER_ADAM, 2e-3, NULL, NULL);
  fg_graph *g2 = dist_mlp(dt, FG_OPTIMIZER_ADAM, 2e-3, "cpu:0", "cpu:1");
  FG_REQUIRE(fg_graph_status(g2, st) == FG_OK);
  fg_session *s1 = fg_session_new(g1, NULL, st), *s2 = fg_session_new(g2, NULL, st);
  if (!s2) fprintf(stderr, "%s\n", fg_status_message(st));
  FG_REQUIRE(s1 && s2);
  const fg_partition *p = fg_session_partition(s2);
  FG_REQUIRE(fg_partition_num_devices(p) == 2);
  /* dense2's variables follow their explicitly placed consumers; their
   * Adam state and updates stay with them. */
  int d2w = fg_graph_find(g2, "dense2/w");
  FG_CHECK_INT(fg_partition_node_device(p, d2w), 1);
  for (int i = 0; i < fg_graph_num_nodes(g2); i++)
    if (strncmp(fg_node_op(g2, i), "apply_", 6) == 0)
      FG_CHECK_INT(fg_partition_node_device(p, i),
                   fg_partition_node_device(p, fg_node_input(g2, i, 0).node));
  FG_CHECK(fg_partition_num_transfers(p) > 0);
  /* Same kernels on the same data: the same bits. */
  dist_check_same_training(s1, s2, dt, STEPS, BATCH, "dense1/w", "dense3/w");
  fg_session_free(s1);
  fg_session_free(s2);
  fg_graph_free(g1);
  fg_graph_free(g2);
  fg_status_free(st);
}

FG_TEST(dist_model_parallel_mlp_f32, "dist") { model_parallel(FG_F32); }
FG_TEST(dist_model_parallel_mlp_f64, "dist") { model_parallel(FG_F64); }

static int is_source_op(const char *op) {
  return !strcmp(op, "variable") || !strcmp(op, "placeholder") || !strcmp(op, "constant") ||
         !strcmp(op, "fill");
}

/* The split MLP's backward pass runs where its forward pass ran: every
 * unplaced node fg_gradients made carries "_colocate" naming an existing
 * forward node and runs on that node's device. So the only tensors crossing
 * devices are layer 1's activations (relu_2, to cpu:1) and their gradient
 * (back to cpu:0); the rest are control edges of 0 bytes. Before this rule
 * dense2/w's gradient was made on cpu:0 next to h1 and sent over, and the
 * labels went to cpu:0 for the loss gradient's one_hot. */
FG_TEST(dist_backward_colocates_with_forward, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, "cpu:0", "cpu:1");
  fg_partition *p = fg_partition_new(g, NULL, st);
  FG_REQUIRE(p);
  int tagged = 0;
  for (int i = 0; i < fg_graph_num_nodes(g); i++) {
    const char *fwd = NULL;
    if (fg_node_attr_string(g, i, "_colocate", &fwd) != 0) {
      FG_CHECK(strncmp(fg_node_name(g, i), "gradients/", 10) != 0);
      continue;
    }
    tagged++;
    FG_CHECK(strncmp(fg_node_name(g, i), "gradients/", 10) == 0);
    int f = fg_graph_find(g, fwd);
    FG_REQUIRE(f >= 0 && f < i);
    FG_CHECK(strncmp(fwd, "gradients/", 10) != 0);
    if (!is_source_op(fg_node_op(g, i)))
      FG_CHECK_INT(fg_partition_node_device(p, i), fg_partition_node_device(p, f));
  }
  FG_CHECK(tagged > 20);
  int data = 0, to1 = 0, to0 = 0;
  for (int i = 0; i < fg_partition_num_transfers(p); i++) {
    const fg_transfer *t = fg_partition_transfer(p, i);
    FG_CHECK(t->src.node != fg_graph_find(g, "y"));
    if (t->bytes == 0) continue; /* control edge */
    data++;
    const char *src = fg_node_name(g, t->src.node);
    if (t->dst_device == 1) to1 += strcmp(src, "relu_2") == 0;
    if (t->dst_device == 0) to0 += strncmp(src, "gradients/", 10) == 0;
  }
  /* The relu's output, its gradient and the step's learning rate (an f32
   * scalar computed on cpu:0, read by the updates on cpu:1). */
  FG_CHECK_INT(data, 3);
  FG_CHECK_INT(to1, 1);
  FG_CHECK_INT(to0, 1);
  /* dense2/w's gradient (its update's input 1) is made on cpu:1. */
  int d2w = fg_graph_find(g, "dense2/w"), upd = -1;
  for (int i = 0; i < fg_graph_num_nodes(g); i++)
    if (!strcmp(fg_node_op(g, i), "apply_sgd") && fg_node_input(g, i, 0).node == d2w) upd = i;
  FG_REQUIRE(upd >= 0);
  FG_CHECK_INT(fg_partition_node_device(p, fg_node_input(g, upd, 1).node), 1);
  fg_partition_free(p);
  fg_graph_free(g);
  /* In a 2-replica rewrite a backward node names the forward node of its
   * own replica, on its own device. */
  g = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, NULL, NULL);
  const char *const batch[2] = {"x", "y"};
  fg_graph *dg = fg_data_parallel(g, 2, batch, 2, NULL, st);
  FG_REQUIRE(dg);
  p = fg_partition_new(dg, NULL, st);
  FG_REQUIRE(p);
  int r1 = 0;
  for (int i = 0; i < fg_graph_num_nodes(dg); i++) {
    const char *fwd = NULL;
    if (fg_node_attr_string(dg, i, "_colocate", &fwd) != 0) continue;
    int f = fg_graph_find(dg, fwd);
    FG_REQUIRE(f >= 0);
    FG_CHECK_INT(strncmp(fwd, "replica_1/", 10) == 0,
                 strncmp(fg_node_name(dg, i), "replica_1/", 10) == 0);
    r1 += strncmp(fwd, "replica_1/", 10) == 0;
    FG_CHECK_INT(fg_partition_node_device(p, i), fg_partition_node_device(p, f));
  }
  FG_CHECK(r1 > 20);
  fg_partition_free(p);
  fg_graph_free(dg);
  fg_graph_free(g);
  fg_status_free(st);
}

/* "_colocate" set by hand through fg_op: a node whose inputs are on cpu:0
 * runs on cpu:1 where the named node is, and an explicit device still wins.
 * Names that cannot be followed (missing, the node itself, a later node, an
 * empty name) leave the input rule in force, with no error; an int
 * _colocate is refused when the node is made. */
FG_TEST(dist_colocate_attr_rules_and_bad_names, "badinput") {
  fg_status *st = fg_status_new();
  /* A _colocate that is not a string is refused when the node is made. */
  fg_graph *bad = dist_cut_graph(1);
  fg_output ba = fg_graph_find_output(bad, "a");
  fg_attrs *ai = fg_attrs_new();
  fg_attrs_set_int(ai, "_colocate", 1);
  FG_CHECK_INT(fg_op(bad, "neg", "int_colocate", &ba, 1, ai).node, -1);
  fg_attrs_free(ai);
  FG_CHECK_INT(fg_graph_status(bad, st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st),
                        "node 'int_colocate' (neg): attribute '_colocate' has type int, "
                        "expected string");
  fg_graph_free(bad);
  fg_graph *g = dist_cut_graph(1);
  fg_output a = fg_graph_find_output(g, "a"), b = fg_graph_find_output(g, "b");
  const char *names[5] = {"b", "nope", "self", "later", ""};
  fg_output made[5];
  for (int k = 0; k < 5; k++) {
    fg_attrs *at = fg_attrs_new();
    fg_attrs_set_string(at, "_colocate", names[k]);
    char nm[16];
    snprintf(nm, sizeof nm, "%s", k == 2 ? "self" : k == 0 ? "f0" : "");
    made[k] = fg_op(g, "neg", nm[0] ? nm : NULL, &a, 1, at);
    fg_attrs_free(at);
    FG_REQUIRE(made[k].node >= 0);
  }
  fg_output late = fg_set_name(g, fg_neg(g, a), "later");
  fg_attrs *at = fg_attrs_new();
  fg_attrs_set_string(at, "_colocate", "b");
  fg_output pinned = fg_op(g, "neg", "pinned", &a, 1, at);
  fg_attrs_free(at);
  fg_set_device(g, pinned, "cpu:0");
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK && late.node >= 0);
  fg_partition *p = fg_partition_new(g, NULL, st);
  FG_REQUIRE(p);
  FG_CHECK_INT(fg_partition_node_device(p, b.node), 1);
  FG_CHECK_INT(fg_partition_node_device(p, made[0].node), 1);
  for (int k = 1; k < 5; k++)
    FG_CHECK_INT(fg_partition_node_device(p, made[k].node), 0);
  FG_CHECK_INT(fg_partition_node_device(p, pinned.node), 0);
  fg_partition_free(p);
  /* The attribute survives a save and load, and so does the placement. */
  void *bytes = NULL;
  size_t size = 0;
  FG_REQUIRE(fg_graph_save_memory(g, &bytes, &size, st) == 0);
  fg_graph *h = fg_graph_load_memory(bytes, size, st);
  free(bytes);
  FG_REQUIRE(h);
  p = fg_partition_new(h, NULL, st);
  FG_REQUIRE(p);
  FG_CHECK_INT(fg_partition_node_device(p, fg_graph_find(h, "f0")), 1);
  FG_CHECK_INT(fg_partition_node_device(p, fg_graph_find(h, "self")), 0);
  fg_partition_free(p);
  fg_graph_free(h);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(dist_partition_send_recv_pairs, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_cut_graph(1);
  fg_partition *p = fg_partition_new(g, NULL, st);
  FG_REQUIRE(p);
  FG_CHECK_INT(fg_partition_num_devices(p), 2);
  FG_CHECK(fg_partition_device(p, 0).kind == FG_DEVICE_CPU && fg_partition_device(p, 0).index == 0);
  FG_CHECK(fg_partition_device(p, 1).index == 1);
  FG_REQUIRE(fg_partition_num_transfers(p) == 3);
  const char *want[3] = {"a:0->cpu:1", "b:0->cpu:0", "c:0->cpu:0"};
  for (int i = 0; i < 3; i++) {
    const fg_transfer *t = fg_partition_transfer(p, i);
    FG_REQUIRE(t);
    FG_CHECK(strcmp(t->key, want[i]) == 0);
    FG_CHECK_INT(t->bytes, 24);
    /* The pair connects the producer's device to the consumer's. */
    FG_CHECK_INT(t->src_device, fg_partition_node_device(p, t->src.node));
    FG_CHECK(t->dst_device != t->src_device);
    for (int j = 0; j < i; j++)
      FG_CHECK(strcmp(fg_partition_transfer(p, j)->key, t->key) != 0);
  }
  /* The scalar 2 (unplaced) follows its consumer b to cpu:1; x follows a. */
  FG_CHECK_INT(fg_partition_node_device(p, fg_node_input(g, fg_graph_find(g, "b"), 1).node), 1);
  FG_CHECK_INT(fg_partition_node_device(p, fg_graph_find(g, "x")), 0);
  FG_CHECK_INT(fg_partition_num_nodes(p, 0) + fg_partition_num_nodes(p, 1), fg_graph_num_nodes(g));
  FG_CHECK(fg_partition_transfer(p, 3) == NULL);
  fg_partition_free(p);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(dist_partition_cut_computes_as_uncut, "dist") {
  fg_status *st = fg_status_new();
  double x[3] = {1, -2, 0.5};
  int64_t xd[1] = {3};
  fg_tensor *xt = fg_tensor_wrap(FG_F64, 1, xd, x, sizeof x, st);
  fg_feed feed = {"x", xt};
  const char *fetch[2] = {"d", "e"};
  fg_tensor *out[2][2];
  for (int place = 0; place < 2; place++) {
    fg_graph *g = dist_cut_graph(place);
    fg_session_options so;
    fg_session_options_init(&so);
    so.num_threads = 4;
    fg_session *s = fg_session_new(g, &so, st);
    FG_REQUIRE(s);
    FG_CHECK_INT(fg_partition_num_devices(fg_session_partition(s)), place ? 2 : 1);
    FG_REQUIRE(fg_session_run(s, &feed, 1, fetch, 2, out[place], NULL, 0, st) == 0);
    fg_session_free(s);
    fg_graph_free(g);
  }
  /* By hand: a = [2, -1, 1.5]; d = 5a = [10, -5, 7.5]; e = 2.5. */
  const double *d = fg_tensor_data(out[1][0]);
  FG_CHECK(d[0] == 10 && d[1] == -5 && d[2] == 7.5);
  FG_CHECK(*(const double *)fg_tensor_data(out[1][1]) == 2.5);
  FG_CHECK(memcmp(fg_tensor_data(out[0][0]), d, 24) == 0);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++)
      fg_tensor_free(out[i][j]);
  fg_tensor_free(xt);
  fg_status_free(st);
}

/* Rules: a variable goes with its first consumer, its update with it; an
 * update placed away from its variable is refused. */
FG_TEST(dist_placement_rules_and_conflicts, "dist,badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t d1[1] = {2};
  double v0[2] = {1, 2};
  fg_tensor *vt = fg_tensor_from_data(FG_F64, 1, d1, v0, sizeof v0, st);
  fg_output v = fg_variable(g, "v", vt);
  fg_output x = fg_placeholder(g, "x", FG_F64, 1, d1);
  fg_output m = fg_set_device(g, fg_mul(g, x, v), "cpu:2");
  fg_output n = fg_set_name(g, fg_neg(g, m), "n");
  fg_output upd = fg_set_name(g, fg_assign(g, v, n), "upd");
  fg_partition *p = fg_partition_new(g, NULL, st);
  FG_REQUIRE(p);
  FG_CHECK(fg_partition_device(p, fg_partition_node_device(p, v.node)).index == 2);
  FG_CHECK(fg_partition_device(p, fg_partition_node_device(p, n.node)).index == 2);
  FG_CHECK(fg_partition_device(p, fg_partition_node_device(p, upd.node)).index == 2);
  FG_CHECK(fg_partition_device(p, fg_partition_node_device(p, x.node)).index == 2);
  FG_CHECK_INT(fg_partition_num_devices(p), 1);
  fg_partition_free(p);
  /* Explicit update on another device than its variable: refused. */
  fg_set_device(g, upd, "cpu:1");
  FG_CHECK(fg_partition_new(g, NULL, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'upd'");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'v'");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "cpu:1");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "cpu:2");
  FG_CHECK(fg_session_new(g, NULL, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  fg_tensor_free(vt);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(dist_bad_device_names_refused, "dist,badinput") {
  const char *bad[] = {"cpu:-1",           "gpu:0",  "cuda:7", "cpu:64", "cpu:x", "cpu:",
                       "cuda:99999999999", " cpu:0", "cuda:",  "cuda:-1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    fg_status *st = fg_status_new();
    fg_graph *g = fg_graph_new();
    int64_t d1[1] = {2};
    fg_output x = fg_placeholder(g, "x", FG_F32, 1, d1);
    fg_set_device(g, fg_set_name(g, fg_relu(g, x), "act"), bad[i]);
    fg_session *s = fg_session_new(g, NULL, st);
    FG_CHECK(s == NULL);
    FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), "node 'act'");
    FG_CHECK_STR_CONTAINS(fg_status_message(st), bad[i]);
    /* What exists is named too. */
    FG_CHECK(strstr(fg_status_message(st), "cpu:0") || strstr(fg_status_message(st), "cpu:N") ||
             strstr(fg_status_message(st), "CUDA"));
    fg_session_free(s);
    fg_graph_free(g);
    fg_status_free(st);
  }
  fg_device d;
  FG_CHECK(fg_parse_device("cpu:63", &d, NULL) == 0 && d.index == 63 && d.kind == FG_DEVICE_CPU);
  FG_CHECK(fg_parse_device("cpu", &d, NULL) == 0 && d.index == 0);
  FG_CHECK(fg_parse_device(NULL, &d, NULL) == -1);
  /* A success resets the status, as every call does. */
  fg_status *st = fg_status_new();
  FG_CHECK(fg_parse_device("cpu:-1", &d, st) == -1);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK(fg_parse_device("rank:1/cpu:2", &d, st) == 0);
  FG_CHECK_INT(fg_status_code(st), FG_OK);
  FG_CHECK_STR(fg_status_message(st), "");
  FG_CHECK(d.rank == 1 && d.index == 2 && d.kind == FG_DEVICE_CPU);
  fg_status_free(st);
}

FG_TEST(dist_unplaced_round_trips, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_cut_graph(0);
  fg_set_device(g, (fg_output){fg_graph_find(g, "b"), 0}, "cpu:3");
  FG_CHECK(fg_node_device_explicit(g, fg_graph_find(g, "a")) == NULL);
  FG_CHECK(strcmp(fg_node_device(g, fg_graph_find(g, "a")), "cpu:0") == 0);
  void *buf;
  size_t size;
  FG_REQUIRE(fg_graph_save_memory(g, &buf, &size, st) == 0);
  fg_graph *l = fg_graph_load_memory(buf, size, st);
  free(buf);
  FG_REQUIRE(l);
  FG_CHECK(fg_node_device_explicit(l, fg_graph_find(l, "a")) == NULL);
  FG_CHECK(strcmp(fg_node_device_explicit(l, fg_graph_find(l, "b")), "cpu:3") == 0);
  fg_graph_free(l);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(dist_data_parallel_bad_arguments, "dist,badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, NULL, NULL);
  FG_CHECK(fg_data_parallel(g, 0, batch_names, 2, NULL, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR(fg_status_message(st), "fg_data_parallel: replicas 0 must be 1 to 64");
  FG_CHECK(fg_data_parallel(g, 65, batch_names, 2, NULL, st) == NULL);
  FG_CHECK(fg_data_parallel(NULL, 2, batch_names, 2, NULL, st) == NULL);
  FG_CHECK_STR(fg_status_message(st), "fg_data_parallel: graph is NULL");
  /* Each bad argument is the one named, with its value. */
  FG_CHECK(fg_data_parallel(g, 2, NULL, 2, NULL, st) == NULL);
  FG_CHECK_STR(fg_status_message(st),
               "fg_data_parallel: batch_inputs is NULL but n_batch_inputs is 2");
  FG_CHECK(fg_data_parallel(g, 2, batch_names, -1, NULL, st) == NULL);
  FG_CHECK_STR(fg_status_message(st), "fg_data_parallel: n_batch_inputs -1 must be >= 0");
  const char *with_null[2] = {"x", NULL};
  FG_CHECK(fg_data_parallel(g, 2, with_null, 2, NULL, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR(fg_status_message(st), "fg_data_parallel: batch_inputs[1] is NULL");
  fg_data_parallel_options o;
  fg_data_parallel_options_init(&o);
  o.bucket_bytes = -1;
  FG_CHECK(fg_data_parallel(g, 2, batch_names, 2, &o, st) == NULL);
  FG_CHECK_STR(fg_status_message(st), "fg_data_parallel: bucket_bytes -1 must be >= 0");
  /* Replica r goes on first_device + r: past cpu:63, or past an int. */
  fg_data_parallel_options_init(&o);
  o.first_device = 63;
  FG_CHECK(fg_data_parallel(g, 2, batch_names, 2, &o, st) == NULL);
  FG_CHECK_STR(fg_status_message(st),
               "fg_data_parallel: first_device 63 with 2 replicas would place the last on "
               "cpu:64; CPU devices are cpu:0 to cpu:63");
  o.first_device = 2147483647;
  FG_CHECK(fg_data_parallel(g, 3, batch_names, 2, &o, st) == NULL);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "on cpu:2147483649");
  o.device_type = "cuda";
  FG_CHECK(fg_data_parallel(g, 3, batch_names, 2, &o, st) == NULL);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "on cuda:2147483649, past the largest");
  o.first_device = 62; /* cpu:62 and cpu:63: fine */
  o.device_type = NULL;
  fg_graph *edge = fg_data_parallel(g, 2, batch_names, 2, &o, st);
  FG_CHECK(edge != NULL);
  fg_graph_free(edge);
  const char *nope[1] = {"nope"};
  FG_CHECK(fg_data_parallel(g, 2, nope, 1, NULL, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_NOT_FOUND);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'nope'");
  const char *notph[1] = {"loss"};
  FG_CHECK(fg_data_parallel(g, 2, notph, 1, NULL, st) == NULL);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "not a placeholder");
  /* A graph without a training step. */
  fg_graph *plain = dist_cut_graph(0);
  FG_CHECK(fg_data_parallel(plain, 2, NULL, 0, NULL, st) == NULL);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "train_target");
  fg_graph_free(plain);
  /* Gradient clipping: accepted (the raw gradients are all-reduced and
   * every replica clips the mean; tests/dist/test_dist_clip.c checks values). */
  fg_graph *gc = fg_graph_new();
  int64_t d1[1] = {2};
  double v0[2] = {1, 2};
  fg_tensor *vt = fg_tensor_from_data(FG_F64, 1, d1, v0, sizeof v0, st);
  fg_output v = fg_variable(gc, "v", vt);
  fg_output l = fg_reduce_sum(gc, fg_mul(gc, v, v), NULL, 0, 0);
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  cfg.clip_global_norm = 1.0;
  FG_REQUIRE(fg_minimize(gc, l, NULL, 0, &cfg, st).node >= 0);
  fg_graph *dgc = fg_data_parallel(gc, 2, NULL, 0, NULL, st);
  FG_CHECK(dgc != NULL);
  fg_graph_free(dgc);
  fg_tensor_free(vt);
  fg_graph_free(gc);
  /* A batch with fewer rows than replicas fails the run, naming the
   * shard and the rows. */
  fg_graph *dg = fg_data_parallel(g, 4, batch_names, 2, NULL, st);
  FG_REQUIRE(dg);
  fg_session *s = fg_session_new(dg, NULL, st);
  FG_REQUIRE(s);
  fg_tensor *x, *y;
  FG_REQUIRE(dist_batch(FG_F32, 0, 3, &x, &y) == 0);
  fg_feed feeds[2] = {{"x", x}, {"y", y}};
  const char *fetch = "loss";
  fg_tensor *out = NULL;
  FG_CHECK(fg_session_run(s, feeds, 2, &fetch, 1, &out, NULL, 0, st) != 0);
  FG_CHECK(out == NULL);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "shard");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "3 rows");
  fg_tensor_free(x);
  fg_tensor_free(y);
  fg_session_free(s);
  fg_graph_free(dg);
  fg_graph_free(g);
  fg_status_free(st);
}

/* The rewrites' training step must be one: metadata "loss" naming a
 * computed loss and "train_target" the updates, and a graph the same
 * rewrite made already is refused (its new names would clash). */
FG_TEST(dist_rewrites_refuse_bad_train_metadata, "dist,badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, NULL, NULL);
  const char *loss = fg_graph_metadata(g, "loss"), *target = fg_graph_metadata(g, "train_target");
  FG_REQUIRE(loss && target);
  char loss_name[64], target_name[64];
  snprintf(loss_name, sizeof loss_name, "%s", loss);
  snprintf(target_name, sizeof target_name, "%s", target);
  for (int mb = 0; mb < 2; mb++) {
    const char *who = mb ? "fg_micro_batch" : "fg_data_parallel";
    char want[256];
#define REWRITE()                                                                                  \
  (mb ? fg_micro_batch(g, 2, batch_names, 2, FG_DP_LOSS_MEAN, st)                                  \
      : fg_data_parallel(g, 2, batch_names, 2, NULL, st))
    fg_graph_set_metadata(g, "loss", "x");
    FG_CHECK(REWRITE() == NULL);
    FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
    snprintf(want, sizeof want,
             "%s: metadata \"loss\" names 'x' (placeholder), not a loss the step computes", who);
    FG_CHECK_STR(fg_status_message(st), want);
    fg_graph_set_metadata(g, "loss", loss_name);
    fg_graph_set_metadata(g, "train_target", "dense1/w");
    FG_CHECK(REWRITE() == NULL);
    snprintf(want, sizeof want,
             "%s: metadata \"train_target\" names 'dense1/w' (variable), not the step's updates "
             "(an optimizer update or a group of them)",
             who);
    FG_CHECK_STR(fg_status_message(st), want);
    fg_graph_set_metadata(g, "train_target", loss_name);
    FG_CHECK(REWRITE() == NULL);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), "the node \"loss\" names too");
    fg_graph_set_metadata(g, "train_target", target_name);
    /* Twice. */
    fg_graph *once = REWRITE();
    FG_REQUIRE(once);
    fg_graph *twice = mb ? fg_micro_batch(once, 2, batch_names, 2, FG_DP_LOSS_MEAN, st)
                         : fg_data_parallel(once, 2, batch_names, 2, NULL, st);
    FG_CHECK(twice == NULL);
    snprintf(want, sizeof want,
             "%s: the graph is a rewrite of this kind already (metadata \"%s\" = 2); apply it to "
             "the original graph",
             who, mb ? "micro_batches" : "data_parallel_replicas");
    FG_CHECK_STR(fg_status_message(st), want);
    fg_graph_free(once);
#undef REWRITE
  }
  fg_graph_free(g);
  fg_status_free(st);
}

/* One replica (data parallelism across processes) of a model split over
 * cpu:0 and cpu:1: every collective goes on one device the graph names,
 * that of the batch input's first placed reader (or, without batch inputs,
 * of the first placed node), so the session
 * runs it, with a process communicator attached too; it trains to the
 * losses of the model without the rewrite (a size-1 group's mean is the
 * identity). */
FG_TEST(dist_dp_one_replica_of_split_model_reduces_on_one_device, "dist") {
  fg_status *st = fg_status_new();
  for (int with_batch = 1; with_batch >= 0; with_batch--) {
    fg_graph *g = dist_mlp(FG_F64, FG_OPTIMIZER_SGD, 0.1, "cpu:0", "cpu:1");
    fg_data_parallel_options o;
    fg_data_parallel_options_init(&o);
    o.bucket_bytes = 1; /* a bucket per gradient: several collectives */
    fg_graph *dg = fg_data_parallel(g, 1, batch_names, with_batch ? 2 : 0, &o, st);
    FG_REQUIRE(dg);
    int n_ar = 0;
    const char *dev = NULL;
    for (int id = 0; id < dg->n_nodes; id++) {
      if (dg->nodes[id].op != FG_OP_ALL_REDUCE) continue;
      n_ar++;
      FG_CHECK(dg->nodes[id].device != NULL);
      if (!dev) dev = dg->nodes[id].device;
      FG_CHECK_STR(dg->nodes[id].device, dev ? dev : "");
    }
    FG_CHECK(n_ar >= 5); /* 4 gradients' buckets at least, and the rows */
    /* x's first placed reader is dense1's matmul, on cpu:0; without batch
     * inputs, the first placed node is dense1's too. */
    FG_CHECK_STR(dev ? dev : "", "cpu:0");
    fg_session *s = fg_session_new(g, NULL, st), *sd = fg_session_new(dg, NULL, st);
    FG_REQUIRE(s && sd);
    fg_comm *h[1];
    FG_REQUIRE(fg_comm_inproc_group(1, 0, h, st) == 0);
    FG_CHECK(fg_session_set_comm(sd, h[0], st) == 0);
    double a[3], b[3];
    FG_REQUIRE(dist_train(s, FG_F64, 3, 32, a, st) == 0);
    FG_REQUIRE(dist_train(sd, FG_F64, 3, 32, b, st) == 0);
    for (int k = 0; k < 3; k++)
      FG_CHECK(fabs(a[k] - b[k]) <= 1e-12 * fabs(a[k]));
    FG_CHECK(dist_var_diff(s, "dense2/w", sd, "dense2/w") <= 1e-12);
    fg_session_free(sd);
    h[0]->ops->free(h[0]);
    fg_session_free(s);
    fg_graph_free(dg);
    fg_graph_free(g);
  }
  fg_status_free(st);
}

/* A graph that names one device leaves the collectives to the placer, as
 * before, and the rewrite does not ask whether the device exists (a model
 * placed on cuda:0 rewrites on a machine without a GPU, as on one with it;
 * the session says what is missing). */
FG_TEST(dist_dp_one_replica_names_one_device_keeps_placer, "dist") {
  fg_status *st = fg_status_new();
  const char *placed[2][2] = {{"cpu:1", NULL}, {"cuda:0", "cuda:0"}};
  for (int k = 0; k < 2; k++) {
    fg_graph *g = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, placed[k][0], placed[k][1]);
    fg_graph *dg = fg_data_parallel(g, 1, batch_names, 2, NULL, st);
    FG_CHECK(dg != NULL);
    if (!dg) fprintf(stderr, "%s\n", fg_status_message(st));
    int n_ar = 0;
    for (int id = 0; dg && id < dg->n_nodes; id++)
      if (dg->nodes[id].op == FG_OP_ALL_REDUCE) {
        n_ar++;
        FG_CHECK(dg->nodes[id].device == NULL);
      }
    FG_CHECK(!dg || n_ar >= 2);
    fg_graph_free(dg);
    fg_graph_free(g);
  }
  fg_status_free(st);
}

/* A graph whose every node is on another rank's device is one device, but
 * not this process's to run alone: refused at the run without a process
 * communicator, as a graph over several ranks is. */
FG_TEST(dist_single_device_of_other_rank_needs_comm, "dist,badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t d1[1] = {2};
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, d1);
  fg_set_device(g, x, "rank:1/cpu:0");
  fg_set_device(g, fg_set_name(g, fg_relu(g, x), "act"), "rank:1/cpu:0");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  fg_tensor *xt = fg_tensor_new(FG_F32, 1, d1, NULL);
  memset(fg_tensor_data(xt), 0, fg_tensor_num_bytes(xt));
  fg_feed feed = {"x", xt};
  const char *fetch = "act";
  fg_tensor *out = NULL;
  FG_CHECK(fg_session_run(s, &feed, 1, &fetch, 1, &out, NULL, 0, st) != 0);
  FG_CHECK(out == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "devices of other MPI ranks");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "no process communicator");
  fg_tensor_free(xt);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* ---- the in-process communicator ---------------------------------------- */

typedef struct comm_arg {
  fg_comm *c;
  void *buf;
  int64_t n;
  int rc;
  fg_code code;
  int skip;    /* this rank never arrives */
  fg_dtype dt; /* 0: f64 */
} comm_arg;

static void *reduce_thread(void *p) {
  comm_arg *a = p;
  fg_status *st = fg_status_new();
  if (!a->skip) {
    a->rc = a->c->ops->all_reduce(a->c, a->buf, a->n, a->dt ? a->dt : FG_F64, 1, st);
    a->code = fg_status_code(st);
  }
  fg_status_free(st);
  return NULL;
}

/* The mean all_reduce of args[0 .. n-1], each on a thread of its own. */
static void run_reduce_threads(comm_arg *args, int n) {
  pthread_t th[8];
  for (int r = 0; r < n; r++)
    pthread_create(&th[r], NULL, reduce_thread, &args[r]);
  for (int r = 0; r < n; r++)
    pthread_join(th[r], NULL);
}

FG_TEST(dist_comm_inproc_all_reduce_rank_order, "dist") {
  enum { R = 3, N = 1001 };
  fg_comm *h[R];
  FG_REQUIRE(fg_comm_inproc_group(R, 0, h, NULL) == 0);
  static double bufs[R][N];
  /* Values whose sum depends on the order: 1e16, 1, -1e16 ... */
  for (int r = 0; r < R; r++)
    for (int i = 0; i < N; i++)
      bufs[r][i] = r == 0 ? 1e16 : r == 1 ? 1.0 + i : -1e16;
  comm_arg args[R];
  for (int r = 0; r < R; r++)
    args[r] = (comm_arg){h[r], bufs[r], N, -1, FG_OK, 0, FG_F64};
  run_reduce_threads(args, R);
  for (int r = 0; r < R; r++) {
    FG_CHECK_INT(args[r].rc, 0);
    for (int i = 0; i < N; i++) {
      /* ((1e16 + (1 + i)) + -1e16) / 3 in rank order, in double. */
      double want = ((1e16 + (1.0 + i)) + -1e16) / 3;
      if (bufs[r][i] != want) {
        FG_FAIL_AT("rank %d element %d: %.17g != %.17g", r, i, bufs[r][i], want);
        break;
      }
    }
  }
  for (int r = 0; r < R; r++)
    h[r]->ops->free(h[r]);
}

/* 4 ranks, f32 means: 1537 elements (each rank's slice spans the 512-element
 * blocks the sum goes by, and the last is short), then 2 elements, fewer
 * than the ranks (ranks 2 and 3 sum nothing but still write nothing
 * wrong). Element i of rank r is i (r + 1): the mean is 10 i / 4 = 2.5 i,
 * exact in f32. */
FG_TEST(dist_comm_inproc_all_reduce_blocks_and_few_elements, "dist") {
  enum { R = 4, N = 1537 };
  fg_comm *h[R];
  FG_REQUIRE(fg_comm_inproc_group(R, 0, h, NULL) == 0);
  static float bufs[R][N];
  const int64_t counts[2] = {N, 2};
  for (int t = 0; t < 2; t++) {
    for (int r = 0; r < R; r++)
      for (int i = 0; i < N; i++)
        bufs[r][i] = (float)i * (float)(r + 1);
    comm_arg args[R];
    for (int r = 0; r < R; r++)
      args[r] = (comm_arg){h[r], bufs[r], counts[t], -1, FG_OK, 0, FG_F32};
    run_reduce_threads(args, R);
    for (int r = 0; r < R; r++) {
      FG_CHECK_INT(args[r].rc, 0);
      for (int i = 0; i < N; i++) {
        /* Past the count, the buffer is untouched. */
        float want = i < counts[t] ? 2.5f * (float)i : (float)i * (float)(r + 1);
        if (bufs[r][i] != want) {
          FG_FAIL_AT("count %lld rank %d element %d: %.9g != %.9g", (long long)counts[t], r, i,
                     bufs[r][i], want);
          break;
        }
      }
    }
  }
  for (int r = 0; r < R; r++)
    h[r]->ops->free(h[r]);
}

FG_TEST(dist_comm_inproc_timeout_is_deadline, "dist,badinput") {
  enum { R = 3 };
  fg_comm *h[R];
  FG_REQUIRE(fg_comm_inproc_group(R, 0.2, h, NULL) == 0);
  double bufs[R][4] = {{0}};
  comm_arg args[R];
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int r = 0; r < R; r++)
    args[r] = (comm_arg){h[r], bufs[r], 4, -1, FG_OK, r == 2, FG_F64};
  run_reduce_threads(args, R);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  for (int r = 0; r < 2; r++) {
    FG_CHECK_INT(args[r].rc, -1);
    FG_CHECK_INT(args[r].code, FG_DEADLINE_EXCEEDED);
  }
  FG_CHECK(s < 5.0);
  /* all_gather and broadcast on a healthy group. */
  fg_comm_inproc_reset(h[0]);
  for (int r = 0; r < R; r++)
    h[r]->ops->free(h[r]);
  fg_comm *one[1];
  FG_REQUIRE(fg_comm_inproc_group(1, 0, one, NULL) == 0);
  uint64_t got[1];
  FG_CHECK(one[0]->ops->all_gather_u64(one[0], 42, got, NULL) == 0 && got[0] == 42);
  double v = 3;
  FG_CHECK(one[0]->ops->all_reduce(one[0], &v, 1, FG_F64, 1, NULL) == 0 && v == 3);
  FG_CHECK(one[0]->ops->broadcast(one[0], &v, 8, 1, NULL) == -1);
  one[0]->ops->free(one[0]);
  FG_CHECK(fg_comm_inproc_group(0, 0, one, NULL) == -1);
  FG_CHECK(fg_comm_inproc_group(65, 0, one, NULL) == -1);
}

/* The MPI shape in one process (dist_run_two_ranks): two sessions, each
 * with the replicas = 1 rewrite, its own half of the batch and one rank of
 * an attached communicator, train to the same numbers as the in-process
 * 2-replica run. */
typedef dist_rank_arg proc_arg;

static int run_two_ranks(fg_graph *g1, const char *device, double timeout_s, proc_arg args[2]) {
  return dist_run_two_ranks(g1, device, timeout_s, STEPS, BATCH, args);
}

/* The reference: the in-process 2-replica run of g2 on the CPU, its losses
 * in l2 and its dense1/w returned. */
static fg_tensor *two_replicas_on_cpu(fg_graph *g2, double l2[STEPS], fg_status *st) {
  fg_session *s = fg_session_new(g2, NULL, st);
  fg_tensor *w = s && dist_train(s, FG_F64, STEPS, BATCH, l2, st) == 0
                     ? fg_session_variable(s, "dense1/w", st)
                     : NULL;
  fg_session_free(s);
  return w;
}

/* g's replicas = 1 and replicas = 2 rewrites (batch x, y). */
static int dp_one_and_two(const fg_graph *g, fg_graph **g1, fg_graph **g2, fg_status *st) {
  *g1 = fg_data_parallel(g, 1, batch_names, 2, NULL, st);
  *g2 = fg_data_parallel(g, 2, batch_names, 2, NULL, st);
  return *g1 && *g2 ? 0 : -1;
}

FG_TEST(dist_process_comm_matches_in_process, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F64, FG_OPTIMIZER_ADAM, 2e-3, NULL, NULL), *g1 = NULL, *g2 = NULL;
  proc_arg args[2];
  FG_REQUIRE(dp_one_and_two(g, &g1, &g2, st) == 0);
  FG_REQUIRE(run_two_ranks(g1, NULL, 10, args) == 0);
  double l2[STEPS];
  fg_tensor *w2 = two_replicas_on_cpu(g2, l2, st);
  FG_REQUIRE(w2);
  for (int k = 0; k < STEPS; k++) {
    /* Each process's loss is its half's mean; their mean is the full one. */
    FG_CHECK_NEAR((args[0].losses[k] + args[1].losses[k]) / 2, l2[k], 1e-12);
  }
  /* The same reduction in the same order: the same weights, bit for bit. */
  FG_REQUIRE(args[0].w && args[1].w);
  FG_CHECK(memcmp(fg_tensor_data(args[0].w), fg_tensor_data(w2), 64 * 128 * 8) == 0);
  FG_CHECK(memcmp(fg_tensor_data(args[1].w), fg_tensor_data(w2), 64 * 128 * 8) == 0);
  fg_tensor_free(args[0].w);
  fg_tensor_free(args[1].w);
  fg_tensor_free(w2);
  fg_graph_free(g1);
  fg_graph_free(g2);
  fg_graph_free(g);
  fg_status_free(st);
}

/* The same on a GPU: two sessions on cuda:0 (one GPU serves both ranks),
 * each attached to one rank of an in-process communicator. A GPU plan's
 * all_reduce runs on the host (executor/cuda/staging.c stages it), so any
 * communicator serves GPU sessions. The GPU kernels sum in another order
 * than the CPU's, so the reference (the CPU's 2-replica run) is met within
 * f64 rounding; the two ranks reduce the same gradients, so their weights
 * agree bit for bit. */
FG_TEST(dist_process_comm_on_gpu_matches_in_process, "dist,gpu") {
  if (fg_cuda_device_count() < 1)
    FG_SKIP_NO_GPU("no CUDA device (or no CUDA backend in this build)");
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F64, FG_OPTIMIZER_ADAM, 2e-3, NULL, NULL), *g1 = NULL, *g2 = NULL;
  proc_arg args[2];
  FG_REQUIRE(dp_one_and_two(g, &g1, &g2, st) == 0);
  FG_REQUIRE(run_two_ranks(g1, "cuda:0", 30, args) == 0);
  double l2[STEPS];
  fg_tensor *w2 = two_replicas_on_cpu(g2, l2, st);
  FG_REQUIRE(w2);
  for (int k = 0; k < STEPS; k++)
    FG_CHECK_NEAR((args[0].losses[k] + args[1].losses[k]) / 2, l2[k], 1e-9 * fabs(l2[k]));
  FG_REQUIRE(args[0].w && args[1].w);
  const double *a0 = fg_tensor_data(args[0].w), *a1 = fg_tensor_data(args[1].w),
               *ref = fg_tensor_data(w2);
  FG_CHECK(memcmp(a0, a1, 64 * 128 * 8) == 0);
  double maxd = 0, maxw = 0;
  for (int i = 0; i < 64 * 128; i++) {
    maxd = fmax(maxd, fabs(a0[i] - ref[i]));
    maxw = fmax(maxw, fabs(ref[i]));
  }
  printf("max |w_gpu - w_cpu| = %.3g (max |w| %.3g)\n", maxd, maxw);
  FG_CHECK(maxd <= 1e-9 * maxw);
  /* The weights moved: a run that skipped the updates would fail here. */
  fg_session *s0 = fg_session_new(g, NULL, st);
  FG_REQUIRE(s0);
  fg_tensor *w0 = fg_session_variable(s0, "dense1/w", st);
  fg_session_free(s0);
  FG_REQUIRE(w0);
  double moved = 0;
  for (int i = 0; i < 64 * 128; i++)
    moved = fmax(moved, fabs(a0[i] - ((const double *)fg_tensor_data(w0))[i]));
  FG_CHECK(moved > 1e-4);
  fg_tensor_free(w0);
  fg_tensor_free(args[0].w);
  fg_tensor_free(args[1].w);
  fg_tensor_free(w2);
  fg_graph_free(g1);
  fg_graph_free(g2);
  fg_graph_free(g);
  fg_status_free(st);
}

/* A step that fails on one replica while the other waits in all_reduce:
 * the run fails at once naming the node (the group is aborted), instead of
 * waiting out the communicator's 60 s timeout; the next good run works. */
FG_TEST(dist_dp_failing_replica_does_not_hang, "dist,badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, NULL, NULL);
  fg_graph *dg = fg_data_parallel(g, 2, batch_names, 2, NULL, st);
  FG_REQUIRE(dg);
  fg_session *s = fg_session_new(dg, NULL, st);
  FG_REQUIRE(s);
  fg_tensor *x, *y;
  FG_REQUIRE(dist_batch(FG_F32, 0, 8, &x, &y) == 0);
  ((int32_t *)fg_tensor_data(y))[6] = 99; /* in replica 1's half */
  fg_feed feeds[2] = {{"x", x}, {"y", y}};
  const char *fetch = "loss", *target = "train";
  fg_tensor *out = NULL;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  FG_CHECK(fg_session_run(s, feeds, 2, &fetch, 1, &out, &target, 1, st) != 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  FG_CHECK(out == NULL);
  FG_CHECK(t1.tv_sec - t0.tv_sec < 10);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "replica_1/");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "99");
  ((int32_t *)fg_tensor_data(y))[6] = 3;
  FG_CHECK(fg_session_run(s, feeds, 2, &fetch, 1, &out, &target, 1, st) == 0);
  fg_tensor_free(out);
  fg_tensor_free(x);
  fg_tensor_free(y);
  fg_session_free(s);
  fg_graph_free(dg);
  fg_graph_free(g);
  fg_status_free(st);
}

/* The weighted all_reduce (fg_data_parallel's form for uneven shards) built
 * by hand with bad inputs: refused when the graph is built, naming the node
 * and the inputs; at run time, rows that exceed the ranks' total fail on
 * both replicas (no hang), naming the values. */
static fg_output weighted_ar(fg_graph *g, const char *name, fg_output *in, int n_in) {
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_int(a, "weighted", 1);
  fg_output o = fg_op(g, "all_reduce", name, in, n_in, a);
  fg_attrs_free(a);
  return o;
}

static void check_weighted_refused(fg_output x, fg_output rows, fg_output sums, int n_in,
                                   fg_graph *g, const char *want) {
  fg_status *st = fg_status_new();
  fg_output in[3] = {x, rows, sums};
  FG_CHECK(weighted_ar(g, "war", in, n_in).node < 0);
  FG_CHECK(fg_graph_status(g, st) != FG_OK);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'war'");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), want);
  fg_status_free(st);
  fg_graph_free(g);
}

FG_TEST(dist_weighted_all_reduce_bad_inputs, "dist,badinput") {
  fg_graph *g = fg_graph_new();
  check_weighted_refused(fg_scalar(g, FG_F32, 1), FG_NO_OUTPUT, FG_NO_OUTPUT, 1, g,
                         "weighted = 1 needs 3 inputs");
  g = fg_graph_new();
  check_weighted_refused(fg_scalar(g, FG_I32, 1), fg_scalar(g, FG_F64, 1), fg_scalar(g, FG_F64, 1),
                         3, g, "input 0 dtype i32 is not allowed with weighted = 1");
  g = fg_graph_new();
  check_weighted_refused(fg_scalar(g, FG_F32, 1), fg_scalar(g, FG_F32, 1), fg_scalar(g, FG_F64, 1),
                         3, g,
                         "input 1 (rows) must be an f64 scalar and input 2 an f64 [2], got "
                         "f32 [] and f64 []");

  /* Run time: two replicas, each claiming 5 rows of a total of 3. */
  fg_status *st = fg_status_new();
  g = fg_graph_new();
  int64_t two = 2;
  double sums[2] = {3, 9};
  fg_tensor *st_t = fg_tensor_from_data(FG_F64, 1, &two, sums, sizeof sums, st);
  const char *fetch[2] = {"ar0", "ar1"};
  for (int r = 0; r < 2; r++) {
    char dev[16];
    snprintf(dev, sizeof dev, "cpu:%d", r);
    fg_output in[3] = {fg_scalar(g, FG_F32, 1 + r), fg_scalar(g, FG_F64, 5),
                       fg_constant(g, r ? "sums1" : "sums0", st_t)};
    for (int k = 0; k < 3; k++)
      fg_set_device(g, in[k], dev);
    fg_set_device(g, weighted_ar(g, fetch[r], in, 3), dev);
  }
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  fg_tensor *out[2] = {NULL, NULL};
  FG_CHECK(fg_session_run(s, NULL, 0, fetch, 2, out, NULL, 0, st) != 0);
  FG_CHECK(out[0] == NULL && out[1] == NULL);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "(all_reduce)");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "rows 5 and the ranks' total 3");
  fg_session_free(s);
  fg_tensor_free(st_t);
  fg_graph_free(g);
  fg_status_free(st);
}

/* all_reduce nodes built by hand on two devices of one process: they reduce
 * together in id order, so a device holding fewer of them, or a partner of
 * another dtype or form, fails fg_session_new naming the nodes and devices
 * instead of a run waiting out the deadline (or reading a buffer as the
 * wrong type). Matched ones run: (1 + 3) / 2 and (2 + 4) / 2. */
static fg_output plain_ar(fg_graph *g, const char *name, fg_output x, const char *dev) {
  fg_output o = fg_op(g, "all_reduce", name, &x, 1, NULL);
  if (!fg_node_device(g, x.node)) fg_set_device(g, x, dev); /* a fresh scalar */
  fg_set_device(g, o, dev);
  return o;
}

static void check_pairs_refused(fg_graph *g, const char *want1, const char *want2) {
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  FG_CHECK(fg_session_new(g, NULL, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), want1);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), want2);
  fg_status_free(st);
  fg_graph_free(g);
}

FG_TEST(dist_all_reduce_pairs_checked, "dist,badinput") {
  fg_graph *g = fg_graph_new();
  plain_ar(g, "a0", fg_scalar(g, FG_F32, 1), "cpu:0");
  plain_ar(g, "b0", fg_scalar(g, FG_F32, 3), "cpu:1");
  plain_ar(g, "a1", fg_scalar(g, FG_F32, 2), "cpu:0");
  check_pairs_refused(g,
                      "all_reduce node 'a1' is all_reduce 2 on 'cpu:0', and 'cpu:1' holds only 1",
                      "the k-th of each with the k-th of the others");
  g = fg_graph_new();
  plain_ar(g, "a0", fg_scalar(g, FG_F32, 1), "cpu:0");
  plain_ar(g, "b0", fg_scalar(g, FG_F64, 3), "cpu:1");
  check_pairs_refused(g, "'a0' (f32, on 'cpu:0') and 'b0' (f64, on 'cpu:1')", "differ in dtype");

  fg_status *st = fg_status_new();
  g = fg_graph_new();
  plain_ar(g, "a0", fg_scalar(g, FG_F32, 1), "cpu:0");
  plain_ar(g, "b0", fg_scalar(g, FG_F32, 3), "cpu:1");
  plain_ar(g, "a1", fg_scalar(g, FG_F32, 2), "cpu:0");
  plain_ar(g, "b1", fg_scalar(g, FG_F32, 4), "cpu:1");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  const char *fetch[2] = {"a1", "b0"};
  fg_tensor *out[2] = {NULL, NULL};
  FG_REQUIRE(fg_session_run(s, NULL, 0, fetch, 2, out, NULL, 0, st) == 0);
  FG_CHECK(*(float *)fg_tensor_data(out[0]) == 3.0f);
  FG_CHECK(*(float *)fg_tensor_data(out[1]) == 2.0f);
  fg_tensor_free(out[0]);
  fg_tensor_free(out[1]);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* Paired all_reduce nodes that depend on each other would wait for each
 * other forever (found by fuzz_api: an all_reduce on cpu:1 reading its
 * partner on cpu:0). Directly, through a later pair (b0, cpu:1's first,
 * reads a1, cpu:0's second, which reads a0, b0's partner), and through the
 * call order alone. Refused at fg_session_new, naming the first pair that
 * cannot run. */
FG_TEST(dist_all_reduce_pairs_that_wait_on_each_other, "dist,badinput") {
  fg_graph *g = fg_graph_new();
  fg_output a0 = plain_ar(g, "a0", fg_scalar(g, FG_F32, 1), "cpu:0");
  plain_ar(g, "b0", a0, "cpu:1");
  check_pairs_refused(g,
                      "'a0' (on 'cpu:0') and 'b0' (on 'cpu:1') reduce together (each is "
                      "all_reduce 1 on its device)",
                      "they would wait for each other forever");
  g = fg_graph_new();
  a0 = plain_ar(g, "a0", fg_scalar(g, FG_F32, 1), "cpu:0");
  fg_output a1 = plain_ar(g, "a1", a0, "cpu:0");
  plain_ar(g, "b0", a1, "cpu:1");
  plain_ar(g, "b1", fg_scalar(g, FG_F32, 2), "cpu:1");
  check_pairs_refused(g, "'a0' (on 'cpu:0') and 'b0' (on 'cpu:1')", "of a later one");
  /* Only through the call order: b0 reads a1, which cpu:0 calls after a0,
   * b0's partner. */
  g = fg_graph_new();
  plain_ar(g, "a0", fg_scalar(g, FG_F32, 1), "cpu:0");
  a1 = plain_ar(g, "a1", fg_scalar(g, FG_F32, 2), "cpu:0");
  plain_ar(g, "b0", a1, "cpu:1");
  plain_ar(g, "b1", fg_scalar(g, FG_F32, 4), "cpu:1");
  check_pairs_refused(g, "'a0' (on 'cpu:0') and 'b0' (on 'cpu:1')", "of a later one");
}

/* Each device makes its all_reduce calls in the order the graph pairs them
 * (node id order), not in the order their inputs become ready: a0's input
 * comes after 20 256 x 256 matmuls on cpu:0 while a1's is a constant, yet
 * a0 still meets b0 and a1 meets b1. By hand: a0 = b0 = (sum(I_256) + 3) /
 * 2 = (256 + 3) / 2 = 129.5, a1 = b1 = (2 + 4) / 2 = 3. */
FG_TEST(dist_all_reduce_calls_keep_pair_order, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  fg_output slow = dist_identity_chain(g, 256, 20, "cpu:0");
  FG_REQUIRE(slow.node >= 0);
  plain_ar(g, "a0", slow, "cpu:0");
  plain_ar(g, "b0", fg_scalar(g, FG_F32, 3), "cpu:1");
  plain_ar(g, "a1", fg_scalar(g, FG_F32, 2), "cpu:0");
  plain_ar(g, "b1", fg_scalar(g, FG_F32, 4), "cpu:1");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  const char *fetch[4] = {"a0", "b0", "a1", "b1"};
  const float want[4] = {129.5f, 129.5f, 3.0f, 3.0f};
  for (int run = 0; run < 3; run++) {
    fg_tensor *out[4] = {NULL, NULL, NULL, NULL};
    FG_REQUIRE(fg_session_run(s, NULL, 0, fetch, 4, out, NULL, 0, st) == 0);
    for (int k = 0; k < 4; k++) {
      FG_CHECK(*(float *)fg_tensor_data(out[k]) == want[k]);
      fg_tensor_free(out[k]);
    }
  }
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* Found by fuzz_api: partners a (cpu:0) and b (cpu:1) where b's input is
 * fed 0 rows. The kernel skipped the collective for an empty tensor, so a
 * waited out the whole deadline. Now both fail at once with the counts,
 * within the run, and with the same rows on both the sum is right:
 * (1 + 3) / 2, (2 + 4) / 2. */
FG_TEST(dist_all_reduce_empty_partner_refused, "dist,badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t dims[1] = {FG_DIM_UNKNOWN};
  fg_output xa = fg_placeholder(g, "xa", FG_F32, 1, dims);
  fg_output xb = fg_placeholder(g, "xb", FG_F32, 1, dims);
  fg_set_device(g, xa, "cpu:0");
  fg_set_device(g, xb, "cpu:1");
  plain_ar(g, "a", xa, "cpu:0");
  plain_ar(g, "b", xb, "cpu:1");
  fg_session_options o;
  fg_session_options_init(&o);
  o.dist_timeout_s = 20;
  fg_session *s = fg_session_new(g, &o, st);
  FG_REQUIRE(s != NULL);
  const double two[2] = {1, 2}, other[2] = {3, 4};
  int64_t d2[1] = {2}, d0[1] = {0};
  fg_tensor *ta = dist_tensor(FG_F32, 1, d2, two, 2), *tb0 = dist_tensor(FG_F32, 1, d0, NULL, 0),
            *tb = dist_tensor(FG_F32, 1, d2, other, 2);
  fg_feed feeds[2] = {{"xa", ta}, {"xb", tb0}};
  const char *fetch[2] = {"a", "b"};
  fg_tensor *out[2] = {NULL, NULL};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  FG_CHECK(fg_session_run(s, feeds, 2, fetch, 2, out, NULL, 0, st) != 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "elements");
  FG_CHECK((double)(t1.tv_sec - t0.tv_sec) < 10.0); /* not the 20 s deadline */
  fprintf(stderr, "empty partner: %s\n", fg_status_message(st));
  feeds[1].tensor = tb;
  FG_REQUIRE(fg_session_run(s, feeds, 2, fetch, 2, out, NULL, 0, st) == 0);
  const float *a = fg_tensor_data(out[0]), *b = fg_tensor_data(out[1]);
  FG_CHECK(a[0] == 2.0f && a[1] == 3.0f && b[0] == 2.0f && b[1] == 3.0f);
  fg_tensor_free(out[0]);
  fg_tensor_free(out[1]);
  fg_tensor_free(ta);
  fg_tensor_free(tb0);
  fg_tensor_free(tb);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}
