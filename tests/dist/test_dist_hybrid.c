/* Data parallelism over a model split across processes (label dist): K
 * replicas of a 2-stage model (layer 1 on rank:0, layers 2-3 on rank:1),
 * each process one (replica, stage) pair, with in-process communicators
 * standing in for the processes (the MPI runs are in test_mpi_train.c).
 * Each process has its replica's group (transfers) and its stage's group
 * (all_reduce). References: the same model unsplit on one device on the
 * full batch, and the in-process K-replica rewrite of the unsplit model,
 * which reduces the same gradients in the same rank order. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/comm/comm_inproc.h"
#include "fgtest.h"
#include "test_dist_util.h"

#define HY_STEPS  5
#define HY_STAGES 2
#define HY_MAX_K  3

static const char *const batch_names[2] = {"x", "y"};
/* Uneven on purpose for 2 and 3 replicas: 63 = 32 + 31 = 21 * 3, 50, 41. */
static const int hy_batches[HY_STEPS] = {64, 63, 50, 64, 41};

typedef struct hy_arg {
  fg_graph *g;
  fg_dtype dt;
  fg_comm *model, *data; /* replica group (rank = stage), stage group (rank = replica) */
  int replica, replicas;
  double losses[HY_STEPS];
  int rows[HY_STEPS];
  fg_tensor *vars[6]; /* stage 0, after gathering */
  int bad_label;      /* feed label 99 (of 10 classes) in the first step */
  int bad_dtype;      /* feed x of the other dtype in the second step */
  int no_fetch;       /* train without fetching the loss */
  int broadcast;      /* fg_session_broadcast_variables from replica 0 first */
  int rc;
  fg_code code;
  double sec; /* the training's wall time */
  char err[600];
} hy_arg;

static void *hy_thread(void *p) {
  hy_arg *a = p;
  fg_status *st = fg_status_new();
  fg_session_options so;
  fg_session_options_init(&so);
  so.num_threads = 1;
  fg_session *s = fg_session_new(a->g, &so, st);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  a->rc = !s || fg_session_set_comm(s, a->model, st) != 0 ||
          fg_session_set_data_comm(s, a->data, st) != 0 ||
          (a->broadcast && fg_session_broadcast_variables(s, 0, st) != 0);
  for (int k = 0; k < HY_STEPS && !a->rc; k++) {
    int64_t first = 0;
    a->rows[k] = (int)fg_shard_rows(hy_batches[k], a->replicas, a->replica, &first);
    fg_tensor *x = NULL, *y = NULL;
    a->rc = dist_batch(a->dt, 100 * k + (int)first, a->rows[k], &x, &y) != 0;
    if (!a->rc && a->bad_label && k == 0) ((int32_t *)fg_tensor_data(y))[1] = 99;
    if (!a->rc && a->bad_dtype && k == 1) {
      fg_tensor_free(x);
      fg_tensor *y2 = NULL;
      a->rc = dist_batch(a->dt == FG_F32 ? FG_F64 : FG_F32, 100 * k + (int)first, a->rows[k], &x,
                         &y2) != 0;
      fg_tensor_free(y2);
    }
    fg_feed feeds[2] = {{"x", x}, {"y", y}};
    const char *fetch = "loss", *target = "train";
    fg_tensor *out = NULL;
    if (!a->rc)
      a->rc = fg_session_run(s, feeds, 2, &fetch, a->no_fetch ? 0 : 1, &out, &target, 1, st) != 0;
    if (!a->rc && out)
      a->losses[k] = a->dt == FG_F32 ? *(const float *)fg_tensor_data(out)
                                     : *(const double *)fg_tensor_data(out);
    fg_tensor_free(out);
    fg_tensor_free(x);
    fg_tensor_free(y);
  }
  if (!a->rc) a->rc = fg_session_gather_variables(s, 0, st) != 0;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  a->sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  a->code = fg_status_code(st);
  for (int v = 0; v < 6 && !a->rc && a->model->rank == 0; v++)
    a->vars[v] = fg_session_variable(s, dist_var_names[v], st);
  snprintf(a->err, sizeof a->err, "%s", fg_status_message(st));
  fg_session_free(s);
  fg_status_free(st);
  return NULL;
}

