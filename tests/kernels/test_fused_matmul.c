/* fused_matmul's CPU kernel (kernels/cpu/matmul.c's tiles and
 * kernels/cpu/matvec.c's spans with an epilogue): the same bits as the
 * matmul, add and relu kernels run one after another (NaN, -0.0 and
 * infinities in the data), on the GEMM tiles (one and several, with
 * thread pools of 1 to 3) and the few-row path, f32 and f64, every
 * transpose, stacked and per-batch products and K = 0; values against a
 * double loop; shape inference, FLOPs, the builder; and bad inputs: a bias
 * of the wrong length or dtype, an unknown activation name. The same for
 * the gradient epilogues' kernels: fused_matmul_relu_grad against
 * matmul -> greater -> select, matmul_bias_grad against matmul and
 * sum_to, both against values computed here. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor/threadpool.h"
#include "fgtest.h"
#include "flowgraph/flowgraph.h"
#include "graph/op_table.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/matvec.h"
#include "test_kernels_util.h"

typedef struct fm_case {
  fg_dtype dt;
  int ar, br, orank;
  int64_t ad[4], bd[4], od[4];
  int ta, tb;
} fm_case;

static const fm_case CASES[] = {
    {FG_F32, 2, 2, 2, {7, 33}, {33, 5}, {7, 5}, 0, 0},               /* few rows: matvec */
    {FG_F32, 2, 2, 2, {1, 300}, {300, 70}, {1, 70}, 0, 0},           /* batch 1 */
    {FG_F64, 2, 2, 2, {33, 8}, {5, 33}, {8, 5}, 1, 1},               /* both transposed */
    {FG_F32, 2, 2, 2, {8, 64}, {90, 64}, {8, 90}, 0, 1},             /* dot products */
    {FG_F32, 2, 2, 2, {130, 70}, {70, 45}, {130, 45}, 0, 0},         /* GEMM tiles */
    {FG_F64, 2, 2, 2, {70, 130}, {45, 70}, {130, 45}, 1, 1},         /* GEMM, transposes */
    {FG_F32, 2, 2, 2, {600, 256}, {256, 520}, {600, 520}, 0, 0},     /* several tiles */
    {FG_F64, 2, 2, 2, {256, 300}, {512, 256}, {300, 512}, 1, 1},     /* several, f64 */
    {FG_F32, 4, 2, 4, {2, 3, 20, 9}, {9, 11}, {2, 3, 20, 11}, 0, 0}, /* stacked over b */
    {FG_F32, 3, 3, 3, {3, 9, 20}, {3, 9, 11}, {3, 20, 11}, 1, 0},    /* per batch */
    {FG_F64, 3, 3, 3, {3, 1, 9}, {1, 11, 9}, {3, 1, 11}, 0, 1},      /* broadcast, few rows */
    {FG_F32, 2, 2, 2, {7, 0}, {0, 5}, {7, 5}, 0, 0},                 /* K = 0: bias alone */
};
#define N_CASES (sizeof CASES / sizeof CASES[0])

/* Uniform in [-1, 1) with, when special, a NaN, infinities and -0.0 at a
 * few places (so sums, the bias add and the relu meet them). */
static void *fill(fg_dtype dt, int64_t n, int special, uint64_t *s) {
  void *p = malloc((size_t)(n > 0 ? n : 1) * float_size(dt));
  static const double sp[] = {NAN, INFINITY, -INFINITY, -0.0};
  for (int64_t i = 0; p && i < n; i++)
    elem_store(p, dt, i, special && i % 97 == 5 ? sp[(i / 97) % 4] : rng_unit(s));
  return p;
}

static fg_kbuf buf(fg_dtype dt, int rank, const int64_t *dims, void *data) {
  fg_kbuf b = {.dtype = dt, .rank = rank, .data = data};
  memcpy(b.dims, dims, (size_t)rank * sizeof *dims);
  return b;
}

/* Runs kernel `op` of c's dtype on n_in inputs into out; its code. */
static int run_kernel(const char *op, const fm_case *c, const fg_kbuf *in, int n_in, fg_kbuf *out,
                      const fg_op_params *p, const fg_kparallel *par, char *err) {
  err[0] = 0;
  fg_kctx ctx = {in,   n_in, out, 1, p, err, 256, par, NULL, NULL,
                 NULL, NULL, 0,   0, 0, 0,   0,   0,   NULL};
  return fg_cpu_kernel(op, c->dt)(&ctx);
}

/* fused_matmul(a, b, bias) of c into a fresh buffer. */
static void *run_fused(const fm_case *c, void *a, void *b, void *bias, int relu,
                       const fg_kparallel *par, int *rc, char *err) {
  const int64_t n = c->od[c->orank - 1];
  fg_kbuf in[3] = {buf(c->dt, c->ar, c->ad, a), buf(c->dt, c->br, c->bd, b),
                   buf(c->dt, 1, &n, bias)};
  void *o = malloc((size_t)dims_count(c->orank, c->od) * float_size(c->dt) + 8);
  memset(o, 0xA5, (size_t)dims_count(c->orank, c->od) * float_size(c->dt));
  fg_kbuf out = buf(c->dt, c->orank, c->od, o);
  fg_op_params p;
  memset(&p, 0, sizeof p);
  p.fused_matmul.transpose_a = c->ta, p.fused_matmul.transpose_b = c->tb;
  p.fused_matmul.activation = relu ? FG_ACTIVATION_RELU : FG_ACTIVATION_NONE;
  *rc = run_kernel("fused_matmul", c, in, 3, &out, &p, par, err);
  return o;
}

