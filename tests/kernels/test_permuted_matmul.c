/* permuted_matmul: transpose(transpose(a, perm_a) @ transpose(b, perm_b),
 * perm_out) read and written in place (kernels/cpu/matmul_permuted.c).
 * Values against the definition evaluated here in double, index by index,
 * for every kind of operand (plain, stored transposed, batch axes moved,
 * broadcast batch dims), ranks 2 to 4, f32 and f64, K = 0, one and three
 * threads; the same bits as the transposes and matmul run one after
 * another where matmul runs the same GEMM calls; FLOPs; and the graphs
 * shape inference refuses, each message naming the node and the values.
 * On a GPU (gpu-labelled), the CUDA kernel against the same definition. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "executor/cuda_backend.h"
#include "passes/test_passes_util.h"

typedef struct pm_case {
  fg_dtype dt;
  int r;
  int64_t ad[4], bd[4];
  int pa[4], pb[4], po[4];
} pm_case;

/* Attention's products among them: q [S, B, D] read as [B, S, D]; k
 * [S, B, D] read as [B, D, S]; the product [B, S, D] written as [S, B, D]. */
static const pm_case CASES[] = {
    {FG_F32, 3, {20, 6, 16}, {20, 6, 16}, {1, 0, 2}, {1, 2, 0}, {0, 1, 2}}, /* q k^T */
    {FG_F32, 3, {6, 20, 20}, {20, 6, 16}, {0, 1, 2}, {1, 0, 2}, {1, 0, 2}}, /* p v, merged */
    {FG_F64, 3, {20, 6, 16}, {20, 6, 16}, {1, 0, 2}, {1, 2, 0}, {1, 0, 2}},
    {FG_F32, 2, {9, 13}, {5, 9}, {1, 0}, {1, 0}, {0, 1}}, /* both stored T */
    {FG_F64, 2, {13, 9}, {9, 5}, {0, 1}, {0, 1}, {0, 1}}, /* plain */
    {FG_F32, 4, {2, 12, 3, 8}, {2, 12, 3, 8}, {0, 2, 1, 3}, {0, 2, 3, 1}, {0, 2, 1, 3}},
    {FG_F64, 4, {3, 2, 10, 7}, {3, 2, 7, 11}, {1, 0, 2, 3}, {1, 0, 2, 3}, {1, 0, 2, 3}},
    {FG_F32, 3, {1, 10, 7}, {4, 7, 5}, {0, 1, 2}, {0, 1, 2}, {1, 0, 2}},      /* a broadcast */
    {FG_F32, 3, {10, 4, 7}, {1, 7, 5}, {1, 0, 2}, {0, 1, 2}, {0, 1, 2}},      /* b broadcast */
    {FG_F32, 3, {3, 300, 40}, {3, 40, 600}, {0, 1, 2}, {0, 1, 2}, {1, 0, 2}}, /* tiles */
    {FG_F32, 3, {12, 4, 0}, {4, 0, 5}, {1, 0, 2}, {0, 1, 2}, {1, 0, 2}},      /* K = 0 */
};
#define N_CASES (int)(sizeof CASES / sizeof CASES[0])

static double value(int64_t i, int salt) { return sin(0.61 * (double)i + salt) * 0.9; }

static fg_tensor *tensor(fg_dtype dt, int rank, const int64_t *dims, int salt) {
  fg_tensor *t = fg_tensor_new(dt, rank, dims, NULL);
  for (int64_t i = 0; i < fg_tensor_num_elements(t); i++)
    if (dt == FG_F32)
      ((float *)fg_tensor_data(t))[i] = (float)value(i, salt);
    else
      ((double *)fg_tensor_data(t))[i] = value(i, salt);
  return t;
}

static double at(const fg_tensor *t, int64_t i) {
  return fg_tensor_dtype(t) == FG_F32 ? ((const float *)fg_tensor_data(t))[i]
                                      : ((const double *)fg_tensor_data(t))[i];
}

