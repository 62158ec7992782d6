/* The rank-order sum every host-memory communicator uses (internal), and
 * the slices ranks sum, so the
 * MPI message path, the MPI shared-memory path (dist/comm/shm_reduce.c) and the
 * in-process group give the same bits for the same data. */
#ifndef FG_DIST_RANK_SUM_H
#define FG_DIST_RANK_SUM_H

#include <stdint.h>

#include "flowgraph/types.h"

/* dst[i] = src[0][i] + src[1][i] + ... + src[n-1][i] in that order, then
 * / n when `mean` is 1, for `len` elements of f32, f64, i32 or i64 (other
 * dtypes: nothing is written). dst may alias any src: each block of
 * elements is read before it is written. */
void fg_rank_sum(fg_dtype dt, void *dst, void *const *src, int n, int64_t len, int mean);

/* The same, storing each block to all n_dst destinations (which may alias
 * the sources) while it is still in L1: the in-process group and the
 * in-place shared-memory path write every rank's buffer, and the slot path
 * its slot and its own buffer, with no second pass to copy. */
void fg_rank_sum_to(fg_dtype dt, void *const *dst, int n_dst, void *const *src, int n, int64_t len,
                    int mean);

/* buf[i] / n for `len` elements, as the sums above take the mean (so a
 * mean formed in steps has the same bits): several ranks' partial sums
 * summed again, across hosts. */
void fg_rank_mean(fg_dtype dt, void *buf, int64_t len, int n);

/* Slice p of n over `len` elements, balanced (the first len % n slices get
 * one more), the same on every rank: which elements rank p sums. */
static inline void fg_rank_slice(int64_t len, int n, int p, int64_t *start, int64_t *plen) {
  int64_t q = len / n, r = len % n;
  *start = q * p + (p < r ? p : r);
  *plen = q + (p < r ? 1 : 0);
}

#endif
