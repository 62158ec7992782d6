/* Host steps: a session on cuda:N whose graph places nodes on cpu:N runs
 * those nodes on the host inside the GPU's plan (executor/dist/session_dist.c
 * host_steps, executor/cuda/staging.c fgc_run_staged). These cases need no
 * GPU: they check which nodes the dist layer marks for the host, what it
 * refuses, and that a GPU plan gives exactly those steps the CPU kernel.
 * The runs themselves are the gpu cases at the end, which skip without a
 * GPU.
 *
 * The binary links with --wrap=fg_cuda_device_count (tests/CMakeLists.txt):
 * the device checks see the GPUs a case asks for, and
 * nothing here starts the CUDA driver. */
#include <string.h>

#include "dist/comm/comm_inproc.h"
#include "executor/dist/exec.h"
#include "executor/plan.h"
#include "fgtest.h"
#include "graph/graph_internal.h"
#include "graph/op_table.h"
#include "test_dist_util.h"

/* The GPU count the library's device checks see: fake_gpus, or the
 * machine's for the gpu cases (-1). */
static int fake_gpus = 2;
int __real_fg_cuda_device_count(void);
int __wrap_fg_cuda_device_count(void);
int __wrap_fg_cuda_device_count(void) {
  return fake_gpus >= 0 ? fake_gpus : __real_fg_cuda_device_count();
}

/* The gpu cases run on the machine's devices, and skip visibly without. */
#define NEED_GPU()                                                                                 \
  do {                                                                                             \
    fake_gpus = -1;                                                                                \
    if (__real_fg_cuda_device_count() < 1) FG_SKIP_NO_GPU("no CUDA device (or no CUDA backend)");  \
  } while (0)

static int sync_on(const fg_graph *g, const char *device, fg_dist_session **ds, fg_status *st) {
  fg_session_options o;
  fg_session_options_init(&o);
  o.device = device;
  o.num_threads = 1;
  return fg_dist_session_sync(g, ds, &o, st);
}

/* The apply_* node whose variable (input 0) is the node named `var`. */
static int update_of(const fg_graph *g, const char *var) {
  int v = fg_graph_find(g, var);
  for (int id = 0; id < g->n_nodes; id++)
    if (fg_op_table[g->nodes[id].op].mutable_inputs && g->nodes[id].inputs[0].node == v) return id;
  return -1;
}

/* The digits MLP with its first layer on cpu:0 and the others on cuda:0,
 * in a cuda:0 session: that layer, its backward pass (colocated with it)
 * and its variables' updates are host nodes; the rest runs on the GPU.
 * Exactly the nodes the partition puts on cpu:0 are marked. (Layers left
 * unplaced would follow their first input onto cpu:0: placement rule 2.) */
FG_TEST(host_steps_mark_the_cpu_placed_nodes, "dist") {
  fake_gpus = 2;
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, "cpu:0", "cuda:0");
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  fg_dist_session *ds = NULL;
  FG_REQUIRE(sync_on(g, "cuda:0", &ds, st) == 0);
  const unsigned char *host = fg_dist_session_host_nodes(ds);
  FG_REQUIRE(host != NULL);
  const fg_partition *p = fg_dist_session_partition(ds);
  FG_REQUIRE(fg_partition_num_devices(p) == 2);
  /* Devices sort cpu before cuda. */
  FG_CHECK_INT(fg_partition_device(p, 0).kind, FG_DEVICE_CPU);
  FG_CHECK_INT(fg_partition_device(p, 1).kind, FG_DEVICE_CUDA);
  int marked = 0;
  for (int id = 0; id < g->n_nodes; id++) {
    FG_CHECK_INT(host[id], fg_partition_node_device(p, id) == 0);
    marked += host[id];
  }
  FG_CHECK(marked >= 8); /* forward, backward and updates of dense1 */
  FG_CHECK_INT(host[fg_graph_find(g, "dense1/w")], 1);
  FG_CHECK_INT(host[update_of(g, "dense1/w")], 1);
  FG_CHECK_INT(host[update_of(g, "dense1/b")], 1);
  FG_CHECK_INT(host[update_of(g, "dense3/w")], 0);
  FG_CHECK_INT(host[fg_graph_find(g, "loss")], 0);
  /* Without a node on the CPU there are none. */
  fg_graph *plain = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, NULL, NULL);
  fg_dist_session *ds2 = NULL;
  FG_REQUIRE(sync_on(plain, "cuda:0", &ds2, st) == 0);
  FG_CHECK(fg_dist_session_host_nodes(ds2) == NULL);
  fg_dist_session_free(ds2);
  /* A CPU session runs nothing on a GPU, and says how to get this. */
  FG_CHECK(fg_session_new(g, NULL, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "run the session on 'cuda:0'");
  fg_dist_session_free(ds);
  fg_graph_free(plain);
  fg_graph_free(g);
  fg_status_free(st);
}

