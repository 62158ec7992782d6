/* fused_elementwise: programs against values worked out by hand,
 * broadcasting (row, column, scalar, both sides), a bool select condition,
 * f64, attributes, the FLOP count, the same bits as the unfused ops'
 * kernels for every opcode, the same bits at 1, 2 and 3 threads, and the
 * programs shape inference refuses (naming the node). The fused nodes are
 * written by hand (fg_op with a "program"); sessions run with the passes
 * off so that the unfused comparison graphs stay unfused. */
#include <math.h>
#include <string.h>

#include "fgtest.h"
#include "flowgraph/flowgraph.h"
#include "graph/fused_program.h"
#include "kernels/kernel.h"
#include "test_kernels_util.h"

static fg_output fused(fg_graph *g, const char *name, const fg_output *in, int n,
                       const char *program) {
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_string(a, "program", program);
  fg_output o = fg_op(g, "fused_elementwise", name, in, n, a);
  fg_attrs_free(a);
  return o;
}

/* Runs `fetch` with feeds "x0".."x{n-1}", passes off, on `threads`. */
static fg_tensor *run(fg_graph *g, fg_tensor *const *feeds, int n, const char *fetch, int threads) {
  static const char *names[] = {"x0", "x1", "x2", "x3"};
  fg_feed f[4];
  for (int i = 0; i < n; i++)
    f[i] = (fg_feed){names[i], feeds[i]};
  fg_status *st = fg_status_new();
  fg_session_options o;
  fg_session_options_init(&o);
  o.num_threads = threads;
  o.no_passes = 1;
  fg_session *s = fg_session_new(g, &o, st);
  fg_tensor *out = NULL;
  if (!s || fg_session_run(s, f, n, &fetch, 1, &out, NULL, 0, st) != 0) {
    fprintf(stderr, "run %s: %s\n", fetch, fg_status_message(st));
    out = NULL;
  }
  fg_session_free(s);
  fg_status_free(st);
  return out;
}

static void check_values(const fg_tensor *t, const double *want, int64_t n, const char *what) {
  FG_REQUIRE(t != NULL);
  FG_REQUIRE(fg_tensor_num_elements(t) == n);
  for (int64_t i = 0; i < n; i++)
    if (tensor_elem(t, i) != want[i])
      FG_FAIL_AT("%s: element %lld is %.17g, want %.17g", what, (long long)i, tensor_elem(t, i),
                 want[i]);
}

FG_TEST(fused_add_relu_row_broadcast_by_hand, "") {
  fg_graph *g = fg_graph_new();
  int64_t d[2] = {2, 3}, r[1] = {3};
  fg_output in[2] = {fg_placeholder(g, "x0", FG_F32, 2, d), fg_placeholder(g, "x1", FG_F32, 1, r)};
  fused(g, "y", in, 2, "add(x0, x1); relu(t0)");
  FG_REQUIRE(fg_graph_status(g, NULL) == FG_OK);
  /* 2 instructions x 6 elements */
  FG_CHECK_INT(fg_node_flops(g, fg_graph_find_output(g, "y").node), 12);
  double a[6] = {1, -2, 3, -4, 5, -6}, b[3] = {0.5, 0.5, -10};
  fg_tensor *f[2] = {tensor_of_doubles(FG_F32, 2, d, a), tensor_of_doubles(FG_F32, 1, r, b)};
  fg_tensor *y = run(g, f, 2, "y", 1);
  const double want[6] = {1.5, 0, 0, 0, 5.5, 0};
  FG_CHECK_INT(fg_tensor_dtype(y), FG_F32);
  check_values(y, want, 6, "add+relu");
  fg_tensor_free(y), fg_tensor_free(f[0]), fg_tensor_free(f[1]);
  fg_graph_free(g);
}

