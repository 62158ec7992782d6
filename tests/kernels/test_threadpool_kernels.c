/* CPU kernels through intra-op parallelism (fg_kctx.par): on large inputs,
 * the results with pools of 1, 2, 3 and 4 threads are bitwise identical to
 * the results with par == NULL (so to each other), error messages
 * included; and the tiled matmul, the chunked reductions and the
 * range-split broadcasts are checked against independent references
 * (a double-precision triple loop; sums folded by hand in the documented
 * chunk order). */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "executor/threadpool.h"
#include "fgtest.h"
#include "kernels/kernel.h"
#include "test_kernels_util.h"

static size_t dsize(fg_dtype dt) {
  switch (dt) {
  case FG_F32:
  case FG_I32: return 4;
  case FG_F64:
  case FG_I64: return 8;
  default: return 1;
  }
}

static int64_t numel(const fg_kbuf *b) {
  int64_t n = 1;
  for (int i = 0; i < b->rank; i++)
    n *= b->dims[i];
  return n;
}

static fg_kbuf make_buf(fg_dtype dt, int rank, const int64_t *dims) {
  fg_kbuf b = {.dtype = dt, .rank = rank};
  for (int i = 0; i < rank; i++)
    b.dims[i] = dims[i];
  b.data = malloc((size_t)(numel(&b) > 0 ? numel(&b) : 1) * dsize(dt));
  return b;
}

/* Random values: floats in [-1, 1) (scaled), integers in [-50, 50). */
static fg_kbuf rand_buf(fg_dtype dt, int rank, const int64_t *dims, uint64_t *s) {
  fg_kbuf b = make_buf(dt, rank, dims);
  const int64_t n = numel(&b);
  for (int64_t i = 0; i < n; i++) {
    const double u = rng_unit(s);
    switch (dt) {
    case FG_F32: ((float *)b.data)[i] = (float)(u * 3); break;
    case FG_F64: ((double *)b.data)[i] = u * 3; break;
    case FG_I32: ((int32_t *)b.data)[i] = (int32_t)floor(u * 50); break;
    case FG_I64: ((int64_t *)b.data)[i] = (int64_t)floor(u * 50); break;
    default: ((uint8_t *)b.data)[i] = u > 0; break;
    }
  }
  return b;
}

static fg_pool *pools[5];

static void get_pools(void) {
  for (int t = 1; t <= 4; t++)
    if (!pools[t]) pools[t] = fg_pool_new(t);
}

/* One kernel call: inputs are copied afresh for every run (optimizers
 * update theirs in place). */
typedef struct kcall {
  const char *op;
  fg_dtype key;
  fg_kbuf in[6];
  int n_in;
  fg_kbuf out;
  fg_op_params p;
} kcall;

typedef struct kresult {
  int rc;
  char err[256];
  void *out;
  void *ins[6]; /* the inputs after the call */
} kresult;

static kresult run_call(const kcall *k, const fg_kparallel *par) {
  kresult r = {0};
  fg_kbuf in[6], out = k->out;
  const size_t out_bytes = (size_t)numel(&k->out) * dsize(k->out.dtype);
  for (int i = 0; i < k->n_in; i++) {
    in[i] = k->in[i];
    const size_t bytes = (size_t)numel(&in[i]) * dsize(in[i].dtype);
    in[i].data = malloc(bytes > 0 ? bytes : 1);
    memcpy(in[i].data, k->in[i].data, bytes);
    r.ins[i] = in[i].data;
  }
  out.data = malloc(out_bytes > 0 ? out_bytes : 1);
  memset(out.data, 0xA5, out_bytes);
  fg_kernel_fn fn = fg_cpu_kernel(k->op, k->key);
  if (!fn) {
    r.rc = -99;
  } else {
    fg_kctx ctx = {in, k->n_in, &out, 1, &k->p, r.err, sizeof r.err, par, NULL, NULL, NULL, NULL,
                   0,  0,       0,    0, 0,     0,     NULL};
    r.rc = fn(&ctx);
  }
  r.out = out.data;
  return r;
}

static void free_result(kresult *r, int n_in) {
  free(r->out);
  for (int i = 0; i < n_in; i++)
    free(r->ins[i]);
}

static void free_call(kcall *k) {
  for (int i = 0; i < k->n_in; i++)
    free(k->in[i].data);
  free(k->out.data);
}

