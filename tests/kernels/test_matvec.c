/* matmul's path for products of at most 8 rows (kernels/cpu/matvec.c):
 * exact on integer-valued data (any term lost or counted twice shows),
 * within the rounding bound of a double loop on random data, the same bits
 * for any thread count, batched and broadcast products, a ninth row that
 * goes back to the GEMM tiles, a plain matmul through a session, and the
 * matmul checks still refusing bad inputs. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor/threadpool.h"
#include "fgtest.h"
#include "flowgraph/flowgraph.h"
#include "kernels/cpu/cpu_kernels.h"
#include "test_kernels_util.h"

/* One product: a [..., M, K] (or [..., K, M] with ta) @ b [..., K, N] (or
 * [..., N, K] with tb) into out. Integer-valued data when ints is set. */
typedef struct mv_case {
  fg_dtype dt;
  int ar, br, orank;
  int64_t ad[4], bd[4], od[4];
  int ta, tb;
} mv_case;

/* Uniform in [-1, 1), or integers in [-4, 4] when ints. */
static void *fill(fg_dtype dt, int64_t n, int ints, uint64_t *s) {
  void *p = malloc((size_t)(n > 0 ? n : 1) * float_size(dt));
  for (int64_t i = 0; p && i < n; i++) {
    const double u = rng_unit(s);
    elem_store(p, dt, i, ints ? floor(u * 4.5 + 0.5) : u);
  }
  return p;
}

/* Runs the matmul kernel on a and b into a fresh output (par NULL: inline);
 * the kernel's return code in *rc, its message in err. */
static void *run_mm(const mv_case *c, const void *a, const void *b, const fg_kparallel *par,
                    int *rc, char *err, size_t err_size) {
  fg_kbuf in[2] = {{.dtype = c->dt, .rank = c->ar, .data = (void *)a},
                   {.dtype = c->dt, .rank = c->br, .data = (void *)b}};
  fg_kbuf out = {.dtype = c->dt, .rank = c->orank};
  memcpy(in[0].dims, c->ad, sizeof c->ad);
  memcpy(in[1].dims, c->bd, sizeof c->bd);
  memcpy(out.dims, c->od, sizeof c->od);
  const int64_t n = dims_count(c->orank, c->od);
  out.data = malloc((size_t)(n > 0 ? n : 1) * float_size(c->dt));
  memset(out.data, 0xA5, (size_t)n * float_size(c->dt));
  fg_op_params p;
  memset(&p, 0, sizeof p);
  p.matmul.transpose_a = c->ta;
  p.matmul.transpose_b = c->tb;
  err[0] = 0;
  fg_kctx ctx = {in,   2,    &out, 1, &p, err, err_size, par, NULL, NULL,
                 NULL, NULL, 0,    0, 0,  0,   0,        0,   NULL};
  *rc = fg_cpu_kernel("matmul", c->dt)(&ctx);
  return out.data;
}

/* Output element e in double, and the sum of its terms' magnitudes. */
static double ref(const mv_case *c, const void *a, const void *b, int64_t e, double *mag) {
  const int R = c->orank;
  const int64_t M = c->od[R - 2], N = c->od[R - 1];
  const int64_t K = c->ta ? c->ad[c->ar - 2] : c->ad[c->ar - 1];
  const int64_t i = (e / N) % M, j = e % N;
  int64_t ab, bb;
  mm_batch_of(R, c->od, c->ar, c->ad, c->br, c->bd, e / (M * N), &ab, &bb);
  double s = 0;
  *mag = 0;
  for (int64_t k = 0; k < K; k++) {
    const double av = elem_as_double(a, c->dt, ab * M * K + (c->ta ? k * M + i : i * K + k));
    const double bv = elem_as_double(b, c->dt, bb * K * N + (c->tb ? j * K + k : k * N + j));
    s += av * bv;
    *mag += fabs(av * bv);
  }
  return s;
}

/* Every output against ref: equal for integer-valued data (its sums are
 * exact in f32), else within the bound of K + 2 roundings of the terms'
 * magnitudes (recursive summation: the products, then K additions).
 * Returns the mismatches. */
