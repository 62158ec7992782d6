/* `flowgraph plan` and `flowgraph profile` end to end: the plan table and
 * its three summary lines (checked by hand on a matmul chain), default
 * fetches and training targets, the profile tables' op counts, the Chrome
 * trace (a JSON validator here, and Python's json when present), the memory
 * SVG, and bad arguments and output paths. Harness: test_cli_harness.h. */
#include "flowgraph/autodiff.h"
#include "test_cli_harness.h"
#include "test_cli_profile_model.h"

/* ---- helpers -------------------------------------------------------------------- */

#define FG_CHECK_STR_EQ(a, b)                                                                      \
  do {                                                                                             \
    const char *fgt_x = (a), *fgt_y = (b);                                                         \
    if (strcmp(fgt_x, fgt_y) != 0) FG_FAIL_AT("%s == %s: \"%s\" != \"%s\"", #a, #b, fgt_x, fgt_y); \
  } while (0)

/* The value of "KEY: N" at the start of a line, as an exact integer; -1
 * when absent or not an integer. */
static long long key_value(const char *out, const char *key) {
  size_t n = strlen(key);
  for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
    if (strncmp(p, key, n) == 0 && p[n] == ':' && p[n + 1] == ' ') {
      char *end;
      long long v = strtoll(p + n + 2, &end, 10);
      if (end == p + n + 2 || *end != '\n') return -1;
      return v;
    }
  }
  return -1;
}

/* The last three lines of `out`, which plan promises are exactly the three
 * keys in this order. */
static int last_three_keys(const char *out, long long v[3]) {
  const char *keys[3] = {"arena_bytes", "lower_bound_bytes", "naive_bytes"};
  size_t len = strlen(out);
  if (len == 0 || out[len - 1] != '\n') return -1;
  const char *p = out + len - 1;
  for (int k = 0; k < 3; k++) {
    do
      p--;
    while (p > out && *p != '\n');
  }
  if (p > out) p++;
  for (int k = 0; k < 3; k++) {
    size_t n = strlen(keys[k]);
    if (strncmp(p, keys[k], n) != 0 || strncmp(p + n, ": ", 2) != 0) return -1;
    char *end;
    v[k] = strtoll(p + n + 2, &end, 10);
    if (end == p + n + 2 || *end != '\n' || v[k] < 0) return -1;
    p = end + 1;
  }
  return 0;
}

static int count_str(const char *s, const char *needle) {
  int n = 0;
  for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
    n++;
  return n;
}

/* A row of the plan's tensor table: "  NAME:OUT KIND DTYPE [SHAPE] OFFSET SIZE LIFE SHARED". */
typedef struct trow {
  char kind[32], dtype[16], shape[64], offset[32], life[32], shared[128];
  long long size;
} trow;

static int tensor_row(const char *out, const char *label, trow *r) {
  char key[160];
  snprintf(key, sizeof key, "\n  %s ", label);
  const char *p = strstr(out, "\ntensors:");
  p = p ? strstr(p, key) : NULL;
  if (!p) return -1;
  return sscanf(p + strlen(key), "%31s %15s %63s %31s %lld %31s %127s", r->kind, r->dtype, r->shape,
                r->offset, &r->size, r->life, r->shared) == 7
             ? 0
             : -1;
}

/* The section of `out` from the banner line containing `title` up to the
 * next banner (or the end); a malloc'ed copy. */
static char *section(const char *out, const char *title) {
  const char *p = strstr(out, title);
  if (!p) return NULL;
  p = strchr(p, '\n');
  if (!p) return NULL;
  const char *e = strstr(p, "\n====");
  size_t n = e ? (size_t)(e - p) : strlen(p);
  char *s = malloc(n + 1);
  memcpy(s, p, n);
  s[n] = '\0';
  return s;
}

/* The count column of OP's row in "Summary by op type"; -1 when absent. */
static int op_count(const char *summary, const char *op) {
  char key[80];
  snprintf(key, sizeof key, "\n  %s ", op);
  const char *p = strstr(summary, key);
  int n;
  if (!p || sscanf(p + strlen(key), "%d", &n) != 1) return -1;
  return n;
}

/* Data rows of a table section: lines after its header line. */
static int table_rows(const char *sec) {
  int lines = 0;
  for (const char *p = sec; *p; p++)
    if (*p == '\n' && p[1] == ' ') lines++;
  return lines - 1; /* the header */
}

/* ---- a small JSON validator (RFC 8259 grammar, no semantics) -------------------- */

typedef struct jp {
  const char *p;
  int depth;
} jp;

