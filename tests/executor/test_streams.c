/* Stream assignment and event placement for the CUDA executor
 * (executor/streams.h). Pure bookkeeping, so it runs in every build: the
 * checks below are what makes a multi-stream run correct without host
 * synchronisation, verified independently of how the assignment is made. */
#include <flowgraph/flowgraph.h>

#include "executor/plan.h"
#include "executor/streams.h"
#include "fgtest.h"
#include "graph/tensor_internal.h"

/* A DAG as successor lists, built from an edge list (u < v). */
typedef struct dag {
  int n;
  int off[257];
  int succ[4096];
} dag;

static void dag_from_edges(dag *d, int n, const int (*e)[2], int n_edges) {
  d->n = n;
  memset(d->off, 0, sizeof d->off);
  for (int i = 0; i < n_edges; i++)
    d->off[e[i][0] + 1]++;
  for (int u = 0; u < n; u++)
    d->off[u + 1] += d->off[u];
  int fill[257] = {0};
  for (int i = 0; i < n_edges; i++) {
    int u = e[i][0];
    d->succ[d->off[u] + fill[u]++] = e[i][1];
  }
}

static int has_edge(const dag *d, int u, int v) {
  for (int i = d->off[u]; i < d->off[u + 1]; i++)
    if (d->succ[i] == v) return 1;
  return 0;
}

static int waits_on(const fg_stream_plan *sp, int v, int u) {
  for (int w = sp->wait_off[v]; w < sp->wait_off[v + 1]; w++)
    if (sp->wait[w] == u) return 1;
  return 0;
}

/* Every property the executor relies on; returns the failures found. */
static int check_plan(const dag *d, const fg_stream_plan *sp, int max_streams) {
  int bad = 0;
  if (sp->n_steps != d->n) bad++;
  if (d->n > 0 && (sp->n_streams < 1 || sp->n_streams > max_streams)) bad++;
  for (int v = 0; v < d->n; v++)
    if (sp->stream[v] < 0 || sp->stream[v] >= sp->n_streams) bad++;
  /* Every cross-stream edge has an event recorded after its producer and a
   * wait before its consumer; same-stream edges go forward in launch order
   * (a stream runs in launch order, so the DAG order holds). */
  for (int u = 0; u < d->n; u++)
    for (int i = d->off[u]; i < d->off[u + 1]; i++) {
      int v = d->succ[i];
      if (sp->stream[u] != sp->stream[v]) {
        if (sp->event_of[u] < 0 || sp->event_of[u] >= sp->n_events || !waits_on(sp, v, u)) bad++;
      } else if (!(u < v)) {
        bad++;
      }
    }
  /* Waits only on cross-stream predecessors that record an event. */
  for (int v = 0; v < d->n; v++)
    for (int w = sp->wait_off[v]; w < sp->wait_off[v + 1]; w++) {
      int u = sp->wait[w];
      if (u < 0 || u >= v || !has_edge(d, u, v) || sp->stream[u] == sp->stream[v] ||
          sp->event_of[u] < 0)
        bad++;
    }
  /* Event indices are distinct. */
  char seen[256] = {0};
  for (int u = 0; u < d->n; u++)
    if (sp->event_of[u] >= 0) {
      if (sp->event_of[u] >= 256 || seen[sp->event_of[u]])
        bad++;
      else
        seen[sp->event_of[u]] = 1;
    }
  /* Simulate the device: each stream runs its steps in launch order; a step
   * at a stream's head starts once the events it waits on were recorded.
   * All steps must finish (no cycle in the stream + event order), and every
   * step must start after all its DAG predecessors finished. */
  int head[FG_MAX_STREAMS], done[256] = {0}, n_done = 0;
  for (int k = 0; k < FG_MAX_STREAMS; k++)
    head[k] = 0;
  for (int progress = 1; progress;) {
    progress = 0;
    for (int k = 0; k < sp->n_streams; k++) {
      while (head[k] < d->n && sp->stream[head[k]] != k)
        head[k]++;
      if (head[k] >= d->n) continue;
      int v = head[k], ready = 1;
      for (int w = sp->wait_off[v]; w < sp->wait_off[v + 1]; w++)
        if (!done[sp->wait[w]]) ready = 0;
      if (!ready) continue;
      for (int u = 0; u < v; u++)
        if (has_edge(d, u, v) && !done[u]) bad++; /* would start too early */
      done[v] = 1, n_done++, head[k]++, progress = 1;
    }
  }
  if (n_done != d->n) bad++;
  return bad;
}

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static unsigned rnd(unsigned n) {
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return (unsigned)(rng_state % n);
}

