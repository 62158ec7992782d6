/* Executing across devices (label dist): each device's own memory plan and
 * arena, recv steps copying tensors between devices, persistent lane
 * threads, collectives on a lane of their own, no allocation in a run, and
 * the in-process collective timeout. Reference values are by hand or from
 * the single-device run of the same graph. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc_count.h"
#include "dist/comm/comm_inproc.h"
#include "executor/dist/exec.h"
#include "fgtest.h"
#include "test_dist_util.h"
#include "test_threads_util.h"

static const char *const batch_names[2] = {"x", "y"};

/* flowgraph's threads in this process. Counting every entry of
 * /proc/self/task is wrong where a GPU exists: the CUDA driver starts a
 * thread of its own when a session first asks for devices (seen on an
 * H100: one more thread than expected, still there after the session was
 * freed). */
static int count_threads(void) { return fgt_count_threads(1); }

/* flowgraph's threads once they number `want` (fgt_threads_reach): after
 * threads were stopped, which may still be listed a moment. */
static int threads_reach(int want) { return fgt_threads_reach(1, want, 2.0); }

static int find_tensor(const fg_plan_info *info, const char *name, const char *kind) {
  for (int k = 0; k < info->n_tensors; k++)
    if (strcmp(info->tensors[k].name, name) == 0 && strcmp(info->tensors[k].kind, kind) == 0)
      return k;
  return -1;
}