/* matmul, then add (of bias [N]), then relu, each its own kernel. */
static void *run_unfused(const fm_case *c, void *a, void *b, void *bias, int relu, char *err) {
  const int64_t n = c->od[c->orank - 1], total = dims_count(c->orank, c->od);
  void *mm = malloc((size_t)total * float_size(c->dt) + 8),
       *sum = malloc((size_t)total * float_size(c->dt) + 8);
  fg_kbuf in[2] = {buf(c->dt, c->ar, c->ad, a), buf(c->dt, c->br, c->bd, b)};
  fg_kbuf out = buf(c->dt, c->orank, c->od, mm);
  fg_op_params p;
  memset(&p, 0, sizeof p);
  p.matmul.transpose_a = c->ta, p.matmul.transpose_b = c->tb;
  int rc = run_kernel("matmul", c, in, 2, &out, &p, NULL, err);
  fg_kbuf add_in[2] = {out, buf(c->dt, 1, &n, bias)};
  fg_kbuf add_out = buf(c->dt, c->orank, c->od, sum);
  memset(&p, 0, sizeof p);
  rc = rc ? rc : run_kernel("add", c, add_in, 2, &add_out, &p, NULL, err);
  if (relu && rc == 0) {
    fg_kbuf relu_out = buf(c->dt, c->orank, c->od, mm);
    rc = run_kernel("relu", c, &add_out, 1, &relu_out, &p, NULL, err);
    free(sum);
    return rc ? (free(mm), NULL) : mm;
  }
  free(mm);
  return rc ? (free(sum), NULL) : sum;
}

/* The first element whose bits differ, or -1. Two NaNs count as equal:
 * where both operands of an add are NaN, IEEE 754 leaves open which one's
 * sign and payload the sum carries, and the compiler may swap the
 * operands of the add kernel's vector loop (it did: a NaN sum of NaN +
 * NaN came out with the other sign). Every other value, -0.0 and the
 * infinities included, must match bit for bit, and a NaN must stay NaN. */
static int64_t first_difference(fg_dtype dt, const void *got, const void *want, int64_t n) {
  const size_t es = float_size(dt);
  for (int64_t e = 0; e < n; e++) {
    const double g = elem_as_double(got, dt, e), w = elem_as_double(want, dt, e);
    if (isnan(g) && isnan(w)) continue;
    if (memcmp((const char *)got + e * es, (const char *)want + e * es, es) != 0) return e;
  }
  return -1;
}

/* The fused kernel gives the unfused chain's bits, with NaN, infinities
 * and -0.0 among the inputs, relu or none. */
FG_TEST(fused_matmul_bits_equal_matmul_add_relu, "") {
  uint64_t seed = 5;
  for (size_t i = 0; i < N_CASES; i++)
    for (int relu = 0; relu < 2; relu++)
      for (int special = 0; special < 2; special++) {
        const fm_case *c = &CASES[i];
        const int64_t n = c->od[c->orank - 1], total = dims_count(c->orank, c->od);
        void *a = fill(c->dt, dims_count(c->ar, c->ad), special, &seed);
        void *b = fill(c->dt, dims_count(c->br, c->bd), 0, &seed);
        void *bias = fill(c->dt, n, special, &seed);
        char err[256];
        int rc;
        void *want = run_unfused(c, a, b, bias, relu, err);
        void *got = run_fused(c, a, b, bias, relu, NULL, &rc, err);
        FG_REQUIRE(want != NULL);
        FG_CHECK_INT(rc, 0);
        const int64_t e = rc == 0 ? first_difference(c->dt, got, want, total) : -1;
        if (e >= 0)
          FG_FAIL_AT("case %zu relu %d special %d: element %lld = %.17g differs from matmul -> "
                     "add -> relu's %.17g",
                     i, relu, special, (long long)e, elem_as_double(got, c->dt, e),
                     elem_as_double(want, c->dt, e));
        free(a), free(b), free(bias), free(want), free(got);
      }
}

/* The same bits for every thread count (the tiles are fixed by the shape). */
FG_TEST(fused_matmul_bits_independent_of_threads, "") {
  fg_pool *pools[4] = {NULL, fg_pool_new(1), fg_pool_new(2), fg_pool_new(3)};
  FG_REQUIRE(pools[1] && pools[2] && pools[3]);
  uint64_t seed = 9;
  for (size_t i = 0; i < N_CASES; i++) {
    const fm_case *c = &CASES[i];
    const int64_t total = dims_count(c->orank, c->od);
    void *a = fill(c->dt, dims_count(c->ar, c->ad), 0, &seed);
    void *b = fill(c->dt, dims_count(c->br, c->bd), 0, &seed);
    void *bias = fill(c->dt, c->od[c->orank - 1], 0, &seed);
    char err[256];
    int rc;
    void *o0 = run_fused(c, a, b, bias, 1, NULL, &rc, err);
    FG_CHECK_INT(rc, 0);
    for (int t = 1; t <= 3; t++) {
      const fg_kparallel par = {pools[t], fg_pool_parallel_for_fn};
      void *o = run_fused(c, a, b, bias, 1, &par, &rc, err);
      FG_CHECK_INT(rc, 0);
      if (memcmp(o, o0, (size_t)total * float_size(c->dt)) != 0)
        FG_FAIL_AT("case %zu: %d threads differ from par NULL", i, t);
      free(o);
    }
    free(a), free(b), free(bias), free(o0);
  }
  for (int t = 1; t <= 3; t++)
    fg_pool_free(pools[t]);
}