FG_TEST(fused_column_scalar_constants_f64, "") {
  fg_graph *g = fg_graph_new();
  int64_t d[2] = {2, 3}, c[2] = {2, 1};
  fg_output in[3] = {fg_placeholder(g, "x0", FG_F64, 2, d), fg_placeholder(g, "x1", FG_F64, 2, c),
                     fg_placeholder(g, "x2", FG_F64, 0, NULL)};
  fused(g, "y", in, 3, "mul(x0, x1); sub(t0, x2); div(t1, 2); maximum(t2, -1.25)");
  double a[6] = {1, 2, 3, 4, 5, 6}, b[2] = {10, -1}, s = 0.5;
  fg_tensor *f[3] = {tensor_of_doubles(FG_F64, 2, d, a), tensor_of_doubles(FG_F64, 2, c, b),
                     tensor_of_doubles(FG_F64, 0, NULL, &s)};
  fg_tensor *y = run(g, f, 3, "y", 1);
  /* row 0: (10x - 0.5) / 2; row 1: max((-x - 0.5) / 2, -1.25) */
  const double want[6] = {4.75, 9.75, 14.75, -1.25, -1.25, -1.25};
  check_values(y, want, 6, "column and scalar");
  FG_CHECK_INT(fg_tensor_dtype(y), FG_F64);
  for (int i = 0; i < 3; i++)
    fg_tensor_free(f[i]);
  fg_tensor_free(y);
  fg_graph_free(g);
}

/* [2,1] and [1,3]: the output is larger than either input. */
FG_TEST(fused_broadcast_both_sides, "") {
  fg_graph *g = fg_graph_new();
  int64_t c[2] = {2, 1}, r[2] = {1, 3};
  fg_output in[2] = {fg_placeholder(g, "x0", FG_F32, 2, c), fg_placeholder(g, "x1", FG_F32, 2, r)};
  fg_output y = fused(g, "y", in, 2, "add(x0, x1)");
  int64_t od[FG_MAX_RANK];
  FG_CHECK_INT(fg_output_shape(g, y, od), 2);
  double a[2] = {1, 2}, b[3] = {10, 20, 30};
  fg_tensor *f[2] = {tensor_of_doubles(FG_F32, 2, c, a), tensor_of_doubles(FG_F32, 2, r, b)};
  fg_tensor *t = run(g, f, 2, "y", 1);
  const double want[6] = {11, 21, 31, 12, 22, 32};
  check_values(t, want, 6, "[2,1] + [1,3]");
  FG_CHECK_INT(fg_tensor_dim(t, 0), 2);
  FG_CHECK_INT(fg_tensor_dim(t, 1), 3);
  fg_tensor_free(t), fg_tensor_free(f[0]), fg_tensor_free(f[1]);
  fg_graph_free(g);
}

FG_TEST(fused_select_bool_input_and_comparison, "") {
  fg_graph *g = fg_graph_new();
  int64_t d[2] = {2, 3};
  fg_output in[3] = {fg_placeholder(g, "x0", FG_BOOL, 2, d), fg_placeholder(g, "x1", FG_F32, 2, d),
                     fg_placeholder(g, "x2", FG_F32, 0, NULL)};
  fused(g, "sel", in, 3, "neg(x1); select(x0, t0, x2)");
  fg_graph *g2 = fg_graph_new();
  fg_output x = fg_placeholder(g2, "x0", FG_F32, 2, d);
  fused(g2, "cmp", &x, 1, "greater(x0, 3); select(t0, x0, 0)");
  fused(g2, "less", &x, 1, "less(x0, 2.5); select(t0, -1, x0)");
  double c[6] = {1, 0, 1, 0, 0, 1}, v[6] = {1, 2, 3, 4, 5, 6}, s = -7;
  fg_tensor *f[3] = {tensor_of_doubles(FG_BOOL, 2, d, c), tensor_of_doubles(FG_F32, 2, d, v),
                     tensor_of_doubles(FG_F32, 0, NULL, &s)};
  fg_tensor *t = run(g, f, 3, "sel", 1);
  const double w1[6] = {-1, -7, -3, -7, -7, -6}, w2[6] = {0, 0, 0, 4, 5, 6},
               w3[6] = {-1, -1, 3, 4, 5, 6};
  check_values(t, w1, 6, "select(bool, neg, scalar)");
  fg_tensor_free(t);
  t = run(g2, f + 1, 1, "cmp", 1);
  check_values(t, w2, 6, "select(x > 3, x, 0)");
  fg_tensor_free(t);
  t = run(g2, f + 1, 1, "less", 1);
  check_values(t, w3, 6, "select(x < 2.5, -1, x)");
  fg_tensor_free(t);
  for (int i = 0; i < 3; i++)
    fg_tensor_free(f[i]);
  fg_graph_free(g);
  fg_graph_free(g2);
}

