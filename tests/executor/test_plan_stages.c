/* The stages of plan building (executor/plan_stages.h), each run on its
 * own: resolve's slots, steps and transfers; infer's shapes, FLOPs and size
 * limits; select's backend table (executor/backend.h) and its refusals;
 * and the schedule's edges and lanes. Expected values are derived by hand
 * from the small graphs below. */
#include <flowgraph/flowgraph.h>
#include <stdlib.h>
#include <string.h>

#include "executor/dist/exec.h"
#include "executor/backend.h"
#include "executor/plan_stages.h"
#include "fgtest.h"
#include "graph/graph_internal.h"
#include "graph/op_table.h"

/* x [2,3] (fed) -> mm = x w (w a constant [3,4]) -> r = relu(mm), fetched;
 * unused = exp(x) is not needed. Node ids 0..4 in that order. */
typedef struct small {
  fg_graph *g;
  fg_tensor *xt;
  int x, w, mm, r, unused;
  int feed_node;
  const fg_tensor *feeds[1];
  fg_output fetch;
  const char *fetch_name;
  fg_plan_request req;
} small;

static void small_init(small *s, int64_t x_cols) {
  memset(s, 0, sizeof *s);
  s->g = fg_graph_new();
  int64_t xd[2] = {2, 3}, wd[2] = {3, 4};
  fg_tensor *wt = fg_tensor_new(FG_F32, 2, wd, NULL);
  memset(fg_tensor_data(wt), 0, fg_tensor_num_bytes(wt));
  fg_output x = fg_placeholder(s->g, "x", FG_F32, 2, xd);
  fg_output w = fg_constant(s->g, "w", wt);
  fg_output mm = fg_set_name(s->g, fg_matmul(s->g, x, w, 0, 0), "mm");
  fg_output r = fg_set_name(s->g, fg_relu(s->g, mm), "r");
  fg_output unused = fg_set_name(s->g, fg_exp(s->g, x), "unused");
  fg_tensor_free(wt);
  s->x = x.node, s->w = w.node, s->mm = mm.node, s->r = r.node, s->unused = unused.node;
  /* The fed tensor may disagree with the placeholder: the plan builder
   * sees only the fed shapes (the session checks them against the
   * placeholder first). */
  int64_t fd[2] = {2, x_cols};
  s->xt = fg_tensor_new(FG_F32, 2, fd, NULL);
  s->feed_node = s->x;
  s->feeds[0] = s->xt;
  s->fetch = r;
  s->fetch_name = "r";
  s->req.feed_nodes = &s->feed_node;
  s->req.feed_tensors = s->feeds;
  s->req.n_feeds = 1;
  s->req.fetches = &s->fetch;
  s->req.fetch_names = &s->fetch_name;
  s->req.n_fetches = 1;
  s->req.threads = 1;
}

static void small_free(small *s) {
  fg_tensor_free(s->xt);
  fg_graph_free(s->g);
}

static void builder_done(fg_plan_builder *b) {
  fg_plan *plan = b->plan;
  fg_plan_builder_free(b);
  fg_plan_free(plan);
}

/* Resolve on the small graph: slots in node order for the needed nodes
 * (x 0, w 1, mm 2, r 3; unused none), one step per op node in the serial
 * order (mm, then r), sources bound, r's slot fetched. */