/* Output e of act(a @ b + bias) in double, and its terms' magnitudes. */
static double ref(const fm_case *c, const void *a, const void *b, const void *bias, int relu,
                  int64_t e, double *mag) {
  const int R = c->orank;
  const int64_t M = c->od[R - 2], N = c->od[R - 1];
  const int64_t K = c->ta ? c->ad[c->ar - 2] : c->ad[c->ar - 1];
  const int64_t i = (e / N) % M, j = e % N;
  int64_t ab, bb;
  mm_batch_of(R, c->od, c->ar, c->ad, c->br, c->bd, e / (M * N), &ab, &bb);
  double s = elem_as_double(bias, c->dt, j);
  *mag = fabs(s);
  for (int64_t k = 0; k < K; k++) {
    const double av = elem_as_double(a, c->dt, ab * M * K + (c->ta ? k * M + i : i * K + k));
    const double bv = elem_as_double(b, c->dt, bb * K * N + (c->tb ? j * K + k : k * N + j));
    s += av * bv;
    *mag += fabs(av * bv);
  }
  return relu && s < 0 ? 0 : s;
}

/* Values against a double loop, within K + 3 roundings of the terms. */
FG_TEST(fused_matmul_values_vs_double_loop, "") {
  uint64_t seed = 21;
  for (size_t i = 0; i < N_CASES; i++)
    for (int relu = 0; relu < 2; relu++) {
      const fm_case *c = &CASES[i];
      const int64_t K = c->ta ? c->ad[c->ar - 2] : c->ad[c->ar - 1];
      void *a = fill(c->dt, dims_count(c->ar, c->ad), 0, &seed);
      void *b = fill(c->dt, dims_count(c->br, c->bd), 0, &seed);
      void *bias = fill(c->dt, c->od[c->orank - 1], 0, &seed);
      char err[256];
      int rc, bad = 0, negatives = 0;
      void *o = run_fused(c, a, b, bias, relu, NULL, &rc, err);
      FG_CHECK_INT(rc, 0);
      const double u = c->dt == FG_F64 ? 0x1p-53 : 0x1p-24;
      for (int64_t e = 0, n = dims_count(c->orank, c->od); rc == 0 && e < n; e++) {
        double mag;
        const double want = ref(c, a, b, bias, relu, e, &mag), got = elem_as_double(o, c->dt, e);
        negatives += got < 0;
        if (!(fabs(got - want) <= (double)(K + 3) * u * mag) && bad++ < 3)
          fprintf(stderr, "  case %zu: element %lld = %.17g, want %.17g\n", i, (long long)e, got,
                  want);
      }
      FG_CHECK_INT(bad, 0);
      if (relu) FG_CHECK_INT(negatives, 0);
      free(a), free(b), free(bias), free(o);
    }
}

/* A bias that is not [N] of the product's dtype, and an activation the
 * params do not know, are refused with a message. */
FG_TEST(fused_matmul_kernel_bad_inputs, "badinput") {
  const fm_case *c = &CASES[0]; /* [7, 33] @ [33, 5] */
  uint64_t seed = 1;
  void *a = fill(FG_F32, 7 * 33, 0, &seed), *b = fill(FG_F32, 33 * 5, 0, &seed);
  double bias[6] = {0};
  float out[35];
  const int64_t n6 = 6, n5 = 5, d15[2] = {1, 5};
  const fg_kbuf base[2] = {buf(FG_F32, 2, c->ad, a), buf(FG_F32, 2, c->bd, b)};
  const fg_kbuf biases[3] = {buf(FG_F32, 1, &n6, bias), buf(FG_F64, 1, &n5, bias),
                             buf(FG_F32, 2, d15, bias)};
  const char *want[3] = {"input 2 (bias) must have shape [N] = [5], got rank 1 with 6 elements",
                         "input 2 (bias) is f64, expected f32",
                         "input 2 (bias) must have shape [N] = [5], got rank 2 with 5 elements"};
  fg_op_params p;
  memset(&p, 0, sizeof p);
  char err[256];
  for (int k = 0; k < 3; k++) {
    fg_kbuf in[3] = {base[0], base[1], biases[k]};
    fg_kbuf o = buf(FG_F32, 2, c->od, out);
    FG_CHECK_INT(run_kernel("fused_matmul", c, in, 3, &o, &p, NULL, err), -1);
    FG_CHECK_STR_CONTAINS(err, want[k]);
  }
  fg_kbuf in[3] = {base[0], base[1], buf(FG_F32, 1, &n5, bias)};
  fg_kbuf o = buf(FG_F32, 2, c->od, out);
  p.fused_matmul.activation = (fg_activation)7;
  FG_CHECK_INT(run_kernel("fused_matmul", c, in, 3, &o, &p, NULL, err), -1);
  FG_CHECK_STR_CONTAINS(err, "unknown activation 7");
  p.fused_matmul.activation = FG_ACTIVATION_NONE;
  FG_CHECK_INT(run_kernel("fused_matmul", c, in, 2, &o, &p, NULL, err), -1);
  FG_CHECK_STR_CONTAINS(err, "expected 3 inputs, got 2");
  free(a), free(b);
}