/* A test's graph for one process (index replica * 2 + stage), else NULL. */
static fg_graph *hy_graph[HY_MAX_K * HY_STAGES];

/* Runs dg (the replicas = 1 rewrite of the split model) as `replicas` x 2
 * processes; args[k * 2 + stage]. Replicas after the first run `other`
 * when it is not NULL; with `broadcast` every process first takes replica
 * 0's variables. One replica runs without a data communicator. `bad`: 1,
 * the last replica feeds a label out of range; 2 + i, process i (replica *
 * 2 + stage) feeds x of the other dtype in the second step; -1, replicas
 * after the first train without fetching the loss. 0 when all trained. */
static int run_hybrid_on(fg_graph *dg, fg_graph *other, int broadcast, fg_dtype dt, int replicas,
                         int bad, hy_arg args[HY_MAX_K * HY_STAGES]) {
  fg_comm *model[HY_MAX_K][HY_STAGES], *data[HY_STAGES][HY_MAX_K];
  for (int k = 0; k < replicas; k++)
    if (fg_comm_inproc_group(HY_STAGES, 20, model[k], NULL) != 0) return -1;
  for (int s = 0; s < HY_STAGES; s++)
    if (fg_comm_inproc_group(replicas, 20, data[s], NULL) != 0) return -1;
  pthread_t th[HY_MAX_K * HY_STAGES];
  int n = replicas * HY_STAGES, rc = 0;
  memset(args, 0, (size_t)n * sizeof *args);
  for (int k = 0; k < replicas; k++)
    for (int s = 0; s < HY_STAGES; s++) {
      hy_arg *a = &args[k * HY_STAGES + s];
      *a = (hy_arg){.g = hy_graph[k * HY_STAGES + s] ? hy_graph[k * HY_STAGES + s]
                         : other && k > 0            ? other
                                                     : dg,
                    .broadcast = broadcast,
                    .dt = dt,
                    .model = model[k][s],
                    .data = replicas > 1 ? data[s][k] : NULL,
                    .replica = k,
                    .replicas = replicas,
                    .bad_label = bad == 1 && k == replicas - 1,
                    .bad_dtype = bad == 2 + k * HY_STAGES + s,
                    .no_fetch = bad == -1 && k > 0};
      pthread_create(&th[k * HY_STAGES + s], NULL, hy_thread, a);
    }
  for (int i = 0; i < n; i++)
    pthread_join(th[i], NULL);
  for (int i = 0; i < n && bad <= 0; i++) {
    if (args[i].rc) {
      FG_FAIL_AT("replica %d stage %d: %s", i / HY_STAGES, i % HY_STAGES, args[i].err);
      rc = -1;
    }
  }
  for (int k = 0; k < replicas; k++)
    for (int s = 0; s < HY_STAGES; s++) {
      model[k][s]->ops->free(model[k][s]);
      data[s][k]->ops->free(data[s][k]);
    }
  return rc;
}

static int run_hybrid(fg_graph *dg, fg_dtype dt, int replicas, int bad,
                      hy_arg args[HY_MAX_K * HY_STAGES]) {
  return run_hybrid_on(dg, NULL, 0, dt, replicas, bad, args);
}

static void free_args(hy_arg *args, int n) {
  for (int i = 0; i < n; i++)
    for (int v = 0; v < 6; v++)
      fg_tensor_free(args[i].vars[v]);
}