/* What host steps do not cover is refused at session creation with
 * FG_UNIMPLEMENTED naming a node and the way out: two GPUs in one graph,
 * collectives (data parallelism) and an attached communicator. */
FG_TEST(host_steps_refusals, "dist,badinput") {
  fake_gpus = 2;
  fg_status *st = fg_status_new();
  /* Layer 1 on cuda:1 in a session on cuda:0 (the session checks devices
   * first: this reaches the dist layer only on a machine with 2 GPUs). */
  fg_graph *g = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, "cuda:1", NULL);
  fg_dist_session *ds = NULL;
  FG_CHECK(sync_on(g, "cuda:0", &ds, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "two CUDA devices (cuda:0 and cuda:1)");
  fg_graph_free(g);
  /* Data parallelism: all_reduce nodes. */
  fg_graph *base = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, "cpu:0", "cuda:0");
  const char *batch[2] = {"x", "y"};
  fg_graph *dp = fg_data_parallel(base, 1, batch, 2, NULL, st);
  FG_REQUIRE(dp);
  FG_CHECK(sync_on(dp, "cuda:0", &ds, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "is placed on 'cpu:0' in a session on 'cuda:0'");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "all_reduce");
  FG_CHECK(ds == NULL);
  fg_graph_free(dp);
  /* A communicator attached: the state before stays. */
  FG_REQUIRE(sync_on(base, "cuda:0", &ds, st) == 0);
  fg_comm *h[2];
  FG_REQUIRE(fg_comm_inproc_group(2, 1.0, h, st) == 0);
  fg_session_options o;
  fg_session_options_init(&o);
  o.device = "cuda:0";
  o.num_threads = 1;
  FG_CHECK(fg_dist_session_set_comm(base, &ds, h[0], 0, &o, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "a communicator is attached");
  FG_CHECK(fg_dist_session_host_nodes(ds) != NULL);
  h[0]->ops->free(h[0]);
  h[1]->ops->free(h[1]);
  fg_dist_session_free(ds);
  fg_graph_free(base);
  fg_status_free(st);
}

/* A GPU session whose graph places every node on CPU devices is refused
 * (unplaced nodes would run on the GPU: only a mistake asks for that), and
 * so is a cross-process graph reaching the GPU through a default-placed
 * source (an unused constant goes to rank 0's cuda:0). */
FG_TEST(host_steps_refuse_all_cpu_and_cross_process, "dist,badinput") {
  fake_gpus = 2;
  fg_status *st = fg_status_new();
  /* x -> relu -> exp, with devices dev0 and dev1; x follows relu. */
  const char *devs[2][2] = {{"cpu:0", "cpu:1"}, {"rank:0/cpu:0", "rank:1/cpu:0"}};
  for (int k = 0; k < 2; k++) {
    fg_graph *g = fg_graph_new();
    int64_t d[1] = {4};
    fg_output x = fg_placeholder(g, "x", FG_F32, 1, d);
    fg_output r = fg_set_device(g, fg_relu(g, x), devs[k][0]);
    fg_set_name(g, fg_set_device(g, fg_exp(g, r), devs[k][1]), "out");
    if (k == 1) {
      fg_tensor *one = fg_tensor_new(FG_F32, 1, d, NULL);
      memset(fg_tensor_data(one), 0, fg_tensor_num_bytes(one));
      fg_constant(g, "unused", one);
      fg_tensor_free(one);
    }
    FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
    fg_dist_session *ds = NULL;
    FG_CHECK(sync_on(g, "cuda:0", &ds, st) != 0);
    FG_CHECK(ds == NULL);
    if (k == 0) {
      FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
      FG_CHECK_STR_CONTAINS(fg_status_message(st),
                            "the session runs on 'cuda:0' but the graph places every node on "
                            "CPU devices");
    } else {
      FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
      FG_CHECK_STR_CONTAINS(fg_status_message(st),
                            "node 'unused' of a cross-process graph (one placing nodes on "
                            "rank:R/ devices) is on 'rank:0/cuda:0'");
    }
    fg_dist_session_free(ds);
    fg_graph_free(g);
  }
  fg_status_free(st);
}