/* The builder: matmul's shapes, batched; FLOPs 2 M N K + 2 M N. */
FG_TEST(fused_matmul_builder_shapes_and_flops, "") {
  fg_graph *g = fg_graph_new();
  const int64_t da[3] = {2, 4, 6}, db[2] = {6, 5}, dbias[1] = {5};
  fg_output a = fg_placeholder(g, "a", FG_F32, 3, da), b = fg_placeholder(g, "b", FG_F32, 2, db);
  fg_output bias = fg_placeholder(g, "bias", FG_F32, 1, dbias);
  fg_output y = fg_fused_matmul(g, a, b, bias, 0, 0, "relu");
  FG_REQUIRE(y.node >= 0);
  const fg_tinfo *t = &g->nodes[y.node].outputs[0];
  FG_CHECK_INT(t->rank, 3);
  FG_CHECK(t->dims[0] == 2 && t->dims[1] == 4 && t->dims[2] == 5 && t->dtype == FG_F32);
  const fg_node *n = &g->nodes[y.node];
  fg_tinfo in[3] = {g->nodes[a.node].outputs[0], g->nodes[b.node].outputs[0],
                    g->nodes[bias.node].outputs[0]};
  /* 2*4*5 outputs: 2 * 40 * 6 multiply-adds' flops, 2 each for bias and relu. */
  FG_CHECK_INT(fg_op_table[FG_OP_FUSED_MATMUL].flops(n, in, t), 2 * 40 * 6 + 2 * 40);
  fg_op_params p;
  fg_status *st = fg_status_new();
  FG_CHECK_INT(fg_op_parse_params(n, in, &p, st), 0);
  FG_CHECK_INT(p.fused_matmul.activation, FG_ACTIVATION_RELU);
  fg_output z = fg_fused_matmul(g, b, a, bias, 1, 1, NULL); /* [5,6]^T... */
  (void)z;
  fg_status_free(st);
  fg_graph_free(g);
}

/* Graph-level refusals name the node and the value: an unknown
 * activation, a bias of the wrong length, rank or dtype. */
FG_TEST(fused_matmul_graph_bad_inputs, "badinput") {
  const int64_t da[2] = {4, 6}, db[2] = {6, 5}, d6[1] = {6}, d5[1] = {5}, d15[2] = {1, 5};
  struct {
    const char *act;
    int bias_kind; /* 0: [5] f32, 1: [6] f32, 2: [1, 5] f32, 3: [5] f64 */
    const char *want;
  } cases[] = {
      {"gelu", 0, "node 'fm' (fused_matmul): attribute 'activation' = 'gelu' is not an activation"},
      {"relu", 1, "node 'fm' (fused_matmul): input 2 (bias) shape [6] must be [N] = [5]"},
      {"none", 2, "node 'fm' (fused_matmul): input 2 (bias) shape [1,5] must be [N] = [5]"},
      {"relu", 3, "node 'fm' (fused_matmul): input 2 (bias) dtype f64 differs from input 0's f32"},
      /* clip is fused_conv2d's activation only */
      {"clip", 0, "node 'fm' (fused_matmul): attribute 'activation' = 'clip' is not an activation"},
  };
  for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
    fg_graph *g = fg_graph_new();
    fg_output a = fg_placeholder(g, "a", FG_F32, 2, da), b = fg_placeholder(g, "b", FG_F32, 2, db);
    const int kind = cases[k].bias_kind;
    fg_output bias = fg_placeholder(g, "bias", kind == 3 ? FG_F64 : FG_F32, kind == 2 ? 2 : 1,
                                    kind == 1   ? d6
                                    : kind == 2 ? d15
                                                : d5);
    fg_output in[3] = {a, b, bias};
    fg_attrs *at = fg_attrs_new();
    fg_attrs_set_string(at, "activation", cases[k].act);
    fg_output y = fg_op(g, "fused_matmul", "fm", in, 3, at);
    fg_attrs_free(at);
    FG_CHECK(y.node < 0);
    fg_status *st = fg_status_new();
    FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), cases[k].want);
    fg_status_free(st);
    fg_graph_free(g);
  }
}

/* The epilogue itself, on values whose sums are exact, so the result is
 * known by hand: x + b then x < 0 ? 0 : x keeps -0.0 (-0.0 + -0.0) and
 * NaN, and turns -0.5 and -0.25 into +0.0; -1 + 1 is +0.0; without the
 * relu the sums stay. Two rows 4 apart with 3 columns used (the 4th must
 * stay 7), from column 1 of the bias: -0.0, 1, 0.5. */
FG_TEST(fused_matmul_epilogue_rule_by_hand, "") {
  const double x[6] = {-0.0, NAN, -1, 2, -1, -0.75};
  const double bias[7] = {99, -0.0, 1, 0.5, 99, 99, 99};
  const double sum[6] = {-0.0, NAN, -0.5, 2, 0.0, -0.25};
  const double relu[6] = {-0.0, NAN, 0.0, 2, 0.0, 0.0};
  for (int d = 0; d < 2; d++)
    for (int r = 0; r < 2; r++) {
      const fg_dtype dt = d ? FG_F64 : FG_F32;
      double o64[8];
      float o32[8];
      void *o = d ? (void *)o64 : (void *)o32, *bs = d ? (void *)bias : malloc(7 * sizeof(float));
      for (int i = 0; i < 7 && !d; i++)
        ((float *)bs)[i] = (float)bias[i];
      for (int i = 0; i < 8; i++)
        elem_store(o, dt, i, i % 4 < 3 ? x[i / 4 * 3 + i % 4] : 7.0);
      const fgk_mm_epilogue e = {bs, r, NULL, NULL};
      fgk_mm_epilogue_apply(dt, &e, o, 4, 2, 1, 3);
      for (int i = 0; i < 8; i++) {
        const double got = elem_as_double(o, dt, i);
        const double want = i % 4 < 3 ? (r ? relu : sum)[i / 4 * 3 + i % 4] : 7.0;
        const int ok = isnan(want) ? isnan(got) : got == want && !signbit(got) == !signbit(want);
        if (!ok) FG_FAIL_AT("dtype %d relu %d element %d: %g, want %g", d, r, i, got, want);
      }
      if (!d) free(bs);
    }
}