static int check_values(const char *label, const mv_case *c, const void *a, const void *b,
                        const void *o, int ints) {
  const int64_t K = c->ta ? c->ad[c->ar - 2] : c->ad[c->ar - 1];
  const double u = c->dt == FG_F64 ? 0x1p-53 : 0x1p-24;
  int bad = 0;
  for (int64_t e = 0, n = dims_count(c->orank, c->od); e < n; e++) {
    double mag;
    const double want = ref(c, a, b, e, &mag), got = elem_as_double(o, c->dt, e);
    const double tol = ints ? 0 : (double)(K + 2) * u * mag;
    if (!(fabs(got - want) <= tol) && bad++ < 3)
      fprintf(stderr, "  %s: element %lld = %.17g, want %.17g (tol %g)\n", label, (long long)e, got,
              want, tol);
  }
  return bad;
}

/* Runs c on fresh data (integer-valued or not) and checks every value. */
static void check_case(const char *label, const mv_case *c, int ints, uint64_t *seed) {
  void *a = fill(c->dt, dims_count(c->ar, c->ad), ints, seed);
  void *b = fill(c->dt, dims_count(c->br, c->bd), ints, seed);
  FG_REQUIRE(a && b);
  char err[256];
  int rc;
  void *o = run_mm(c, a, b, NULL, &rc, err, sizeof err);
  if (rc != 0) fprintf(stderr, "  %s: %s\n", label, err);
  FG_CHECK_INT(rc, 0);
  if (rc == 0) FG_CHECK_INT(check_values(label, c, a, b, o, ints), 0);
  free(o);
  free(a);
  free(b);
}

/* 2-D products over M = 1, 3, 8, K and N off the vector widths, K up to
 * 2048, every transpose combination, f32 and f64. */
static void each_2d_case(void (*fn)(const char *, const mv_case *, int, uint64_t *), int ints) {
  static const int64_t Ms[] = {1, 3, 8}, KNs[][2] = {{1, 1}, {5, 17}, {37, 100}, {2048, 1000}};
  uint64_t seed = 7;
  for (int dt = 0; dt < 2; dt++)
    for (size_t mi = 0; mi < 3; mi++)
      for (size_t s = 0; s < sizeof KNs / sizeof KNs[0]; s++)
        for (int t = 0; t < 4; t++) {
          const int64_t M = Ms[mi], K = KNs[s][0], N = KNs[s][1];
          const int ta = t & 1, tb = t >> 1;
          mv_case c = {dt ? FG_F64 : FG_F32, 2, 2, 2, {0}, {0}, {M, N}, ta, tb};
          c.ad[0] = ta ? K : M, c.ad[1] = ta ? M : K;
          c.bd[0] = tb ? N : K, c.bd[1] = tb ? K : N;
          char label[96];
          snprintf(label, sizeof label, "%s M %lld K %lld N %lld ta %d tb %d", fg_dtype_name(c.dt),
                   (long long)M, (long long)K, (long long)N, ta, tb);
          fn(label, &c, ints, &seed);
        }
}

FG_TEST(matvec_exact_on_integers, "slow") { each_2d_case(check_case, 1); }

FG_TEST(matvec_within_rounding_of_double, "slow") { each_2d_case(check_case, 0); }

/* Batched products: per-batch b, a's batches stacked under a shared b,
 * broadcast batch dims with a transposed a, and a ninth row (the GEMM
 * tiles again), each exact on integers and within rounding on reals. */