static fg_output pm_node(fg_graph *g, const char *name, fg_output a, fg_output b, int r,
                         const int *pa, const int *pb, const int *po) {
  int64_t v[3][4];
  for (int i = 0; i < r; i++)
    v[0][i] = pa[i], v[1][i] = pb[i], v[2][i] = po[i];
  fg_attrs *at = fg_attrs_new();
  fg_attrs_set_ints(at, "perm_a", v[0], r);
  fg_attrs_set_ints(at, "perm_b", v[1], r);
  fg_attrs_set_ints(at, "perm_out", v[2], r);
  fg_output in[2] = {a, b};
  fg_output o = fg_op(g, "permuted_matmul", name, in, 2, at);
  fg_attrs_free(at);
  return o;
}

/* Runs `fetch` of g fed a and b, passes off, on `threads` threads of the
 * CPU or on `device`. */
static fg_tensor *run_on(fg_graph *g, const fg_tensor *a, const fg_tensor *b, const char *fetch,
                         int threads, const char *device) {
  fg_feed feeds[2] = {{"a", a}, {"b", b}};
  return run_feeds_on(g, device, threads, 1, feeds, 2, fetch);
}

static fg_tensor *run(fg_graph *g, const fg_tensor *a, const fg_tensor *b, const char *fetch,
                      int threads) {
  return run_on(g, a, b, fetch, threads, NULL);
}

/* Row-major index of coordinate c in dims d (rank r). */
static int64_t flat(const int64_t *c, const int64_t *d, int r) {
  int64_t i = 0;
  for (int k = 0; k < r; k++)
    i = i * d[k] + c[k];
  return i;
}

/* Output element `oi` by the definition: the output coordinate o maps
 * to the product's p (p[perm_out[i]] = o[i]), the product's row, column
 * and batch to a' and b' coordinates, and those back to a and b (a'[i]
 * is a's axis perm_a[i]); batch dims of size 1 broadcast. *mag gets the
 * sum of |terms|, the scale of the rounding. */
static double want(const pm_case *c, const fg_tensor *a, const fg_tensor *b, const int64_t *od,
                   int64_t oi, double *mag) {
  const int r = c->r;
  int64_t o[4], p[4], ac[4], bc[4], rem = oi;
  for (int i = r - 1; i >= 0; i--)
    o[i] = rem % od[i], rem /= od[i];
  for (int i = 0; i < r; i++)
    p[c->po[i]] = o[i];
  const int64_t K = c->ad[c->pa[r - 1]];
  double s = 0;
  *mag = 0;
  for (int64_t k = 0; k < K; k++) {
    int64_t ap[4], bp[4]; /* coordinates of a' and b' */
    for (int i = 0; i < r - 2; i++) {
      ap[i] = c->ad[c->pa[i]] == 1 ? 0 : p[i];
      bp[i] = c->bd[c->pb[i]] == 1 ? 0 : p[i];
    }
    ap[r - 2] = p[r - 2], ap[r - 1] = k, bp[r - 2] = k, bp[r - 1] = p[r - 1];
    for (int i = 0; i < r; i++)
      ac[c->pa[i]] = ap[i], bc[c->pb[i]] = bp[i];
    const double t = at(a, flat(ac, c->ad, r)) * at(b, flat(bc, c->bd, r));
    s += t;
    *mag += fabs(t);
  }
  return s;
}

/* The output's dims by the definition. */
static void out_dims(const pm_case *c, int64_t *od) {
  const int r = c->r;
  int64_t pd[4];
  for (int i = 0; i < r - 2; i++) {
    const int64_t x = c->ad[c->pa[i]], y = c->bd[c->pb[i]];
    pd[i] = x == 1 ? y : x;
  }
  pd[r - 2] = c->ad[c->pa[r - 2]], pd[r - 1] = c->bd[c->pb[r - 1]];
  for (int i = 0; i < r; i++)
    od[i] = pd[c->po[i]];
}

/* Fails at the first element of out further from the definition than
 * 1e-6 (f32) or 1e-14 (f64) of the sum of its terms' magnitudes. */
static void check_values(const pm_case *c, const fg_tensor *a, const fg_tensor *b,
                         const int64_t *od, const fg_tensor *out, int ci, const char *where) {
  const double eps = c->dt == FG_F32 ? 1e-6 : 1e-14;
  for (int64_t i = 0; i < fg_tensor_num_elements(out); i++) {
    double mag, w = want(c, a, b, od, i, &mag);
    if (!(fabs(at(out, i) - w) <= eps * (mag + 1e-30) + 1e-300)) {
      FG_FAIL_AT("case %d, %s: element %lld is %.17g, want %.17g", ci, where, (long long)i,
                 at(out, i), w);
      return;
    }
  }
}