/* A GPU plan gives a host node's step the CPU kernel and every other step
 * the CUDA one: x [4, 3] -> matmul with a constant (GPU) -> softmax on
 * cpu:0 (host) -> relu (GPU, placed). Planning touches no device. */
FG_TEST(host_steps_plan_kernels, "dist") {
  fake_gpus = 2;
  if (!fg_cuda_kernel("matmul", FG_F32)) FG_SKIP_NO_GPU("this build has no CUDA kernels");
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {4, 3}, wd[2] = {3, 5};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_tensor *wt = fg_tensor_new(FG_F32, 2, wd, NULL);
  memset(fg_tensor_data(wt), 0, fg_tensor_num_bytes(wt));
  fg_output mm = fg_set_name(g, fg_matmul(g, x, fg_constant(g, "w", wt), 0, 0), "mm");
  fg_output sm = fg_set_device(g, fg_set_name(g, fg_softmax(g, mm, 1), "sm"), "cpu:0");
  fg_output out = fg_set_device(g, fg_set_name(g, fg_relu(g, sm), "out"), "cuda:0");
  (void)out;
  fg_tensor_free(wt);
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  fg_dist_session *ds = NULL;
  FG_REQUIRE(sync_on(g, "cuda:0", &ds, st) == 0);
  const unsigned char *host = fg_dist_session_host_nodes(ds);
  FG_REQUIRE(host);
  FG_CHECK_INT(host[fg_graph_find(g, "sm")], 1);
  FG_CHECK_INT(host[fg_graph_find(g, "mm")], 0);
  FG_CHECK_INT(host[fg_graph_find(g, "out")], 0);
  fg_tensor *xt = fg_tensor_new(FG_F32, 2, xd, NULL);
  int feed_node = fg_graph_find(g, "x");
  const fg_tensor *feeds[1] = {xt};
  fg_output fetch = fg_graph_find_output(g, "out");
  const char *fetch_name = "out";
  fg_plan_request req;
  memset(&req, 0, sizeof req);
  req.feed_nodes = &feed_node;
  req.feed_tensors = feeds;
  req.n_feeds = 1;
  req.fetches = &fetch;
  req.fetch_names = &fetch_name;
  req.n_fetches = 1;
  req.threads = 1;
  req.cuda = 1;
  req.host_nodes = host;
  fg_plan *plan = fg_plan_build(g, &req, NULL, NULL, st);
  FG_REQUIRE(plan);
  int seen = 0;
  for (int si = 0; si < plan->n_steps; si++) {
    const fg_step *s = &plan->steps[si];
    const char *op = fg_op_table[g->nodes[s->node].op].name;
    FG_CHECK_INT(s->host, host[s->node]);
    FG_CHECK(s->fn == (s->host ? fg_cpu_kernel(op, FG_F32) : fg_cuda_kernel(op, FG_F32)));
    seen += s->host;
  }
  FG_CHECK_INT(seen, 1);
  fg_plan_free(plan);
  fg_tensor_free(xt);
  fg_dist_session_free(ds);
  fg_graph_free(g);
  fg_status_free(st);
}

/* Trains the MLP for 5 steps with its first layer on the host (cpu:0) and
 * the rest on cuda:0, against the same graph all on the CPU: the same
 * losses and variables within 1e-4 (the GPU's kernels round differently
 * from the CPU's: test_cuda_session.c's tolerance for training). SGD
 * writes one variable per update back from the host, Adam three (the
 * variable and both moments). */
/* The MLP with layer 1 on cpu:0 and the rest on cuda:0 in a cuda:0
 * session (m), and the same graph all on the CPU (c). */
typedef struct two_sessions {
  fg_graph *gm, *gc;
  fg_session *sm, *sc;
} two_sessions;

static int open_two(two_sessions *t, fg_optimizer_kind opt, double lr, fg_status *st) {
  t->gm = dist_mlp(FG_F32, opt, lr, "cpu:0", "cuda:0");
  t->gc = dist_mlp(FG_F32, opt, lr, NULL, NULL);
  fg_session_options o;
  fg_session_options_init(&o);
  o.device = "cuda:0";
  t->sm = fg_session_new(t->gm, &o, st);
  t->sc = t->sm ? fg_session_new(t->gc, NULL, st) : NULL;
  return t->sm && t->sc ? 0 : -1;
}