FG_TEST(matvec_batched_and_fallback, "") {
  static const mv_case cases[] = {
      {FG_F32, 3, 3, 3, {4, 2, 60}, {4, 60, 70}, {4, 2, 70}, 0, 0},
      {FG_F32, 3, 3, 3, {4, 2, 60}, {4, 70, 60}, {4, 2, 70}, 0, 1},
      {FG_F32, 3, 2, 3, {3, 2, 50}, {50, 40}, {3, 2, 40}, 0, 0}, /* stacked: 6 rows */
      {FG_F32, 3, 2, 3, {5, 2, 50}, {50, 40}, {5, 2, 40}, 0, 0}, /* stacked: 10 rows */
      {FG_F64, 3, 3, 4, {1, 20, 3}, {5, 20, 30}, {1, 5, 3, 30}, 1, 0},
      {FG_F32, 4, 3, 4, {2, 1, 1, 33}, {3, 33, 19}, {2, 3, 1, 19}, 0, 0},
      {FG_F32, 2, 2, 2, {9, 300}, {300, 130}, {9, 130}, 0, 0}, /* 9 rows: GEMM */
      {FG_F32, 2, 2, 2, {300, 9}, {130, 300}, {9, 130}, 1, 1}, /* transposed both: GEMM */
  };
  uint64_t seed = 11;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int ints = 0; ints < 2; ints++) {
      char label[48];
      snprintf(label, sizeof label, "batched case %zu ints %d", i, ints);
      check_case(label, &cases[i], ints, &seed);
    }
}

/* The same bits with par NULL and with pools of 1, 2 and 3 threads, on
 * products large enough to be cut into several column chunks. */
FG_TEST(matvec_bits_independent_of_threads, "") {
  static const mv_case cases[] = {
      {FG_F32, 2, 2, 2, {1, 700}, {700, 1100}, {1, 1100}, 0, 0},
      {FG_F32, 2, 2, 2, {8, 512}, {1000, 512}, {8, 1000}, 0, 1},
      {FG_F64, 2, 2, 2, {300, 3}, {300, 900}, {3, 900}, 1, 0},
      {FG_F32, 3, 3, 3, {16, 1, 200}, {16, 200, 300}, {16, 1, 300}, 0, 0},
      {FG_F32, 3, 3, 3, {2, 8, 64}, {2, 64, 1100}, {2, 8, 1100}, 0, 0}, /* chunks x batches */
  };
  fg_pool *pools[4] = {NULL, fg_pool_new(1), fg_pool_new(2), fg_pool_new(3)};
  FG_REQUIRE(pools[1] && pools[2] && pools[3]);
  uint64_t seed = 13;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const mv_case *c = &cases[i];
    void *a = fill(c->dt, dims_count(c->ar, c->ad), 0, &seed);
    void *b = fill(c->dt, dims_count(c->br, c->bd), 0, &seed);
    FG_REQUIRE(a && b);
    char err[256];
    int rc;
    void *o0 = run_mm(c, a, b, NULL, &rc, err, sizeof err);
    FG_CHECK_INT(rc, 0);
    FG_CHECK_INT(check_values("threads", c, a, b, o0, 0), 0);
    for (int t = 1; t <= 3; t++) {
      const fg_kparallel par = {pools[t], fg_pool_parallel_for_fn};
      void *o = run_mm(c, a, b, &par, &rc, err, sizeof err);
      FG_CHECK_INT(rc, 0);
      if (memcmp(o, o0, (size_t)dims_count(c->orank, c->od) * float_size(c->dt)) != 0)
        FG_FAIL_AT("case %zu: %d threads differ from par NULL", i, t);
      free(o);
    }
    free(o0);
    free(a);
    free(b);
  }
  for (int t = 1; t <= 3; t++)
    fg_pool_free(pools[t]);
}