FG_TEST(fused_attributes_and_defaults_f64, "") {
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {5};
  fg_output x = fg_placeholder(g, "x0", FG_F64, 1, d);
  fused(g, "y", &x, 1, "leaky_relu(x0, alpha=0.25); clip(t0, min=-0.5, max=2)");
  fused(g, "dflt", &x, 1, "leaky_relu(x0)");
  double v[5] = {-4, -1, 0, 1, 3};
  fg_tensor *f = tensor_of_doubles(FG_F64, 1, d, v);
  fg_tensor *t = run(g, &f, 1, "y", 1);
  const double w[5] = {-0.5, -0.25, 0, 1, 2};
  check_values(t, w, 5, "leaky_relu+clip");
  fg_tensor_free(t);
  t = run(g, &f, 1, "dflt", 1);
  /* leaky_relu's default alpha, 0.01 */
  const double w2[5] = {-4 * 0.01, -1 * 0.01, 0, 1, 3};
  check_values(t, w2, 5, "leaky_relu default");
  fg_tensor_free(t);
  fg_tensor_free(f);
  fg_graph_free(g);
}

/* ---- the same bits as the ops' own kernels -------------------------------- */

/* The unfused node of op on (a, b, c) with its attributes, and the
 * program text that says the same. */
static fg_output unfused(fg_graph *g, const char *op, fg_output a, fg_output b, fg_output c,
                         char *prog, size_t size) {
  fg_attrs *at = fg_attrs_new();
  fg_output in[3] = {a, b, c}, o;
  int n = 1;
  snprintf(prog, size, "%s(x0)", op);
  if (!strcmp(op, "leaky_relu") || !strcmp(op, "elu")) {
    fg_attrs_set_float(at, "alpha", 0.3);
    snprintf(prog, size, "%s(x0, alpha=0.3)", op);
  } else if (!strcmp(op, "softplus")) {
    fg_attrs_set_float(at, "beta", 1.5);
    fg_attrs_set_float(at, "threshold", 2);
    snprintf(prog, size, "softplus(x0, beta=1.5, threshold=2)");
  } else if (!strcmp(op, "clip")) {
    fg_attrs_set_float(at, "min", -0.7);
    fg_attrs_set_float(at, "max", 0.9);
    snprintf(prog, size, "clip(x0, min=-0.7, max=0.9)");
  } else if (!strcmp(op, "select")) {
    n = 3;
    snprintf(prog, size, "select(x2, x0, x1)");
    in[0] = c, in[1] = a, in[2] = b;
  } else if (strstr("add sub mul div maximum minimum pow", op)) {
    n = 2;
    snprintf(prog, size, "%s(x0, x1)", op);
  }
  o = fg_op(g, op, NULL, in, n, at);
  fg_attrs_free(at);
  return o;
}

static const char *const every_op[] = {
    "add",  "sub",        "mul",   "div",      "maximum", "minimum", "pow",  "select",
    "neg",  "exp",        "log",   "sqrt",     "rsqrt",   "abs",     "tanh", "sigmoid",
    "relu", "leaky_relu", "elu",   "softplus", "clip",    "silu",    "gelu", "erf",
    "sign", "reciprocal", "floor", "ceil",     "round"};