FG_TEST(plan_stages_resolve_slots_and_steps, "executor") {
  small s;
  small_init(&s, 3);
  fg_status *st = fg_status_new();
  fg_plan_builder b;
  FG_REQUIRE(fg_plan_builder_init(&b, s.g, &s.req, NULL, NULL, st) == 0);
  FG_REQUIRE(fg_plan_resolve(&b, st) == 0);
  const fg_plan *p = b.plan;
  FG_CHECK_INT(p->slot_of_output[s.x], 0);
  FG_CHECK_INT(p->slot_of_output[s.w], 1);
  FG_CHECK_INT(p->slot_of_output[s.mm], 2);
  FG_CHECK_INT(p->slot_of_output[s.r], 3);
  FG_CHECK_INT(p->slot_of_output[s.unused], -1);
  FG_CHECK_INT(b.needed[s.unused], 0);
  FG_CHECK_INT(p->n_slots, 4);
  FG_REQUIRE(p->n_steps == 2);
  FG_CHECK_INT(p->steps[0].node, s.mm);
  FG_REQUIRE(p->steps[0].n_in == 2 && p->steps[0].n_out == 1);
  FG_CHECK_INT(p->steps[0].in_slots[0], 0);
  FG_CHECK_INT(p->steps[0].in_slots[1], 1);
  FG_CHECK_INT(p->steps[0].out_slots[0], 2);
  FG_CHECK_INT(p->steps[1].node, s.r);
  FG_REQUIRE(p->steps[1].n_in == 1);
  FG_CHECK_INT(p->steps[1].in_slots[0], 2);
  FG_CHECK_INT(p->steps[1].out_slots[0], 3);
  FG_CHECK_INT(p->slot_kind[0], FG_SLOT_FEED);
  FG_CHECK_INT(p->slot_kind[1], FG_SLOT_CONSTANT);
  FG_CHECK(p->slots[0].data == fg_tensor_data(s.xt));
  FG_CHECK_INT(p->slots[1].rank, 2);
  FG_CHECK_INT(p->slots[1].dims[0], 3);
  FG_CHECK_INT(p->slots[1].dims[1], 4);
  const int want_step[4] = {-1, -1, 0, 1};
  for (int k = 0; k < 4; k++)
    FG_CHECK_INT(p->slot_step[k], want_step[k]);
  FG_REQUIRE(b.n_seq == 2);
  FG_CHECK_INT(b.seq[0], 0);
  FG_CHECK_INT(b.seq[1], 1);
  FG_CHECK_INT(b.fetched[3], 1);
  FG_CHECK_INT(b.fetched[2], 0);
  builder_done(&b);
  /* No feed for x: refused, naming the placeholder and what needs it. */
  s.req.n_feeds = 0;
  FG_REQUIRE(fg_plan_builder_init(&b, s.g, &s.req, NULL, NULL, st) == 0);
  FG_CHECK(fg_plan_resolve(&b, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st),
                        "placeholder 'x' (f32 [2,3]) is needed by 'r' but was not fed");
  builder_done(&b);
  fg_status_free(st);
  small_free(&s);
}

/* Two devices of one process: x, a = relu(x) on device 0; b = exp(a) and
 * c = a + b on device 1. Node slots x 0, a 1, b 2, c 3; a crosses to
 * device 1 once, as a copy step into slot 4 (the first after the nodes'),
 * which both b and c read. Steps: 0 a (dev 0), 1 the copy (dev 1), 2 b,
 * 3 c. Infer gives slot 4 a's shape. */
FG_TEST(plan_stages_resolve_transfers, "executor,dist") {
  fg_graph *g = fg_graph_new();
  int64_t xd[1] = {3};
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, xd);
  fg_output a = fg_relu(g, x);
  fg_output bb = fg_exp(g, a);
  fg_output c = fg_add(g, a, bb);
  int node_dev[4] = {0, 0, 1, 1};
  fg_dist_exec dx;
  memset(&dx, 0, sizeof dx);
  dx.n_dev = 2;
  dx.node_dev = node_dev;
  dx.my_rank = -1;
  dx.n_local = 2;
  fg_tensor *xt = fg_tensor_new(FG_F32, 1, xd, NULL);
  const fg_tensor *feeds[1] = {xt};
  const char *fetch_name = "c";
  fg_plan_request req;
  memset(&req, 0, sizeof req);
  req.feed_nodes = &x.node;
  req.feed_tensors = feeds;
  req.n_feeds = 1;
  req.fetches = &c;
  req.fetch_names = &fetch_name;
  req.n_fetches = 1;
  req.threads = 1;
  req.dist = &dx;
  fg_status *st = fg_status_new();
  fg_plan_builder b;
  FG_REQUIRE(fg_plan_builder_init(&b, g, &req, NULL, NULL, st) == 0);
  FG_REQUIRE(fg_plan_resolve(&b, st) == 0);
  const fg_plan *p = b.plan;
  FG_CHECK_INT(p->n_slots, 5);
  FG_REQUIRE(p->n_steps == 4);
  const int want_node[4] = {a.node, a.node, bb.node, c.node};
  const int want_xfer[4] = {FG_XFER_NONE, FG_XFER_COPY, FG_XFER_NONE, FG_XFER_NONE};
  const int want_dev[4] = {0, 1, 1, 1};
  for (int si = 0; si < 4; si++) {
    FG_CHECK_INT(p->steps[si].node, want_node[si]);
    FG_CHECK_INT(p->steps[si].xfer, want_xfer[si]);
    FG_CHECK_INT(p->step_dev[si], want_dev[si]);
  }
  FG_CHECK_INT(p->steps[0].in_slots[0], 0);
  FG_CHECK_INT(p->steps[0].out_slots[0], 1);
  FG_CHECK_INT(p->steps[1].in_slots[0], 1);
  FG_CHECK_INT(p->steps[1].out_slots[0], 4);
  FG_CHECK_INT(p->steps[2].in_slots[0], 4);
  FG_CHECK_INT(p->steps[2].out_slots[0], 2);
  FG_REQUIRE(p->steps[3].n_in == 2);
  FG_CHECK_INT(p->steps[3].in_slots[0], 4);
  FG_CHECK_INT(p->steps[3].in_slots[1], 2);
  FG_CHECK_INT(p->steps[3].out_slots[0], 3);
  const int want_slot_dev[5] = {-1, 0, 1, 1, 1};
  for (int k = 0; k < 5; k++)
    FG_CHECK_INT(p->slot_dev[k], want_slot_dev[k]);
  FG_CHECK_INT(p->slot_step[4], 1);
  FG_REQUIRE(fg_plan_infer(&b, st) == 0);
  FG_CHECK_INT(p->slots[4].dtype, FG_F32);
  FG_CHECK_INT(p->slots[4].rank, 1);
  FG_CHECK_INT(p->slots[4].dims[0], 3);
  builder_done(&b);
  fg_status_free(st);
  fg_tensor_free(xt);
  fg_graph_free(g);
}