/* Through the kernel, on the few-row path (1 row) and the GEMM tiles (300
 * rows): row i of a is 1 (K = 1), b's row [NaN, -1, 2], the bias [1, 0.5,
 * -0.0]: each output row is NaN, -0.5 -> 0 and 2. */
FG_TEST(fused_matmul_relu_keeps_nan, "") {
  static const int64_t rows[2] = {1, 300};
  for (int r = 0; r < 2; r++) {
    const fm_case c = {FG_F32, 2, 2, 2, {rows[r], 1}, {1, 3}, {rows[r], 3}, 0, 0};
    float *a = malloc((size_t)rows[r] * sizeof *a);
    for (int64_t i = 0; i < rows[r]; i++)
      a[i] = 1.0f;
    float b[3] = {NAN, -1.0f, 2.0f}, bias[3] = {1.0f, 0.5f, -0.0f};
    char err[256];
    int rc;
    float *o = run_fused(&c, a, b, bias, 1, NULL, &rc, err);
    FG_CHECK_INT(rc, 0);
    int bad = 0;
    for (int64_t i = 0; rc == 0 && i < rows[r]; i++)
      bad += !isnan(o[3 * i]) || o[3 * i + 1] != 0.0f || o[3 * i + 2] != 2.0f;
    FG_CHECK_INT(bad, 0);
    free(a), free(o);
  }
}

/* ---- fused_matmul_relu_grad and matmul_bias_grad ------------------------ */

/* fused_matmul_relu_grad(a, b, y) of c (y of the output's shape) with
 * the thread pool par, into a fresh buffer. */
static void *run_relu_grad(const fm_case *c, void *a, void *b, void *y, const fg_kparallel *par,
                           int *rc, char *err) {
  const int64_t total = dims_count(c->orank, c->od);
  fg_kbuf in[3] = {buf(c->dt, c->ar, c->ad, a), buf(c->dt, c->br, c->bd, b),
                   buf(c->dt, c->orank, c->od, y)};
  void *o = malloc((size_t)total * float_size(c->dt) + 8);
  memset(o, 0xA5, (size_t)total * float_size(c->dt));
  fg_kbuf out = buf(c->dt, c->orank, c->od, o);
  fg_op_params p;
  memset(&p, 0, sizeof p);
  p.matmul.transpose_a = c->ta, p.matmul.transpose_b = c->tb;
  *rc = run_kernel("fused_matmul_relu_grad", c, in, 3, &out, &p, par, err);
  return o;
}

/* relu's gradient as autodiff makes it: matmul, greater(y, 0), then
 * select(mask, product, 0), each its own kernel. */
static void *run_relu_grad_unfused(const fm_case *c, void *a, void *b, void *y, char *err) {
  const int64_t total = dims_count(c->orank, c->od);
  const size_t es = float_size(c->dt);
  void *mm = malloc((size_t)total * es + 8), *o = malloc((size_t)total * es + 8);
  unsigned char *mask = malloc((size_t)total + 8);
  double zero64 = 0;
  float zero32 = 0;
  void *zero = c->dt == FG_F64 ? (void *)&zero64 : (void *)&zero32;
  static const int64_t scalar_dims[1] = {1}; /* rank 0: none read */
  fg_kbuf in[2] = {buf(c->dt, c->ar, c->ad, a), buf(c->dt, c->br, c->bd, b)};
  fg_kbuf prod = buf(c->dt, c->orank, c->od, mm);
  fg_op_params p;
  memset(&p, 0, sizeof p);
  p.matmul.transpose_a = c->ta, p.matmul.transpose_b = c->tb;
  int rc = run_kernel("matmul", c, in, 2, &prod, &p, NULL, err);
  memset(&p, 0, sizeof p);
  fg_kbuf gt_in[2] = {buf(c->dt, c->orank, c->od, y), buf(c->dt, 0, scalar_dims, zero)};
  fg_kbuf gt_out = buf(FG_BOOL, c->orank, c->od, mask);
  fg_kctx gctx = {gt_in, 2,    &gt_out, 1, &p, err, 256, NULL, NULL, NULL,
                  NULL,  NULL, 0,       0, 0,  0,   0,   0,    NULL};
  rc = rc ? rc : fg_cpu_kernel("greater", c->dt)(&gctx);
  fg_kbuf sel_in[3] = {gt_out, prod, buf(c->dt, 0, scalar_dims, zero)};
  fg_kbuf sel_out = buf(c->dt, c->orank, c->od, o);
  rc = rc ? rc : run_kernel("select", c, sel_in, 3, &sel_out, &p, NULL, err);
  free(mm), free(mask);
  return rc ? (free(o), NULL) : o;
}