static void bits_equal_every_op(fg_dtype dt) {
  int64_t d[2] = {37, 53}, r[1] = {53};
  double *a = malloc(37 * 53 * sizeof *a), b[53], *c = malloc(37 * 53 * sizeof *c);
  uint64_t s = 7;
  for (int i = 0; i < 37 * 53; i++) {
    a[i] = rng_unit(&s) * 6; /* spans the kinks, the exp range, negatives for log/sqrt */
    c[i] = rng_next(&s) & 1;
  }
  for (int i = 0; i < 53; i++)
    b[i] = i == 5 ? a[5] : rng_unit(&s) * 3; /* a tie for maximum/minimum */
  a[7] = NAN, a[11] = -0.0, a[13] = INFINITY, a[17] = 2.5, b[17 % 53] = 2;
  fg_tensor *f[3] = {tensor_of_doubles(dt, 2, d, a), tensor_of_doubles(dt, 1, r, b),
                     tensor_of_doubles(FG_BOOL, 2, d, c)};
  int n_ops = (int)(sizeof every_op / sizeof every_op[0]);
  for (int k = 0; k < n_ops; k++) {
    fg_graph *g = fg_graph_new();
    fg_output x0 = fg_placeholder(g, "x0", dt, 2, d), x1 = fg_placeholder(g, "x1", dt, 1, r),
              x2 = fg_placeholder(g, "x2", FG_BOOL, 2, d);
    char prog[128];
    fg_set_name(g, unfused(g, every_op[k], x0, x1, x2, prog, sizeof prog), "ref");
    fg_output in[3] = {x0, x1, x2};
    fused(g, "fused", in, 3, prog);
    if (fg_graph_status(g, NULL) != FG_OK) {
      FG_FAIL_AT("%s: the graph failed", every_op[k]);
      fg_graph_free(g);
      continue;
    }
    fg_tensor *want = run(g, f, 3, "ref", 1), *got = run(g, f, 3, "fused", 1);
    FG_REQUIRE(want && got);
    if (fg_tensor_num_bytes(want) != fg_tensor_num_bytes(got) ||
        memcmp(fg_tensor_data(want), fg_tensor_data(got), fg_tensor_num_bytes(got)) != 0)
      FG_FAIL_AT("%s %s: fused bits differ from the op's kernel", every_op[k], fg_dtype_name(dt));
    fg_tensor_free(want), fg_tensor_free(got);
    fg_graph_free(g);
  }
  for (int i = 0; i < 3; i++)
    fg_tensor_free(f[i]);
  free(a), free(c);
}

FG_TEST(fused_bits_equal_unfused_kernels_f32, "") { bits_equal_every_op(FG_F32); }
FG_TEST(fused_bits_equal_unfused_kernels_f64, "") { bits_equal_every_op(FG_F64); }

/* A long program (comparisons, constants, a column and a row input)
 * against the same chain of unfused nodes, at 1, 2 and 3 threads on
 * 77100 elements (several chunks per thread). */
FG_TEST(fused_chain_same_bits_any_thread_count, "") {
  int64_t d[2] = {300, 257}, col[2] = {300, 1}, row[1] = {257};
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x0", FG_F32, 2, d), cc = fg_placeholder(g, "x1", FG_F32, 2, col),
            rr = fg_placeholder(g, "x2", FG_F32, 1, row);
  fg_output t = fg_mul(g, fg_add(g, x, cc), rr);
  fg_output m = fg_greater(g, t, fg_scalar(g, FG_F32, 0.25));
  t = fg_select(g, m, fg_exp(g, fg_neg(g, t)), fg_tanh(g, t));
  t = fg_sub(g, fg_sigmoid(g, t), fg_scalar(g, FG_F32, 0.5));
  fg_set_name(g, fg_maximum(g, fg_gelu(g, t), fg_div(g, t, cc)), "ref");
  fg_output in[3] = {x, cc, rr};
  fused(g, "fused", in, 3,
        "add(x0, x1); mul(t0, x2); greater(t1, 0x1p-2); neg(t1); exp(t3); tanh(t1); "
        "select(t2, t4, t5); sigmoid(t6); sub(t7, 0.5); gelu(t8); div(t8, x1); maximum(t9, t10)");
  FG_REQUIRE(fg_graph_status(g, NULL) == FG_OK);
  double *a = malloc(300 * 257 * sizeof *a), b[300], c[257];
  uint64_t s = 11;
  for (int i = 0; i < 300 * 257; i++)
    a[i] = rng_unit(&s) * 4;
  for (int i = 0; i < 300; i++)
    b[i] = rng_unit(&s) + (i == 0 ? 0 : 1.5);
  for (int i = 0; i < 257; i++)
    c[i] = rng_unit(&s) * 2;
  fg_tensor *f[3] = {tensor_of_doubles(FG_F32, 2, d, a), tensor_of_doubles(FG_F32, 2, col, b),
                     tensor_of_doubles(FG_F32, 1, row, c)};
  fg_tensor *want = run(g, f, 3, "ref", 1);
  FG_REQUIRE(want);
  for (int threads = 1; threads <= 3; threads++) {
    fg_tensor *got = run(g, f, 3, "fused", threads);
    FG_REQUIRE(got);
    if (memcmp(fg_tensor_data(want), fg_tensor_data(got), fg_tensor_num_bytes(want)) != 0)
      FG_FAIL_AT("%d threads: the fused chain's bits differ from the unfused nodes'", threads);
    fg_tensor_free(got);
  }
  fg_tensor_free(want);
  for (int i = 0; i < 3; i++)
    fg_tensor_free(f[i]);
  free(a);
  fg_graph_free(g);
}

