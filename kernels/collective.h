/* The weighted all_reduce's arithmetic, shared by the CPU kernel
 * (kernels/cpu/collective.c) and the CUDA executor's NCCL path
 * (executor/cuda/staging.c), so both weigh uneven shards alike. */
#ifndef FG_KERNELS_COLLECTIVE_H
#define FG_KERNELS_COLLECTIVE_H

#include <stddef.h>

/* From this rank's rows and the ranks' all-reduced sums (sums[0] = rows,
 * sums[1] = rows^2) over `size` ranks: *plain = 1 when every rank has the
 * same rows (the plain mean then is the weighted one; taking it keeps even
 * shards bit for bit as without weights), else *w = rows and *total =
 * sums[0] (the result is sum(x_r * w_r) / total). Every rank sees the same
 * sums, so all choose alike. 0, or -1 with `err` naming the values when
 * they are out of range. */
int fgk_all_reduce_weights(double rows, const double sums[2], int size, int *plain, double *w,
                           double *total, char *err, size_t err_size);

#endif