/* The checks before the path: inner dims, the output's shape, dtypes. */
FG_TEST(matvec_bad_inputs_still_refused, "") {
  static const struct {
    mv_case c;
    fg_dtype b_dt;
    const char *msg;
  } bad[] = {
      {{FG_F32, 2, 2, 2, {1, 5}, {6, 3}, {1, 3}, 0, 0}, FG_F32, "inner dims differ"},
      {{FG_F32, 2, 2, 2, {1, 5}, {3, 6}, {1, 3}, 0, 1}, FG_F32, "inner dims differ"},
      {{FG_F32, 2, 2, 2, {1, 5}, {5, 3}, {1, 4}, 0, 0}, FG_F32, "output is [..., 1, 4]"},
      {{FG_F32, 2, 2, 2, {2, 5}, {5, 3}, {1, 3}, 0, 0}, FG_F32, "expected [..., 2, 3]"},
      {{FG_F32, 3, 3, 3, {2, 1, 5}, {3, 5, 3}, {2, 1, 3}, 0, 0}, FG_F32, "does not broadcast"},
      {{FG_F32, 2, 2, 2, {1, 5}, {5, 3}, {1, 3}, 0, 0}, FG_F64, "expected f32 inputs"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const mv_case *c = &bad[i].c;
    float a[16] = {0};
    double b[64] = {0};
    fg_kbuf in[2] = {{.dtype = c->dt, .rank = c->ar, .data = a},
                     {.dtype = bad[i].b_dt, .rank = c->br, .data = b}};
    float o[64];
    fg_kbuf out = {.dtype = c->dt, .rank = c->orank, .data = o};
    memcpy(in[0].dims, c->ad, sizeof c->ad);
    memcpy(in[1].dims, c->bd, sizeof c->bd);
    memcpy(out.dims, c->od, sizeof c->od);
    fg_op_params p;
    memset(&p, 0, sizeof p);
    p.matmul.transpose_b = c->tb;
    char err[256] = "";
    fg_kctx ctx = {in,   2,    &out, 1, &p, err, sizeof err, NULL, NULL, NULL,
                   NULL, NULL, 0,    0, 0,  0,   0,          0,    NULL};
    FG_CHECK_INT(fg_cpu_kernel("matmul", FG_F32)(&ctx), -1);
    FG_CHECK_STR_CONTAINS(err, bad[i].msg);
  }
}

/* y = x @ w for x [1, 1000] fed and w [1000, 300] a constant, through
 * sessions of 1 and 2 threads: the same bits, within rounding of a double
 * loop. */
static fg_tensor *session_matmul(fg_graph *g, int threads, const fg_tensor *x) {
  fg_status *st = fg_status_new();
  fg_session_options o;
  fg_session_options_init(&o);
  o.num_threads = threads;
  fg_session *s = fg_session_new(g, &o, st);
  fg_tensor *y = NULL;
  fg_feed feed = {"x", (fg_tensor *)x};
  const char *fetch = "y";
  if (!s || fg_session_run(s, &feed, 1, &fetch, 1, &y, NULL, 0, st) != 0)
    FG_FAIL_AT("session: %s", fg_status_message(st));
  fg_session_free(s);
  fg_status_free(st);
  return y;
}

FG_TEST(matvec_through_session, "") {
  const mv_case c = {FG_F32, 2, 2, 2, {1, 1000}, {1000, 300}, {1, 300}, 0, 0};
  uint64_t seed = 17;
  float *xv = fill(FG_F32, 1000, 0, &seed), *wv = fill(FG_F32, 300000, 0, &seed);
  FG_REQUIRE(xv && wv);
  fg_tensor *x = fg_tensor_new(FG_F32, 2, c.ad, NULL), *w = fg_tensor_new(FG_F32, 2, c.bd, NULL);
  FG_REQUIRE(x && w);
  memcpy(fg_tensor_data(x), xv, sizeof(float) * 1000);
  memcpy(fg_tensor_data(w), wv, sizeof(float) * 300000);
  fg_graph *g = fg_graph_new();
  fg_output xin = fg_placeholder(g, "x", FG_F32, 2, c.ad);
  fg_set_name(g, fg_matmul(g, xin, fg_constant(g, "w", w), 0, 0), "y");
  fg_tensor *y1 = session_matmul(g, 1, x), *y2 = session_matmul(g, 2, x);
  FG_REQUIRE(y1 && y2);
  FG_CHECK(memcmp(fg_tensor_data(y1), fg_tensor_data(y2), sizeof(float) * 300) == 0);
  FG_CHECK_INT(check_values("session", &c, xv, wv, fg_tensor_data(y1), 0), 0);
  fg_tensor_free(y1);
  fg_tensor_free(y2);
  fg_tensor_free(x);
  fg_tensor_free(w);
  fg_graph_free(g);
  free(xv);
  free(wv);
}
