/* Resource limits: fg_session_options.max_memory_bytes and max_nodes, and
 * plans larger than the machine's memory. Each fails with
 * FG_RESOURCE_EXHAUSTED naming the bytes (or nodes) needed and the limit,
 * before the arena or the fetch buffers are allocated; the session stays
 * usable. */
#include <flowgraph/flowgraph.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fgtest.h"

static fg_session *session(fg_graph *g, int64_t max_memory, int64_t max_nodes, fg_status *st) {
  fg_session_options o;
  fg_session_options_init(&o);
  o.num_threads = 1;
  o.max_memory_bytes = max_memory;
  o.max_nodes = max_nodes;
  return fg_session_new(g, &o, st);
}

static fg_tensor *filled(int64_t rows, int64_t cols, float value) {
  int64_t d[2] = {rows, cols};
  fg_tensor *t = fg_tensor_new(FG_F32, 2, d, NULL);
  float *v = fg_tensor_data(t);
  for (int64_t i = 0; i < rows * cols; i++)
    v[i] = value;
  return t;
}

/* x [?,4] f32; a = x w1, b = x w2 (each [B,1000]; w1 all 0.001, w2 all
 * 0.002, constants: they live in the graph, not the arena); out =
 * reduce_sum(a + b). Both products are live at the add. */
static fg_graph *two_branches(void) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {FG_DIM_UNKNOWN, 4};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_tensor *t1 = filled(4, 1000, 0.001f), *t2 = filled(4, 1000, 0.002f);
  fg_output w1 = fg_constant(g, "w1", t1);
  fg_output w2 = fg_constant(g, "w2", t2);
  fg_tensor_free(t1);
  fg_tensor_free(t2);
  fg_output a = fg_set_name(g, fg_matmul(g, x, w1, 0, 0), "a");
  fg_output b = fg_set_name(g, fg_matmul(g, x, w2, 0, 0), "b");
  fg_set_name(g, fg_reduce_sum(g, fg_add(g, a, b), NULL, 0, 0), "out");
  return g;
}

static fg_tensor *ones(int64_t rows, int64_t cols) { return filled(rows, cols, 1.0f); }

static int run_out(fg_session *s, const char *feed_name, const fg_tensor *x, const char *fetch,
                   double *value, fg_status *st) {
  fg_feed f = {feed_name, x};
  fg_tensor *out = NULL;
  int rc = fg_session_run(s, &f, 1, &fetch, 1, &out, NULL, 0, st);
  if (rc == 0 && value) *value = ((const float *)fg_tensor_data(out))[0];
  fg_tensor_free(out);
  return rc;
}

FG_TEST(badinput_limit_one_tensor_over_max_memory, "badinput") {
  fg_graph *g = two_branches();
  fg_status *st = fg_status_new();
  /* a is [2,1000] f32 = 8000 bytes, over a 4000-byte limit. */
  fg_session *s = session(g, 4000, 0, st);
  FG_REQUIRE(s);
  fg_tensor *x = ones(2, 4);
  FG_CHECK(run_out(s, "x", x, "out", NULL, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_RESOURCE_EXHAUSTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "node 'a' (matmul) output 0 needs 8000 bytes");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "limit of 4000 bytes (max_memory_bytes)");
  fg_tensor_free(x);
  fg_session_free(s);
  fg_status_free(st);
  fg_graph_free(g);
}

FG_TEST(badinput_limit_arena_sum_over_max_memory, "badinput") {
  fg_graph *g = two_branches();
  fg_status *st = fg_status_new();
  fg_tensor *x = ones(2, 4);
  /* What the plan holds, from an unlimited session: at least a and b
   * (2 x 8000 bytes) in the arena, plus the fetched scalar. */
  fg_session *free_s = session(g, 0, 0, st);
  FG_REQUIRE(free_s);
  fg_feed f = {"x", x};
  const char *fetch = "out";
  fg_plan_info *info = fg_session_plan_info(free_s, &f, 1, &fetch, 1, NULL, 0, st);
  FG_REQUIRE(info);
  size_t arena = info->arena_bytes;
  FG_CHECK(arena >= 16000);
  fg_plan_info_free(info);
  /* Sum of x w1 + x w2 over 2 rows: each entry 4 * 0.001 + 4 * 0.002 =
   * 0.012, times 2000 entries = 24. */
  double v = 0;
  FG_CHECK_INT(run_out(free_s, "x", x, "out", &v, st), 0);
  FG_CHECK_NEAR(v, 24.0, 1e-4);
  fg_session_free(free_s);

  /* 12000: every tensor fits alone, the arena does not. */
  fg_session *s = session(g, 12000, 0, st);
  FG_REQUIRE(s);
  FG_CHECK(run_out(s, "x", x, "out", NULL, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_RESOURCE_EXHAUSTED);
  char want[200];
  /* The fetched f32 scalar takes one 64-byte aligned block. */
  snprintf(want, sizeof want, "plan (arena plus fetched outputs) needs %zu bytes", arena + 64);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), want);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "limit of 12000 bytes");
  fg_session_free(s);

  /* Exactly enough passes, and gives the same value. */
  s = session(g, (int64_t)(arena + 64), 0, st);
  FG_REQUIRE(s);
  FG_CHECK_INT(run_out(s, "x", x, "out", &v, st), 0);
  FG_CHECK_NEAR(v, 24.0, 1e-4);
  /* A batch of 1 halves the plan; a batch of 4 is refused, and the
   * session still runs afterwards. */
  fg_tensor *x4 = ones(4, 4), *x1 = ones(1, 4);
  FG_CHECK(run_out(s, "x", x4, "out", NULL, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_RESOURCE_EXHAUSTED);
  FG_CHECK_INT(run_out(s, "x", x1, "out", &v, st), 0);
  FG_CHECK_NEAR(v, 12.0, 1e-4);
  fg_tensor_free(x4);
  fg_tensor_free(x1);
  fg_session_free(s);
  fg_tensor_free(x);
  fg_status_free(st);
  fg_graph_free(g);
}