static void jws(jp *j) {
  while (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')
    j->p++;
}

static int jvalue(jp *j);

static int jstring(jp *j) {
  if (*j->p != '"') return -1;
  for (j->p++;; j->p++) {
    unsigned char c = (unsigned char)*j->p;
    if (c == '"') {
      j->p++;
      return 0;
    }
    if (c < 0x20) return -1;
    if (c == '\\') {
      j->p++;
      if (*j->p == 'u') {
        for (int i = 1; i <= 4; i++)
          if (!strchr("0123456789abcdefABCDEF", j->p[i]) || !j->p[i]) return -1;
        j->p += 4;
      } else if (!*j->p || !strchr("\"\\/bfnrt", *j->p)) {
        return -1;
      }
    }
  }
}

static int jnumber(jp *j) {
  const char *s = j->p;
  if (*j->p == '-') j->p++;
  if (*j->p == '0') {
    j->p++;
  } else if (*j->p >= '1' && *j->p <= '9') {
    while (*j->p >= '0' && *j->p <= '9')
      j->p++;
  } else {
    return -1;
  }
  if (*j->p == '.') {
    j->p++;
    if (!(*j->p >= '0' && *j->p <= '9')) return -1;
    while (*j->p >= '0' && *j->p <= '9')
      j->p++;
  }
  if (*j->p == 'e' || *j->p == 'E') {
    j->p++;
    if (*j->p == '+' || *j->p == '-') j->p++;
    if (!(*j->p >= '0' && *j->p <= '9')) return -1;
    while (*j->p >= '0' && *j->p <= '9')
      j->p++;
  }
  return j->p > s ? 0 : -1;
}

static int jseq(jp *j, char close, int object) {
  j->p++;
  if (++j->depth > 64) return -1;
  jws(j);
  if (*j->p == close) {
    j->p++;
    j->depth--;
    return 0;
  }
  for (;;) {
    jws(j);
    if (object) {
      if (jstring(j) != 0) return -1;
      jws(j);
      if (*j->p++ != ':') return -1;
    }
    if (jvalue(j) != 0) return -1;
    jws(j);
    if (*j->p == ',') {
      j->p++;
      continue;
    }
    if (*j->p++ != close) return -1;
    j->depth--;
    return 0;
  }
}

static int jvalue(jp *j) {
  jws(j);
  switch (*j->p) {
  case '{': return jseq(j, '}', 1);
  case '[': return jseq(j, ']', 0);
  case '"': return jstring(j);
  case 't': return strncmp(j->p, "true", 4) == 0 ? (j->p += 4, 0) : -1;
  case 'f': return strncmp(j->p, "false", 5) == 0 ? (j->p += 5, 0) : -1;
  case 'n': return strncmp(j->p, "null", 4) == 0 ? (j->p += 4, 0) : -1;
  default: return jnumber(j);
  }
}

static int json_valid(const char *s) {
  jp j = {s, 0};
  if (jvalue(&j) != 0) return 0;
  jws(&j);
  return *j.p == '\0';
}

/* Runs /usr/bin/python3 -c CODE FILE; its exit status (fgt_python), for
 * FG_CHECK_PYTHON. */
static int python_check(const char *code, const char *file) { return fgt_python(code, file, NULL); }

/* ---- models ------------------------------------------------------------------- */

static fg_output const_f32(fg_graph *g, const char *name, int64_t r, int64_t c) {
  int64_t d[2] = {r, c};
  float *v = calloc((size_t)(r * c), sizeof *v);
  for (int64_t i = 0; i < r * c; i++)
    v[i] = (float)((i % 7) - 3) * 0.125f;
  fg_tensor *t = tensor_f32(2, d, v);
  fg_output o = fg_constant(g, name, t);
  fg_tensor_free(t);
  free(v);
  return o;
}

/* a [2,4] -> mm1 [2,20] -> mm2 [2,3] -> mm3 [2,20] -> out [2,2], all
 * matmuls (not in-place-able), out the graph's output. By hand, with the
 * executor's 64-byte alignment:
 *   arena tensors mm1 160 B -> 192, mm2 24 B -> 64, mm3 160 B -> 192;
 *   naive_bytes = 192 + 64 + 192 = 448;
 *   live per step: 0 {mm1} 192, 1 {mm1,mm2} 256, 2 {mm2,mm3} 256,
 *   3 {mm3} 192: lower_bound_bytes = 256;
 *   mm3 may reuse mm1 (mm1's producer and user, steps 0 and 1, are
 *   ancestors of step 2) and mm2 overlaps both: arena_bytes = 256. */
static int build_chain(const char *path) {
  fg_graph *g = fg_graph_new();
  int64_t ad[2] = {2, 4};
  fg_output a = fg_placeholder(g, "a", FG_F32, 2, ad);
  fg_output mm1 = fg_set_name(g, fg_matmul(g, a, const_f32(g, "w1", 4, 20), 0, 0), "mm1");
  fg_output mm2 = fg_set_name(g, fg_matmul(g, mm1, const_f32(g, "w2", 20, 3), 0, 0), "mm2");
  fg_output mm3 = fg_set_name(g, fg_matmul(g, mm2, const_f32(g, "w3", 3, 20), 0, 0), "mm3");
  fg_output out = fg_set_name(g, fg_matmul(g, mm3, const_f32(g, "w4", 20, 2), 0, 0), "out");
  fg_graph_add_output(g, out);
  return save_and_free_graph(g, path);
}

/* Non-source nodes the target needs, walked on the saved graph. */
static int needed_steps(const char *path, const char *target) {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_load(path, st);
  fg_status_free(st);
  if (!g) return -1;
  int n = fg_graph_num_nodes(g), count = 0, top = 0;
  unsigned char *seen = calloc((size_t)n + 1, 1);
  int *stack = malloc(((size_t)n + 1) * sizeof *stack);
  int t = fg_graph_find(g, target);
  if (t >= 0) {
    seen[t] = 1;
    stack[top++] = t;
  }
  while (top > 0) {
    int id = stack[--top];
    const char *op = fg_node_op(g, id);
    if (strcmp(op, "placeholder") && strcmp(op, "constant") && strcmp(op, "variable")) count++;
    for (int k = 0; k < fg_node_num_inputs(g, id); k++) {
      int src = fg_node_input(g, id, k).node;
      if (src >= 0 && !seen[src]) {
        seen[src] = 1;
        stack[top++] = src;
      }
    }
  }
  free(seen);
  free(stack);
  fg_graph_free(g);
  return count;
}

/* ---- plan ---------------------------------------------------------------------- */

/* The plans and profiles of the model's own nodes, checked by hand, are
 * taken with --no-passes; cli_plan_mlp_fused checks the default plan,
 * where the epilogue pass has fused each matmul and its bias add (and
 * relu). */
FG_TEST(cli_plan_mlp, "") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  char in[600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  FG_REQUIRE(cli(&r, "plan", tpath("mlp.fgb"), "-i", in, "--no-passes", NULL) == 0);
  CHECK_OK(r);
  long long v[3];
  FG_REQUIRE(last_three_keys(r.out, v) == 0);
  FG_CHECK(v[0] <= v[2]);
  FG_CHECK(v[1] <= v[0]);
  /* mm1 add1 h mm2 logits probs; the five sources are not steps. */
  FG_CHECK_STR_CONTAINS(r.out, ": 6 steps,");
  const char *order[6][2] = {{"mm1", "matmul"}, {"add1", "add"},   {"h", "relu"},
                             {"mm2", "matmul"}, {"logits", "add"}, {"probs", "softmax"}};
  const char *p = strstr(r.out, "\nsteps:");
  FG_REQUIRE(p);
  for (int s = 0; s < 6; s++) {
    char line[128];
    snprintf(line, sizeof line, "\n  %5d  %s", s, order[s][0]);
    const char *q = strstr(p, line);
    FG_CHECK(q != NULL);
    if (!q) continue;
    /* The op on the step's own line: found, and before the line ends. */
    const char *op = strstr(q + 1, order[s][1]), *eol = strchr(q + 1, '\n');
    FG_CHECK(op != NULL && (eol == NULL || op < eol));
  }
  /* Five intermediates of at most 24 bytes, one 64-byte block each. */
  FG_CHECK_INT(v[2], 5 * 64);
  trow t;
  FG_REQUIRE(tensor_row(r.out, "x:0", &t) == 0);
  FG_CHECK_STR_EQ(t.kind, "feed");
  FG_CHECK_STR_EQ(t.offset, "-");
  FG_REQUIRE(tensor_row(r.out, "W1:0", &t) == 0);
  FG_CHECK_STR_EQ(t.kind, "variable");
  FG_REQUIRE(tensor_row(r.out, "b1:0", &t) == 0);
  FG_CHECK_STR_EQ(t.kind, "constant");
  FG_REQUIRE(tensor_row(r.out, "probs:0", &t) == 0);
  FG_CHECK_STR_EQ(t.kind, "fetch");
  FG_CHECK_STR_EQ(t.shape, "[2,2]");
  FG_CHECK_INT(t.size, 16);
  FG_REQUIRE(tensor_row(r.out, "h:0", &t) == 0);
  FG_CHECK_STR_EQ(t.kind, "arena");
  FG_CHECK_STR_EQ(t.dtype, "f32");
  FG_CHECK_STR_EQ(t.shape, "[2,3]");
  FG_CHECK_INT(t.size, 24);
  FG_CHECK_STR_EQ(t.life, "2..3");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* The default plan of the same model: h = relu(x @ W1 + b1) and logits =
 * h @ W2 + b2 are one fused_matmul each (the user's names stay; the op
 * column shows what runs),
 * so the arena holds h (24 bytes) and logits (16), one 64-byte block each,
 * both live at step 1: 128 bytes. */
FG_TEST(cli_plan_mlp_fused, "") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  char in[600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  FG_REQUIRE(cli(&r, "plan", tpath("mlp.fgb"), "-i", in, NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, ": 3 steps,");
  FG_CHECK_STR_CONTAINS(r.out, "\n      0  h       fused_matmul\n      1  logits  fused_matmul\n"
                               "      2  probs   softmax\n");
  trow t;
  FG_CHECK(tensor_row(r.out, "mm1:0", &t) != 0 && tensor_row(r.out, "add1:0", &t) != 0);
  FG_REQUIRE(tensor_row(r.out, "h:0", &t) == 0);
  FG_CHECK_STR_EQ(t.life, "0..1");
  FG_CHECK_INT(t.size, 24);
  FG_CHECK_INT(key_value(r.out, "arena_bytes"), 128);
  FG_CHECK_INT(key_value(r.out, "naive_bytes"), 128);
  /* Matmuls keep nothing outside the arena. */
  FG_CHECK_INT(key_value(r.out, "kernel_bytes"), 0);
  FG_CHECK_INT(key_value(r.out, "kernel_shared_bytes"), 0);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_plan_hand_checked_chain, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_chain(tpath("chain.fgb")) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "plan", tpath("chain.fgb"), "--random-inputs", NULL) == 0);
  CHECK_OK(r);
  long long v[3];
  FG_REQUIRE(last_three_keys(r.out, v) == 0);
  FG_CHECK_INT(v[2], 448);
  FG_CHECK_INT(v[1], 256);
  FG_CHECK_INT(v[0], 256);
  FG_CHECK_INT(key_value(r.out, "naive_bytes"), 448);
  FG_CHECK_STR_CONTAINS(r.out, ": 4 steps,");
  trow m1, m2, m3, o;
  FG_REQUIRE(tensor_row(r.out, "mm1:0", &m1) == 0);
  FG_REQUIRE(tensor_row(r.out, "mm2:0", &m2) == 0);
  FG_REQUIRE(tensor_row(r.out, "mm3:0", &m3) == 0);
  FG_REQUIRE(tensor_row(r.out, "out:0", &o) == 0);
  FG_CHECK_STR_EQ(m1.kind, "arena");
  FG_CHECK_INT(m1.size, 160);
  FG_CHECK_INT(m2.size, 24);
  FG_CHECK_STR_EQ(m1.life, "0..1");
  FG_CHECK_STR_EQ(m2.life, "1..2");
  FG_CHECK_STR_EQ(m3.life, "2..3");
  FG_CHECK_STR_EQ(o.kind, "fetch");
  FG_CHECK_STR_EQ(o.offset, "-");
  /* mm3 takes mm1's bytes; mm2 sits beside them, 64-byte aligned. */
  FG_CHECK_STR_EQ(m1.offset, m3.offset);
  long long off1 = atoll(m1.offset), off2 = atoll(m2.offset);
  FG_CHECK(off2 % 64 == 0 && off1 % 64 == 0);
  FG_CHECK(off2 >= off1 + 192 || off1 >= off2 + 64);
  FG_CHECK_STR_EQ(m1.shared, "-");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_plan_fetch_subset_and_batch, "") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "plan", tpath("mlp.fgb"), "--random-inputs", "--batch", "5", "--fetch", "h",
                 "--no-passes", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, ": 3 steps,");
  FG_CHECK_STR_CONTAINS(r.out, "fetches: h\n");
  trow t;
  FG_REQUIRE(tensor_row(r.out, "mm1:0", &t) == 0);
  FG_CHECK_STR_EQ(t.shape, "[5,3]");
  FG_CHECK_INT(t.size, 60);
  FG_CHECK(tensor_row(r.out, "probs:0", &t) != 0); /* pruned */
  long long v[3];
  FG_REQUIRE(last_three_keys(r.out, v) == 0);
  /* mm1 and add1 (60 bytes each) are the intermediates: 2 x 64. */
  FG_CHECK_INT(v[2], 128);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_plan_training_target_default, "") {
  FG_REQUIRE(make_tmpdir());
  char target[256];
  FG_REQUIRE(build_profile_train(tpath("train.fgb"), 0, target) == 0 && target[0]);
  int want = needed_steps(tpath("train.fgb"), target);
  FG_REQUIRE(want > 5);
  cli_result r;
  /* Without the passes, which fuse steps (the counts here are the graph's). */
  FG_REQUIRE(cli(&r, "plan", tpath("train.fgb"), "--random-inputs", "--batch", "3", "--no-passes",
                 NULL) == 0);
  CHECK_OK(r);
  char line[300];
  snprintf(line, sizeof line, "targets: %s\n", target);
  FG_CHECK_STR_CONTAINS(r.out, line);
  FG_CHECK_STR_CONTAINS(r.out, "fetches: (none)\n");
  snprintf(line, sizeof line, ": %d steps,", want);
  FG_CHECK_STR_CONTAINS(r.out, line);
  long long v[3];
  FG_REQUIRE(last_three_keys(r.out, v) == 0);
  FG_CHECK(v[1] <= v[0] && v[0] <= v[2]);
  result_free(&r);

  /* An explicit --fetch replaces the training default. */
  FG_REQUIRE(cli(&r, "plan", tpath("train.fgb"), "--random-inputs", "--fetch", "loss",
                 "--no-passes", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "targets: (none)\n");
  snprintf(line, sizeof line, ": %d steps,", needed_steps(tpath("train.fgb"), "loss"));
  FG_CHECK_STR_CONTAINS(r.out, line);
  result_free(&r);

  /* profile runs the whole step: its op counts add up to the plan's steps. */
  FG_REQUIRE(cli(&r, "profile", tpath("train.fgb"), "--random-inputs", "--batch", "3", "--runs",
                 "2", "--warmup", "0", "--no-passes", NULL) == 0);
  CHECK_OK(r);
  char *sum = section(r.out, "Summary by op type");
  FG_REQUIRE(sum);
  int total = 0, n;
  for (const char *p = strchr(sum, '\n'); p && p[1]; p = strchr(p + 1, '\n')) {
    char op[64];
    if (p == strchr(sum, '\n')) continue; /* the header */
    if (sscanf(p + 1, "%63s %d", op, &n) == 2) total += n;
  }
  FG_CHECK_INT(total, want);
  FG_CHECK_INT(op_count(sum, "softmax_cross_entropy"), 1);
  free(sum);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_plan_needs_feeds, "badinput") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "plan", tpath("mlp.fgb"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "placeholder 'x'");
  result_free(&r);
  FG_REQUIRE(cli(&r, "plan", tpath("mlp.fgb"), "--random-inputs", "--fetch", "nope", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "nope");
  result_free(&r);
  FG_REQUIRE(cli(&r, "plan", tpath("missing.fgb"), "--random-inputs", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "missing.fgb");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* ---- profile ------------------------------------------------------------------- */

FG_TEST(cli_profile_tables, "") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  char in[600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  FG_REQUIRE(cli(&r, "profile", tpath("mlp.fgb"), "-i", in, "--runs", "4", "--warmup", "2",
                 "--no-passes", NULL) == 0);
  CHECK_OK(r);
  char *order = section(r.out, "Run order"), *top = section(r.out, "Top by time");
  char *sum = section(r.out, "Summary by op type"), *tim = section(r.out, "Timings");
  FG_REQUIRE(order && top && sum && tim);
  FG_CHECK_INT(table_rows(order), 6);
  FG_CHECK_INT(table_rows(top), 6);
  FG_CHECK_INT(table_rows(sum), 4);
  FG_CHECK_INT(op_count(sum, "matmul"), 2);
  FG_CHECK_INT(op_count(sum, "add"), 2);
  FG_CHECK_INT(op_count(sum, "relu"), 1);
  FG_CHECK_INT(op_count(sum, "softmax"), 1);
  /* Run order is plan order, with each node's output. */
  const char *names[6] = {"mm1", "add1", "h", "mm2", "logits", "probs"};
  const char *prev = order;
  for (int i = 0; i < 6; i++) {
    char key[64];
    snprintf(key, sizeof key, "\n  %5d  %s ", i, names[i]);
    const char *q = strstr(order, key);
    FG_CHECK(q != NULL && q >= prev);
    if (q) prev = q;
  }
  FG_CHECK_STR_CONTAINS(order, "f32 [2,3]");
  FG_CHECK_STR_CONTAINS(order, "f32 [2,2]");
  /* mem KB of matmul: mm1 24 B + mm2 16 B = 40 B = 0.039 KiB. */
  const char *mm = strstr(sum, "\n  matmul ");
  FG_REQUIRE(mm);
  char nl[512];
  snprintf(nl, sizeof nl, "%.*s", (int)(strchr(mm + 1, '\n') ? strchr(mm + 1, '\n') - mm : 100),
           mm);
  FG_CHECK(strstr(nl, " 0.039") != NULL);
  FG_CHECK_STR_CONTAINS(tim, "\ninit: ");
  FG_CHECK_STR_CONTAINS(tim, "\nfirst run: ");
  FG_CHECK_STR_CONTAINS(tim, "\nwarmup: 2 runs");
  FG_CHECK_STR_CONTAINS(tim, "\nruns: 4, min ");
  double mn, avg, mx, sd;
  const char *rl = strstr(tim, "\nruns: 4, ");
  FG_REQUIRE(rl);
  FG_REQUIRE(sscanf(rl, "\nruns: 4, min %lf, avg %lf, max %lf, std %lf", &mn, &avg, &mx, &sd) == 4);
  FG_CHECK(mn >= 0 && mn <= avg && avg <= mx && sd >= 0);
  free(order);
  free(top);
  free(sum);
  free(tim);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_profile_trace, "") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "profile", tpath("mlp.fgb"), "--random-inputs", "--batch", "2", "--runs", "3",
                 "--threads", "2", "--trace", tpath("t.json"), "--no-passes", NULL) == 0);
  CHECK_OK(r);
  char *js = slurp(tpath("t.json"));
  FG_REQUIRE(js);
  FG_CHECK(json_valid(js));
  /* One slice per node per run (category op), and one per run enclosing
   * them (category run). */
  FG_CHECK_INT(count_str(js, "\"cat\":\"op\",\"ph\":\"X\""), 6 * 3);
  FG_CHECK_INT(count_str(js, "\"cat\":\"run\",\"ph\":\"X\""), 3);
  FG_CHECK_INT(count_str(js, "\"ph\":\"X\""), 6 * 3 + 3);
  FG_CHECK_INT(count_str(js, "\"name\":\"mm1\""), 3);
  FG_CHECK_INT(count_str(js, "\"op\":\"matmul\""), 6);
  FG_CHECK_STR_CONTAINS(js, "\"displayTimeUnit\":\"ms\"");
  FG_CHECK_STR_CONTAINS(js, "\"name\":\"thread_name\"");
  FG_CHECK_STR_CONTAINS(js, "\"shape\":\"[2,3]\"");
  FG_CHECK_STR_CONTAINS(js, "\"bytes\":24");
  /* Runs follow one another: every event of run k ends before run k+1's
   * first starts (to the trace's nanosecond resolution). */
  double end_of[3] = {0, 0, 0}, start_of[3] = {1e300, 1e300, 1e300};
  for (const char *p = strstr(js, "\"ph\":\"X\""); p; p = strstr(p + 1, "\"ph\":\"X\"")) {
    double ts, dur;
    int run;
    const char *t = strstr(p, "\"ts\":"), *d = strstr(p, "\"dur\":"), *u = strstr(p, "\"run\":");
    FG_REQUIRE(t && d && u);
    FG_REQUIRE(sscanf(t, "\"ts\":%lf", &ts) == 1 && sscanf(d, "\"dur\":%lf", &dur) == 1 &&
               sscanf(u, "\"run\":%d", &run) == 1);
    FG_REQUIRE(run >= 0 && run < 3);
    FG_CHECK(dur >= 0);
    if (ts + dur > end_of[run]) end_of[run] = ts + dur;
    if (ts < start_of[run]) start_of[run] = ts;
  }
  FG_CHECK(end_of[0] <= start_of[1] + 1e-3);
  FG_CHECK(end_of[1] <= start_of[2] + 1e-3);
  int py = python_check("import json,sys; d=json.load(open(sys.argv[1])); "
                        "ev=[e for e in d['traceEvents'] if e['ph']=='X' and e['cat']=='op']; "
                        "assert len(ev)==18, len(ev); "
                        "assert all(e['pid']==1 and e['dur']>=0 for e in ev); "
                        "runs=[e for e in d['traceEvents'] if e['ph']=='X' and e['cat']=='run']; "
                        "assert [e['name'] for e in runs]==['run 0','run 1','run 2'], runs; "
                        "assert len(ev)+len(runs)==len([e for e in d['traceEvents'] "
                        "if e['ph']=='X']); "
                        "assert sorted(set(e['name'] for e in ev))=="
                        "sorted(['mm1','add1','h','mm2','logits','probs'])",
                        tpath("t.json"));
  FG_CHECK_PYTHON(py);
  free(js);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_profile_trace_escapes_names, "") {
  FG_REQUIRE(make_tmpdir());
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {3};
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, d);
  fg_output y = fg_set_name(g, fg_relu(g, x), "q\"b\\s\tt/\xc3\xa9<&>");
  /* so the odd name is an arena tensor (a reduce: no fusion takes it) */
  fg_graph_add_output(g, fg_reduce_sum(g, y, NULL, 0, 0));
  FG_REQUIRE(save_and_free_graph(g, tpath("odd.fgb")) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "profile", tpath("odd.fgb"), "--random-inputs", "--runs", "2", "--trace",
                 tpath("t.json"), "--memory-svg", tpath("m.svg"), NULL) == 0);
  CHECK_OK(r);
  char *js = slurp(tpath("t.json"));
  FG_REQUIRE(js);
  FG_CHECK(json_valid(js));
  FG_CHECK_INT(count_str(js, "\"name\":\"q\\\"b\\\\s\\u0009t/\xc3\xa9<&>\""), 2);
  int py = python_check("import json,sys; d=json.load(open(sys.argv[1], encoding='utf-8')); "
                        "n=[e['name'] for e in d['traceEvents'] if e['ph']=='X']; "
                        "assert n.count('q\"b\\\\s\\tt/\\u00e9<&>')==2, n",
                        tpath("t.json"));
  FG_CHECK_PYTHON(py);
  char *svg = slurp(tpath("m.svg"));
  FG_REQUIRE(svg);
  FG_CHECK(strstr(svg, "<&>") == NULL);
  FG_CHECK_STR_CONTAINS(svg, "&lt;&amp;&gt;");
  py = python_check("import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])", tpath("m.svg"));
  FG_CHECK_PYTHON(py);
  free(svg);
  free(js);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* ---- the memory SVG ------------------------------------------------------------- */

