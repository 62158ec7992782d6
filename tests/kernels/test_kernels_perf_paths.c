/* The fast paths of the softmax family (contiguous f32 rows: a polynomial
 * exp, lane sums), select with broadcast scalars, and reductions that only
 * drop size-1 dims (a copy): values against plain reference loops in
 * double, and bitwise identical results with par == NULL and pools of 1, 2
 * and 4 threads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "executor/threadpool.h"
#include "fgtest.h"
#include "kernels/kernel.h"
#include "test_kernels_par.h"

static int64_t numel(const fg_kbuf *b) { return dims_count(b->rank, b->dims); }

/* Logits [N, C] with C not a multiple of the lane count and above the
 * block size, plus rows that test the exp's edges: very negative gaps
 * (results underflow to subnormals and 0), -inf entries, large logits. */
static fg_kbuf logits(int64_t N, int64_t C, uint64_t *seed) {
  const int64_t d[2] = {N, C};
  fg_kbuf b = make_kbuf(FG_F32, 2, d);
  float *x = (float *)b.data;
  for (int64_t i = 0; i < N * C; i++)
    x[i] = (float)(rng_unit(seed) * 8);
  for (int64_t j = 0; j < C; j++) {
    x[1 * C + j] = (float)(-j * 0.2);           /* gaps down to ~-200 */
    x[2 * C + j] = j % 3 ? -INFINITY : 1.0f;    /* -inf entries */
    x[3 * C + j] = (float)(1e4 + (j % 17) * 3); /* large logits */
  }
  return b;
}

static double ref_lse(const float *row, int64_t C) {
  double m = -INFINITY, s = 0;
  for (int64_t j = 0; j < C; j++)
    m = row[j] > m ? row[j] : m;
  for (int64_t j = 0; j < C; j++)
    s += exp((double)row[j] - m);
  return m + log(s);
}

FG_TEST(perf_softmax_f32_rows_match_reference, "") {
  uint64_t seed = 5;
  const int64_t N = 37, C = 1003, d[2] = {N, C};
  fg_kbuf x = logits(N, C, &seed), y = make_kbuf(FG_F32, 2, d);
  fg_op_params p = {.softmax = {.axis = 1}};
  for (int want_log = 0; want_log < 2; want_log++) {
    run_bitwise(want_log ? "log_softmax" : "softmax", FG_F32, &x, 1, &y, &p);
    const float *xv = (const float *)x.data, *yv = (const float *)y.data;
    double worst = 0;
    for (int64_t n = 0; n < N; n++) {
      const double lse = ref_lse(xv + n * C, C);
      for (int64_t j = 0; j < C; j++) {
        const double want = want_log ? (double)xv[n * C + j] - lse : exp(xv[n * C + j] - lse);
        const double got = yv[n * C + j];
        if (isinf(want)) {
          FG_CHECK(got == want);
          continue;
        }
        const double err = fabs(got - want) / (want_log ? 1 + fabs(want) : fmax(want, 1e-30));
        if (want >= 1e-30 || want_log)
          worst = err > worst ? err : worst;
        else
          FG_CHECK(fabs(got - want) < 1e-37); /* subnormal or zero: absolute */
      }
    }
    FG_CHECK(worst < 2e-6);
  }
  /* A NaN makes its row NaN and leaves the others alone. */
  ((float *)x.data)[5 * C + 17] = NAN;
  run_bitwise("softmax", FG_F32, &x, 1, &y, &p);
  for (int64_t j = 0; j < C; j++)
    FG_CHECK(isnan(((float *)y.data)[5 * C + j]));
  FG_CHECK(!isnan(((float *)y.data)[4 * C]) && !isnan(((float *)y.data)[6 * C]));
  free(x.data);
  free(y.data);
}

FG_TEST(perf_softmax_cross_entropy_f32_matches_reference, "") {
  uint64_t seed = 9;
  const int64_t N = 300, C = 1003, nd[1] = {N};
  fg_kbuf in[2] = {logits(N, C, &seed), make_kbuf(FG_I32, 1, nd)};
  for (int64_t n = 0; n < N; n++)
    ((int32_t *)in[1].data)[n] = (int32_t)((n * 131) % C);
  ((int32_t *)in[1].data)[2] = 0; /* a finite logit in the -inf row */
  fg_kbuf out = make_kbuf(FG_F32, 0, NULL);
  fg_op_params p;
  memset(&p, 0, sizeof p);
  run_bitwise("softmax_cross_entropy", FG_F32, in, 2, &out, &p);
  double want = 0;
  for (int64_t n = 0; n < N; n++) {
    const float *row = (const float *)in[0].data + n * C;
    want += ref_lse(row, C) - row[((int32_t *)in[1].data)[n]];
  }
  want /= (double)N;
  FG_CHECK_NEAR(*(float *)out.data, want, 1e-5 * fabs(want));
  free(in[0].data);
  free(in[1].data);
  free(out.data);
}