/* The fused kernel gives the bits of matmul -> greater -> select, with
 * NaN, infinities, -0.0 and +0.0 in a and in y, on every path (few rows,
 * GEMM tiles, stacked and per-batch products, K = 0) and thread count. */
FG_TEST(fused_matmul_relu_grad_bits_equal_the_chain, "") {
  fg_pool *pool = fg_pool_new(3);
  FG_REQUIRE(pool);
  const fg_kparallel par = {pool, fg_pool_parallel_for_fn};
  uint64_t seed = 31;
  for (size_t i = 0; i < N_CASES; i++)
    for (int special = 0; special < 2; special++) {
      const fm_case *c = &CASES[i];
      const int64_t total = dims_count(c->orank, c->od);
      void *a = fill(c->dt, dims_count(c->ar, c->ad), special, &seed);
      void *b = fill(c->dt, dims_count(c->br, c->bd), 0, &seed);
      void *y = fill(c->dt, total, 1, &seed);
      for (int64_t e = 3; e < total; e += 101)
        elem_store(y, c->dt, e, 0.0); /* +0.0 too: not > 0 */
      char err[256];
      int rc;
      void *want = run_relu_grad_unfused(c, a, b, y, err);
      FG_REQUIRE(want != NULL);
      for (int t = 0; t < 2; t++) {
        void *got = run_relu_grad(c, a, b, y, t ? &par : NULL, &rc, err);
        FG_CHECK_INT(rc, 0);
        if (rc == 0 && memcmp(got, want, (size_t)total * float_size(c->dt)) != 0)
          FG_FAIL_AT("case %zu special %d threads %d: bits differ from matmul -> greater -> "
                     "select",
                     i, special, t ? 3 : 0);
        free(got);
      }
      free(a), free(b), free(y), free(want);
    }
  fg_pool_free(pool);
}

/* Values known by hand: each row of a is 1 (K = 1) and b's row is [3, -2,
 * NaN, 5], so every product row is [3, -2, NaN, 5]; y's rows alternate
 * [1, 0, 2, -0.0] and [NaN, -1, 1, inf]: the outputs are [3, +0, NaN,
 * +0] and [+0, +0, NaN, 5]. On the few-row path (2 rows) and the GEMM
 * tiles (300 rows), f32 and f64. */
FG_TEST(fused_matmul_relu_grad_values_by_hand, "") {
  static const int64_t rows[2] = {2, 300};
  const double brow[4] = {3, -2, NAN, 5};
  const double yrow[2][4] = {{1, 0, 2, -0.0}, {NAN, -1, 1, INFINITY}};
  const double want[2][4] = {{3, 0, NAN, 0}, {0, 0, NAN, 5}};
  for (int d = 0; d < 2; d++)
    for (int r = 0; r < 2; r++) {
      const fg_dtype dt = d ? FG_F64 : FG_F32;
      const fm_case c = {dt, 2, 2, 2, {rows[r], 1}, {1, 4}, {rows[r], 4}, 0, 0};
      void *a = malloc((size_t)rows[r] * 8), *b = malloc(4 * 8), *y = malloc((size_t)rows[r] * 32);
      for (int64_t i = 0; i < rows[r]; i++) {
        elem_store(a, dt, i, 1.0);
        for (int j = 0; j < 4; j++)
          elem_store(y, dt, i * 4 + j, yrow[i % 2][j]);
      }
      for (int j = 0; j < 4; j++)
        elem_store(b, dt, j, brow[j]);
      char err[256];
      int rc, bad = 0;
      void *o = run_relu_grad(&c, a, b, y, NULL, &rc, err);
      FG_CHECK_INT(rc, 0);
      for (int64_t e = 0; rc == 0 && e < rows[r] * 4; e++) {
        const double got = elem_as_double(o, dt, e), w = want[(e / 4) % 2][e % 4];
        bad += isnan(w) ? !isnan(got) : got != w || signbit(got);
      }
      FG_CHECK_INT(bad, 0);
      free(a), free(b), free(y), free(o);
    }
}

/* matmul_bias_grad(a, dz) of a [R, K] and dz [R, N] into dw and db. */
static int run_bias_grad(fg_dtype dt, int64_t R, int64_t K, int64_t N, void *a, void *dz, void *dw,
                         void *db, char *err) {
  const int64_t da[2] = {R, K}, dd[2] = {R, N}, dwd[2] = {K, N};
  const fg_kbuf in[2] = {buf(dt, 2, da, a), buf(dt, 2, dd, dz)};
  fg_kbuf out[2] = {buf(dt, 2, dwd, dw), buf(dt, 1, &N, db)};
  fg_op_params p;
  memset(&p, 0, sizeof p);
  err[0] = 0;
  fg_kctx ctx = {in, 2, out, 2, &p, err, 256, NULL, NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0, 0, NULL};
  return fg_cpu_kernel("matmul_bias_grad", dt)(&ctx);
}

/* dw and db carry the bits of matmul(a, dz, transpose_a) and sum_to(dz,
 * [N]) run as their own kernels, and values within rounding of a double
 * loop, for few and many rows, f32 and f64, with NaN, infinities and -0.0
 * in dz where special. */