static void check_svg(const char *path, int want_rects, const char *needle) {
  char *svg = slurp(path);
  FG_REQUIRE(svg);
  FG_CHECK(strncmp(svg, "<svg", 4) == 0);
  size_t n = strlen(svg);
  FG_CHECK(n > 7 && strcmp(svg + n - 7, "</svg>\n") == 0);
  FG_CHECK_INT(count_str(svg, "<rect"), want_rects);
  FG_CHECK_INT(count_str(svg, "<title>"), want_rects + 1);
  FG_CHECK_STR_CONTAINS(svg, needle);
  FG_CHECK_STR_CONTAINS(svg, "lower bound");
  FG_CHECK_STR_CONTAINS(svg, "naive");
  int py = python_check("import sys, xml.etree.ElementTree as E; "
                        "r=E.parse(sys.argv[1]).getroot(); "
                        "assert r.tag=='{http://www.w3.org/2000/svg}svg', r.tag",
                        path);
  FG_CHECK_PYTHON(py);
  free(svg);
}

FG_TEST(cli_plan_memory_svg, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_chain(tpath("chain.fgb")) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "plan", tpath("chain.fgb"), "--random-inputs", "--memory-svg", tpath("m.svg"),
                 NULL) == 0);
  CHECK_OK(r);
  /* Arena tensors: mm1, mm2, mm3. */
  check_svg(tpath("m.svg"), 3, ">mm2<");
  FG_CHECK_STR_CONTAINS(r.out, "m.svg");
  long long v[3];
  FG_CHECK(last_three_keys(r.out, v) == 0);
  FG_CHECK_INT(fgt_count_entries(tmpdir), 2); /* chain.fgb, m.svg: no temporary left */
  result_free(&r);

  /* profile draws the same plan. */
  FG_REQUIRE(cli(&r, "profile", tpath("chain.fgb"), "--random-inputs", "--runs", "1",
                 "--memory-svg", tpath("p.svg"), NULL) == 0);
  CHECK_OK(r);
  check_svg(tpath("p.svg"), 3, "mm1:0 f32 [2,20], 160 bytes");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* ---- arguments and output paths ----------------------------------------------- */