FG_TEST(streams_chain_stays_on_one_stream, "") {
  int e[4][2] = {{0, 1}, {1, 2}, {2, 3}, {3, 4}};
  dag d;
  dag_from_edges(&d, 5, e, 4);
  fg_stream_plan sp;
  char err[256];
  FG_REQUIRE(fg_stream_plan_build(d.n, d.off, d.succ, 4, &sp, err, sizeof err) == 0);
  FG_CHECK_INT(sp.n_streams, 1);
  FG_CHECK_INT(sp.n_events, 0);
  for (int v = 0; v < 5; v++)
    FG_CHECK_INT(sp.stream[v], 0);
  FG_CHECK_INT(check_plan(&d, &sp, 4), 0);
  fg_stream_plan_free(&sp);
}

FG_TEST(streams_independent_chains_get_different_streams, "") {
  /* Two chains interleaved in plan order: a = 0,2,4, b = 1,3,5; then 6
   * joins them. */
  int e[6][2] = {{0, 2}, {2, 4}, {1, 3}, {3, 5}, {4, 6}, {5, 6}};
  dag d;
  dag_from_edges(&d, 7, e, 6);
  fg_stream_plan sp;
  char err[256];
  FG_REQUIRE(fg_stream_plan_build(d.n, d.off, d.succ, 4, &sp, err, sizeof err) == 0);
  FG_CHECK(sp.stream[0] == sp.stream[2] && sp.stream[2] == sp.stream[4]);
  FG_CHECK(sp.stream[1] == sp.stream[3] && sp.stream[3] == sp.stream[5]);
  FG_CHECK(sp.stream[0] != sp.stream[1]);
  FG_CHECK_INT(sp.n_streams, 2);
  /* The join continues one chain and waits on the other's last step. */
  FG_CHECK_INT(sp.wait_off[7] - sp.wait_off[6], 1);
  FG_CHECK_INT(sp.n_events, 1);
  FG_CHECK_INT(check_plan(&d, &sp, 4), 0);
  fg_stream_plan_free(&sp);
}

FG_TEST(streams_diamond_events, "") {
  /* 0 -> {1, 2} -> 3: 1 continues 0's stream, 2 opens a second one, 3
   * continues the latest predecessor's (2's) stream; events after 0 (for 2)
   * and after 1 (for 3). */
  int e[4][2] = {{0, 1}, {0, 2}, {1, 3}, {2, 3}};
  dag d;
  dag_from_edges(&d, 4, e, 4);
  fg_stream_plan sp;
  char err[256];
  FG_REQUIRE(fg_stream_plan_build(d.n, d.off, d.succ, 4, &sp, err, sizeof err) == 0);
  FG_CHECK_INT(sp.stream[0], 0);
  FG_CHECK_INT(sp.stream[1], 0);
  FG_CHECK_INT(sp.stream[2], 1);
  FG_CHECK_INT(sp.stream[3], 1);
  FG_CHECK_INT(sp.n_events, 2);
  FG_CHECK(sp.event_of[0] >= 0);
  FG_CHECK(sp.event_of[1] >= 0);
  FG_CHECK(sp.event_of[2] < 0);
  FG_CHECK(waits_on(&sp, 2, 0));
  FG_CHECK(waits_on(&sp, 3, 1));
  FG_CHECK(!waits_on(&sp, 3, 2));
  FG_CHECK_INT(check_plan(&d, &sp, 4), 0);
  fg_stream_plan_free(&sp);
}

FG_TEST(streams_wide_fanout_uses_the_pool_and_wraps, "") {
  /* 0 -> 1..8 -> 9 over 3 streams: the fan-out fills the 3 streams, then
   * reuses the stream whose last step is oldest. */
  int e[16][2];
  for (int i = 0; i < 8; i++) {
    e[2 * i][0] = 0, e[2 * i][1] = i + 1;
    e[2 * i + 1][0] = i + 1, e[2 * i + 1][1] = 9;
  }
  dag d;
  dag_from_edges(&d, 10, e, 16);
  fg_stream_plan sp;
  char err[256];
  FG_REQUIRE(fg_stream_plan_build(d.n, d.off, d.succ, 3, &sp, err, sizeof err) == 0);
  FG_CHECK_INT(sp.n_streams, 3);
  int per[3] = {0, 0, 0};
  for (int v = 1; v <= 8; v++)
    per[sp.stream[v]]++;
  FG_CHECK(per[0] >= 2 && per[1] >= 2 && per[2] >= 2);
  FG_CHECK_INT(check_plan(&d, &sp, 3), 0);
  fg_stream_plan_free(&sp);
}