/* Runs k with par NULL and with pools of 1..4 threads; every run must give
 * the same return code, message, output bytes and input bytes. Returns the
 * par == NULL result for reference checks (caller frees). */
static kresult check_bitwise(const char *label, const kcall *k) {
  get_pools();
  kresult ref = run_call(k, NULL);
  const size_t out_bytes = (size_t)numel(&k->out) * dsize(k->out.dtype);
  for (int t = 1; t <= 4; t++) {
    if (!pools[t]) {
      FG_FAIL_AT("fg_pool_new(%d) failed", t);
      return ref;
    }
    const fg_kparallel par = {pools[t], fg_pool_parallel_for_fn};
    kresult r = run_call(k, &par);
    int same = r.rc == ref.rc && strcmp(r.err, ref.err) == 0;
    if (ref.rc == 0) same = same && memcmp(r.out, ref.out, out_bytes) == 0;
    for (int i = 0; i < k->n_in; i++)
      same = same &&
             memcmp(r.ins[i], ref.ins[i], (size_t)numel(&k->in[i]) * dsize(k->in[i].dtype)) == 0;
    if (!same)
      fprintf(stderr, "  %s (%s): %d threads differ from par == NULL (rc %d vs %d: %s)\n", label,
              k->op, t, r.rc, ref.rc, r.err);
    FG_CHECK(same);
    free_result(&r, k->n_in);
  }
  return ref;
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "test_threadpool_kernels: timed out\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  _exit(1);
}

/* ---- reductions ---------------------------------------------------------------- */

typedef struct red_case {
  const char *op;
  fg_dtype dt;
  int rank;
  int64_t dims[4];
  int n_axes;
  int axes[4];
} red_case;

static double elem(const fg_kbuf *b, const void *data, int64_t i) {
  switch (b->dtype) {
  case FG_F32: return ((const float *)data)[i];
  case FG_F64: return ((const double *)data)[i];
  case FG_I32: return ((const int32_t *)data)[i];
  default: return (double)((const int64_t *)data)[i];
  }
}

/* A naive reference: every input element goes to the output element with
 * its kept coordinates; sums in double (exact for these integers), then
 * compared with a tolerance for floats. Returns the number of mismatches. */
static int red_check(const red_case *rc, const kcall *k, const void *got) {
  const int64_t n_in = numel(&k->in[0]), n_out = numel(&k->out);
  double *acc = calloc((size_t)n_out, sizeof(double));
  int64_t *cnt = calloc((size_t)n_out, sizeof(int64_t));
  const int is_max = !strcmp(rc->op, "reduce_max");
  for (int64_t o = 0; o < n_out; o++)
    acc[o] = is_max ? -INFINITY : 0;
  for (int64_t i = 0; i < n_in; i++) {
    int64_t rem = i, o = 0, scale = 1;
    for (int d = rc->rank - 1; d >= 0; d--) {
      const int64_t c = rem % rc->dims[d];
      rem /= rc->dims[d];
      int red = 0;
      for (int a = 0; a < rc->n_axes; a++)
        red |= rc->axes[a] == d;
      if (red) continue;
      o += c * scale;
      scale *= rc->dims[d];
    }
    const double v = elem(&k->in[0], k->in[0].data, i);
    if (is_max) {
      if (acc[o] == acc[o] && (v > acc[o] || v != v)) acc[o] = v; /* NaN sticks */
    } else
      acc[o] += v;
    cnt[o]++;
  }
  int bad = 0;
  for (int64_t o = 0; o < n_out; o++) {
    double want = acc[o];
    if (!strcmp(rc->op, "reduce_mean"))
      want = (k->out.dtype == FG_I32 || k->out.dtype == FG_I64) ? trunc(want / (double)cnt[o])
                                                                : want / (double)cnt[o];
    const double g = elem(&k->out, got, o);
    const int ok = isnan(want) ? isnan(g) : fabs(g - want) <= 1e-5 * (1 + fabs(want));
    if (!ok && bad++ < 3)
      fprintf(stderr, "  %s: output %lld = %.9g, want %.9g\n", rc->op, (long long)o, g, want);
  }
  free(acc);
  free(cnt);
  return bad;
}