static fg_graph *case_graph(const pm_case *c) {
  fg_graph *g = fg_graph_new();
  fg_output a = fg_placeholder(g, "a", c->dt, c->r, c->ad);
  fg_output b = fg_placeholder(g, "b", c->dt, c->r, c->bd);
  pm_node(g, "out", a, b, c->r, c->pa, c->pb, c->po);
  return g;
}

/* Every case on `device` (NULL: the CPU with `threads` threads): the
 * output's dims and values against the definition. */
static void check_cases(const char *device, int threads) {
  for (int ci = 0; ci < N_CASES; ci++) {
    const pm_case *c = &CASES[ci];
    fg_graph *g = case_graph(c);
    fg_tensor *a = tensor(c->dt, c->r, c->ad, 1), *b = tensor(c->dt, c->r, c->bd, 2);
    int64_t od[4];
    out_dims(c, od);
    fg_tensor *out = run_on(g, a, b, "out", threads, device);
    FG_REQUIRE(out);
    FG_CHECK_INT(fg_tensor_rank(out), c->r);
    for (int i = 0; i < c->r; i++)
      FG_CHECK_INT(fg_tensor_dims(out)[i], od[i]);
    check_values(c, a, b, od, out, ci, device ? device : threads == 1 ? "1 thread" : "3 threads");
    fg_tensor_free(out), fg_tensor_free(a), fg_tensor_free(b);
    fg_graph_free(g);
  }
}

FG_TEST(permuted_matmul_values_vs_definition, "") {
  check_cases(NULL, 1);
  check_cases(NULL, 3);
}

static fg_output transpose_of(fg_graph *g, fg_output x, const int *p, int r) {
  int64_t v[4];
  int ident = 1;
  for (int i = 0; i < r; i++)
    v[i] = p[i], ident &= p[i] == i;
  return ident ? x : fg_transpose(g, x, r, v);
}

/* The case written as transposes and a matmul (passes off): the same bits
 * where matmul runs a GEMM per batch too (more than 8 rows, b with
 * batches), as the transpose_matmul pass requires. */
FG_TEST(permuted_matmul_bits_equal_transposes_and_matmul, "") {
  static const int cases[] = {0, 1, 2, 5, 6, 9};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const pm_case *c = &CASES[cases[k]];
    fg_graph *g = case_graph(c);
    fg_output a = fg_graph_find_output(g, "a"), b = fg_graph_find_output(g, "b");
    fg_output mm =
        fg_matmul(g, transpose_of(g, a, c->pa, c->r), transpose_of(g, b, c->pb, c->r), 0, 0);
    fg_set_name(g, transpose_of(g, mm, c->po, c->r), "chain");
    fg_tensor *at_ = tensor(c->dt, c->r, c->ad, 3), *bt = tensor(c->dt, c->r, c->bd, 4);
    fg_tensor *x = run(g, at_, bt, "out", 2), *y = run(g, at_, bt, "chain", 2);
    FG_REQUIRE(x && y);
    FG_CHECK(fg_tensor_num_bytes(x) == fg_tensor_num_bytes(y) &&
             memcmp(fg_tensor_data(x), fg_tensor_data(y), fg_tensor_num_bytes(x)) == 0);
    fg_tensor_free(x), fg_tensor_free(y), fg_tensor_free(at_), fg_tensor_free(bt);
    fg_graph_free(g);
  }
}

FG_TEST(permuted_matmul_flops_and_shapes, "") {
  const pm_case *c = &CASES[0]; /* [6, 20, 16] @ [6, 16, 20]: 2 * 6 * 20 * 20 * 16 */
  fg_graph *g = case_graph(c);
  int id = fg_graph_find_output(g, "out").node;
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  FG_CHECK_INT(fg_node_flops(g, id), 2 * 6 * 20 * 20 * 16);
  fg_status_free(st);
  fg_graph_free(g);
}

/* A graph with one permuted_matmul of a [ad] and b [bd] whose attributes
 * are given by the caller; its status message ("" when valid). */