/* max |a - b| / max |b| over one variable's elements (as dist_var_diff). */
static double tensor_diff(const fg_tensor *a, const fg_tensor *b) {
  if (!a || !b || fg_tensor_num_elements(a) != fg_tensor_num_elements(b)) return -1;
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < fg_tensor_num_elements(a); i++) {
    double x, y;
    if (fg_tensor_dtype(a) == FG_F32)
      x = ((const float *)fg_tensor_data(a))[i], y = ((const float *)fg_tensor_data(b))[i];
    else
      x = ((const double *)fg_tensor_data(a))[i], y = ((const double *)fg_tensor_data(b))[i];
    worst = fmax(worst, fabs(x - y));
    scale = fmax(scale, fabs(y));
  }
  return worst > 0 ? worst / (scale > 0 ? scale : 1e-300) : 0;
}

/* dist_mlp split over rank 0 (layer 1) and rank 1 (layers 2, 3), in *gx,
 * and its replicas = 1 rewrite with buckets of bucket_bytes (0: the
 * default), returned (NULL with st set). */
static fg_graph *split_rewrite(fg_dtype dt, fg_optimizer_kind opt, double lr, int64_t bucket_bytes,
                               fg_graph **gx, fg_status *st) {
  *gx = dist_mlp(dt, opt, lr, "rank:0/cpu:0", "rank:1/cpu:0");
  fg_data_parallel_options o;
  fg_data_parallel_options_init(&o);
  if (bucket_bytes) o.bucket_bytes = bucket_bytes;
  fg_graph *dg = fg_data_parallel(*gx, 1, batch_names, 2, &o, st);
  if (!dg) FG_FAIL_AT("%s", fg_status_message(st));
  return dg;
}

/* Trains the split model's hybrid rewrite on `replicas` replicas and checks
 * it against one device on the full batch (losses and variables within
 * tol, relative) and against the unsplit model's in-process rewrite over
 * as many replicas (the same bits: same gradients, same reduction order).
 * `other`: the graph of the replicas after the first (then broadcast from
 * replica 0), or NULL. */
static void hybrid_case_on(fg_dtype dt, int replicas, int64_t bucket_bytes, double tol,
                           fg_graph *other) {
  fg_status *st = fg_status_new();
  fg_graph *g1 = dist_mlp(dt, FG_OPTIMIZER_ADAM, 2e-3, NULL, NULL), *gx = NULL;
  fg_graph *dg = split_rewrite(dt, FG_OPTIMIZER_ADAM, 2e-3, bucket_bytes, &gx, st);
  fg_data_parallel_options o;
  fg_data_parallel_options_init(&o);
  if (bucket_bytes) o.bucket_bytes = bucket_bytes;
  fg_graph *gn = fg_data_parallel(g1, replicas, batch_names, 2, &o, st);
  FG_REQUIRE(dg && gn);
  fg_session *s1 = fg_session_new(g1, NULL, st), *sn = fg_session_new(gn, NULL, st);
  FG_REQUIRE(s1 && sn);
  double ref[HY_STEPS], refn[HY_STEPS];
  FG_REQUIRE(dist_train_batches(s1, dt, HY_STEPS, hy_batches, 0, ref, st) == 0);
  FG_REQUIRE(dist_train_batches(sn, dt, HY_STEPS, hy_batches, 0, refn, st) == 0);
  hy_arg args[HY_MAX_K * HY_STAGES];
  FG_REQUIRE(run_hybrid_on(dg, other, other != NULL, dt, replicas, 0, args) == 0);
  for (int k = 0; k < HY_STEPS; k++) {
    /* Both stages of a replica return its loss (made on stage 1); the
     * full batch's loss is the replicas' weighted by their rows. */
    double full = 0;
    for (int r = 0; r < replicas; r++) {
      FG_CHECK(args[r * HY_STAGES].losses[k] == args[r * HY_STAGES + 1].losses[k]);
      full += args[r * HY_STAGES].losses[k] * args[r * HY_STAGES].rows[k];
    }
    full /= hy_batches[k];
    if (!(fabs(full - ref[k]) <= tol * fabs(ref[k])))
      FG_FAIL_AT("step %d: loss %.17g, one device %.17g (tol %g)", k, full, ref[k], tol);
    FG_CHECK(fabs(full - refn[k]) <= 1e-6 * fabs(refn[k]));
  }
  FG_CHECK(ref[HY_STEPS - 1] < ref[0]);
  for (int v = 0; v < 6; v++) {
    fg_tensor *want = fg_session_variable(s1, dist_var_names[v], st);
    fg_tensor *same = fg_session_variable(sn, dist_var_names[v], st);
    double d = tensor_diff(args[0].vars[v], want);
    if (!(d >= 0 && d <= tol))
      FG_FAIL_AT("%s differs from one device's by %g (tol %g)", dist_var_names[v], d, tol);
    /* The in-process replicas reduce in the same order: the same bits. */
    FG_CHECK(tensor_diff(args[0].vars[v], same) == 0.0);
    for (int r = 1; r < replicas; r++)
      if (tensor_diff(args[r * HY_STAGES].vars[v], args[0].vars[v]) != 0.0)
        FG_FAIL_AT("replica %d's %s is not replica 0's bits", r, dist_var_names[v]);
    fg_tensor_free(want);
    fg_tensor_free(same);
  }
  free_args(args, replicas * HY_STAGES);
  fg_session_free(s1);
  fg_session_free(sn);
  fg_graph_free(dg);
  fg_graph_free(gn);
  fg_graph_free(gx);
  fg_graph_free(g1);
  fg_status_free(st);
}