FG_TEST(dist_exec_per_device_arenas_and_recv_steps, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_cut_graph(1);
  fg_session_options so;
  fg_session_options_init(&so);
  so.num_threads = 2;
  fg_session *s = fg_session_new(g, &so, st);
  FG_REQUIRE(s);
  double x[3] = {1, -2, 0.5};
  int64_t xd[1] = {3};
  fg_tensor *xt = fg_tensor_wrap(FG_F64, 1, xd, x, sizeof x, st);
  fg_feed feed = {"x", xt};
  const char *fetch[2] = {"d", "e"};
  fg_plan_info *info = fg_session_plan_info(s, &feed, 1, fetch, 2, NULL, 0, st);
  FG_REQUIRE(info);
  FG_REQUIRE(info->n_devices == 2);
  /* Each device plans its own arena; the total is their sum. */
  FG_CHECK(info->device_arena_bytes[0] > 0 && info->device_arena_bytes[1] > 0);
  FG_CHECK(info->device_arena_bytes[0] + info->device_arena_bytes[1] == info->arena_bytes);
  /* Three recv steps: a onto cpu:1 (once, though b, c and e read it), b and
   * c onto cpu:0; each copies 24 bytes into the receiving device's arena. */
  int n_recv = 0;
  for (int k = 0; k < info->n_steps; k++)
    n_recv += info->step_recv[k];
  FG_CHECK_INT(n_recv, 3);
  const char *names[3] = {"a", "b", "c"};
  const int dst[3] = {1, 0, 0};
  for (int i = 0; i < 3; i++) {
    int k = find_tensor(info, names[i], "recv");
    if (k < 0) FG_FAIL_AT("no recv tensor of '%s'", names[i]);
    const fg_plan_tensor *t = &info->tensors[k];
    FG_CHECK_INT(t->device, dst[i]);
    FG_CHECK_INT(t->bytes, 24);
    FG_CHECK_INT(t->output, 0);
    FG_CHECK(t->first_step >= 0 && info->step_recv[t->first_step]);
    FG_CHECK_INT(info->step_devices[t->first_step], dst[i]);
    /* The copy comes after its producer and before its first reader. */
    int src = find_tensor(info, names[i], "arena");
    if (src < 0) src = find_tensor(info, names[i], "fetch");
    FG_REQUIRE(src >= 0);
    FG_CHECK(info->tensors[src].first_step < t->first_step);
    FG_CHECK(t->first_step < t->last_step);
  }
  /* Isolation: a device's arena tensor is read on another device only by
   * a recv step, and every one fits its own device's arena. */
  for (int k = 0; k < info->n_tensors; k++) {
    const fg_plan_tensor *t = &info->tensors[k];
    if (t->device < 0) continue;
    FG_CHECK_INT(info->step_devices[t->first_step], t->device);
    if (t->last_step >= 0 && info->step_devices[t->last_step] != t->device)
      FG_CHECK(info->step_recv[t->last_step]);
    FG_CHECK(t->offset >= 0 && (size_t)t->offset + t->bytes <= info->device_arena_bytes[t->device]);
  }
  fg_plan_info_free(info);
  /* By hand: a = [2, -1, 1.5]; d = 2a + 3a = [10, -5, 7.5]; e = 2.5. */
  fg_tensor *out[2];
  for (int run = 0; run < 3; run++) {
    FG_REQUIRE(fg_session_run(s, &feed, 1, fetch, 2, out, NULL, 0, st) == 0);
    const double *d = fg_tensor_data(out[0]);
    FG_CHECK(d[0] == 10 && d[1] == -5 && d[2] == 7.5);
    FG_CHECK(*(const double *)fg_tensor_data(out[1]) == 2.5);
    fg_tensor_free(out[0]);
    fg_tensor_free(out[1]);
  }
  /* A new feed value flows through the copies. */
  x[0] = 3;
  FG_REQUIRE(fg_session_run(s, &feed, 1, fetch, 2, out, NULL, 0, st) == 0);
  FG_CHECK(((const double *)fg_tensor_data(out[0]))[0] == 20);
  FG_CHECK(*(const double *)fg_tensor_data(out[1]) == 4.5); /* 4 - 1 + 1.5 */
  fg_tensor_free(out[0]);
  fg_tensor_free(out[1]);
  /* Profiling: recv steps are named after the tensor, op "recv", on the
   * receiving device. */
  fg_run_options ro = {1};
  fg_run_metadata *md = NULL;
  FG_REQUIRE(fg_session_run_ex(s, &feed, 1, fetch, 2, out, NULL, 0, &ro, &md, st) == 0);
  int seen = 0;
  for (int i = 0; i < md->n_nodes; i++) {
    const fg_node_timing *t = &md->nodes[i];
    if (strcmp(t->op, "recv") != 0) {
      FG_CHECK_INT(t->device, fg_partition_node_device(fg_session_partition(s), t->node));
      continue;
    }
    seen++;
    FG_CHECK_INT(t->device, strcmp(t->name, "a") == 0 ? 1 : 0);
    FG_CHECK_INT(t->thread, t->device); /* lane = device without collectives */
    FG_CHECK_INT(t->output_bytes, 24);
  }
  FG_CHECK_INT(seen, 3);
  fg_run_metadata_free(md);
  fg_tensor_free(out[0]);
  fg_tensor_free(out[1]);
  fg_tensor_free(xt);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* Lane threads start with the session and persist: runs create none, and
 * a cached multi-device plan runs without allocating (the fetched tensors
 * aside). */
FG_TEST(dist_exec_lanes_persist_and_runs_do_not_allocate, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_cut_graph(1);
  fg_session_options so;
  fg_session_options_init(&so);
  so.num_threads = 1;
  int before = count_threads();
  fg_session *s = fg_session_new(g, &so, st);
  FG_REQUIRE(s);
  /* Two devices, no collectives: two lanes, the second on its own thread. */
  int with = count_threads();
  FG_CHECK_INT(with - before, 1);
  double x[3] = {1, -2, 0.5};
  int64_t xd[1] = {3};
  fg_tensor *xt = fg_tensor_wrap(FG_F64, 1, xd, x, sizeof x, st);
  fg_feed feed = {"x", xt};
  const char *fetch = "e";
  fg_tensor *out = NULL;
  FG_REQUIRE(fg_session_run(s, &feed, 1, &fetch, 1, &out, NULL, 0, st) == 0);
  fg_tensor_free(out);
  for (int run = 0; run < 20; run++) {
    long a0 = atomic_load(&n_allocs);
    FG_REQUIRE(fg_session_run(s, &feed, 1, &fetch, 1, &out, NULL, 0, st) == 0);
    /* The returned tensor: its struct and its data. */
    FG_CHECK_INT(atomic_load(&n_allocs) - a0, 2);
    FG_CHECK(*(const double *)fg_tensor_data(out) == 2.5);
    fg_tensor_free(out);
  }
  FG_CHECK_INT(count_threads(), with);
  fg_session_free(s);
  FG_CHECK_INT(threads_reach(before), before);
  fg_tensor_free(xt);
  fg_graph_free(g);
  fg_status_free(st);
}

/* all_reduce_apply_sgd over the in-process group (two devices),
 * which has no fused form: the node all-reduces a copy of its 1 MiB
 * gradient in a buffer the communicator keeps, so cached runs allocate
 * nothing (they allocated 2 MiB a run before). v = 1, g0 = 1, g1 = 3, lr
 * 0.125: each run takes 0.125 x mean 2 = 0.25 off, exactly. */
FG_TEST(dist_exec_fused_update_runs_do_not_allocate, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t n = 1 << 18; /* 1 MiB of f32 */
  const char *targets[2] = {"u0", "u1"};
  for (int r = 0; r < 2; r++) {
    fg_tensor *vt = fg_tensor_new(FG_F32, 1, &n, st), *gt = fg_tensor_new(FG_F32, 1, &n, st);
    FG_REQUIRE(vt && gt);
    for (int64_t i = 0; i < n; i++) {
      ((float *)fg_tensor_data(vt))[i] = 1;
      ((float *)fg_tensor_data(gt))[i] = r ? 3 : 1;
    }
    dist_fused_sgd_on(g, r, vt, gt, FG_F32, 0.125, 1, targets[r]);
    fg_tensor_free(vt);
    fg_tensor_free(gt);
  }
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  FG_REQUIRE(fg_session_run(s, NULL, 0, NULL, 0, NULL, targets, 2, st) == 0);
  for (int run = 0; run < 10; run++) {
    long a0 = atomic_load(&n_allocs);
    FG_REQUIRE(fg_session_run(s, NULL, 0, NULL, 0, NULL, targets, 2, st) == 0);
    FG_CHECK_INT(atomic_load(&n_allocs) - a0, 0);
  }
  for (int r = 0; r < 2; r++) {
    fg_tensor *v = fg_session_variable(s, r ? "v1" : "v0", st);
    FG_REQUIRE(v);
    FG_CHECK(((const float *)fg_tensor_data(v))[0] == -1.75f);
    FG_CHECK(((const float *)fg_tensor_data(v))[n - 1] == -1.75f);
    fg_tensor_free(v);
  }
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* Data parallelism on two devices: each device's all_reduce steps run on
 * that device's collectives lane (lane n_devices + device), overlapping its
 * compute lane; the replica's batch input arrives by a recv step. */
FG_TEST(dist_exec_collectives_on_their_own_lane, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F32, FG_OPTIMIZER_ADAM, 2e-3, NULL, NULL);
  fg_data_parallel_options o;
  fg_data_parallel_options_init(&o);
  o.bucket_bytes = 1; /* one all_reduce per gradient */
  fg_graph *dg = fg_data_parallel(g, 2, batch_names, 2, &o, st);
  FG_REQUIRE(dg);
  fg_session_options so;
  fg_session_options_init(&so);
  so.num_threads = 1;
  so.collective_lanes = 1; /* by default only where a core is free for them */
  int before = count_threads();
  fg_session *s = fg_session_new(dg, &so, st);
  FG_REQUIRE(s);
  /* Four lanes (two compute, two collectives): three threads. */
  FG_CHECK_INT(count_threads() - before, 3);
  fg_tensor *x, *y;
  FG_REQUIRE(dist_batch(FG_F32, 0, 64, &x, &y) == 0);
  fg_feed feeds[2] = {{"x", x}, {"y", y}};
  const char *fetch = "loss", *target = "train";
  fg_tensor *out = NULL;
  fg_run_options ro = {1};
  fg_run_metadata *md = NULL;
  FG_REQUIRE(fg_session_run_ex(s, feeds, 2, &fetch, 1, &out, &target, 1, &ro, &md, st) == 0);
  int n_ar = 0, n_recv = 0;
  for (int i = 0; i < md->n_nodes; i++) {
    const fg_node_timing *t = &md->nodes[i];
    if (strcmp(t->op, "all_reduce") == 0) {
      n_ar++;
      FG_CHECK_INT(t->thread, 2 + t->device);
    } else {
      FG_CHECK_INT(t->thread, t->device);
      n_recv += strcmp(t->op, "recv") == 0 && t->device == 1;
    }
  }
  /* Six gradients (3 weights, 3 biases) and the row count per replica. */
  FG_CHECK_INT(n_ar, 14);
  FG_CHECK(n_recv >= 2); /* x and y onto cpu:1 */
  fg_run_metadata_free(md);
  fg_tensor_free(out);
  fg_tensor_free(x);
  fg_tensor_free(y);
  fg_session_free(s);
  fg_graph_free(dg);
  fg_graph_free(g);
  fg_status_free(st);
}

/* dist_timeout_s bounds an in-process collective: cpu:1 reaches its
 * all_reduce only after a chain of 400 512 x 512 matmuls (seconds at
 * single-core BLAS speed), so cpu:0's all_reduce waits past the 0.3 s
 * timeout and the run fails with DEADLINE_EXCEEDED naming it instead of
 * waiting. (Pairs that can never meet are refused by fg_session_new:
 * dist_all_reduce_pairs_that_wait_on_each_other.) */
FG_TEST(dist_exec_timeout_option, "dist,badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t dims[1] = {4};
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, dims);
  fg_output r0 = fg_op(g, "all_reduce", "r0", &x, 1, NULL);
  fg_set_device(g, r0, "cpu:0");
  fg_output z = fg_set_name(g, fg_neg(g, r0), "z");
  fg_set_device(g, z, "cpu:0");
  fg_output busy = dist_identity_chain(g, 512, 400, "cpu:1");
  FG_REQUIRE(busy.node >= 0);
  fg_output x1 = fg_add(g, fg_neg(g, x), busy);
  fg_set_device(g, x1, "cpu:1");
  fg_output r1 = fg_op(g, "all_reduce", "r1", &x1, 1, NULL);
  fg_set_device(g, r1, "cpu:1");
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  fg_session_options so;
  fg_session_options_init(&so);
  const double bad[4] = {-1, NAN, 86401, -0.0001};
  for (int i = 0; i < 4; i++) {
    so.dist_timeout_s = bad[i];
    FG_CHECK(fg_session_new(g, &so, st) == NULL);
    FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
    FG_CHECK(strstr(fg_status_message(st), "dist_timeout_s") != NULL);
  }
  so.dist_timeout_s = 0.3;
  fg_session *s = fg_session_new(g, &so, st);
  FG_REQUIRE(s);
  float xv[4] = {1, 2, 3, 4};
  fg_tensor *xt = fg_tensor_wrap(FG_F32, 1, dims, xv, sizeof xv, st);
  fg_feed feed = {"x", xt};
  const char *fetch[2] = {"z", "r1"};
  fg_tensor *out[2] = {NULL, NULL};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  FG_CHECK(fg_session_run(s, &feed, 1, fetch, 2, out, NULL, 0, st) != 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  FG_CHECK_INT(fg_status_code(st), FG_DEADLINE_EXCEEDED);
  FG_CHECK(strstr(fg_status_message(st), "r0") != NULL);
  FG_CHECK(sec >= 0.25 && sec < 10);
  FG_CHECK(out[0] == NULL && out[1] == NULL);
  fg_tensor_free(xt);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* collective_lanes = -1 runs the all_reduce steps in line on the device's
 * lane: the same bits, one thread per device; 1 gives them lanes of their
 * own; 0 gives them lanes only where the two devices' compute threads (one
 * each) leave a core free. Other values are refused. */
FG_TEST(dist_exec_collective_lanes_modes_same_bits, "dist,badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F32, FG_OPTIMIZER_ADAM, 2e-3, NULL, NULL);
  fg_graph *dg = fg_data_parallel(g, 2, batch_names, 2, NULL, st);
  FG_REQUIRE(dg);
  fg_session_options so;
  fg_session_options_init(&so);
  so.num_threads = 1;
  const int bad[3] = {2, -2, 7};
  for (int i = 0; i < 3; i++) {
    so.collective_lanes = bad[i];
    FG_CHECK(fg_session_new(dg, &so, st) == NULL);
    FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
    FG_CHECK(strstr(fg_status_message(st), "collective_lanes") != NULL);
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  FG_REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  const int free_core = CPU_COUNT(&set) > 2;
  const int modes[3] = {1, -1, 0};
  double losses[3][4];
  const int base = count_threads();
  for (int m = 0; m < 3; m++) {
    so.collective_lanes = modes[m];
    /* The last mode's lane threads, stopped, may still be listed a moment
     * (under TSan, once in a fresh clone): counted from when they are gone. */
    int before = threads_reach(base);
    fg_session *s = fg_session_new(dg, &so, st);
    FG_REQUIRE(s);
    /* Lanes: 2 compute (one on the caller's thread) and 2 collective ones. */
    const int own = modes[m] == 1 || (modes[m] == 0 && free_core);
    FG_CHECK_INT(count_threads() - before, own ? 3 : 1);
    FG_REQUIRE(dist_train(s, FG_F32, 4, 64, losses[m], st) == 0);
    fg_session_free(s);
  }
  for (int m = 1; m < 3; m++)
    for (int k = 0; k < 4; k++)
      FG_CHECK(losses[m][k] == losses[0][k]);
  FG_CHECK(losses[0][3] < losses[0][0]);
  fg_graph_free(dg);
  fg_graph_free(g);
  fg_status_free(st);
}

/* The default's rule: own lanes while the machine's compute threads leave
 * a core free; a process bound to fewer cores than the machine has counts
 * alone. */
FG_TEST(dist_exec_auto_own_lanes_rule, "dist") {
  /* threads per process, processes on the host, usable cores, online cores */
  FG_CHECK_INT(fg_dist_auto_own_lanes(1, 1, 2, 2), 1);  /* one rank per host */
  FG_CHECK_INT(fg_dist_auto_own_lanes(1, 2, 2, 2), 0);  /* 2 ranks fill 2 cores */
  FG_CHECK_INT(fg_dist_auto_own_lanes(2, 1, 2, 2), 0);  /* 2 devices x 1 thread */
  FG_CHECK_INT(fg_dist_auto_own_lanes(1, 4, 8, 8), 1);  /* 4 of 8 cores busy */
  FG_CHECK_INT(fg_dist_auto_own_lanes(2, 4, 8, 8), 0);  /* 8 of 8 */
  FG_CHECK_INT(fg_dist_auto_own_lanes(1, 2, 1, 2), 0);  /* bound to one core */
  FG_CHECK_INT(fg_dist_auto_own_lanes(1, 8, 4, 16), 1); /* bound to 4: peers elsewhere */
  FG_CHECK_INT(fg_dist_auto_own_lanes(4, 8, 4, 16), 0);
}

/* ---- cross-process graphs, with an in-process communicator as the
 * "processes" (the MPI runs are in tests/dist/test_mpi_train.c) ----------- */

#define XP_STEPS 5

typedef struct xp_arg {
  fg_comm *c;
  double losses[XP_STEPS];
  fg_tensor *w1, *w3; /* after gathering on rank 0 */
  int rc, n_recv;
  char err[512];
} xp_arg;

static void *xp_thread(void *p) {
  xp_arg *a = p;
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F32, FG_OPTIMIZER_ADAM, 2e-3, "rank:0/cpu:0", "rank:1/cpu:0");
  fg_session_options so;
  fg_session_options_init(&so);
  so.num_threads = 1;
  fg_session *s = fg_session_new(g, &so, st);
  a->rc = !s || fg_session_set_comm(s, a->c, st) != 0 ||
          dist_train(s, FG_F32, XP_STEPS, 64, a->losses, st) != 0 ||
          fg_session_gather_variables(s, 0, st) != 0;
  if (!a->rc) {
    a->w1 = fg_session_variable(s, "dense1/w", st);
    a->w3 = fg_session_variable(s, "dense3/w", st);
    /* The plan of a training step: this rank's transfer steps. */
    fg_tensor *x = NULL, *y = NULL;
    dist_batch(FG_F32, 0, 64, &x, &y);
    fg_feed feeds[2] = {{"x", x}, {"y", y}};
    const char *fetch = "loss", *target = "train";
    fg_plan_info *info = fg_session_plan_info(s, feeds, 2, &fetch, 1, &target, 1, st);
    for (int k = 0; info && k < info->n_steps; k++)
      a->n_recv += info->step_recv[k];
    fg_plan_info_free(info);
    fg_tensor_free(x);
    fg_tensor_free(y);
  }
  snprintf(a->err, sizeof a->err, "%s", fg_status_message(st));
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
  return NULL;
}

static void cross_process(int ranks) {
  fg_status *st = fg_status_new();
  fg_graph *g1 = dist_mlp(FG_F32, FG_OPTIMIZER_ADAM, 2e-3, NULL, NULL);
  fg_session *s1 = fg_session_new(g1, NULL, st);
  FG_REQUIRE(s1);
  double ref[XP_STEPS];
  FG_REQUIRE(dist_train(s1, FG_F32, XP_STEPS, 64, ref, st) == 0);
  fg_comm *h[4];
  FG_REQUIRE(fg_comm_inproc_group(ranks, 20, h, st) == 0);
  xp_arg args[4];
  pthread_t th[4];
  memset(args, 0, sizeof args);
  for (int r = 0; r < ranks; r++) {
    args[r].c = h[r];
    pthread_create(&th[r], NULL, xp_thread, &args[r]);
  }
  for (int r = 0; r < ranks; r++)
    pthread_join(th[r], NULL);
  for (int r = 0; r < ranks; r++)
    if (args[r].rc) FG_FAIL_AT("rank %d: %s", r, args[r].err);
  FG_REQUIRE(args[0].rc == 0 && args[1].rc == 0);
  for (int r = 0; r < ranks; r++) {
    /* Same kernels on the same data, split across the ranks: the same bits,
     * and every rank returns the loss (computed on rank 1). */
    for (int k = 0; k < XP_STEPS; k++)
      FG_CHECK(args[r].losses[k] == ref[k]);
  }
  /* Rank 0 gathered rank 1's weights; rank 1 never updated rank 0's. */
  fg_tensor *w1 = fg_session_variable(s1, "dense1/w", st);
  fg_tensor *w3 = fg_session_variable(s1, "dense3/w", st);
  FG_CHECK(memcmp(fg_tensor_data(args[0].w1), fg_tensor_data(w1), fg_tensor_num_bytes(w1)) == 0);
  FG_CHECK(memcmp(fg_tensor_data(args[0].w3), fg_tensor_data(w3), fg_tensor_num_bytes(w3)) == 0);
  FG_CHECK(memcmp(fg_tensor_data(args[1].w1), fg_tensor_data(w1), fg_tensor_num_bytes(w1)) != 0);
  /* Rank 0 receives dense2's gradient w.r.t. its input and the fetched
   * loss; rank 1 receives layer 1's activations (and more). */
  FG_CHECK(args[0].n_recv >= 2 && args[1].n_recv >= 1);
  for (int r = 0; r < ranks; r++) {
    fg_tensor_free(args[r].w1);
    fg_tensor_free(args[r].w3);
    h[r]->ops->free(h[r]);
  }
  fg_tensor_free(w1);
  fg_tensor_free(w3);
  fg_session_free(s1);
  fg_graph_free(g1);
  fg_status_free(st);
}

FG_TEST(dist_exec_cross_process_2_ranks, "dist") { cross_process(2); }
/* A third rank runs no node but takes part: it gets the fetched loss. */
FG_TEST(dist_exec_cross_process_3_ranks, "dist") { cross_process(3); }

/* Each rank's plan holds only its own work: a step for every node placed on
 * its rank, its transfers, and nothing of the other rank's (whose nodes
 * once were no-op steps, waking the lanes of devices the rank does not
 * run). Between them the two plans run every step of the one-device plan
 * exactly once. A rank's threads serve its own devices only: with 4
 * threads and one device of its own, its device pool has all 4 (3 workers
 * plus the lane), and it has lanes for that device alone. */
FG_TEST(dist_exec_cross_process_plans_hold_own_steps, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g1 = dist_mlp(FG_F32, FG_OPTIMIZER_ADAM, 2e-3, NULL, NULL);
  /* Without the passes: multi_update groups a device's updates into one
   * node, so which nodes have steps depends on the placement (one device
   * groups all six; two devices, each its own). */
  fg_session_options so1;
  fg_session_options_init(&so1);
  so1.no_passes = 1;
  fg_session *s1 = fg_session_new(g1, &so1, st);
  FG_REQUIRE(s1);
  fg_tensor *x = NULL, *y = NULL;
  FG_REQUIRE(dist_batch(FG_F32, 0, 16, &x, &y) == 0);
  fg_feed feeds[2] = {{"x", x}, {"y", y}};
  const char *fetch = "loss", *target = "train";
  fg_plan_info *one = fg_session_plan_info(s1, feeds, 2, &fetch, 1, &target, 1, st);
  FG_REQUIRE(one);
  fg_comm *h[2];
  FG_REQUIRE(fg_comm_inproc_group(2, 5, h, st) == 0);
  fg_graph *g[2];
  fg_session *s[2];
  fg_plan_info *info[2];
  int n_nodes = fg_graph_num_nodes(g1);
  int *runs = calloc((size_t)n_nodes, sizeof *runs);
  FG_REQUIRE(runs);
  for (int r = 0; r < 2; r++) {
    g[r] = dist_mlp(FG_F32, FG_OPTIMIZER_ADAM, 2e-3, "rank:0/cpu:0", "rank:1/cpu:0");
    FG_REQUIRE(fg_graph_num_nodes(g[r]) == n_nodes);
    fg_session_options so;
    fg_session_options_init(&so);
    so.num_threads = 4;
    so.no_passes = 1;
    s[r] = fg_session_new(g[r], &so, st);
    FG_REQUIRE(s[r]);
    int before = count_threads();
    FG_REQUIRE(fg_session_set_comm(s[r], h[r], st) == 0);
    /* The state is rebuilt for rank r. Before, without a communicator,
     * both devices counted: a pool of 2 threads each (1 worker each) and a
     * compute lane each (1 thread). Now: one device, whose pool has all 4
     * threads (3 workers), and its compute, collective and send lanes (2
     * threads). */
    FG_CHECK_INT(threads_reach(before + (3 + 2) - (2 * 1 + 1)) - before, (3 + 2) - (2 * 1 + 1));
    info[r] = fg_session_plan_info(s[r], feeds, 2, &fetch, 1, &target, 1, st);
    FG_REQUIRE(info[r]);
    const fg_partition *p = fg_session_partition(s[r]);
    int n_recv = 0;
    for (int k = 0; k < info[r]->n_steps; k++) {
      int node = info[r]->step_nodes[k];
      /* Every step runs on this rank's device. */
      FG_CHECK_INT(fg_partition_device(p, info[r]->step_devices[k]).rank, r);
      if (info[r]->step_recv[k]) {
        n_recv++;
        continue;
      }
      /* A compute step, or the send of its output: the node is this rank's. */
      FG_CHECK_INT(fg_partition_device(p, fg_partition_node_device(p, node)).rank, r);
      /* A fed or stored tensor is sent but never computed. */
      const char *op = fg_node_op(g[r], node);
      if (!strcmp(op, "placeholder") || !strcmp(op, "variable") || !strcmp(op, "constant"))
        continue;
      int first = 1;
      for (int j = 0; j < k; j++)
        if (!info[r]->step_recv[j] && info[r]->step_nodes[j] == node) first = 0;
      if (first) runs[node]++;
    }
    FG_CHECK(n_recv >= 1);
    FG_CHECK_INT(info[r]->device_arena_bytes[1 - r], 0);
  }
  int n_compute = 0;
  for (int k = 0; k < one->n_steps; k++) {
    FG_CHECK_INT(runs[one->step_nodes[k]], 1);
    runs[one->step_nodes[k]] = 0;
    n_compute++;
  }
  for (int id = 0; id < n_nodes; id++)
    if (runs[id]) FG_FAIL_AT("node %d has a step on a rank but none in the one-device plan", id);
  FG_CHECK(n_compute > 20);
  /* Rank 0's session made rank 1's: the plan cached for rank 0 is not
   * reused (it would run rank 0's nodes here). */
  FG_REQUIRE(fg_session_set_comm(s[0], h[1], st) == 0);
  fg_plan_info *again = fg_session_plan_info(s[0], feeds, 2, &fetch, 1, &target, 1, st);
  FG_REQUIRE(again);
  FG_CHECK_INT(again->n_steps, info[1]->n_steps);
  for (int k = 0; k < again->n_steps && k < info[1]->n_steps; k++)
    FG_CHECK_INT(again->step_nodes[k], info[1]->step_nodes[k]);
  fg_plan_info_free(again);
  for (int r = 0; r < 2; r++) {
    fg_plan_info_free(info[r]);
    fg_session_free(s[r]);
    fg_graph_free(g[r]);
    h[r]->ops->free(h[r]);
  }
  free(runs);
  fg_plan_info_free(one);
  fg_tensor_free(x);
  fg_tensor_free(y);
  fg_session_free(s1);
  fg_graph_free(g1);
  fg_status_free(st);
}

/* What cross-process graphs do not support yet is refused with the node
 * named, instead of running wrongly: a CUDA device (its nodes would run CPU
 * kernels), and all_reduce nodes (each rank would skip the others' and
 * leave its collective waiting for them). */
FG_TEST(dist_exec_cross_process_unsupported_refused, "dist,badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t two = 2;
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, &two);
  fg_set_device(g, fg_set_name(g, fg_relu(g, x), "r"), "rank:0/cuda:0");
  FG_CHECK(fg_session_new(g, NULL, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st),
                        "node 'r' (relu, on 'rank:0/cuda:0') of a cross-process graph (one placing "
                        "nodes on rank:R/ devices) runs on a CUDA device: model parallelism "
                        "across processes supports cpu:N devices only");
  fg_graph_free(g);
  g = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, "rank:0/cpu:0", "rank:1/cuda:0");
  FG_CHECK(fg_session_new(g, NULL, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "on 'rank:1/cuda:0') of a cross-process graph");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "runs on a CUDA device");
  /* fg_data_parallel refuses several replicas of a model split across
   * ranks in one graph (replicas = 1 is the hybrid form: test_dist_hybrid.c). */
  const char *batch[1] = {"x"};
  fg_graph_free(g);
  g = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, "rank:0/cpu:0", "rank:1/cpu:0");
  FG_CHECK(fg_data_parallel(g, 2, batch, 1, NULL, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st),
                        "fg_data_parallel: node 'dense1/w' is placed on 'rank:0/cpu:0' (model "
                        "parallelism across processes)");
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(dist_exec_cross_process_bad_setups, "dist,badinput") {
  fg_status *st = fg_status_new();
  /* No communicator: the session exists, a run is refused. */
  fg_graph *g = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, "rank:0/cpu:0", "rank:2/cpu:0");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  FG_CHECK_INT(fg_partition_num_ranks(fg_session_partition(s)), 3);
  double loss[1];
  FG_CHECK(dist_train(s, FG_F32, 1, 8, loss, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK(strstr(fg_status_message(st), "fg_session_set_comm") != NULL);
  FG_CHECK(fg_session_gather_variables(s, 0, st) != 0);
  /* Two ranks for a graph that names rank 2. */
  fg_comm *h[2];
  FG_REQUIRE(fg_comm_inproc_group(2, 1, h, st) == 0);
  FG_CHECK(fg_session_set_comm(s, h[0], st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK(strstr(fg_status_message(st), "rank:2/cpu:0") != NULL);
  FG_CHECK(strstr(fg_status_message(st), "2 ranks") != NULL);
  FG_CHECK(fg_session_gather_variables(NULL, 0, st) != 0);
  fg_session_free(s);
  fg_graph_free(g);
  /* A peer that never runs: the run ends with a deadline within the
   * communicator's timeout (1 s), at the first exchange: the processes'
   * comparison of their graphs, before any transfer. */
  g = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, "rank:0/cpu:0", "rank:1/cpu:0");
  s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s && fg_session_set_comm(s, h[0], st) == 0);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  FG_CHECK(dist_train(s, FG_F32, 1, 8, loss, st) != 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  FG_CHECK_INT(fg_status_code(st), FG_DEADLINE_EXCEEDED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st),
                        "comparing the graph across processes before the first run with the "
                        "communicator: in-process all_gather: rank 0 of 2 waited 1 s, only 1 "
                        "rank arrived");
  FG_CHECK(sec < 10);
  fg_session_free(s);
  fg_graph_free(g);
  h[0]->ops->free(h[0]);
  h[1]->ops->free(h[1]);
  fg_status_free(st);
}

/* A step that fails on one rank aborts the communicator: rank 0's one_hot
 * refuses index 9, and rank 1, waiting for its output with a 30 s timeout,
 * stops at once with FG_ABORTED naming rank 0 and the index. */
typedef struct xp_fail_arg {
  fg_comm *c;
  int rc;
  fg_code code;
  double sec;
  char err[1024];
} xp_fail_arg;

static void *xp_fail_thread(void *p) {
  xp_fail_arg *a = p;
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t two = 2;
  fg_output idx = fg_placeholder(g, "idx", FG_I32, 1, &two);
  fg_output oh = fg_one_hot(g, idx, 4, FG_F32);
  fg_set_device(g, oh, "rank:0/cpu:0");
  fg_output r = fg_reduce_sum(g, oh, NULL, 0, 0);
  fg_set_device(g, r, "rank:1/cpu:0");
  fg_set_name(g, r, "r");
  fg_session *s = fg_session_new(g, NULL, st);
  int32_t bad[2] = {1, 9};
  fg_tensor *it = fg_tensor_from_data(FG_I32, 1, &two, bad, sizeof bad, st);
  fg_feed feeds[1] = {{"idx", it}};
  const char *fetch = "r";
  fg_tensor *out = NULL;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  a->rc = !s || fg_session_set_comm(s, a->c, st) != 0 ||
          fg_session_run(s, feeds, 1, &fetch, 1, &out, NULL, 0, st) != 0;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  a->sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  a->code = fg_status_code(st);
  snprintf(a->err, sizeof a->err, "%s", fg_status_message(st));
  fg_tensor_free(out);
  fg_tensor_free(it);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
  return NULL;
}

FG_TEST(dist_exec_cross_process_failed_step_aborts_peers, "dist,badinput") {
  fg_comm *h[2];
  FG_REQUIRE(fg_comm_inproc_group(2, 30, h, NULL) == 0);
  xp_fail_arg a[2];
  pthread_t th[2];
  memset(a, 0, sizeof a);
  for (int r = 0; r < 2; r++) {
    a[r].c = h[r];
    pthread_create(&th[r], NULL, xp_fail_thread, &a[r]);
  }
  for (int r = 0; r < 2; r++)
    pthread_join(th[r], NULL);
  FG_CHECK_INT(a[0].rc, 1);
  FG_CHECK_INT(a[0].code, FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(a[0].err, "indices[1] = 9 is out of range");
  FG_CHECK_INT(a[1].rc, 1);
  FG_CHECK_INT(a[1].code, FG_ABORTED);
  FG_CHECK_STR_CONTAINS(a[1].err, "rank 0 failed: node '");
  FG_CHECK_STR_CONTAINS(a[1].err, "indices[1] = 9 is out of range");
  FG_CHECK(a[1].sec < 10);
  if (fgt_failures) fprintf(stderr, "rank 0: %s\nrank 1: %s\n", a[0].err, a[1].err);
  for (int r = 0; r < 2; r++)
    h[r]->ops->free(h[r]);
}