static const char *refusal(fg_dtype dt, int ra, const int64_t *ad, int rb, const int64_t *bd,
                           const int64_t *pa, int na, const int64_t *pb, int nb, const int64_t *po,
                           int no, char *buf, size_t size) {
  fg_graph *g = fg_graph_new();
  fg_output a = fg_placeholder(g, "a", dt, ra, ad), b = fg_placeholder(g, "b", dt, rb, bd);
  fg_attrs *at = fg_attrs_new();
  if (pa) fg_attrs_set_ints(at, "perm_a", pa, na);
  if (pb) fg_attrs_set_ints(at, "perm_b", pb, nb);
  if (po) fg_attrs_set_ints(at, "perm_out", po, no);
  fg_output in[2] = {a, b};
  fg_op(g, "permuted_matmul", "pm", in, 2, at);
  fg_attrs_free(at);
  fg_status *st = fg_status_new();
  snprintf(buf, size, "%s", fg_graph_status(g, st) == FG_OK ? "" : fg_status_message(st));
  fg_status_free(st);
  fg_graph_free(g);
  return buf;
}

FG_TEST(permuted_matmul_graph_bad_inputs, "badinput") {
  char m[1024];
  const int64_t d3[3] = {4, 5, 6}, e3[3] = {4, 6, 7}, d2[2] = {5, 6};
  const int64_t id3[3] = {0, 1, 2}, id2[2] = {0, 1};
#define REFUSED(want, ...)                                                                         \
  FG_CHECK_STR_CONTAINS(refusal(__VA_ARGS__, m, sizeof m), want);                                  \
  FG_CHECK_STR_CONTAINS(m, "node 'pm' (permuted_matmul)")
  REFUSED("input 0 shape [4,5,6] and input 1 shape [5,6]: permuted_matmul needs one rank >= 2",
          FG_F32, 3, d3, 2, d2, id3, 3, id2, 2, id3, 3);
  REFUSED("attribute 'perm_a' [0,1] has 2 entries but input 0 shape [4,5,6] has rank 3", FG_F32, 3,
          d3, 3, e3, id2, 2, id3, 3, id3, 3);
  REFUSED("attribute 'perm_b' [0,2,2] is not a permutation of 0..2", FG_F32, 3, d3, 3, e3, id3, 3,
          (int64_t[]){0, 2, 2}, 3, id3, 3);
  REFUSED("attribute 'perm_a' puts input 0's last axis (2) at position 0; permuted_matmul needs "
          "it at position 1 or 2",
          FG_F32, 3, d3, 3, e3, (int64_t[]){2, 0, 1}, 3, id3, 3, id3, 3);
  REFUSED("attribute 'perm_out' puts the product's last axis (2) at position 1", FG_F32, 3, d3, 3,
          e3, id3, 3, id3, 3, (int64_t[]){0, 2, 1}, 3);
  REFUSED("inner dimensions differ: input 0 shape [4,5,6] permuted gives K=5, input 1 shape "
          "[4,6,7] permuted gives K=6",
          FG_F32, 3, d3, 3, e3, (int64_t[]){0, 2, 1}, 3, id3, 3, id3, 3);
  REFUSED("batch dimensions of input 0 shape [4,5,6] and input 1 shape [3,6,7], permuted, do not "
          "broadcast (dim 0: 4 vs 3)",
          FG_F32, 3, d3, 3, (int64_t[]){3, 6, 7}, id3, 3, id3, 3, id3, 3);
  REFUSED("input 0 dtype i32 is not allowed; permuted_matmul needs f32 or f64", FG_I32, 3, d3, 3,
          e3, id3, 3, id3, 3, id3, 3);
  REFUSED("perm_out", FG_F32, 3, d3, 3, e3, id3, 3, id3, 3, NULL, 0);
#undef REFUSED
  /* The same shapes and perms, valid: nothing refused. */
  FG_CHECK_STR(refusal(FG_F32, 3, d3, 3, e3, id3, 3, id3, 3, id3, 3, m, sizeof m), "");
}

/* The CUDA kernel (cuBLAS with the operands' strides: one strided-batched
 * call for one batch dim, one call per batch else) against the definition
 * in double, every case. Skips visibly without a CUDA build or device. */
FG_TEST(gpu_permuted_matmul_vs_definition, "gpu") {
  if (fg_cuda_device_count() < 1) FG_SKIP_NO_GPU("no CUDA build or no CUDA device");
  check_cases("cuda:0", 1);
}