FG_TEST(reductions_bitwise_any_thread_count, "") {
  signal(SIGALRM, on_alarm);
  alarm(300);
  static const red_case cases[] = {
      {"reduce_sum", FG_F32, 1, {1 << 20}, 1, {0}},           /* to a scalar: partials */
      {"reduce_sum", FG_F32, 2, {300000, 3}, 1, {0}},         /* few outputs, inner 3 */
      {"reduce_sum", FG_F64, 2, {64, 70000}, 1, {1}},         /* 64 long rows */
      {"reduce_sum", FG_F32, 2, {2000, 600}, 1, {0}},         /* inner > 256: groups */
      {"reduce_sum", FG_F32, 2, {4096, 300}, 1, {1}},         /* many short rows */
      {"reduce_sum", FG_F32, 3, {40000, 3, 5}, 2, {0, 2}},    /* inner 1, two reduced dims */
      {"reduce_sum", FG_F64, 4, {6, 7, 20000, 3}, 2, {0, 2}}, /* inner 3, split reduced dims */
      {"reduce_sum", FG_I32, 2, {500000, 2}, 1, {0}},
      {"reduce_sum", FG_I64, 1, {300000}, 1, {0}},
      {"reduce_mean", FG_F32, 2, {3, 200000}, 1, {1}},
      {"reduce_mean", FG_F64, 3, {20, 30000, 2}, 2, {0, 1}},
      {"reduce_mean", FG_I32, 2, {100000, 4}, 1, {0}},
      {"reduce_max", FG_F32, 2, {200000, 3}, 1, {0}},
      {"reduce_max", FG_F64, 2, {3000, 300}, 1, {1}},
      {"reduce_max", FG_I64, 1, {400000}, 1, {0}},
  };
  uint64_t seed = 1;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const red_case *rc = &cases[c];
    kcall k = {.op = rc->op, .key = rc->dt, .n_in = 1};
    k.in[0] = rand_buf(rc->dt, rc->rank, rc->dims, &seed);
    if (!strcmp(rc->op, "reduce_max") && rc->dt == FG_F32) /* NaNs win, bit patterns kept */
      for (int i = 0; i < 5; i++)
        ((float *)k.in[0].data)[(i * 104729) % 600000] = NAN;
    int64_t odims[4];
    int orank = 0;
    for (int d = 0; d < rc->rank; d++) {
      int red = 0;
      for (int a = 0; a < rc->n_axes; a++)
        red |= rc->axes[a] == d;
      if (!red) odims[orank++] = rc->dims[d];
    }
    k.out = make_buf(rc->dt, orank, odims);
    k.p.reduce.n_axes = rc->n_axes;
    for (int a = 0; a < rc->n_axes; a++)
      k.p.reduce.axes[a] = rc->axes[a];
    char label[64];
    snprintf(label, sizeof label, "case %zu", c);
    kresult r = check_bitwise(label, &k);
    FG_CHECK_INT(r.rc, 0);
    FG_CHECK_INT(red_check(rc, &k, r.out), 0);
    free_result(&r, k.n_in);
    free_call(&k);
  }
  alarm(0);
}

/* 16 lanes added pairwise: lanes 2k and 2k + 1, then the same on the 8
 * sums, down to one. */
static double lanes16(const double *l) {
  double t[16];
  memcpy(t, l, sizeof t);
  for (int w = 8; w >= 1; w /= 2)
    for (int k = 0; k < w; k++)
      t[k] = t[2 * k] + t[2 * k + 1];
  return t[0];
}

/* reduce_sum in f64 of x [d0, d1, d2] over the axes in bit mask `red` (at
 * most 16384 elements an output: one run), every `spike`-th element times
 * 1e8 so that the order shows: each output must be its elements, in
 * row-major order, element i into lane i % 16, the lanes added by
 * lanes16. */