static void close_two(two_sessions *t) {
  fg_session_free(t->sm);
  fg_session_free(t->sc);
  fg_graph_free(t->gm);
  fg_graph_free(t->gc);
}

static void train_like_cpu(fg_optimizer_kind opt, double lr) {
  NEED_GPU();
  fg_status *st = fg_status_new();
  two_sessions t;
  FG_REQUIRE(open_two(&t, opt, lr, st) == 0);
  double lm[5], lc[5];
  FG_REQUIRE(dist_train(t.sm, FG_F32, 5, 64, lm, st) == 0);
  FG_REQUIRE(dist_train(t.sc, FG_F32, 5, 64, lc, st) == 0);
  for (int k = 0; k < 5; k++)
    FG_CHECK(fabs(lm[k] - lc[k]) <= 1e-4 * fabs(lc[k]));
  FG_CHECK(lm[4] < lm[0]);
  static const char *const vars[] = {"dense1/w", "dense1/b", "dense2/w", "dense3/b"};
  for (int i = 0; i < 4; i++) {
    double d = dist_var_diff(t.sm, vars[i], t.sc, vars[i]);
    FG_CHECK(d >= 0 && d <= 1e-4);
  }
  close_two(&t);
  fg_status_free(st);
}

FG_TEST(host_steps_sgd_trains_like_cpu, "gpu") { train_like_cpu(FG_OPTIMIZER_SGD, 0.1); }
FG_TEST(host_steps_adam_trains_like_cpu, "gpu") { train_like_cpu(FG_OPTIMIZER_ADAM, 2e-3); }

/* A profiled run names each node's device as the partition does: the host
 * steps cpu:0 (device 0), the GPU's cuda:0 (device 1). A host node's
 * output is fetched like any other: layer 1's relu, against a CPU
 * session's. */
FG_TEST(host_steps_profile_devices_and_fetch, "gpu") {
  NEED_GPU();
  fg_status *st = fg_status_new();
  two_sessions two;
  FG_REQUIRE(open_two(&two, FG_OPTIMIZER_SGD, 0.1, st) == 0);
  fg_graph *g = two.gm;
  fg_session *s = two.sm, *sc = two.sc;
  const fg_partition *p = fg_session_partition(s);
  const char *relu = NULL;
  for (int id = 0; id < g->n_nodes && !relu; id++)
    if (g->nodes[id].op == FG_OP_RELU && fg_partition_node_device(p, id) == 0)
      relu = g->nodes[id].name;
  FG_REQUIRE(relu);
  fg_tensor *x, *y;
  FG_REQUIRE(dist_batch(FG_F32, 0, 16, &x, &y) == 0);
  fg_feed feeds[2] = {{"x", x}, {"y", y}};
  const char *target = "train", *fetch[2] = {"loss", relu};
  fg_run_options ro = {1};
  fg_run_metadata *md = NULL;
  fg_tensor *out[2] = {NULL, NULL}, *ref[2] = {NULL, NULL};
  FG_REQUIRE(fg_session_run_ex(s, feeds, 2, fetch, 2, out, &target, 1, &ro, &md, st) == 0);
  FG_REQUIRE(fg_session_run(sc, feeds, 2, fetch, 2, ref, &target, 1, st) == 0);
  int on[2] = {0, 0};
  for (int i = 0; i < md->n_nodes; i++) {
    const fg_node_timing *t = &md->nodes[i];
    FG_CHECK_INT(t->device, fg_partition_node_device(p, t->node));
    if (t->device >= 0 && t->device < 2) on[t->device]++;
  }
  FG_CHECK(on[0] > 0 && on[1] > 0);
  /* The plan's view agrees: steps on the partition's devices, the one
   * arena the GPU's. */
  fg_plan_info *info = fg_session_plan_info(s, feeds, 2, fetch, 2, &target, 1, st);
  FG_REQUIRE(info);
  FG_CHECK_INT(info->n_devices, 2);
  FG_CHECK(info->device_arena_bytes[0] == 0 && info->device_arena_bytes[1] == info->arena_bytes);
  for (int si = 0; si < info->n_steps; si++)
    FG_CHECK_INT(info->step_devices[si], fg_partition_node_device(p, info->step_nodes[si]));
  for (int k = 0; k < info->n_tensors; k++)
    FG_CHECK(info->tensors[k].device == -1 || info->tensors[k].device == 1);
  fg_plan_info_free(info);
  FG_REQUIRE(fg_tensor_num_elements(out[1]) == 16 * 128);
  const float *a = fg_tensor_data(out[1]), *b = fg_tensor_data(ref[1]);
  for (int i = 0; i < 16 * 128; i++)
    FG_CHECK(fabsf(a[i] - b[i]) <= 1e-5f * (1 + fabsf(b[i])));
  for (int k = 0; k < 2; k++) {
    fg_tensor_free(out[k]);
    fg_tensor_free(ref[k]);
  }
  fg_run_metadata_free(md);
  fg_tensor_free(x);
  fg_tensor_free(y);
  close_two(&two);
  fg_status_free(st);
}