FG_TEST(cli_profile_bad_args, "badinput") {
  FG_REQUIRE(setup_mlp() == 0);
  const char *m = tpath("mlp.fgb");
  const char *cases[][8] = {
      {"profile", NULL},
      {"profile", m, "--runs", "0", NULL},
      {"profile", m, "--runs", "x", NULL},
      {"profile", m, "--runs", NULL},
      {"profile", m, "--warmup", "-1", NULL},
      {"profile", m, "--threads", "two", NULL},
      {"profile", m, "--trace", NULL},
      {"profile", m, "--trace", "", NULL},
      {"profile", m, m, NULL},
      {"profile", m, "--bogus", NULL},
      {"profile", m, "-i", "noequals", NULL},
      {"profile", m, "--trace", "a.json", "--trace", "b.json", NULL},
      {"profile", m, "--trace", "same", "--memory-svg", "same", NULL},
      {"plan", m, "--runs", "3", NULL},
      {"plan", m, "--trace", "t.json", NULL},
      {"plan", m, "--batch", "0", NULL},
      {"plan", m, "--memory-svg", NULL},
      {"plan", NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cli_result r;
    const char **c = cases[i];
    FG_REQUIRE(cli(&r, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]) == 0);
    if (r.code != 2) fprintf(stderr, "case %zu: %s %s %s\n", i, c[0], c[1] ? c[1] : "", r.err);
    CHECK_USAGE_ERROR(r);
    result_free(&r);
  }
  FG_CHECK_INT(fgt_count_entries(tmpdir), 2);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_profile_bad_output_paths, "badinput") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  const char *m = tpath("mlp.fgb");
  FG_REQUIRE(
      cli(&r, "profile", m, "--random-inputs", "--trace", tpath("no/such/dir/t.json"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "IO_ERROR", "no/such/dir");
  FG_CHECK_INT(strlen(r.out), 0);
  result_free(&r);
  /* A directory in the way. */
  FG_REQUIRE(cli(&r, "profile", m, "--random-inputs", "--memory-svg", tmpdir, NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "IO_ERROR", "directory");
  result_free(&r);
  FG_REQUIRE(cli(&r, "plan", m, "--random-inputs", "--memory-svg", tpath("none/m.svg"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "IO_ERROR", "none");
  result_free(&r);
  /* A run that fails (an unfed placeholder) leaves neither file. */
  FG_REQUIRE(
      cli(&r, "profile", m, "--trace", tpath("t.json"), "--memory-svg", tpath("m.svg"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "placeholder 'x'");
  result_free(&r);
  /* A kernel error (a label out of range) happens after the trace was
   * opened: its temporary file goes too. */
  FG_REQUIRE(build_profile_train(tpath("train.fgb"), 0, NULL) == 0);
  int64_t ld[1] = {2};
  int32_t labels[2] = {1, 99};
  fg_status *st = fg_status_new();
  fg_tensor *lt = fg_tensor_from_data(FG_I32, 1, ld, labels, sizeof labels, st);
  FG_REQUIRE(lt && fg_npy_write(tpath("labels.npy"), lt, st) == 0);
  fg_tensor_free(lt);
  fg_status_free(st);
  char in[600];
  snprintf(in, sizeof in, "labels=%s", tpath("labels.npy"));
  FG_REQUIRE(cli(&r, "profile", tpath("train.fgb"), "-i", in, "--random-inputs", "--batch", "2",
                 "--trace", tpath("t.json"), "--memory-svg", tpath("m.svg"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "", "99");
  FG_CHECK_INT(strlen(r.out), 0);
  result_free(&r);
  FG_CHECK_INT(fgt_count_entries(tmpdir), 4); /* mlp.fgb, x.npy, train.fgb, labels.npy */
  fgt_rmtree(tmpdir);
}

/* --trace and --memory-svg on a symbolic link write the file it names, and
 * on a device write the device: a copy of /dev/full fails the command with an I/O
 * error and stays a device (the writer's rename had replaced it with the
 * trace, run as root). */
FG_TEST(cli_profile_outputs_to_links_and_devices, "badinput") {
  FG_REQUIRE(setup_mlp() == 0);
  const char *m = tpath("mlp.fgb");
  char link[600];
  snprintf(link, sizeof link, "%s", tpath("t.json"));
  FG_REQUIRE(symlink("real.json", link) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "profile", m, "--random-inputs", "--runs", "1", "--trace", link, NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  struct stat sb;
  FG_CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode));
  char *json = slurp(tpath("real.json"));
  FG_CHECK(json && json_valid(json));
  free(json);
  /* Copies of /dev/null and /dev/full (as root), never the machine's. */
  char null_dev[600], full_dev[600];
  snprintf(null_dev, sizeof null_dev, "%s", tpath("null"));
  snprintf(full_dev, sizeof full_dev, "%s", tpath("full"));
  if (fgt_make_char_device(null_dev, 1, 3) && fgt_make_char_device(full_dev, 1, 7)) {
    FG_REQUIRE(cli(&r, "profile", m, "--random-inputs", "--runs", "1", "--memory-svg", null_dev,
                   NULL) == 0);
    CHECK_OK(r);
    result_free(&r);
    FG_CHECK(stat(null_dev, &sb) == 0 && S_ISCHR(sb.st_mode));
    FG_REQUIRE(cli(&r, "profile", m, "--random-inputs", "--runs", "1", "--trace", full_dev, NULL) ==
               0);
    CHECK_RUNTIME_ERROR(r, "IO_ERROR", full_dev);
    result_free(&r);
    FG_CHECK(stat(full_dev, &sb) == 0 && S_ISCHR(sb.st_mode));
    /* The trace written to a device, then the SVG failing: the command
     * fails and takes back what it can, which is not the device. */
    FG_REQUIRE(cli(&r, "profile", m, "--random-inputs", "--runs", "1", "--trace", null_dev,
                   "--memory-svg", full_dev, NULL) == 0);
    CHECK_RUNTIME_ERROR(r, "IO_ERROR", full_dev);
    result_free(&r);
    FG_CHECK(stat(null_dev, &sb) == 0 && S_ISCHR(sb.st_mode));
    FG_CHECK(stat(full_dev, &sb) == 0 && S_ISCHR(sb.st_mode));
  }
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_profile_help, "") {
  FG_REQUIRE(make_tmpdir());
  cli_result r;
  FG_REQUIRE(cli(&r, "--help", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "  plan ");
  FG_CHECK_STR_CONTAINS(r.out, "  profile ");
  result_free(&r);
  FG_REQUIRE(cli(&r, "help", "plan", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "lower_bound_bytes");
  FG_CHECK_STR_CONTAINS(r.out, "train_target");
  result_free(&r);
  FG_REQUIRE(cli(&r, "profile", "--help", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "--trace OUT.json");
  FG_CHECK_STR_CONTAINS(r.out, "Summary by op type");
  result_free(&r);
  fgt_rmtree(tmpdir);
}
