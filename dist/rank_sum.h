/* The rank-order sum every host-memory communicator uses (internal), so the
 * MPI message path, the MPI shared-memory path (dist/shm_reduce.c) and the
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

#endif
