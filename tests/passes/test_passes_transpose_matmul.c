/* The transpose_matmul pass: the transposes around a matmul (attention's
 * heads split and merged) fold into one permuted_matmul. On an attention
 * block written as ONNX exporters write it, what is rewritten and into
 * what (the perms read off by hand), the same bits with the pass on and
 * off, fetches of the folded nodes in a session; and the graphs it must
 * leave alone: a transpose read elsewhere, a fetched one, perms that move
 * a last axis out of the matrix, few rows, b shared by every batch,
 * operands of two ranks. */
#include <math.h>

#include <flowgraph/autodiff.h>

#include "test_passes_util.h"

enum { B = 2, S = 12, H = 3, D = 8 };

static fg_output tr(fg_graph *g, const char *name, fg_output x, int r, const int64_t *perm) {
  return fg_set_name(g, fg_transpose(g, x, r, perm), name);
}

static fg_output mm(fg_graph *g, const char *name, fg_output a, fg_output b) {
  return fg_set_name(g, fg_matmul(g, a, b, 0, 0), name);
}

/* q, k, v [B, S, H, D] (placeholders "x" = q, "k", "v"): scores =
 * q' @ k' with q' = qt = transpose(q, (0, 2, 1, 3)) [B, H, S, D] and k' =
 * kt = transpose(k, (0, 2, 3, 1)) [B, H, D, S] (with tb: kt =
 * transpose(k, (0, 2, 1, 3)) and the matmul's transpose_b, the same k');
 * p = softmax(scores); ctx = p @ vt, vt = transpose(v, (0, 2, 1, 3)); out
 * = transpose(ctx, (0, 2, 1, 3)) [B, S, H, D]. */
static fg_graph *attention_as(fg_dtype dt, int64_t s, int tb) {
  fg_graph *g = fg_graph_new();
  int64_t dims[4] = {B, s, H, D};
  static const int64_t p0213[4] = {0, 2, 1, 3}, p0231[4] = {0, 2, 3, 1};
  fg_output q = fg_placeholder(g, "x", dt, 4, dims), k = fg_placeholder(g, "k", dt, 4, dims);
  fg_output v = fg_placeholder(g, "v", dt, 4, dims), qt = tr(g, "qt", q, 4, p0213);
  fg_output sc = tb ? fg_set_name(g, fg_matmul(g, qt, tr(g, "kt", k, 4, p0213), 0, 1), "scores")
                    : mm(g, "scores", qt, tr(g, "kt", k, 4, p0231));
  fg_output p = fg_set_name(g, fg_softmax(g, sc, -1), "p");
  fg_output ctx = mm(g, "ctx", p, tr(g, "vt", v, 4, p0213));
  tr(g, "out", ctx, 4, p0213);
  return g;
}

static fg_graph *attention(fg_dtype dt, int64_t s) { return attention_as(dt, s, 0); }

static fg_tensor *filled(fg_dtype dt, int64_t s, int salt) {
  fg_tensor *t = fg_tensor_new(dt, 4, (int64_t[]){B, s, H, D}, NULL);
  for (int64_t i = 0; i < fg_tensor_num_elements(t); i++) {
    double v = sin(0.7 * (double)i + salt) * 1.5;
    if (dt == FG_F32)
      ((float *)fg_tensor_data(t))[i] = (float)v;
    else
      ((double *)fg_tensor_data(t))[i] = v;
  }
  return t;
}

/* Runs `fetch` of g fed q, k, v with the passes on or off. */
static fg_tensor *run3(fg_graph *g, fg_dtype dt, int64_t s, const char *fetch, int no_passes) {
  fg_tensor *x[3] = {filled(dt, s, 1), filled(dt, s, 2), filled(dt, s, 3)};
  fg_feed feeds[3] = {{"x", x[0]}, {"k", x[1]}, {"v", x[2]}};
  fg_tensor *out = run_feeds_on(g, NULL, 2, no_passes, feeds, 3, fetch);
  for (int i = 0; i < 3; i++)
    fg_tensor_free(x[i]);
  return out;
}

static int same_on_off(fg_graph *g, fg_dtype dt, int64_t s, const char *fetch) {
  fg_tensor *on = run3(g, dt, s, fetch, 0), *off = run3(g, dt, s, fetch, 1);
  int same = on && off && same_values(on, off);
  fg_tensor_free(on), fg_tensor_free(off);
  return same;
}

