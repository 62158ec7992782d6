/* Kernel buffers and the thread check the kernel tests share: a kernel
 * run with par == NULL, then with pools of 1, 2 and 4 threads, must write
 * the same bytes (kernels split work by the shape alone, never by the
 * thread count). Needs fgtest.h included first. */
#ifndef FG_TEST_KERNELS_PAR_H
#define FG_TEST_KERNELS_PAR_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor/threadpool.h"
#include "kernels/kernel.h"
#include "test_kernels_util.h"

static inline size_t kbuf_nbytes(const fg_kbuf *b) {
  return (size_t)dims_count(b->rank, b->dims) * fg_dtype_size(b->dtype);
}

/* A zeroed buffer of that type (at least one byte, so empty ones are not NULL). */
static inline fg_kbuf make_kbuf(fg_dtype dt, int rank, const int64_t *dims) {
  fg_kbuf b = {.dtype = dt, .rank = rank};
  for (int i = 0; i < rank; i++)
    b.dims[i] = dims[i];
  b.data = calloc(kbuf_nbytes(&b) > 0 ? kbuf_nbytes(&b) : 1, 1);
  return b;
}

/* Runs op once with par `par` (NULL: single-threaded) into out; 0, -1
 * with the kernel's message printed, or -99 when no kernel has that key. */
static inline int run_kernel(const char *op, fg_dtype key, const fg_kbuf *in, int n_in,
                             fg_kbuf *out, const fg_op_params *p, const fg_kparallel *par) {
  fg_kernel_fn fn = fg_cpu_kernel(op, key);
  if (!fn) return -99;
  char err[256] = "";
  fg_kctx ctx = {in,   n_in, out, 1, p, err, sizeof err, par, NULL, NULL,
                 NULL, NULL, 0,   0, 0, 0,   0,          0,   NULL};
  const int rc = fn(&ctx);
  if (rc != 0) fprintf(stderr, "  %s: %s\n", op, err);
  return rc;
}

/* The thread counts run_bitwise checks. */
static const int bitwise_threads[3] = {1, 2, 4};

/* The pool of bitwise_threads[t] threads, made at first use and kept for
 * the process: a case calls run_bitwise a thousand times, and starting
 * threads each time was most of its run time (4320 threads, under ASan 2.9 s). */
static inline fg_pool *bitwise_pool(int t) {
  static fg_pool *pools[3];
  if (!pools[t]) pools[t] = fg_pool_new(bitwise_threads[t]);
  return pools[t];
}

/* Runs op with par NULL (into out) and with pools of 1, 2 and 4 threads;
 * every run must return 0 and write the same bytes. */
static inline void run_bitwise(const char *op, fg_dtype key, const fg_kbuf *in, int n_in,
                               fg_kbuf *out, const fg_op_params *p) {
  FG_CHECK_INT(run_kernel(op, key, in, n_in, out, p, NULL), 0);
  fg_kbuf o2 = *out;
  const size_t bytes = kbuf_nbytes(out);
  o2.data = malloc(bytes > 0 ? bytes : 1);
  FG_REQUIRE(o2.data != NULL);
  for (int t = 0; t < 3; t++) {
    fg_pool *pool = bitwise_pool(t);
    FG_REQUIRE(pool != NULL);
    const fg_kparallel par = {pool, fg_pool_parallel_for_fn};
    memset(o2.data, 0xA5, bytes);
    FG_CHECK_INT(run_kernel(op, key, in, n_in, &o2, p, &par), 0);
    if (memcmp(o2.data, out->data, bytes) != 0)
      fprintf(stderr, "  %s: %d threads differ from par == NULL\n", op, bitwise_threads[t]);
    FG_CHECK(memcmp(o2.data, out->data, bytes) == 0);
  }
  free(o2.data);
}

#endif