static void check_lane_order(const int64_t d[3], unsigned red, int spike, uint64_t *seed) {
  kcall k = {.op = "reduce_sum", .key = FG_F64, .n_in = 1};
  k.in[0] = rand_buf(FG_F64, 3, d, seed);
  double *x = k.in[0].data;
  for (int64_t i = 0; i < d[0] * d[1] * d[2]; i += spike)
    x[i] *= 1e8;
  int64_t od[3];
  int n_out = 0;
  for (int a = 0; a < 3; a++)
    if (red >> a & 1)
      k.p.reduce.axes[k.p.reduce.n_axes++] = a;
    else
      od[n_out++] = d[a];
  k.out = make_buf(FG_F64, n_out, od);
  kresult r = check_bitwise("f64 sum in lanes", &k);
  int64_t o = 0; /* outputs in row-major order of the kept coordinates */
  for (int64_t c0 = 0; c0 < d[0]; c0++)
    for (int64_t c1 = 0; c1 < d[1]; c1++)
      for (int64_t c2 = 0; c2 < d[2]; c2++) {
        const int64_t c[3] = {c0, c1, c2};
        int first = 1; /* the first element of its output: all reduced coordinates 0 */
        for (int a = 0; a < 3; a++)
          if (red >> a & 1 && c[a] != 0) first = 0;
        if (!first) continue;
        double l[16] = {0};
        int64_t i = 0;
        for (int64_t e0 = 0; e0 < d[0]; e0++)
          for (int64_t e1 = 0; e1 < d[1]; e1++)
            for (int64_t e2 = 0; e2 < d[2]; e2++) {
              const int64_t e[3] = {e0, e1, e2};
              int same = 1;
              for (int a = 0; a < 3; a++)
                if (!(red >> a & 1) && e[a] != c[a]) same = 0;
              if (same) l[i++ % 16] += x[(e0 * d[1] + e1) * d[2] + e2];
            }
        const double want = 0.0 + lanes16(l);
        FG_CHECK(memcmp((double *)r.out + o++, &want, sizeof want) == 0);
      }
  free_result(&r, 1);
  free_call(&k);
}

/* The documented order (kernels/cpu/reduce.c): runs of 16384 elements,
 * element i of a run added into lane i % 16 (each lane a left fold from
 * 0), the lanes added pairwise (lanes16), and the runs' partials added in
 * order. Folded here by hand for f64. */
FG_TEST(reduce_sum_order_is_fixed_chunks, "") {
  uint64_t seed = 5;
  const int64_t n = 100000, run = 16384;
  const int64_t dims[1] = {n};
  kcall k = {.op = "reduce_sum", .key = FG_F64, .n_in = 1};
  k.in[0] = rand_buf(FG_F64, 1, dims, &seed);
  const double *x = k.in[0].data;
  for (int64_t i = 0; i < n; i += 7)
    ((double *)k.in[0].data)[i] *= 1e8; /* make order matter */
  k.out = make_buf(FG_F64, 0, NULL);
  k.p.reduce.n_axes = 1;
  double total = 0, plain = 0;
  for (int64_t c0 = 0; c0 < n; c0 += run) {
    double l[16] = {0};
    for (int64_t i = c0; i < c0 + run && i < n; i++)
      l[(i - c0) % 16] += x[i];
    const double part = 0.0 + lanes16(l);
    total = c0 == 0 ? part : total + part;
  }
  for (int64_t i = 0; i < n; i++)
    plain += x[i];
  kresult r = check_bitwise("f64 sum", &k);
  FG_CHECK_INT(r.rc, 0);
  FG_CHECK(memcmp(r.out, &total, sizeof total) == 0);
  FG_CHECK_NEAR(*(double *)r.out, plain, 1e-9);
  free_result(&r, 1);
  free_call(&k);

  /* f32 to a scalar: accumulated in double, close to the double sum. */
  kcall k2 = {.op = "reduce_mean", .key = FG_F32, .n_in = 1};
  const int64_t d2[2] = {1000, 1000};
  k2.in[0] = rand_buf(FG_F32, 2, d2, &seed);
  k2.out = make_buf(FG_F32, 0, NULL);
  k2.p.reduce.n_axes = 2;
  k2.p.reduce.axes[1] = 1;
  double want = 0;
  for (int64_t i = 0; i < 1000000; i++)
    want += ((const float *)k2.in[0].data)[i];
  kresult r2 = check_bitwise("f32 mean", &k2);
  FG_CHECK_NEAR(*(float *)r2.out, want / 1e6, 1e-6);
  free_result(&r2, 1);
  free_call(&k2);

  /* Axes 0 and 2 of [5, 3, 7]: each output's 35 elements lie in rows of
   * 7, so the lanes carry on across rows. */
  check_lane_order((const int64_t[3]){5, 3, 7}, 5, 5, &seed);
  /* The last axis of [1, 3, 37] (the rows pass, the size-1 dim dropped):
   * 37 elements into lanes from the first, a tail of 5. */
  check_lane_order((const int64_t[3]){1, 3, 37}, 4, 3, &seed);
}