FG_TEST(streams_one_stream_puts_everything_on_it, "") {
  for (int trial = 0; trial < 50; trial++) {
    int n = 1 + (int)rnd(60), m = 0;
    static int e[4096][2];
    for (int v = 1; v < n; v++)
      for (int u = 0; u < v; u++)
        if (rnd(100) < 15 && m < 4096) e[m][0] = u, e[m][1] = v, m++;
    dag d;
    dag_from_edges(&d, n, e, m);
    fg_stream_plan sp;
    char err[256];
    FG_REQUIRE(fg_stream_plan_build(d.n, d.off, d.succ, 1, &sp, err, sizeof err) == 0);
    FG_CHECK_INT(sp.n_streams, 1);
    FG_CHECK_INT(sp.n_events, 0);
    FG_CHECK_INT(sp.wait_off[n], 0);
    for (int v = 0; v < n; v++)
      FG_CHECK_INT(sp.stream[v], 0);
    FG_CHECK_INT(check_plan(&d, &sp, 1), 0);
    fg_stream_plan_free(&sp);
  }
}

FG_TEST(streams_random_dags, "") {
  /* 500 random DAGs: sizes 0..200, densities from a forest of chains to
   * dense, 1..64 streams. */
  static int e[4096][2];
  int failures = 0, multi = 0;
  for (int trial = 0; trial < 500; trial++) {
    int n = (int)rnd(201), m = 0, kind = (int)rnd(3);
    unsigned pct = kind == 0 ? 2 : kind == 1 ? 10 : 40;
    for (int v = 1; v < n; v++) {
      if (kind == 0 && v >= 4 && m < 4096) e[m][0] = v - 4, e[m][1] = v, m++; /* 4 chains */
      for (int u = (v > 30 ? v - 30 : 0); u < v; u++)
        if (rnd(100) < pct && m < 4096 && !(kind == 0 && u == v - 4)) e[m][0] = u, e[m][1] = v, m++;
    }
    dag d;
    dag_from_edges(&d, n, e, m);
    int streams = 1 + (int)rnd(trial % 5 == 0 ? 64 : 8);
    fg_stream_plan sp;
    char err[256];
    if (fg_stream_plan_build(d.n, d.off, d.succ, streams, &sp, err, sizeof err) != 0) {
      FG_FAIL_AT("trial %d: %s", trial, err);
      continue;
    }
    int bad = check_plan(&d, &sp, streams);
    if (bad)
      FG_FAIL_AT("trial %d (n %d, edges %d, streams %d): %d violations", trial, n, m, streams, bad);
    failures += bad != 0;
    multi += sp.n_streams > 1;
    fg_stream_plan_free(&sp);
  }
  FG_CHECK_INT(failures, 0);
  FG_CHECK(multi > 300); /* the DAGs do use several streams */
}

FG_TEST(streams_bad_arguments_refused, "badinput") {
  int e[2][2] = {{0, 1}, {1, 2}};
  dag d;
  dag_from_edges(&d, 3, e, 2);
  fg_stream_plan sp;
  char err[256] = "";
  FG_CHECK(fg_stream_plan_build(3, d.off, d.succ, 0, &sp, err, sizeof err) == -1);
  FG_CHECK_STR_CONTAINS(err, "streams 0");
  FG_CHECK(fg_stream_plan_build(3, d.off, d.succ, 65, &sp, err, sizeof err) == -1);
  FG_CHECK(fg_stream_plan_build(-1, d.off, d.succ, 4, &sp, err, sizeof err) == -1);
  /* An edge going backwards (2 -> 0) or out of range. */
  int back[2][2] = {{0, 1}, {2, 0}};
  dag_from_edges(&d, 3, back, 2);
  FG_CHECK(fg_stream_plan_build(3, d.off, d.succ, 4, &sp, err, sizeof err) == -1);
  FG_CHECK_STR_CONTAINS(err, "2 -> 0");
  int out[1][2] = {{0, 7}};
  dag_from_edges(&d, 3, out, 1);
  FG_CHECK(fg_stream_plan_build(3, d.off, d.succ, 4, &sp, err, sizeof err) == -1);
  FG_CHECK_STR_CONTAINS(err, "0 -> 7");
  /* Freeing a zeroed or failed plan is fine. */
  fg_stream_plan_free(&sp);
  fg_stream_plan_free(NULL);
  FG_CHECK_INT(fg_streams_from_option(0), FG_DEFAULT_STREAMS);
  FG_CHECK_INT(fg_streams_from_option(1), 1);
  FG_CHECK_INT(fg_streams_from_option(64), 64);
  FG_CHECK_INT(fg_streams_from_option(65), -1);
  FG_CHECK_INT(fg_streams_from_option(-1), -1);
}