static void hybrid_case(fg_dtype dt, int replicas, int64_t bucket_bytes, double tol) {
  hybrid_case_on(dt, replicas, bucket_bytes, tol, NULL);
}

FG_TEST(dist_hybrid_2x2_f64_uneven, "dist") { hybrid_case(FG_F64, 2, 0, 1e-9); }

/* Replica 1's processes built the model with other initial weights (seed
 * 2). Without a broadcast every process's first run is refused, naming the
 * variables (each stage compares its own over its stage group); with
 * fg_session_broadcast_variables from replica 0 the run is replica 0's:
 * as one device on the full batch from seed 1's weights. Then one process
 * with another graph: every process fails, none waits for a timeout. */
FG_TEST(dist_hybrid_replicas_broadcast_variables, "dist,badinput") {
  fg_status *st = fg_status_new();
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_ADAM);
  cfg.learning_rate = 2e-3;
  fg_graph *gy = dist_mlp_seeded(FG_F64, &cfg, "rank:0/cpu:0", "rank:1/cpu:0", 2);
  fg_graph *other = fg_data_parallel(gy, 1, batch_names, 2, NULL, st);
  fg_graph *gx = NULL, *dg = split_rewrite(FG_F64, FG_OPTIMIZER_ADAM, 2e-3, 0, &gx, st);
  FG_REQUIRE(other && dg);
  hy_arg args[HY_MAX_K * HY_STAGES];
  /* bad = 1: failures expected (its bad label is never fed: the first run
   * stops at the check). */
  run_hybrid_on(dg, other, 0, FG_F64, 2, 1, args);
  for (int i = 0; i < 2 * HY_STAGES; i++) {
    FG_CHECK(args[i].rc != 0);
    FG_CHECK_INT(args[i].code, FG_INVALID_ARGUMENT);
    FG_CHECK_STR_CONTAINS(args[i].err,
                          "ranks disagree on the variables: rank 0 has variables hash");
  }
  free_args(args, 2 * HY_STAGES);
  hybrid_case_on(FG_F64, 2, 0, 1e-9, other);
  /* Only replica 1's stage 1 runs another graph (one gradient bucket per
   * gradient: other all_reduce nodes; a learning rate is a variable's
   * value, which the variables' check covers): its replica group and its
   * stage group see the difference; replica 0's stage 0 sees none in
   * either of its groups, and fails through the second round, told by its
   * replica's stage 1. */
  fg_graph *g2 = NULL, *dg2 = split_rewrite(FG_F64, FG_OPTIMIZER_ADAM, 2e-3, 1, &g2, st);
  FG_REQUIRE(dg2);
  hy_graph[3] = dg2;
  run_hybrid_on(dg, NULL, 0, FG_F64, 2, 1, args);
  hy_graph[3] = NULL;
  for (int i = 0; i < 2 * HY_STAGES; i++) {
    FG_CHECK(args[i].rc != 0);
    FG_CHECK_INT(args[i].code, FG_INVALID_ARGUMENT);
    const char *want = i == 0 ? "rank 1 of this process's replica group found that the "
                                "processes' graphs or variables differ"
                              : "ranks disagree on the graph: rank 0 has graph hash 0x";
    FG_CHECK_STR_CONTAINS(args[i].err, want);
  }
  free_args(args, 2 * HY_STAGES);
  fg_graph_free(dg2);
  fg_graph_free(g2);
  fg_graph_free(dg);
  fg_graph_free(gx);
  fg_graph_free(other);
  fg_graph_free(gy);
  fg_status_free(st);
}
/* One bucket per gradient: each stage chains several collectives. */
FG_TEST(dist_hybrid_2x2_f32_bucket_per_gradient, "dist") { hybrid_case(FG_F32, 2, 1, 1e-5); }
FG_TEST(dist_hybrid_3x2_f32, "dist") { hybrid_case(FG_F32, 3, 0, 1e-5); }
/* One process group and no data communicator: the all_reduce nodes are
 * the identity, and the split model trains as on one device. */