/* Node `name` of o is a permuted_matmul reading a_in and b_in with the
 * perms given. */
static int is_permuted(const fg_graph *o, const char *name, const char *a_in, const char *b_in,
                       const int64_t *pa, const int64_t *pb, const int64_t *po) {
  int id = fg_graph_find_output(o, name).node;
  if (id < 0 || strcmp(fg_node_op(o, id), "permuted_matmul") != 0) return 0;
  if (strcmp(fg_node_name(o, fg_node_input(o, id, 0).node), a_in) != 0 ||
      strcmp(fg_node_name(o, fg_node_input(o, id, 1).node), b_in) != 0)
    return 0;
  const char *attr[3] = {"perm_a", "perm_b", "perm_out"};
  const int64_t *want[3] = {pa, pb, po};
  for (int k = 0; k < 3; k++) {
    const int64_t *v;
    int n;
    if (fg_node_attr_ints(o, id, attr[k], &v, &n) != 0 || n != 4 ||
        memcmp(v, want[k], 4 * sizeof *v) != 0)
      return 0;
  }
  return 1;
}

/* fg_optimize of "out", f32 and f64, k' by a transpose or by the
 * matmul's transpose_b too: scores reads q and k in place (q' = q's axes
 * 0, 2, 1, 3; k' = k's 0, 2, 3, 1: stored transposed), out reads p and v (v'
 * = v's 0, 2, 1, 3) and writes ctx's axes 0, 2, 1, 3; no transpose or
 * matmul left; the report names each folded node. */
FG_TEST(passes_transpose_matmul_attention, "") {
  static const int64_t id[4] = {0, 1, 2, 3}, p0213[4] = {0, 2, 1, 3}, p0231[4] = {0, 2, 3, 1};
  for (int form = 0; form < 4; form++) {
    const fg_dtype dt = form & 1 ? FG_F64 : FG_F32;
    fg_graph *g = attention_as(dt, S, form >> 1);
    fg_pass_report *r = NULL;
    fg_graph *o = optimize1(g, "out", &r);
    FG_REQUIRE(o);
    FG_CHECK(is_permuted(o, "scores", "x", "k", p0213, p0231, id));
    FG_CHECK(is_permuted(o, "out", "p", "v", id, p0213, p0213));
    FG_CHECK_INT(count_op(o, "transpose"), 0);
    FG_CHECK_INT(count_op(o, "matmul"), 0);
    static const char *const folded[][3] = {{"qt", "scores", "transpose+matmul"},
                                            {"kt", "scores", "transpose+matmul"},
                                            {"vt", "out", "transpose+matmul+transpose"},
                                            {"ctx", "out", "transpose+matmul+transpose"}};
    for (int i = 0; i < 4; i++) {
      const fg_pass_change *c = find_change(r, "transpose_matmul", folded[i][0]);
      FG_CHECK(c && strcmp(c->action, "fused") == 0 && strcmp(c->into, folded[i][1]) == 0 &&
               strcmp(c->rule, folded[i][2]) == 0);
    }
    FG_CHECK(same_on_off(g, dt, S, "out"));
    /* A session keeps every name: the folded nodes' own values. */
    FG_CHECK(same_on_off(g, dt, S, "kt"));
    FG_CHECK(same_on_off(g, dt, S, "ctx"));
    FG_CHECK(same_on_off(g, dt, S, "scores"));
    fg_pass_report_free(r);
    fg_graph_free(o);
    fg_graph_free(g);
  }
}

/* The session's plan runs "out" and "scores" as permuted_matmul. */
FG_TEST(passes_transpose_matmul_in_a_session, "") {
  fg_graph *g = attention(FG_F32, S);
  fg_tensor *x = filled(FG_F32, S, 1);
  fg_status *st = fg_status_new();
  fg_session *s = passes_session(g, 1, 0, st);
  fg_feed feeds[3] = {{"x", x}, {"k", x}, {"v", x}};
  const char *fetch = "out";
  fg_plan_info *pi = s ? fg_session_plan_info(s, feeds, 3, &fetch, 1, NULL, 0, st) : NULL;
  FG_REQUIRE(pi);
  FG_CHECK_STR(step_op(pi, g, "out"), "permuted_matmul");
  FG_CHECK_STR(step_op(pi, g, "scores"), "permuted_matmul");
  FG_CHECK_STR(step_op(pi, g, "qt"), "");
  FG_CHECK_STR(step_op(pi, g, "ctx"), "");
  fg_plan_info_free(pi);
  fg_session_free(s);
  fg_status_free(st);
  fg_tensor_free(x);
  fg_graph_free(g);
}