FG_TEST(matmul_bias_grad_bits_and_values, "") {
  static const struct {
    fg_dtype dt;
    int64_t R, K, N;
  } cases[] = {{FG_F32, 16, 12, 10},  {FG_F64, 5, 3, 7},     {FG_F32, 300, 130, 70},
               {FG_F64, 257, 64, 33}, {FG_F32, 128, 784, 8}, {FG_F32, 0, 4, 3}};
  uint64_t seed = 77;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (int special = 0; special < 2; special++) {
      const fg_dtype dt = cases[k].dt;
      const int64_t R = cases[k].R, K = cases[k].K, N = cases[k].N;
      const size_t es = float_size(dt);
      void *a = fill(dt, R * K, 0, &seed), *dz = fill(dt, R * N, special, &seed);
      void *dw = malloc((size_t)(K * N) * es + 8), *db = malloc((size_t)N * es + 8);
      void *dw0 = malloc((size_t)(K * N) * es + 8), *db0 = malloc((size_t)N * es + 8);
      char err[256];
      FG_CHECK_INT(run_bias_grad(dt, R, K, N, a, dz, dw, db, err), 0);
      /* The unfused kernels. */
      const int64_t da[2] = {R, K}, dd[2] = {R, N}, dwd[2] = {K, N};
      const fm_case c = {dt, 2, 2, 2, {R, K}, {R, N}, {K, N}, 1, 0};
      fg_kbuf in[2] = {buf(dt, 2, da, a), buf(dt, 2, dd, dz)};
      fg_kbuf o = buf(dt, 2, dwd, dw0), ob = buf(dt, 1, &N, db0);
      fg_op_params p;
      memset(&p, 0, sizeof p);
      p.matmul.transpose_a = 1;
      FG_CHECK_INT(run_kernel("matmul", &c, in, 2, &o, &p, NULL, err), 0);
      memset(&p, 0, sizeof p);
      FG_CHECK_INT(run_kernel("sum_to", &c, &in[1], 1, &ob, &p, NULL, err), 0);
      if (first_difference(dt, dw, dw0, K * N) >= 0 || first_difference(dt, db, db0, N) >= 0)
        FG_FAIL_AT("case %zu special %d: bits differ from matmul and sum_to", k, special);
      const double u = dt == FG_F64 ? 0x1p-53 : 0x1p-24;
      int bad = 0;
      for (int64_t j = 0; !special && j < N; j++) {
        double s = 0, mag = 0;
        for (int64_t r = 0; r < R; r++)
          s += elem_as_double(dz, dt, r * N + j), mag += fabs(elem_as_double(dz, dt, r * N + j));
        bad += !(fabs(elem_as_double(db, dt, j) - s) <= (double)(R + 2) * u * mag);
        for (int64_t i = 0; i < K; i++) {
          double t = 0, m = 0;
          for (int64_t r = 0; r < R; r++) {
            const double v = elem_as_double(a, dt, r * K + i) * elem_as_double(dz, dt, r * N + j);
            t += v, m += fabs(v);
          }
          bad += !(fabs(elem_as_double(dw, dt, i * N + j) - t) <= (double)(R + 2) * u * m);
        }
      }
      if (bad) FG_FAIL_AT("case %zu: %d values off the double loop", k, bad);
      free(a), free(dz), free(dw), free(db), free(dw0), free(db0);
    }
}

/* Kernel-level refusals name the input and the values. */
FG_TEST(matmul_grad_kernels_bad_inputs, "badinput") {
  float a[64] = {0}, b[64] = {0}, y[64] = {0}, o[64], o2[16];
  char err[256];
  const int64_t d45[2] = {4, 5}, d46[2] = {4, 6}, d65[2] = {6, 5}, d35[2] = {3, 5};
  const fm_case c = {FG_F32, 2, 2, 2, {4, 6}, {6, 5}, {4, 5}, 0, 0};
  fg_op_params p;
  memset(&p, 0, sizeof p);
  fg_kbuf in[3] = {buf(FG_F32, 2, d46, a), buf(FG_F32, 2, d65, b), buf(FG_F32, 2, d46, y)};
  fg_kbuf out = buf(FG_F32, 2, d45, o);
  FG_CHECK_INT(run_kernel("fused_matmul_relu_grad", &c, in, 3, &out, &p, NULL, err), -1);
  FG_CHECK_STR_CONTAINS(err, "input 2 (y) is f32 of rank 2 with 24 elements; it must be f32 of "
                             "the product's shape (rank 2, 20 elements)");
  in[2] = buf(FG_F64, 2, d45, y);
  FG_CHECK_INT(run_kernel("fused_matmul_relu_grad", &c, in, 3, &out, &p, NULL, err), -1);
  FG_CHECK_STR_CONTAINS(err, "input 2 (y) is f64 of rank 2 with 20 elements");
  FG_CHECK_INT(run_kernel("fused_matmul_relu_grad", &c, in, 2, &out, &p, NULL, err), -1);
  FG_CHECK_STR_CONTAINS(err, "expected 3 inputs, got 2");
  /* matmul_bias_grad: R differs; dz of another dtype; a db of 4. */
  fg_kbuf bin[2] = {buf(FG_F32, 2, d46, a), buf(FG_F32, 2, d35, b)};
  const int64_t n5 = 5, n4 = 4;
  fg_kbuf bout[2] = {buf(FG_F32, 2, d65, o), buf(FG_F32, 1, &n5, o2)};
  fg_kctx ctx = {bin,  2,    bout, 2, &p, err, 256, NULL, NULL, NULL,
                 NULL, NULL, 0,    0, 0,  0,   0,   0,    NULL};
  FG_CHECK_INT(fg_cpu_kernel("matmul_bias_grad", FG_F32)(&ctx), -1);
  FG_CHECK_STR_CONTAINS(err, "must be [R, K] and [R, N] with one R");
  bin[1] = buf(FG_F64, 2, d45, b);
  FG_CHECK_INT(fg_cpu_kernel("matmul_bias_grad", FG_F32)(&ctx), -1);
  FG_CHECK_STR_CONTAINS(err, "expected f32 inputs and outputs, got a f32, dz f64, dw f32, db f32");
  bin[1] = buf(FG_F32, 2, d45, b), bout[1] = buf(FG_F32, 1, &n4, o2);
  FG_CHECK_INT(fg_cpu_kernel("matmul_bias_grad", FG_F32)(&ctx), -1);
  FG_CHECK_STR_CONTAINS(err, "outputs must be dw [6, 5] and db [5]");
  ctx.n_out = 1;
  FG_CHECK_INT(fg_cpu_kernel("matmul_bias_grad", FG_F32)(&ctx), -1);
  FG_CHECK_STR_CONTAINS(err, "expected 2 outputs, got 1");
}