FG_TEST(dist_hybrid_1x2_without_data_comm, "dist") { hybrid_case(FG_F64, 1, 0, 1e-12); }

/* The rewrite of a split model: each rank's gradients in buckets of their
 * own on that rank, chained within the rank only; the row counts made
 * where x lives (rank 0) and sent to rank 1 as 8 + 16 bytes; x itself
 * never crosses. */
FG_TEST(dist_hybrid_rewrite_places_buckets_per_rank, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *gx = NULL, *dg = split_rewrite(FG_F32, FG_OPTIMIZER_SGD, 0.1, 1, &gx, st);
  FG_REQUIRE(dg);
  fg_partition *p = fg_partition_new(dg, NULL, st);
  FG_REQUIRE(p);
  FG_CHECK_INT(fg_partition_num_ranks(p), 2);
  int per_rank[2] = {0, 0};
  for (int id = 0; id < fg_graph_num_nodes(dg); id++) {
    if (strcmp(fg_node_op(dg, id), "all_reduce") != 0) continue;
    int rank = fg_partition_device(p, fg_partition_node_device(p, id)).rank;
    FG_REQUIRE(rank == 0 || rank == 1);
    const char *name = fg_node_name(dg, id);
    if (strcmp(name, "data_parallel/rows") == 0) {
      FG_CHECK_INT(rank, 0);
      continue;
    }
    per_rank[rank]++;
    /* One gradient per bucket: reduced in place where it is computed (the
     * placer puts dense2/w's gradient with h1, on rank 0). */
    int grad = fg_node_input(dg, id, 0).node;
    FG_CHECK_INT(fg_partition_device(p, fg_partition_node_device(p, grad)).rank, rank);
    /* Its control input (the previous collective), if any, is on its rank. */
    for (int k = 3; k < fg_node_num_inputs(dg, id); k++) {
      int prev = fg_node_input(dg, id, k).node;
      FG_CHECK_INT(fg_partition_device(p, fg_partition_node_device(p, prev)).rank, rank);
    }
  }
  /* One bucket per gradient, 6 in all, on both ranks. */
  FG_CHECK_INT(per_rank[0] + per_rank[1], 6);
  FG_CHECK(per_rank[0] >= 2 && per_rank[1] >= 2);
  int rows_sent = 0, stats_sent = 0;
  for (int t = 0; t < fg_partition_num_transfers(p); t++) {
    const fg_transfer *tr = fg_partition_transfer(p, t);
    const char *src = fg_node_name(dg, tr->src.node);
    FG_CHECK(strcmp(src, "x") != 0);
    if (strcmp(src, "data_parallel/rows") == 0) stats_sent += tr->bytes == 16;
    if (strncmp(src, "data_parallel/", 14) == 0 && strcmp(src, "data_parallel/rows") != 0 &&
        tr->bytes == 8)
      rows_sent++;
  }
  FG_CHECK_INT(stats_sent, 1);
  FG_CHECK_INT(rows_sent, 1);
  fg_partition_free(p);
  fg_graph_free(dg);
  fg_graph_free(gx);
  fg_status_free(st);
}