/* x [1, 2^20] f32 (4 MiB) fed; outer = x^T x is [2^20, 2^20] f32 = 2^42
 * bytes = 4 TiB: more than any machine this runs on, refused without a
 * limit set (no OOM kill), and named. */
FG_TEST(badinput_limit_plan_beyond_machine_memory, "badinput") {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) FG_SKIP("sysconf does not report the physical memory");
  if ((double)pages * (double)page >= 4398046511104.0) FG_SKIP("this machine has 4 TiB or more");
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {1, 1 << 20};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output outer = fg_set_name(g, fg_matmul(g, x, x, 1, 0), "outer");
  fg_set_name(g, fg_reduce_sum(g, outer, NULL, 0, 0), "total");
  fg_status *st = fg_status_new();
  fg_session *s = session(g, 0, 0, st);
  FG_REQUIRE(s);
  fg_tensor *xv = ones(1, 1 << 20);
  FG_CHECK(run_out(s, "x", xv, "total", NULL, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_RESOURCE_EXHAUSTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st),
                        "node 'outer' (matmul) output 0 needs 4398046511104 bytes, more than "
                        "the machine's");
  /* With a limit, the limit is named. */
  fg_session *s2 = session(g, (int64_t)1 << 30, 0, st);
  FG_REQUIRE(s2);
  FG_CHECK(run_out(s2, "x", xv, "total", NULL, st) != 0);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "limit of 1073741824 bytes");
  fg_session_free(s2);
  fg_tensor_free(xv);
  fg_session_free(s);
  fg_status_free(st);
  fg_graph_free(g);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FG_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define FG_SANITIZED 1
#endif
#endif

/* An arena malloc that fails (here: an address-space limit of 256 MiB in a
 * child process, and a 1 GiB plan) is FG_RESOURCE_EXHAUSTED too. */
FG_TEST(badinput_limit_arena_malloc_failure, "badinput") {
#ifdef FG_SANITIZED
  FG_SKIP("sanitizers reserve terabytes of address space; RLIMIT_AS cannot be used");
#else
  fflush(NULL);
  pid_t pid = fork();
  FG_REQUIRE(pid >= 0);
  if (pid == 0) {
    struct rlimit rl = {(rlim_t)512 << 20, (rlim_t)512 << 20};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
    /* x [1,16384] f32; x^T x is [16384,16384] f32 = 1 GiB; then tanh. */
    fg_graph *g = fg_graph_new();
    int64_t xd[2] = {1, 16384};
    fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
    fg_output outer = fg_matmul(g, x, x, 1, 0);
    fg_set_name(g, fg_reduce_sum(g, fg_tanh(g, outer), NULL, 0, 0), "total");
    fg_status *st = fg_status_new();
    fg_session *s = session(g, 0, 0, st);
    fg_tensor *xv = ones(1, 16384);
    if (!s || !xv) _exit(4);
    int rc = run_out(s, "x", xv, "total", NULL, st);
    if (rc == 0) _exit(5);
    if (fg_status_code(st) != FG_RESOURCE_EXHAUSTED) _exit(6);
    if (!strstr(fg_status_message(st), "cannot allocate")) _exit(7);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  FG_CHECK(WIFEXITED(status));
  FG_CHECK_INT(WEXITSTATUS(status), 0);
#endif
}

FG_TEST(badinput_limit_max_nodes_at_creation, "badinput") {
  fg_graph *g = two_branches(); /* x, w1, w2, a, b, add, out: 7 nodes */
  FG_CHECK_INT(fg_graph_num_nodes(g), 7);
  fg_status *st = fg_status_new();
  FG_CHECK(session(g, 0, 6, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_RESOURCE_EXHAUSTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "the graph has 7 nodes, over the limit of 6");
  fg_session *s = session(g, 0, 7, st);
  FG_CHECK(s != NULL);
  fg_session_free(s);
  /* Negative limits are refused, not read as "none". */
  FG_CHECK(session(g, -1, 0, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "max_memory_bytes = -1");
  FG_CHECK(session(g, 0, -5, st) == NULL);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "max_nodes = -5");
  fg_status_free(st);
  fg_graph_free(g);
}

FG_TEST(badinput_limit_max_nodes_at_graph_change, "badinput") {
  fg_graph *g = two_branches();
  fg_status *st = fg_status_new();
  fg_session *s = session(g, 0, 8, st);
  FG_REQUIRE(s);
  fg_tensor *x = ones(1, 4);
  double v = 0;
  FG_CHECK_INT(run_out(s, "x", x, "out", &v, st), 0);
  FG_CHECK_NEAR(v, 12.0, 1e-4);
  /* Node 8 fits, node 9 does not: the next run says so. */
  fg_output o = fg_graph_find_output(g, "out");
  fg_set_name(g, fg_neg(g, o), "neg");
  FG_CHECK_INT(run_out(s, "x", x, "neg", &v, st), 0);
  FG_CHECK_NEAR(v, -12.0, 1e-4);
  fg_set_name(g, fg_abs(g, o), "abs");
  FG_CHECK(run_out(s, "x", x, "out", NULL, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_RESOURCE_EXHAUSTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "the graph has 9 nodes, over the limit of 8");
  fg_tensor_free(x);
  fg_session_free(s);
  fg_status_free(st);
  fg_graph_free(g);
}