/* select(cond, x, y) with x and/or y broadcast from one element, flat and
 * per row of a [R, C] output, for 1-, 4- and 8-byte dtypes. */
FG_TEST(perf_select_broadcast_scalars, "") {
  uint64_t seed = 3;
  const int64_t R = 300, C = 257, od[2] = {R, C}, cd[1] = {C}, one[1] = {1};
  const fg_dtype dts[3] = {FG_BOOL, FG_F32, FG_F64};
  for (int di = 0; di < 3; di++) {
    const fg_dtype dt = dts[di];
    for (int shape = 0; shape < 8; shape++) {
      /* bit 0: x is one element; bit 1: y is one element; bit 2: cond is [C] */
      fg_kbuf in[3];
      in[0] = shape & 4 ? make_kbuf(FG_BOOL, 1, cd) : make_kbuf(FG_BOOL, 2, od);
      in[1] = shape & 1 ? make_kbuf(dt, 1, one) : make_kbuf(dt, 2, od);
      in[2] = shape & 2 ? make_kbuf(dt, 0, NULL) : make_kbuf(dt, 2, od);
      for (int k = 0; k < 3; k++) {
        for (int64_t i = 0; i < numel(&in[k]); i++) {
          const double u = rng_unit(&seed);
          if (in[k].dtype == FG_BOOL)
            ((uint8_t *)in[k].data)[i] = u > 0;
          else if (in[k].dtype == FG_F32)
            ((float *)in[k].data)[i] = (float)u;
          else
            ((double *)in[k].data)[i] = u;
        }
      }
      fg_kbuf out = make_kbuf(dt, 2, od);
      fg_op_params p;
      memset(&p, 0, sizeof p);
      run_bitwise("select", dt, in, 3, &out, &p);
      const size_t es = fg_dtype_size(dt);
      int ok = 1;
      for (int64_t i = 0; i < R * C; i++) {
        const int64_t ci = shape & 4 ? i % C : i, xi = shape & 1 ? 0 : i, yi = shape & 2 ? 0 : i;
        const char *src = ((const uint8_t *)in[0].data)[ci] ? (const char *)in[1].data + xi * es
                                                            : (const char *)in[2].data + yi * es;
        ok = ok && memcmp((const char *)out.data + i * es, src, es) == 0;
      }
      FG_CHECK(ok);
      for (int k = 0; k < 3; k++)
        free(in[k].data);
      free(out.data);
    }
  }
}

/* sum_to [R, C] -> [R, C] and reduce_sum over a size-1 axis are copies;
 * sum_to [R, C] -> [C] sums rows in order, in double. */
FG_TEST(perf_sum_to_identity_and_axis0, "") {
  uint64_t seed = 17;
  const int64_t R = 256, C = 1000, d[2] = {R, C}, kd[3] = {R, 1, C}, cd[1] = {C};
  fg_kbuf x = make_kbuf(FG_F32, 2, d);
  float *xv = (float *)x.data;
  for (int64_t i = 0; i < R * C; i++)
    xv[i] = (float)rng_unit(&seed);
  xv[7] = -0.0f;
  fg_kbuf y = make_kbuf(FG_F32, 2, d);
  fg_op_params p;
  memset(&p, 0, sizeof p);
  run_bitwise("sum_to", FG_F32, &x, 1, &y, &p);
  FG_CHECK(memcmp(x.data, y.data, kbuf_nbytes(&x)) == 0);
  fg_kbuf x3 = x;
  x3.rank = 3;
  memcpy(x3.dims, kd, sizeof kd);
  fg_op_params pr = {.reduce = {.n_axes = 1, .axes = {1}}};
  run_bitwise("reduce_sum", FG_F32, &x3, 1, &y, &pr);
  FG_CHECK(memcmp(x.data, y.data, kbuf_nbytes(&x)) == 0);
  fg_kbuf s = make_kbuf(FG_F32, 1, cd);
  run_bitwise("sum_to", FG_F32, &x, 1, &s, &p);
  int ok = 1;
  for (int64_t j = 0; j < C; j++) {
    double acc = 0;
    for (int64_t r = 0; r < R; r++)
      acc += xv[r * C + j];
    ok = ok && ((float *)s.data)[j] == (float)acc;
  }
  FG_CHECK(ok);
  free(x.data);
  free(y.data);
  free(s.data);
}