static fg_graph *two_chains(void) {
  fg_graph *g = fg_graph_new();
  int64_t dims[1] = {4};
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, dims);
  fg_output y = fg_placeholder(g, "y", FG_F32, 1, dims);
  fg_output a = fg_relu(g, fg_tanh(g, fg_neg(g, x)));
  fg_output b = fg_relu(g, fg_tanh(g, fg_neg(g, y)));
  fg_set_name(g, a, "a");
  fg_set_name(g, b, "b");
  fg_set_name(g, fg_add(g, a, b), "sum");
  return g;
}

FG_TEST(streams_session_num_streams_out_of_range, "badinput") {
  fg_graph *g = two_chains();
  fg_status *st = fg_status_new();
  int bad[3] = {-1, 65, -1000000};
  for (int i = 0; i < 3; i++) {
    fg_session_options o;
    fg_session_options_init(&o);
    o.num_streams = bad[i];
    fg_session *s = fg_session_new(g, &o, st);
    FG_CHECK(s == NULL);
    FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), "num_streams");
    fg_session_free(s);
  }
  /* In range: accepted (a CPU session ignores the value). */
  int good[3] = {0, 1, 64};
  for (int i = 0; i < 3; i++) {
    fg_session_options o;
    fg_session_options_init(&o);
    o.num_streams = good[i];
    fg_session *s = fg_session_new(g, &o, st);
    FG_CHECK(s != NULL);
    fg_session_free(s);
  }
  fg_status_free(st);
  fg_graph_free(g);
}

FG_TEST(streams_on_a_real_plan, "") {
  /* Two independent chains of a real plan (neg -> tanh -> relu on x and on
   * y, then add): the chains get two streams and the add one wait. */
  fg_graph *g = two_chains();
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  int64_t dims[1] = {4};
  float v[4] = {1, -2, 3, -4};
  fg_tensor *tx = fg_tensor_from_data(FG_F32, 1, dims, v, sizeof v, st);
  fg_tensor *ty = fg_tensor_from_data(FG_F32, 1, dims, v, sizeof v, st);
  int feed_nodes[2] = {fg_graph_find(g, "x"), fg_graph_find(g, "y")};
  const fg_tensor *feeds[2] = {tx, ty};
  fg_output fetch = fg_graph_find_output(g, "sum");
  const char *fetch_name = "sum";
  fg_plan_request req;
  memset(&req, 0, sizeof req);
  req.feed_nodes = feed_nodes;
  req.feed_tensors = feeds;
  req.n_feeds = 2;
  req.fetches = &fetch;
  req.fetch_names = &fetch_name;
  req.n_fetches = 1;
  req.threads = 1;
  fg_plan *plan = fg_plan_build(g, &req, NULL, NULL, st);
  FG_REQUIRE(plan);
  FG_CHECK_INT(plan->n_steps, 7);
  dag d;
  d.n = plan->n_steps;
  memcpy(d.off, plan->succ_off, sizeof(int) * (size_t)(plan->n_steps + 1));
  memcpy(d.succ, plan->succ, sizeof(int) * (size_t)(plan->succ_off[plan->n_steps]));
  fg_stream_plan sp;
  char err[256];
  FG_REQUIRE(fg_stream_plan_build(d.n, d.off, d.succ, 4, &sp, err, sizeof err) == 0);
  FG_CHECK_INT(check_plan(&d, &sp, 4), 0);
  int chain_stream[2] = {-1, -1};
  for (int si = 0; si < plan->n_steps; si++) {
    const char *name = fg_node_name(g, plan->steps[si].node);
    if (strcmp(name, "a") == 0) chain_stream[0] = sp.stream[si];
    if (strcmp(name, "b") == 0) chain_stream[1] = sp.stream[si];
  }
  FG_CHECK(chain_stream[0] >= 0 && chain_stream[1] >= 0);
  FG_CHECK(chain_stream[0] != chain_stream[1]);
  fg_stream_plan_free(&sp);
  /* One stream: everything on stream 0. */
  FG_REQUIRE(fg_stream_plan_build(d.n, d.off, d.succ, 1, &sp, err, sizeof err) == 0);
  for (int si = 0; si < plan->n_steps; si++)
    FG_CHECK_INT(sp.stream[si], 0);
  fg_stream_plan_free(&sp);
  fg_plan_free(plan);
  fg_tensor_free(tx);
  fg_tensor_free(ty);
  fg_status_free(st);
  fg_graph_free(g);
}