FG_TEST(sum_to_argmax_bitwise, "") {
  uint64_t seed = 9;
  const int64_t xd[2] = {512, 1024}, od[1] = {1024};
  kcall k = {.op = "sum_to", .key = FG_F32, .n_in = 1};
  k.in[0] = rand_buf(FG_F32, 2, xd, &seed);
  k.out = make_buf(FG_F32, 1, od);
  kresult r = check_bitwise("sum_to", &k);
  FG_CHECK_INT(r.rc, 0);
  double want = 0; /* column 7, in double, row order: one run */
  for (int i = 0; i < 512; i++)
    want += ((const float *)k.in[0].data)[i * 1024 + 7];
  FG_CHECK(((float *)r.out)[7] == (float)want);
  free_result(&r, 1);
  free_call(&k);

  for (int axis = 0; axis < 2; axis++) {
    const int64_t ad[2] = {3000, 500}, aod[1] = {axis ? 3000 : 500};
    kcall a = {.op = "argmax", .key = FG_F32, .n_in = 1};
    a.in[0] = rand_buf(FG_F32, 2, ad, &seed);
    a.out = make_buf(FG_I64, 1, aod);
    a.p.argmax.axis = axis;
    kresult ra = check_bitwise("argmax", &a);
    FG_CHECK_INT(ra.rc, 0);
    free_result(&ra, 1);
    free_call(&a);
  }
}

/* ---- softmax family -------------------------------------------------------------- */

FG_TEST(softmax_family_bitwise, "") {
  uint64_t seed = 11;
  const int64_t d1[2] = {512, 1000};
  for (int variant = 0; variant < 4; variant++) {
    const fg_dtype dt = variant == 3 ? FG_F64 : FG_F32;
    kcall k = {.op = variant >= 2 ? "log_softmax" : "softmax", .key = dt, .n_in = 1};
    k.in[0] = rand_buf(dt, 2, d1, &seed);
    k.out = make_buf(dt, 2, d1);
    k.p.softmax.axis = variant == 1 ? 0 : 1;
    kresult r = check_bitwise("softmax", &k);
    FG_CHECK_INT(r.rc, 0);
    free_result(&r, 1);
    free_call(&k);
  }
  const int64_t ld[2] = {100000, 10}, nd[1] = {100000};
  kcall x = {.op = "softmax_cross_entropy", .key = FG_F32, .n_in = 2};
  x.in[0] = rand_buf(FG_F32, 2, ld, &seed);
  x.in[1] = make_buf(FG_I64, 1, nd);
  for (int64_t i = 0; i < nd[0]; i++)
    ((int64_t *)x.in[1].data)[i] = (i * 37) % 10;
  x.out = make_buf(FG_F32, 0, NULL);
  kresult r = check_bitwise("xent", &x);
  FG_CHECK_INT(r.rc, 0);
  double want = 0; /* the loss in double, row by row */
  for (int64_t n = 0; n < nd[0]; n++) {
    const float *row = (const float *)x.in[0].data + n * 10;
    double m = row[0], s = 0;
    for (int j = 1; j < 10; j++)
      m = row[j] > m ? row[j] : m;
    for (int j = 0; j < 10; j++)
      s += exp((double)row[j] - m);
    want += m + log(s) - row[(n * 37) % 10];
  }
  FG_CHECK_NEAR(*(float *)r.out, want / 1e5, 1e-6);
  free_result(&r, 2);
  /* a bad label: the same message for every thread count */
  ((int64_t *)x.in[1].data)[77777] = 10;
  kresult rb = check_bitwise("xent bad label", &x);
  FG_CHECK_INT(rb.rc, -1);
  FG_CHECK_STR_CONTAINS(rb.err, "labels[77777] = 10");
  free_result(&rb, 2);
  free_call(&x);
}

/* ---- matmul ------------------------------------------------------------------------ */

/* out = op(a) @ op(b) over broadcast batches, in double, for a check with
 * tolerance of the tiling's pointer arithmetic. */
