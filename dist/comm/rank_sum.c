/* dist/comm/rank_sum.h. Blocked through a small accumulator, so each element's
 * sum is formed in exactly the order the in-process communicator uses, and
 * so dst may alias a source. */
#include "dist/comm/rank_sum.h"

#include <string.h>

#define DEFINE_SUM(NAME, T)                                                                        \
  static void NAME(T *const *dst, int n_dst, T *const *src, int n, int64_t len, int mean) {        \
    enum { BLK = 512 };                                                                            \
    T acc[BLK];                                                                                    \
    for (int64_t b = 0; b < len; b += BLK) {                                                       \
      int64_t k = len - b < BLK ? len - b : BLK;                                                   \
      for (int64_t i = 0; i < k; i++)                                                              \
        acc[i] = src[0][b + i];                                                                    \
      for (int p = 1; p < n; p++)                                                                  \
        for (int64_t i = 0; i < k; i++)                                                            \
          acc[i] += src[p][b + i];                                                                 \
      if (mean == 2)                                                                               \
        for (int64_t i = 0; i < k; i++)                                                            \
          acc[i] *= (T)1 / (T)n;                                                                   \
      else if (mean)                                                                               \
        for (int64_t i = 0; i < k; i++)                                                            \
          acc[i] /= (T)n;                                                                          \
      for (int d = 0; d < n_dst; d++)                                                              \
        memcpy(dst[d] + b, acc, (size_t)k * sizeof(T));                                            \
    }                                                                                              \
  }
DEFINE_SUM(sum_f32, float)
DEFINE_SUM(sum_f64, double)
DEFINE_SUM(sum_i32, int32_t)
DEFINE_SUM(sum_i64, int64_t)

void fg_rank_sum_to(fg_dtype dt, void *const *dst, int n_dst, void *const *src, int n, int64_t len,
                    int mean) {
  /* A float divided by a power of two equals it times the exact
   * reciprocal, rounding included (both are the correctly rounded value of
   * the same real number), and a multiply is several times cheaper than a
   * divide, and the mean of a large gradient is memory-bound already. */
  if (mean && (dt == FG_F32 || dt == FG_F64) && n > 0 && (n & (n - 1)) == 0) mean = 2;
  switch (dt) {
  case FG_F32: sum_f32((float *const *)dst, n_dst, (float *const *)src, n, len, mean); break;
  case FG_F64: sum_f64((double *const *)dst, n_dst, (double *const *)src, n, len, mean); break;
  case FG_I32: sum_i32((int32_t *const *)dst, n_dst, (int32_t *const *)src, n, len, mean); break;
  case FG_I64: sum_i64((int64_t *const *)dst, n_dst, (int64_t *const *)src, n, len, mean); break;
  default: break;
  }
}

void fg_rank_mean(fg_dtype dt, void *buf, int64_t len, int n) {
  /* The sums' own rule (fg_rank_sum_to): floats times the exact
   * reciprocal when n is a power of two, else divided; integers divided. */
  if (n <= 1) return;
  const int by_mul = (n & (n - 1)) == 0;
  switch (dt) {
  case FG_F32:
    for (int64_t i = 0; i < len; i++)
      ((float *)buf)[i] =
          by_mul ? ((float *)buf)[i] * (1.0f / (float)n) : ((float *)buf)[i] / (float)n;
    break;
  case FG_F64:
    for (int64_t i = 0; i < len; i++)
      ((double *)buf)[i] =
          by_mul ? ((double *)buf)[i] * (1.0 / (double)n) : ((double *)buf)[i] / (double)n;
    break;
  case FG_I32:
    for (int64_t i = 0; i < len; i++)
      ((int32_t *)buf)[i] /= n;
    break;
  case FG_I64:
    for (int64_t i = 0; i < len; i++)
      ((int64_t *)buf)[i] /= n;
    break;
  default: break;
  }
}

void fg_rank_sum(fg_dtype dt, void *dst, void *const *src, int n, int64_t len, int mean) {
  fg_rank_sum_to(dt, &dst, 1, src, n, len, mean);
}