/* Infer on the small graph: mm and r are f32 [2, 4]; mm costs 2 * 2 * 4 *
 * 3 = 48 FLOPs. A fed x of [2, 5] cannot multiply w [3, 4]: refused "with
 * the fed shapes". A limit of 16 bytes is below mm's 2 * 4 * 4 = 32. */
FG_TEST(plan_stages_infer_shapes_and_limits, "executor,badinput") {
  small s;
  small_init(&s, 3);
  fg_status *st = fg_status_new();
  fg_plan_builder b;
  FG_REQUIRE(fg_plan_builder_init(&b, s.g, &s.req, NULL, NULL, st) == 0);
  FG_REQUIRE(fg_plan_resolve(&b, st) == 0);
  FG_REQUIRE(fg_plan_infer(&b, st) == 0);
  const fg_plan *p = b.plan;
  for (int k = 2; k < 4; k++) {
    FG_CHECK_INT(p->slots[k].dtype, FG_F32);
    FG_CHECK_INT(p->slots[k].rank, 2);
    FG_CHECK_INT(p->slots[k].dims[0], 2);
    FG_CHECK_INT(p->slots[k].dims[1], 4);
    FG_CHECK(p->slots[k].data == NULL);
  }
  FG_CHECK_INT(p->steps[0].flops, 48);
  FG_CHECK_INT(p->flops, p->steps[0].flops + p->steps[1].flops);
  builder_done(&b);
  small_free(&s);

  small_init(&s, 5);
  FG_REQUIRE(fg_plan_builder_init(&b, s.g, &s.req, NULL, NULL, st) == 0);
  FG_REQUIRE(fg_plan_resolve(&b, st) == 0);
  FG_CHECK(fg_plan_infer(&b, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'mm'");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "(with the fed shapes)");
  builder_done(&b);
  small_free(&s);

  small_init(&s, 3);
  s.req.max_memory_bytes = 16;
  FG_REQUIRE(fg_plan_builder_init(&b, s.g, &s.req, NULL, NULL, st) == 0);
  FG_REQUIRE(fg_plan_resolve(&b, st) == 0);
  FG_CHECK(fg_plan_infer(&b, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_RESOURCE_EXHAUSTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st),
                        "node 'mm' (matmul) output 0 needs 32 bytes, over the session's limit "
                        "of 16 bytes (max_memory_bytes)");
  builder_done(&b);
  fg_status_free(st);
  small_free(&s);
}

/* A backend for the tests: runs every node, has the CPU's kernels but no
 * matmul. */
static int test_runs(const fg_backend_query *q) {
  (void)q;
  return 1;
}
static fg_kernel_fn test_kernel(const fg_backend_query *q) {
  return q->node->op == FG_OP_MATMUL ? NULL : fg_cpu_kernel(q->def->name, q->key);
}
static int test_supports(const fg_backend_query *q, char *why, size_t why_size) {
  (void)why, (void)why_size;
  return test_kernel(q) != NULL;
}
static const fg_backend test_backend = {"TEST",        "the test device", 0,   test_runs,
                                        test_supports, test_kernel,       NULL};
static int none_runs(const fg_backend_query *q) {
  (void)q;
  return 0;
}
static const fg_backend none_backend = {"NONE",        "nowhere",   0,   none_runs,
                                        test_supports, test_kernel, NULL};

/* Resolve, infer and select on s with the given table (NULL: the real
 * one); the select stage's result (-2, a failed case, when an earlier
 * stage fails). */
static int select_with(small *s, const fg_backend *const *table, fg_plan_builder *b,
                       fg_status *st) {
  if (fg_plan_builder_init(b, s->g, &s->req, NULL, NULL, st) != 0) {
    FG_FAIL_AT("builder: %s", fg_status_message(st));
    return -2;
  }
  if (table) b->backends = table;
  if (fg_plan_resolve(b, st) != 0 || fg_plan_infer(b, st) != 0) {
    FG_FAIL_AT("resolve or infer: %s", fg_status_message(st));
    return -2;
  }
  return fg_plan_select(b, st);
}

/* Select asks the table: a node its backend has no kernel for is refused
 * with FG_UNIMPLEMENTED naming the node, op, device and dtype (the node's
 * own device when it names one); a node no backend runs is refused too.
 * With a kernel, each step gets its backend's. */
FG_TEST(plan_stages_select_refuses_missing_kernel, "executor,badinput") {
  small s;
  small_init(&s, 3);
  fg_status *st = fg_status_new();
  fg_plan_builder b;
  const fg_backend *const test_table[] = {&test_backend, NULL};
  FG_CHECK_INT(select_with(&s, test_table, &b, st), -1);
  FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
  FG_CHECK_STR(fg_status_message(st),
               "node 'mm' (matmul) on the test device: no TEST kernel for dtype f32");
  builder_done(&b);
  fg_set_device(s.g, (fg_output){s.mm, 0}, "cpu:0");
  FG_CHECK_INT(select_with(&s, test_table, &b, st), -1);
  FG_CHECK_STR(fg_status_message(st),
               "node 'mm' (matmul) on 'cpu:0': no TEST kernel for dtype f32");
  builder_done(&b);
  const fg_backend *const none_table[] = {&none_backend, NULL};
  FG_CHECK_INT(select_with(&s, none_table, &b, st), -1);
  FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
  FG_CHECK_STR(fg_status_message(st), "node 'mm' (matmul): no backend of this session runs it");
  builder_done(&b);
  /* The real table, a CPU plan: the CPU kernels. */
  small_free(&s);
  small_init(&s, 3);
  FG_REQUIRE(select_with(&s, NULL, &b, st) == 0);
  FG_CHECK(b.plan->steps[0].fn == fg_cpu_kernel("matmul", FG_F32));
  FG_CHECK(b.plan->steps[1].fn == fg_cpu_kernel("relu", FG_F32));
  FG_CHECK_INT(b.plan->steps[0].host, 0);
  builder_done(&b);
  /* A GPU plan (planning touches no device): the CUDA kernels, or, in a
   * build without them, the refusal of the first step. */
  s.req.cuda = 1;
  fg_kernel_fn cuda_mm = fg_cuda_kernel("matmul", FG_F32);
  int rc = select_with(&s, NULL, &b, st);
  if (cuda_mm) {
    FG_REQUIRE(rc == 0);
    FG_CHECK(b.plan->steps[0].fn == cuda_mm);
    FG_CHECK(b.plan->steps[1].fn == fg_cuda_kernel("relu", FG_F32));
  } else {
    FG_CHECK_INT(rc, -1);
    FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
    FG_CHECK_STR(fg_status_message(st),
                 "node 'mm' (matmul) on the session's GPU: no CUDA kernel for dtype f32");
  }
  builder_done(&b);
  fg_status_free(st);
  small_free(&s);
}

static const fg_backend *row_named(const char *name, int host) {
  for (int i = 0; fg_backends[i]; i++)
    if (!strcmp(fg_backends[i]->name, name) && fg_backends[i]->host == host) return fg_backends[i];
  return NULL;
}

/* The rows: a CPU plan's nodes are the CPU's; a GPU plan's are CUDA's but
 * for its host nodes (CPU kernels, step->host). CUDA's all_reduce is the
 * CPU kernel, which the CUDA executor stages. The fused updates have no
 * CUDA kernel: the CUDA row refuses sufficient_factor_apply_sgd always, and
 * all_reduce_apply_sgd when a communicator is attached; without one (a
 * group of one) it runs the plain apply_sgd kernel. */
FG_TEST(plan_stages_backend_rows, "executor,dist") {
  fg_graph *g = fg_graph_new();
  int64_t vd[2] = {2, 3}, ad[2] = {4, 2}, bd[2] = {4, 3};
  fg_tensor *vt = fg_tensor_new(FG_F32, 2, vd, NULL), *at = fg_tensor_new(FG_F32, 2, ad, NULL),
            *bt = fg_tensor_new(FG_F32, 2, bd, NULL);
  memset(fg_tensor_data(vt), 0, fg_tensor_num_bytes(vt));
  memset(fg_tensor_data(at), 0, fg_tensor_num_bytes(at));
  memset(fg_tensor_data(bt), 0, fg_tensor_num_bytes(bt));
  fg_output v = fg_variable(g, "v", vt), gr = fg_placeholder(g, "g", FG_F32, 2, vd);
  fg_output lr = fg_scalar(g, FG_F32, 0.1);
  fg_output in3[3] = {v, gr, lr};
  fg_output upd = fg_op(g, "all_reduce_apply_sgd", "upd", in3, 3, NULL);
  fg_output in4[4] = {v, fg_constant(g, "a", at), lr, fg_constant(g, "b", bt)};
  fg_output prod = fg_op(g, "sufficient_factor_apply_sgd", "prod", in4, 4, NULL);
  fg_output ar = fg_set_name(g, fg_op(g, "all_reduce", NULL, &gr, 1, NULL), "ar");
  fg_tensor_free(vt), fg_tensor_free(at), fg_tensor_free(bt);
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  FG_REQUIRE(upd.node >= 0 && prod.node >= 0 && ar.node >= 0);

  const fg_backend *cpu = row_named("CPU", 0), *cuda = row_named("CUDA", 0),
                   *host = row_named("CPU", 1);
  FG_REQUIRE(cpu && cuda && host);
  fg_plan_request req;
  memset(&req, 0, sizeof req);
  unsigned char *host_nodes = calloc((size_t)g->n_nodes, 1);
  FG_REQUIRE(host_nodes);
  host_nodes[ar.node] = 1;
  const fg_node *arn = &g->nodes[ar.node];
  fg_backend_query q = {&req, arn, ar.node, &fg_op_table[arn->op], FG_F32};
  FG_CHECK(fg_backend_for(fg_backends, &q) == cpu);
  req.cuda = 1;
  FG_CHECK(fg_backend_for(fg_backends, &q) == cuda);
  FG_CHECK(cuda->kernel(&q) == fg_cpu_kernel("all_reduce", FG_F32));
  req.host_nodes = host_nodes;
  FG_CHECK(fg_backend_for(fg_backends, &q) == host);
  FG_CHECK(host->kernel(&q) == fg_cpu_kernel("all_reduce", FG_F32));
  req.host_nodes = NULL;

  char why[512];
  const fg_node *un = &g->nodes[upd.node], *pn = &g->nodes[prod.node];
  fg_backend_query qu = {&req, un, upd.node, &fg_op_table[un->op], FG_F32};
  fg_backend_query qp = {&req, pn, prod.node, &fg_op_table[pn->op], FG_F32};
  /* No communicator: the fused update is the plain one, if there is a
   * CUDA apply_sgd. */
  why[0] = '\0';
  FG_CHECK_INT(cuda->supports(&qu, why, sizeof why), fg_cuda_kernel("apply_sgd", FG_F32) != NULL);
  FG_CHECK(cuda->kernel(&qu) == fg_cuda_kernel("apply_sgd", FG_F32));
  FG_CHECK_STR(why, "");
  FG_CHECK_INT(cuda->supports(&qp, why, sizeof why), 0);
  FG_CHECK(cuda->kernel(&qp) == NULL);
  /* A communicator on one of the devices. */
  int node_dev[16] = {0};
  fg_comm *comms[2] = {NULL, (fg_comm *)&node_dev[0]}; /* never called: only present */
  fg_dist_exec dx;
  memset(&dx, 0, sizeof dx);
  dx.n_dev = 2;
  dx.node_dev = node_dev;
  dx.comm = comms;
  req.dist = &dx;
  FG_CHECK_INT(cuda->supports(&qu, why, sizeof why), 0);
  FG_CHECK(cuda->kernel(&qu) == NULL);
  /* The CPU row runs both forms. */
  req.cuda = 0;
  why[0] = '\0';
  FG_CHECK_INT(cpu->supports(&qu, why, sizeof why), 1);
  FG_CHECK_INT(cpu->supports(&qp, why, sizeof why), 1);
  free(host_nodes);
  fg_status_free(st);
  fg_graph_free(g);
}

/* Two devices with collective lanes: x, a = relu(x), r0 = all_reduce(a)
 * and c = exp(x), r2 = all_reduce(c) on device 0; y, b = relu(y), r1 =
 * all_reduce(b) on device 1; all three reductions fetched. Steps in node
 * order: 0 a, 1 r0, 2 b, 3 r1, 4 c, 5 r2. Edges: the data (0,1), (2,3),
 * (4,5), and device 0's collectives in node order (1,5). Lanes: device d
 * computes on lane d and reduces on lane 2 + d; without collective lanes,
 * everything of device d is on lane d. */
FG_TEST(plan_stages_schedule_edges_and_lanes, "executor,dist") {
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {4};
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, d), y = fg_placeholder(g, "y", FG_F32, 1, d);
  fg_output a = fg_relu(g, x);
  fg_output r0 = fg_op(g, "all_reduce", "r0", &a, 1, NULL);
  fg_output b = fg_relu(g, y);
  fg_output r1 = fg_op(g, "all_reduce", "r1", &b, 1, NULL);
  fg_output c = fg_exp(g, x);
  fg_output r2 = fg_op(g, "all_reduce", "r2", &c, 1, NULL);
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  FG_REQUIRE(g->n_nodes == 8 && r2.node == 7);
  int node_dev[8] = {0, 1, 0, 0, 1, 1, 0, 0};
  fg_dist_exec dx;
  memset(&dx, 0, sizeof dx);
  dx.n_dev = 2;
  dx.node_dev = node_dev;
  dx.my_rank = -1;
  dx.n_local = 2;
  fg_tensor *xt = fg_tensor_new(FG_F32, 1, d, NULL), *yt = fg_tensor_new(FG_F32, 1, d, NULL);
  int feed_nodes[2] = {x.node, y.node};
  const fg_tensor *feeds[2] = {xt, yt};
  fg_output fetches[3] = {r0, r1, r2};
  const char *names[3] = {"r0", "r1", "r2"};
  fg_plan_request req;
  memset(&req, 0, sizeof req);
  req.feed_nodes = feed_nodes;
  req.feed_tensors = feeds;
  req.n_feeds = 2;
  req.fetches = fetches;
  req.fetch_names = names;
  req.n_fetches = 3;
  req.threads = 1;
  req.dist = &dx;
  const int want_node[6] = {a.node, r0.node, b.node, r1.node, c.node, r2.node};
  const int want_preds[6] = {0, 1, 0, 1, 0, 2};
  const int want_off[7] = {0, 1, 2, 3, 3, 4, 4};
  const int want_succ[4] = {1, 5, 3, 5};
  const int want_lane[2][6] = {{0, 0, 1, 1, 0, 0}, {0, 2, 1, 3, 0, 2}};
  for (int lanes = 0; lanes < 2; lanes++) {
    dx.comm_lanes = lanes;
    fg_plan *p = fg_plan_build(g, &req, NULL, NULL, st);
    FG_REQUIRE(p);
    FG_REQUIRE(p->n_steps == 6);
    for (int si = 0; si < 6; si++) {
      FG_CHECK_INT(p->steps[si].node, want_node[si]);
      FG_CHECK_INT(p->n_preds[si], want_preds[si]);
      FG_CHECK_INT(p->step_lane[si], want_lane[lanes][si]);
    }
    for (int si = 0; si <= 6; si++)
      FG_CHECK_INT(p->succ_off[si], want_off[si]);
    for (int e = 0; e < 4 && p->succ_off[6] == 4; e++)
      FG_CHECK_INT(p->succ[e], want_succ[e]);
    FG_CHECK_INT(p->use_lanes, 1);
    /* The fetches read the reductions' own slots. */
    for (int i = 0; i < 3; i++)
      FG_CHECK_INT(p->fetch_slots[i], p->slot_of_output[fetches[i].node]);
    fg_plan_free(p);
  }
  fg_tensor_free(xt);
  fg_tensor_free(yt);
  fg_status_free(st);
  fg_graph_free(g);
}