static double mm_ref(const kcall *k, int64_t flat) {
  const fg_kbuf *a = &k->in[0], *b = &k->in[1], *o = &k->out;
  const int R = o->rank;
  const int64_t M = o->dims[R - 2], N = o->dims[R - 1];
  const int64_t K = k->p.matmul.transpose_a ? a->dims[a->rank - 2] : a->dims[a->rank - 1];
  const int64_t i = (flat / N) % M, j = flat % N;
  int64_t ab, bb;
  mm_batch_of(R, o->dims, a->rank, a->dims, b->rank, b->dims, flat / (M * N), &ab, &bb);
  const int f32 = a->dtype == FG_F32;
  double s = 0;
  for (int64_t kk = 0; kk < K; kk++) {
    const int64_t ai = ab * M * K + (k->p.matmul.transpose_a ? kk * M + i : i * K + kk);
    const int64_t bj = bb * K * N + (k->p.matmul.transpose_b ? j * K + kk : kk * N + j);
    const double av = f32 ? ((const float *)a->data)[ai] : ((const double *)a->data)[ai];
    const double bv = f32 ? ((const float *)b->data)[bj] : ((const double *)b->data)[bj];
    s += av * bv;
  }
  return s;
}

typedef struct mm_case {
  fg_dtype dt;
  int ar, br, orank;
  int64_t ad[4], bd[4], od[4];
  int ta, tb;
} mm_case;

FG_TEST(matmul_tiles_bitwise_and_correct, "") {
  signal(SIGALRM, on_alarm);
  alarm(300);
  static const mm_case cases[] = {
      {FG_F32, 2, 2, 2, {300, 100}, {100, 1100}, {300, 1100}, 0, 0},
      {FG_F32, 2, 2, 2, {100, 300}, {100, 1100}, {300, 1100}, 1, 0},
      {FG_F32, 2, 2, 2, {300, 100}, {1100, 100}, {300, 1100}, 0, 1},
      {FG_F32, 2, 2, 2, {100, 300}, {1100, 100}, {300, 1100}, 1, 1},
      {FG_F32, 2, 2, 2, {128, 784}, {784, 512}, {128, 512}, 0, 0}, /* MLP-sized */
      {FG_F32, 2, 2, 2, {32, 64}, {64, 128}, {32, 128}, 0, 0},     /* mlp_small_train's */
      {FG_F32, 2, 2, 2, {40, 4200}, {4200, 60}, {40, 60}, 0, 0},   /* K past libxsmm's limit */
      {FG_F64, 2, 2, 2, {130, 520}, {130, 260}, {520, 260}, 1, 0},
      {FG_F64, 2, 2, 2, {520, 130}, {130, 260}, {520, 260}, 0, 0},
      {FG_F32, 3, 2, 3, {4, 150, 60}, {60, 700}, {4, 150, 700}, 0, 0},        /* stacked */
      {FG_F32, 4, 3, 4, {2, 1, 90, 60}, {3, 60, 300}, {2, 3, 90, 300}, 0, 0}, /* broadcast */
      {FG_F64, 3, 3, 3, {5, 60, 90}, {5, 300, 60}, {5, 90, 300}, 1, 1},
      {FG_I32, 2, 2, 2, {300, 100}, {100, 200}, {300, 200}, 0, 0},
      {FG_I64, 3, 3, 3, {3, 100, 80}, {3, 80, 120}, {3, 100, 120}, 0, 0},
  };
  uint64_t seed = 21;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const mm_case *mc = &cases[c];
    kcall k = {.op = "matmul", .key = mc->dt, .n_in = 2};
    k.in[0] = rand_buf(mc->dt, mc->ar, mc->ad, &seed);
    k.in[1] = rand_buf(mc->dt, mc->br, mc->bd, &seed);
    k.out = make_buf(mc->dt, mc->orank, mc->od);
    k.p.matmul.transpose_a = mc->ta;
    k.p.matmul.transpose_b = mc->tb;
    char label[64];
    snprintf(label, sizeof label, "matmul case %zu", c);
    kresult r = check_bitwise(label, &k);
    FG_CHECK_INT(r.rc, 0);
    const int64_t n = numel(&k.out);
    int bad = 0;
    if (mc->dt == FG_F32 || mc->dt == FG_F64) {
      for (int64_t e = 0; e < n; e += 1 + (e % 13)) { /* a spread-out sample */
        const double got = mc->dt == FG_F32 ? ((float *)r.out)[e] : ((double *)r.out)[e];
        const double want = mm_ref(&k, e);
        if (!(fabs(got - want) <= 1e-4 * (1 + fabs(want))) && bad++ < 3)
          fprintf(stderr, "  %s: element %lld = %g, want %g\n", label, (long long)e, got, want);
      }
    } else { /* integers: exact, rows computed directly (no batch broadcast here) */
      const int64_t M = mc->od[mc->orank - 2], N = mc->od[mc->orank - 1];
      const int64_t K = mc->ad[mc->ar - 1];
      for (int64_t e = 0; e < n; e += 1 + (e % 11)) {
        const int64_t bi = e / (M * N), i = (e / N) % M, j = e % N;
        int64_t s = 0;
        for (int64_t kk = 0; kk < K; kk++) {
          const int64_t ai = bi * M * K + i * K + kk, bj = bi * K * N + kk * N + j;
          s += mc->dt == FG_I32
                   ? (int64_t)((int32_t *)k.in[0].data)[ai] * ((int32_t *)k.in[1].data)[bj]
                   : ((int64_t *)k.in[0].data)[ai] * ((int64_t *)k.in[1].data)[bj];
        }
        const int64_t got = mc->dt == FG_I32 ? ((int32_t *)r.out)[e] : ((int64_t *)r.out)[e];
        if (got != s && bad++ < 3)
          fprintf(stderr, "  %s: element %lld = %lld, want %lld\n", label, (long long)e,
                  (long long)got, (long long)s);
      }
    }
    FG_CHECK_INT(bad, 0);
    free_result(&r, 2);
    free_call(&k);
  }
  alarm(0);
}