/* Replica 1 feeds a label out of range. Its processes fail (stage 1 in
 * the loss, stage 0 in the one_hot of the loss gradient, which the placer
 * puts on rank 0 with the labels), whichever gets there first, or are
 * aborted by the other; their stage groups then abort replica 0's
 * processes, whose data was good. All four stop well before the 20 s
 * deadline, and the first failure names the label. */
FG_TEST(dist_hybrid_failed_step_aborts_every_process, "dist,badinput") {
  fg_status *st = fg_status_new();
  fg_graph *gx = NULL, *dg = split_rewrite(FG_F32, FG_OPTIMIZER_SGD, 0.1, 0, &gx, st);
  FG_REQUIRE(dg);
  hy_arg args[HY_MAX_K * HY_STAGES];
  run_hybrid(dg, FG_F32, 2, 1, args);
  int named = 0;
  for (int i = 0; i < 4; i++) {
    if (!args[i].rc) FG_FAIL_AT("process %d did not fail", i);
    if (!(args[i].sec < 10)) FG_FAIL_AT("process %d took %.1f s to stop", i, args[i].sec);
    if (args[i].code == FG_INVALID_ARGUMENT) {
      FG_CHECK(i >= 2);
      FG_CHECK_STR_CONTAINS(args[i].err, "[1] = 99 is out of range [0, 10)");
      named++;
    } else {
      FG_CHECK_INT(args[i].code, FG_ABORTED);
      FG_CHECK_STR_CONTAINS(args[i].err, "group aborted (rank ");
    }
  }
  FG_CHECK(named >= 1);
  if (fgt_failures)
    for (int i = 0; i < 4; i++)
      fprintf(stderr, "process %d: %s\n", i, args[i].err);
  free_args(args, 4);
  fg_graph_free(dg);
  fg_graph_free(gx);
  fg_status_free(st);
}

/* A run refused before it starts in one process (x of the wrong dtype):
 * the ranks' agreement to start it (executor/dist/exec.h fg_dist_run_agree) tells
 * its replica group and then, in a second round, every stage group, so
 * all processes stop at once, told why, instead of waiting in the run's
 * transfers and all_reduce until the 20 s deadline. With one replica
 * (model parallelism only) the replica group alone. */
static void hybrid_refused_case(int replicas, int bad_proc) {
  fg_status *st = fg_status_new();
  fg_graph *gx = NULL, *dg = split_rewrite(FG_F32, FG_OPTIMIZER_SGD, 0.1, 0, &gx, st);
  FG_REQUIRE(dg);
  hy_arg args[HY_MAX_K * HY_STAGES];
  run_hybrid(dg, FG_F32, replicas, 2 + bad_proc, args);
  for (int i = 0; i < replicas * HY_STAGES; i++) {
    if (!args[i].rc) FG_FAIL_AT("process %d did not fail", i);
    if (!(args[i].sec < 10)) FG_FAIL_AT("process %d took %.1f s to stop", i, args[i].sec);
    if (i == bad_proc) {
      FG_CHECK_INT(args[i].code, FG_INVALID_ARGUMENT);
      FG_CHECK_STR_CONTAINS(args[i].err, "feed 'x': expected f32 [?,64], given f64");
    } else {
      FG_CHECK_INT(args[i].code, FG_ABORTED);
      FG_CHECK_STR_CONTAINS(args[i].err, "refused the run before it started, so no rank ran it");
      FG_CHECK_STR_CONTAINS(args[i].err, "feed 'x': expected f32 [?,64], given f64");
    }
  }
  if (fgt_failures)
    for (int i = 0; i < replicas * HY_STAGES; i++)
      fprintf(stderr, "process %d: %s\n", i, args[i].err);
  free_args(args, replicas * HY_STAGES);
  fg_graph_free(dg);
  fg_graph_free(gx);
  fg_status_free(st);
}