/* The number of transpose_matmul changes fg_optimize reports for "out"
 * (and `extra` kept as a fetch when given). */
static int n_folded(const fg_graph *g, const char *extra, fg_pass_report **r) {
  const char *f[2] = {"out", extra};
  fg_graph *o = optimize_fetches(g, f, extra ? 2 : 1, r);
  int n = 0;
  for (int i = 0; o && i < fg_pass_report_size(*r); i++)
    n += strcmp(fg_pass_report_change(*r, i)->pass, "transpose_matmul") == 0;
  fg_graph_free(o);
  return o ? n : -1;
}

FG_TEST(passes_transpose_matmul_left_alone, "") {
  fg_pass_report *r = NULL;
  /* qt read by another node too: it stays and scores reads it; kt folds. */
  fg_graph *g = attention(FG_F32, S);
  fg_output qt = fg_graph_find_output(g, "qt");
  fg_set_name(g, fg_op(g, "neg", NULL, &qt, 1, NULL), "other");
  const char *f2[2] = {"out", "other"};
  fg_graph *o = optimize_fetches(g, f2, 2, &r);
  FG_REQUIRE(o);
  FG_CHECK(!find_change(r, "transpose_matmul", "qt") && find_change(r, "transpose_matmul", "kt"));
  FG_CHECK_INT(count_op(o, "transpose"), 1);
  FG_CHECK(same_on_off(g, FG_F32, S, "out"));
  fg_graph_free(o), fg_pass_report_free(r), r = NULL;
  fg_graph_free(g);
  /* kt fetched: fg_optimize keeps it and does not fold it (5 changes:
   * qt and scores, vt, ctx and out). */
  g = attention(FG_F32, S);
  FG_CHECK_INT(n_folded(g, "kt", &r), 5);
  FG_CHECK(!find_change(r, "transpose_matmul", "kt"));
  fg_pass_report_free(r), r = NULL;
  fg_graph_free(g);
  /* Eight rows or fewer (matmul's few-row path): nothing folds. */
  g = attention(FG_F32, 8);
  FG_CHECK_INT(n_folded(g, NULL, &r), 0);
  FG_CHECK(same_on_off(g, FG_F32, 8, "out"));
  fg_pass_report_free(r), r = NULL;
  fg_graph_free(g);
  /* Nine rows: everything folds (6 changes: the four folded nodes and
   * the two rewritten in place). */
  g = attention(FG_F32, 9);
  FG_CHECK_INT(n_folded(g, NULL, &r), 6);
  FG_CHECK(same_on_off(g, FG_F32, 9, "out"));
  fg_pass_report_free(r), r = NULL;
  fg_graph_free(g);
}

/* x [10, 12, 9] and y as given: matmul(transpose(x, px), y, ta) written
 * to "out" (through a transpose swapping its last two axes when
 * out_perm), then the op fg_optimize makes "out". */
static const char *single_op_ta(int64_t *yd, int yr, const int64_t *px, int out_perm, int ta) {
  static char buf[64];
  fg_graph *g = fg_graph_new();
  int64_t xd[3] = {10, 12, 9};
  fg_output x = fg_placeholder(g, "x", FG_F32, 3, xd);
  fg_output y = fg_placeholder(g, "y", FG_F32, yr, yd);
  fg_output m = fg_matmul(g, fg_transpose(g, x, 3, px), y, ta, 0);
  static const int64_t swap_last[3] = {0, 2, 1};
  fg_set_name(g, out_perm ? fg_transpose(g, m, 3, swap_last) : m, "out");
  fg_graph *o = optimize1(g, "out", NULL);
  int id = o ? fg_graph_find_output(o, "out").node : -1;
  snprintf(buf, sizeof buf, "%s", id >= 0 ? fg_node_op(o, id) : "?");
  fg_graph_free(o);
  fg_graph_free(g);
  return buf;
}