/* ---- elementwise ------------------------------------------------------------------- */

static kcall binary_call(const char *op, fg_dtype dt, int ar, const int64_t *ad, int br,
                         const int64_t *bd, int orank, const int64_t *od, uint64_t *s) {
  kcall k = {.op = op, .key = dt, .n_in = 2};
  k.in[0] = rand_buf(dt, ar, ad, s);
  k.in[1] = rand_buf(dt, br, bd, s);
  k.out = make_buf(!strcmp(op, "greater") ? FG_BOOL : dt, orank, od);
  return k;
}

FG_TEST(elementwise_bitwise_and_correct, "") {
  uint64_t seed = 31;
  const int64_t sq[2] = {1000, 1000}, row[1] = {1000}, col[2] = {1000, 1}, r1[2] = {1, 1000};
  /* add with a row broadcast, checked element by element too */
  kcall k = binary_call("add", FG_F32, 2, sq, 1, row, 2, sq, &seed);
  kresult r = check_bitwise("add row", &k);
  int bad = 0;
  for (int64_t e = 0; e < 1000000; e++)
    bad += ((float *)r.out)[e] != ((float *)k.in[0].data)[e] + ((float *)k.in[1].data)[e % 1000];
  FG_CHECK_INT(bad, 0);
  free_result(&r, 2);
  free_call(&k);
  /* an outer product by broadcasting both sides */
  k = binary_call("mul", FG_F64, 2, col, 2, r1, 2, sq, &seed);
  r = check_bitwise("mul outer", &k);
  bad = 0;
  for (int64_t e = 0; e < 1000000; e++)
    bad += ((double *)r.out)[e] !=
           ((double *)k.in[0].data)[e / 1000] * ((double *)k.in[1].data)[e % 1000];
  FG_CHECK_INT(bad, 0);
  free_result(&r, 2);
  free_call(&k);
  /* comparisons write bool */
  const int64_t d3[3] = {40, 50, 600}, d3b[3] = {40, 1, 600};
  k = binary_call("greater", FG_I32, 3, d3, 3, d3b, 3, d3, &seed);
  r = check_bitwise("greater", &k);
  FG_CHECK_INT(r.rc, 0);
  free_result(&r, 2);
  free_call(&k);
  /* integer division by zero: the first failing element, whatever the split */
  k = binary_call("div", FG_I32, 2, sq, 2, sq, 2, sq, &seed);
  for (int64_t e = 0; e < 1000000; e++)
    if (((int32_t *)k.in[1].data)[e] == 0) ((int32_t *)k.in[1].data)[e] = 3;
  ((int32_t *)k.in[1].data)[900001] = 0;
  ((int32_t *)k.in[1].data)[654321] = 0;
  r = check_bitwise("div zero", &k);
  FG_CHECK_INT(r.rc, -1);
  FG_CHECK_STR_CONTAINS(r.err, "division by zero at output element 654321");
  free_result(&r, 2);
  free_call(&k);
  /* unary */
  const int64_t big[1] = {1 << 20};
  const char *unary[] = {"exp", "tanh", "relu", "neg", "gelu", "erf"};
  for (size_t u = 0; u < sizeof unary / sizeof unary[0]; u++) {
    kcall ku = {.op = unary[u], .key = FG_F32, .n_in = 1};
    ku.in[0] = rand_buf(FG_F32, 1, big, &seed);
    ku.out = make_buf(FG_F32, 1, big);
    r = check_bitwise(unary[u], &ku);
    FG_CHECK_INT(r.rc, 0);
    if (!strcmp(unary[u], "exp")) {
      /* f32 exp is a vectorised polynomial: within 2 ulp of exp in double. */
      bad = 0;
      for (int64_t e = 0; e < big[0]; e++) {
        const double want = exp((double)((float *)ku.in[0].data)[e]);
        const double ulp = nextafterf((float)want, INFINITY) - (float)want;
        bad += !(fabs((double)((float *)r.out)[e] - want) <= 2 * ulp);
      }
      FG_CHECK_INT(bad, 0);
    }
    free_result(&r, 1);
    free_call(&ku);
  }
  /* select with broadcasting, and broadcast_like */
  kcall ks = {.op = "select", .key = FG_F32, .n_in = 3};
  ks.in[0] = rand_buf(FG_BOOL, 2, col, &seed);
  ks.in[1] = rand_buf(FG_F32, 2, sq, &seed);
  ks.in[2] = rand_buf(FG_F32, 1, row, &seed);
  ks.out = make_buf(FG_F32, 2, sq);
  r = check_bitwise("select", &ks);
  bad = 0;
  for (int64_t e = 0; e < 1000000; e++)
    bad += ((float *)r.out)[e] != (((uint8_t *)ks.in[0].data)[e / 1000]
                                       ? ((float *)ks.in[1].data)[e]
                                       : ((float *)ks.in[2].data)[e % 1000]);
  FG_CHECK_INT(bad, 0);
  free_result(&r, 3);
  free_call(&ks);
  kcall kb = {.op = "broadcast_like", .key = FG_F64, .n_in = 1};
  kb.in[0] = rand_buf(FG_F64, 2, col, &seed);
  kb.out = make_buf(FG_F64, 2, sq);
  r = check_bitwise("broadcast_like", &kb);
  bad = 0;
  for (int64_t e = 0; e < 1000000; e++)
    bad += ((double *)r.out)[e] != ((double *)kb.in[0].data)[e / 1000];
  FG_CHECK_INT(bad, 0);
  free_result(&r, 1);
  free_call(&kb);
}