/* Replicas may make different calls that hold the same collectives:
 * replica 1 trains without fetching the loss. The stage groups' agreement
 * compares collectives only (the replica groups' also fetches), so every
 * run trains, and the replicas end with the same bits. */
FG_TEST(dist_hybrid_replicas_may_fetch_differently, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *gx = NULL, *dg = split_rewrite(FG_F64, FG_OPTIMIZER_SGD, 0.1, 0, &gx, st);
  FG_REQUIRE(dg);
  hy_arg args[HY_MAX_K * HY_STAGES];
  FG_CHECK(run_hybrid(dg, FG_F64, 2, -1, args) == 0);
  for (int k = 0; k < HY_STEPS; k++)
    FG_CHECK(args[0].losses[k] > 0 && args[2].losses[k] == 0); /* fetched, not fetched */
  for (int v = 0; v < 6; v++)
    if (tensor_diff(args[2].vars[v], args[0].vars[v]) != 0.0)
      FG_FAIL_AT("replica 1's %s is not replica 0's bits", dist_var_names[v]);
  free_args(args, 4);
  fg_graph_free(dg);
  fg_graph_free(gx);
  fg_status_free(st);
}

FG_TEST(dist_hybrid_refused_run_stops_every_process, "dist,badinput") {
  hybrid_refused_case(2, 3); /* replica 1, stage 1 */
}
FG_TEST(dist_hybrid_refused_run_stops_other_stage, "dist,badinput") {
  hybrid_refused_case(1, 1); /* model parallelism: stage 1 */
}

FG_TEST(dist_hybrid_bad_setups, "dist,badinput") {
  fg_status *st = fg_status_new();
  fg_graph *gx = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, "rank:0/cpu:0", "rank:1/cpu:0");
  /* Several replicas of a split model in one graph: refused, saying how. */
  FG_CHECK(fg_data_parallel(gx, 2, batch_names, 2, NULL, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st),
                        "fg_data_parallel: node 'dense1/w' is placed on 'rank:0/cpu:0' (model "
                        "parallelism across processes): such a model is replicated one process "
                        "group per replica, with replicas = 1");
  /* A data communicator on a graph that names no rank. */
  fg_graph *g1 = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, NULL, NULL);
  fg_session *s = fg_session_new(g1, NULL, st);
  FG_REQUIRE(s);
  fg_comm *h[2];
  FG_REQUIRE(fg_comm_inproc_group(2, 5, h, st) == 0);
  FG_CHECK(fg_session_set_data_comm(s, h[0], st) == -1);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st),
                        "a data communicator (fg_session_set_data_comm) serves graphs split "
                        "across processes (devices rank:R/...), and this graph names no rank");
  /* The session still runs as before (the refused communicator is not kept). */
  double l[1];
  FG_CHECK(dist_train(s, FG_F32, 1, 16, l, st) == 0);
  FG_CHECK(fg_session_set_data_comm(NULL, h[0], st) == -1);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "fg_session_set_data_comm: session is NULL");
  fg_session_free(s);
  h[0]->ops->free(h[0]);
  h[1]->ops->free(h[1]);
  fg_status_free(st);
  fg_graph_free(g1);
  fg_graph_free(gx);
}