/* The builders: shapes, FLOPs, and refusals that name the node, the
 * input and the shapes. */
FG_TEST(matmul_grad_builders_shapes_flops_and_refusals, "badinput") {
  fg_graph *g = fg_graph_new();
  const int64_t da[2] = {4, 6}, dw[2] = {5, 6}, dy[2] = {4, 5}, dz[2] = {4, 3};
  fg_output a = fg_placeholder(g, "a", FG_F32, 2, da), w = fg_placeholder(g, "w", FG_F32, 2, dw);
  fg_output y = fg_placeholder(g, "y", FG_F32, 2, dy), z = fg_placeholder(g, "z", FG_F32, 2, dz);
  fg_output r = fg_fused_matmul_relu_grad(g, a, w, y, 0, 1); /* [4,6] @ [5,6]^T */
  FG_REQUIRE(r.node >= 0);
  const fg_tinfo *t = &g->nodes[r.node].outputs[0];
  FG_CHECK(t->rank == 2 && t->dims[0] == 4 && t->dims[1] == 5 && t->dtype == FG_F32);
  fg_tinfo in[3] = {g->nodes[a.node].outputs[0], g->nodes[w.node].outputs[0],
                    g->nodes[y.node].outputs[0]};
  /* 20 outputs of 6 multiply-adds, and a compare each. */
  FG_CHECK_INT(fg_op_table[FG_OP_FUSED_MATMUL_RELU_GRAD].flops(&g->nodes[r.node], in, t),
               2 * 20 * 6 + 20);
  fg_output bg = fg_matmul_bias_grad(g, a, z); /* a [4, 6], dz [4, 3] */
  FG_REQUIRE(bg.node >= 0);
  const fg_node *n = &g->nodes[bg.node];
  FG_CHECK_INT(n->n_outputs, 2);
  FG_CHECK(n->outputs[0].rank == 2 && n->outputs[0].dims[0] == 6 && n->outputs[0].dims[1] == 3);
  FG_CHECK(n->outputs[1].rank == 1 && n->outputs[1].dims[0] == 3);
  fg_tinfo bin[2] = {g->nodes[a.node].outputs[0], g->nodes[z.node].outputs[0]};
  FG_CHECK_INT(fg_op_table[FG_OP_MATMUL_BIAS_GRAD].flops(n, bin, n->outputs), 2 * 12 * 6 + 12);
  fg_graph_free(g);
  struct {
    int op; /* 0: relu grad with y [4, 6]; 1: relu grad with y f64; 2, 3: bias grad */
    const char *want;
  } cases[] = {
      {0, "node 'bad' (fused_matmul_relu_grad): input 2 (y) shape [4,6] must be the product's "
          "shape [4,5]"},
      {1, "node 'bad' (fused_matmul_relu_grad): input 2 (y) dtype f64 differs from input 0's "
          "f32"},
      {2, "node 'bad' (matmul_bias_grad): input 0 (a) shape [4,6] and input 1 (dz) shape [5,6] "
          "must be [R, K] and [R, N]"},
      {3, "node 'bad' (matmul_bias_grad): inputs 0 (a) and 1 (dz) must be f32 or f64 of one "
          "dtype, got f32 and f64"},
  };
  for (int k = 0; k < 4; k++) {
    g = fg_graph_new();
    a = fg_placeholder(g, "a", FG_F32, 2, da), w = fg_placeholder(g, "w", FG_F32, 2, dw);
    fg_output x = fg_placeholder(g, "x", k == 1 || k == 3 ? FG_F64 : FG_F32, 2,
                                 k == 0   ? da
                                 : k == 2 ? dw
                                          : dy);
    fg_output ins[3] = {a, k < 2 ? w : x, x};
    fg_attrs *at = fg_attrs_new();
    if (k < 2) fg_attrs_set_int(at, "transpose_b", 1);
    fg_output o = fg_op(g, k < 2 ? "fused_matmul_relu_grad" : "matmul_bias_grad", "bad", ins,
                        k < 2 ? 3 : 2, at);
    fg_attrs_free(at);
    FG_CHECK(o.node < 0);
    fg_status *st = fg_status_new();
    FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), cases[k].want);
    fg_status_free(st);
    fg_graph_free(g);
  }
}