/* The kernel called directly with its output in input 0's bytes (the
 * planner may share them: the op is in place): -(x*y + x), 1500 elements
 * over three blocks, against the same arithmetic in plain C. */
FG_TEST(fused_output_in_input0_bytes, "") {
  enum { N = 1500 };
  float x[N], y[N], want[N];
  uint64_t s = 5;
  for (int i = 0; i < N; i++) {
    x[i] = (float)rng_unit(&s) * 3;
    y[i] = (float)rng_unit(&s) * 3;
    float t = x[i] * y[i];
    t = t + x[i];
    want[i] = -t;
  }
  fg_op_params p;
  char err[256] = "";
  FG_REQUIRE(fg_fused_parse("mul(x0, x1); add(t0, x0); neg(t1)", 2, &p.fused, err, sizeof err) ==
             0);
  fg_kbuf in[2] = {{FG_F32, 1, {N}, x, 0}, {FG_F32, 1, {N}, y, 0}};
  fg_kbuf out = {FG_F32, 1, {N}, x, 0};
  fg_kctx c;
  memset(&c, 0, sizeof c);
  c.in = in, c.n_in = 2, c.out = &out, c.n_out = 1, c.p = &p, c.err = err, c.err_size = sizeof err;
  fg_kernel_fn fn = fg_cpu_kernel("fused_elementwise", FG_F32);
  FG_REQUIRE(fn != NULL);
  FG_CHECK_INT(fn(&c), 0);
  FG_CHECK(memcmp(x, want, sizeof want) == 0);
}

/* Text to parameters and back: constants and attributes (defaults filled
 * in) print as C99 hex floats, which parse back to the same doubles. */
FG_TEST(fused_program_text_round_trip, "") {
  fg_fused_params p, q;
  char err[256] = "", text[512];
  FG_REQUIRE(fg_fused_parse("leaky_relu(x0, alpha=0.01) ;add(t0,0.1); softplus(t1); "
                            "select(x1, t2, -inf)",
                            2, &p, err, sizeof err) == 0);
  FG_CHECK_INT(p.n_instrs, 4);
  FG_CHECK_INT(p.n_consts, 2);
  FG_CHECK(fg_fused_format(&p, text, sizeof text) > 0);
  FG_CHECK_STR(text, "leaky_relu(x0, alpha=0x1.47ae147ae147bp-7); add(t0, 0x1.999999999999ap-4); "
                     "softplus(t1, beta=0x1p+0, threshold=0x1.4p+4); select(x1, t2, -inf)");
  FG_REQUIRE(fg_fused_parse(text, 2, &q, err, sizeof err) == 0);
  FG_CHECK(memcmp(&p, &q, sizeof p) == 0);
  char ops[128];
  fg_fused_ops_list(&p, ops, sizeof ops);
  FG_CHECK_STR(ops, "leaky_relu+add+softplus+select");
  /* Too small a buffer: -1, never a cut program. */
  FG_CHECK_INT(fg_fused_format(&p, text, 20), -1);
}

/* ---- programs refused ------------------------------------------------------ */

typedef struct bad_case {
  const char *program;
  int n_inputs;
  fg_dtype dt0, dt1;
  const char *message;
} bad_case;