static const char *single_op(int64_t *yd, int yr, const int64_t *px, int out_perm) {
  return single_op_ta(yd, yr, px, out_perm, 0);
}

FG_TEST(passes_transpose_matmul_perms_and_shapes, "") {
  static const int64_t p102[3] = {1, 0, 2}, p021[3] = {0, 2, 1}, p120[3] = {1, 2, 0},
                       p201[3] = {2, 0, 1};
  /* x' [12, 10, 9] @ y [12, 9, 5]: folds. */
  FG_CHECK_STR(single_op((int64_t[]){12, 9, 5}, 3, p102, 0), "permuted_matmul");
  /* x' = x's [10, 9, 12], stored transposed, @ y [10, 12, 5]: folds. */
  FG_CHECK_STR(single_op((int64_t[]){10, 12, 5}, 3, p021, 0), "permuted_matmul");
  /* x' = x's axes 1, 2, 0 [12, 9, 10]: x's last axis is x''s rows, so
   * x' is stored transposed: folds. */
  FG_CHECK_STR(single_op((int64_t[]){12, 10, 5}, 3, p120, 0), "permuted_matmul");
  /* x' = x's axes 2, 0, 1 [9, 10, 12] puts x's last axis first (a batch
   * axis): not folded. */
  FG_CHECK_STR(single_op((int64_t[]){9, 12, 5}, 3, p201, 0), "matmul");
  /* y shared by every batch ([1, 9, 5]) with x' not transposed: matmul
   * stacks the batches into one GEMM; not folded. */
  FG_CHECK_STR(single_op((int64_t[]){1, 9, 5}, 3, p102, 0), "matmul");
  /* transpose_a: op(x') = x's axes 1, 2, 0 [12, 9, 10] @ y [12, 10, 5]:
   * folds. */
  FG_CHECK_STR(single_op_ta((int64_t[]){12, 10, 5}, 3, p102, 0, 1), "permuted_matmul");
  /* y's batch dim unknown: it may be 1 at run time, where matmul stacks
   * the batches; not folded. */
  FG_CHECK_STR(single_op((int64_t[]){FG_DIM_UNKNOWN, 9, 5}, 3, p102, 0), "matmul");
  /* y of rank 2: ranks differ, not folded. */
  FG_CHECK_STR(single_op((int64_t[]){9, 5}, 2, p102, 0), "matmul");
  /* The product's last axis moved by the transpose after it: the operand
   * folds into the matmul, the transpose stays. */
  FG_CHECK_STR(single_op((int64_t[]){12, 9, 5}, 3, p102, 1), "transpose");
}

/* The gradients of the attention block in q, k and v (autodiff's backward
 * graph has its own matmuls between transposes): the pass folds some of
 * them, and every gradient keeps its bits, passes on and off. */
FG_TEST(passes_transpose_matmul_backward_same_bits, "") {
  fg_graph *g = attention(FG_F32, S);
  fg_output out = fg_graph_find_output(g, "out");
  fg_output loss = fg_reduce_sum(g, fg_mul(g, out, out), NULL, 0, 0);
  const char *names[3] = {"x", "k", "v"}, *grads[3] = {"dq", "dk", "dv"};
  fg_output xs[3], dxs[3];
  for (int i = 0; i < 3; i++)
    xs[i] = fg_graph_find_output(g, names[i]);
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_gradients(g, &loss, 1, xs, 3, NULL, dxs, st) == 0);
  for (int i = 0; i < 3; i++)
    fg_set_name(g, dxs[i], grads[i]);
  fg_pass_report *r = NULL;
  fg_graph *o = optimize_fetches(g, grads, 3, &r);
  FG_REQUIRE(o);
  int folded = 0;
  for (int i = 0; i < fg_pass_report_size(r); i++)
    folded += strcmp(fg_pass_report_change(r, i)->pass, "transpose_matmul") == 0;
  FG_CHECK(folded > 0);
  for (int i = 0; i < 3; i++)
    FG_CHECK(same_on_off(g, FG_F32, S, grads[i]));
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_status_free(st);
  fg_graph_free(g);
}