FG_TEST(optimizers_bitwise, "") {
  uint64_t seed = 41;
  const int64_t d[2] = {700, 900};
  const char *ops[] = {"apply_sgd", "apply_momentum", "apply_adam"};
  const int n_state[] = {1, 2, 3};
  for (int o = 0; o < 3; o++) {
    kcall k = {.op = ops[o], .key = FG_F32};
    for (int i = 0; i < n_state[o] + 1; i++)
      k.in[k.n_in++] = rand_buf(FG_F32, 2, d, &seed);
    if (o == 2) /* v must be >= 0 */
      for (int64_t e = 0; e < d[0] * d[1]; e++)
        ((float *)k.in[2].data)[e] = fabsf(((float *)k.in[2].data)[e]);
    k.in[k.n_in] = make_buf(FG_F64, 0, NULL);
    *(double *)k.in[k.n_in++].data = 0.01;
    if (o == 2) {
      k.in[k.n_in] = make_buf(FG_F64, 0, NULL);
      *(double *)k.in[k.n_in++].data = 3;
    }
    k.out = make_buf(FG_F32, 2, d);
    if (o == 1) {
      k.p.momentum.momentum = 0.9;
      k.p.momentum.nesterov = 1;
    } else if (o == 2) {
      k.p.adam.beta1 = 0.9;
      k.p.adam.beta2 = 0.999;
      k.p.adam.epsilon = 1e-8;
      k.p.adam.weight_decay = 0.01;
    }
    kresult r = check_bitwise(ops[o], &k);
    FG_CHECK_INT(r.rc, 0);
    if (o == 0) { /* sgd by hand */
      int bad = 0;
      for (int64_t e = 0; e < d[0] * d[1]; e++)
        bad +=
            ((float *)r.out)[e] != ((float *)k.in[0].data)[e] - 0.01f * ((float *)k.in[1].data)[e];
      FG_CHECK_INT(bad, 0);
    }
    free_result(&r, k.n_in);
    free_call(&k);
  }
  for (int t = 1; t <= 4; t++) { /* the last case: release the shared pools */
    fg_pool_free(pools[t]);
    pools[t] = NULL;
  }
}