FG_TEST(fused_bad_programs_name_the_node, "badinput") {
  char many[1024] = "", consts[1024] = "";
  for (int i = 0; i < 33; i++)
    strcat(many, i ? "; relu(t0)" : "relu(x0)");
  /* 17 selects of two new constants each: 34 constants */
  for (int i = 0; i < 17; i++)
    snprintf(consts + strlen(consts), sizeof consts - strlen(consts), "%sselect(%s, %d, %d)",
             i ? "; " : "", i ? "t0" : "x0", 2 * i + 1, 2 * i + 2);
  const bad_case cases[] = {
      {"foo(x0)", 1, FG_F32, FG_F32, "instruction 0: 'foo' is no op a fused program runs"},
      {"cast(x0)", 1, FG_F32, FG_F32, "is no op a fused program runs"},
      {"add(x0, y)", 1, FG_F32, FG_F32, "cannot read an argument at 'y)'"},
      {"add(t0, x0)", 1, FG_F32, FG_F32, "argument 't0' refers to instruction 0, not an earlier"},
      {"relu(x0); add(t1, x0)", 1, FG_F32, FG_F32, "instruction 1: argument 't1' refers"},
      {"relu(x2)", 2, FG_F32, FG_F32, "argument 'x2': the node has 2 inputs"},
      {"add(x0)", 1, FG_F32, FG_F32, "add takes 2 arguments, got 1"},
      {"relu(x0, x0)", 1, FG_F32, FG_F32, "relu takes 1 arguments, got 2"},
      {"select(x0, x0, x0, x0)", 1, FG_F32, FG_F32, "more than 3 arguments"},
      {many, 1, FG_F32, FG_F32, "more than 32 instructions"},
      {consts, 1, FG_F32, FG_F32, "more than 32 constants"},
      {"greater(x0, x1)", 2, FG_F32, FG_F32, "the last instruction is a comparison"},
      {"less(x0, 1); add(t0, x0)", 1, FG_F32, FG_F32, "argument 0 reads comparison t0"},
      {"add(x0, x1)", 2, FG_BOOL, FG_F32, "argument 0 reads bool input x0"},
      {"add(x0, x1)", 2, FG_F32, FG_F64, "input 1 is f64 where an earlier input is f32"},
      {"add(x0, x1)", 2, FG_I32, FG_I32, "input 0 is i32; a fused program reads f32, f64 or bool"},
      {"select(x0, 1, 2)", 1, FG_BOOL, FG_BOOL, "no f32 or f64 input gives the output's dtype"},
      {"relu(x0, alpha=1)", 1, FG_F32, FG_F32, "relu has no attribute 'alpha'"},
      {"clip(x0, max=1)", 1, FG_F32, FG_F32, "clip needs attribute 'min'"},
      {"clip(x0, min=2, max=1)", 1, FG_F32, FG_F32, "clip's min 2 is above its max 1"},
      {"elu(x0, alpha=inf)", 1, FG_F32, FG_F32, "attribute 'alpha' needs a finite number"},
      {"relu(x0) relu(t0)", 1, FG_F32, FG_F32, "expected ';' at 'relu(t0)'"},
      {"relu x0", 1, FG_F32, FG_F32, "expected '(' after relu"},
      {"", 1, FG_F32, FG_F32, "the program has no instructions"},
      {NULL, 1, FG_F32, FG_F32, "missing attribute 'program' (string)"},
  };
  int n = (int)(sizeof cases / sizeof cases[0]);
  int64_t d[1] = {4};
  for (int k = 0; k < n; k++) {
    fg_graph *g = fg_graph_new();
    fg_output in[2] = {fg_placeholder(g, "a", cases[k].dt0, 1, d),
                       fg_placeholder(g, "b", cases[k].dt1, 1, d)};
    fg_attrs *a = fg_attrs_new();
    if (cases[k].program) fg_attrs_set_string(a, "program", cases[k].program);
    fg_op(g, "fused_elementwise", "the_fused", in, cases[k].n_inputs, a);
    fg_attrs_free(a);
    fg_status *st = fg_status_new();
    if (fg_graph_status(g, st) == FG_OK) {
      FG_FAIL_AT("case %d (%s): accepted", k, cases[k].message);
    } else {
      FG_CHECK_STR_CONTAINS(fg_status_message(st), "node 'the_fused' (fused_elementwise)");
      FG_CHECK_STR_CONTAINS(fg_status_message(st), cases[k].message);
    }
    fg_status_free(st);
    fg_graph_free(g);
  }
}

/* 17 inputs: over the op's maximum of 16. */
FG_TEST(fused_too_many_inputs, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output in[17];
  for (int i = 0; i < 17; i++)
    in[i] = fg_placeholder(g, NULL, FG_F32, 0, NULL);
  fused(g, "wide", in, 17, "relu(x0)");
  fg_status *st = fg_status_new();
  FG_CHECK(fg_graph_status(g, st) != FG_OK);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "wide");
  fg_status_free(st);
  fg_graph_free(g);
}