/* out[i] for output flat index `flat` of transpose(perm): the input
 * element at the permuted coordinates (a plain index loop). */
static int64_t transposed_source(int rank, const int64_t *in_dims, const int *perm, int64_t flat) {
  int64_t coord[FG_MAX_RANK], st[FG_MAX_RANK], s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    coord[i] = flat % in_dims[perm[i]];
    flat /= in_dims[perm[i]];
    st[i] = 0;
  }
  int64_t in_st[FG_MAX_RANK];
  for (int i = rank - 1; i >= 0; i--) {
    in_st[i] = s;
    s *= in_dims[i];
  }
  int64_t off = 0;
  for (int i = 0; i < rank; i++)
    off += coord[i] * in_st[perm[i]];
  (void)st;
  return off;
}

/* Every permutation of rank-4 shapes holding size-1 dims, sizes that are
 * not multiples of the 16-element tiles and dims of 16 and more (the
 * tiled plane transposes, the row copies short and long), for 1-, 4- and
 * 8-byte elements (bool, f32, f64): each output element is the input element the index
 * loop names, and par == NULL and pools of 1, 2 and 4 threads write the
 * same bytes. Plus attention's two layouts at their size. */
FG_TEST(perf_transpose_matches_index_loop, "") {
  static const int64_t shapes[][4] = {{3, 1, 37, 20}, {17, 33, 1, 5}, {2, 70, 3, 18}, {1, 1, 1, 1}};
  static const int64_t attn[][4] = {{128, 32, 16, 1}, {8, 128, 8, 64}};
  static const int attn_perm[][4] = {{1, 2, 0, 3}, {0, 2, 1, 3}};
  const fg_dtype dts[3] = {FG_BOOL, FG_F32, FG_F64};
  uint64_t seed = 42;
  int bad = 0, cases = 0;
  for (int sh = 0; sh < 6; sh++)
    for (int pi = 0; pi < (sh < 4 ? 24 : 1); pi++) {
      int perm[4] = {0, 1, 2, 3};
      if (sh < 4) { /* the pi-th permutation (factorial number system) */
        int pool[4] = {0, 1, 2, 3}, left = 4, code = pi;
        for (int i = 0; i < 4; i++) {
          const int f = left == 4 ? 6 : left == 3 ? 2 : 1, k = code / f;
          code %= f;
          perm[i] = pool[k];
          for (int j = k; j < left - 1; j++)
            pool[j] = pool[j + 1];
          left--;
        }
      } else {
        memcpy(perm, attn_perm[sh - 4], sizeof perm);
      }
      const int64_t *dims = sh < 4 ? shapes[sh] : attn[sh - 4];
      for (int di = 0; di < 3; di++) {
        fg_kbuf in = make_kbuf(dts[di], 4, dims);
        int64_t od[4];
        for (int i = 0; i < 4; i++)
          od[i] = dims[perm[i]];
        fg_kbuf out = make_kbuf(dts[di], 4, od);
        const size_t es = fg_dtype_size(dts[di]);
        unsigned char *x = (unsigned char *)in.data;
        for (size_t b = 0; b < (size_t)numel(&in) * es; b++)
          x[b] = (unsigned char)(rng_unit(&seed) * (es == 1 ? 2 : 256)); /* bools 0 or 1 */
        fg_op_params p;
        memset(&p, 0, sizeof p);
        for (int i = 0; i < 4; i++)
          p.transpose.perm[i] = perm[i];
        run_bitwise("transpose", dts[di], &in, 1, &out, &p);
        const unsigned char *y = (const unsigned char *)out.data;
        for (int64_t f = 0; f < numel(&out); f++)
          bad += memcmp(y + f * es, x + transposed_source(4, dims, perm, f) * es, es) != 0;
        cases++;
        free(in.data), free(out.data);
      }
    }
  FG_CHECK_INT(cases, 3 * (4 * 24 + 2));
  FG_CHECK_INT(bad, 0);
}