/* A host step's kernel failing on the data it is given (an index out of
 * range) fails the run with the node and the kernel's words, with and
 * without check_numerics, and the runs after it give the right values
 * again. lookup = gather(params, idx) on cpu:0, out =
 * relu(lookup) on cuda:0, params[i][j] = 3i + j - 6.5, so out[r][j] =
 * max(0, 3 idx[r] + j - 6.5), worked out here by hand. */
static fg_graph *lookup_graph(void) {
  fg_graph *g = fg_graph_new();
  int64_t pd[2] = {5, 3}, id[1] = {4};
  fg_tensor *pt = fg_tensor_new(FG_F32, 2, pd, NULL);
  float *p = fg_tensor_data(pt);
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 3; j++)
      p[i * 3 + j] = (float)(3 * i + j) - 6.5f;
  fg_output idx = fg_placeholder(g, "idx", FG_I32, 1, id);
  fg_output lk = fg_set_device(
      g, fg_set_name(g, fg_gather(g, fg_constant(g, "params", pt), idx), "lookup"), "cpu:0");
  fg_set_device(g, fg_set_name(g, fg_relu(g, lk), "out"), "cuda:0");
  fg_tensor_free(pt);
  return g;
}

/* One run of `s` with idx = v[0..3]: 0 with out[] checked against the
 * formula above, or -1 with st set. */
static int lookup_run(fg_session *s, const int32_t *v, fg_status *st) {
  int64_t id[1] = {4};
  fg_tensor *it = fg_tensor_new(FG_I32, 1, id, NULL);
  memcpy(fg_tensor_data(it), v, 4 * sizeof *v);
  fg_feed feed = {"idx", it};
  const char *fetch = "out";
  fg_tensor *out = NULL;
  int rc = fg_session_run(s, &feed, 1, &fetch, 1, &out, NULL, 0, st);
  if (rc == 0) {
    FG_CHECK_INT(fg_tensor_num_elements(out), 12);
    const float *o = fg_tensor_data(out);
    for (int r = 0; r < 4; r++)
      for (int j = 0; j < 3; j++) {
        float want = (float)(3 * v[r] + j) - 6.5f;
        FG_CHECK(o[r * 3 + j] == (want > 0 ? want : 0));
      }
  }
  fg_tensor_free(out);
  fg_tensor_free(it);
  return rc;
}

FG_TEST(host_steps_kernel_failure_named_then_clean_runs, "gpu,badinput") {
  NEED_GPU();
  fg_status *st = fg_status_new();
  for (int numerics = 0; numerics < 2; numerics++) {
    fg_graph *g = lookup_graph();
    FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
    fg_session_options o;
    fg_session_options_init(&o);
    o.device = "cuda:0";
    o.check_numerics = numerics;
    fg_session *s = fg_session_new(g, &o, st);
    FG_REQUIRE(s);
    static const int32_t good[4] = {0, 4, 2, 1}, bad[4] = {0, 7, 2, 1}, again[4] = {3, 3, 0, 4};
    FG_CHECK(lookup_run(s, good, st) == 0);
    FG_CHECK(lookup_run(s, bad, st) != 0);
    FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), "lookup");
    FG_CHECK_STR_CONTAINS(fg_status_message(st), "indices[1] = 7 is out of range [0, 5)");
    for (int k = 0; k < 3; k++)
      FG_CHECK(lookup_run(s, k == 1 ? good : again, st) == 0);
    fg_session_free(s);
    fg_graph_free(g);
  }
  fg_status_free(st);
}
