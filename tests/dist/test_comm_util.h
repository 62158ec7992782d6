/* Shared by the point-to-point tests of both communicators: test_comm_p2p.c
 * (in-process, ranks are threads) and mpi/mpi_comm_check.c (MPI, started
 * under mpirun by test_mpi), and the all_reduce data of the latter and of
 * test_shm_reduce.c. Plain C, no test framework: the MPI helper is
 * a program of its own. Received values are compared with a formula the
 * receiver evaluates itself, never with what the sender's buffer holds. */
#ifndef FG_TEST_COMM_UTIL_H
#define FG_TEST_COMM_UTIL_H

#include <flowgraph/flowgraph.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/comm/comm.h"

static inline double comm_now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- all_reduce: test_shm_reduce.c and mpi/mpi_comm_check.c ---------- */

/* Values of mixed magnitude, so that a different summation order would
 * change the low bits (and the bitwise comparison would notice). */
static inline double reduce_value(int rank, int64_t i) {
  return sin(0.37 * (double)i + 1.3 * rank) * pow(10.0, (double)((i + rank) % 7) - 3.0);
}

static inline void reduce_fill(fg_dtype dt, void *buf, int rank, int64_t count) {
  for (int64_t i = 0; i < count; i++) {
    double v = reduce_value(rank, i);
    switch (dt) {
    case FG_F32: ((float *)buf)[i] = (float)v; break;
    case FG_F64: ((double *)buf)[i] = v; break;
    case FG_I32: ((int32_t *)buf)[i] = (int32_t)(v * 1000.0) + rank; break;
    case FG_I64: ((int64_t *)buf)[i] = (int64_t)(v * 1e6) * 1000003 + rank; break;
    default: break;
    }
  }
}

/* out[i] = src[i] (first) or out[i] + src[i], for count elements of dt. */
static inline void reduce_acc(fg_dtype dt, void *out, const void *src, int64_t count, int first) {
  for (int64_t i = 0; i < count; i++) {
    switch (dt) {
    case FG_F32:
      ((float *)out)[i] =
          first ? ((const float *)src)[i] : ((float *)out)[i] + ((const float *)src)[i];
      break;
    case FG_F64:
      ((double *)out)[i] =
          first ? ((const double *)src)[i] : ((double *)out)[i] + ((const double *)src)[i];
      break;
    case FG_I32:
      ((int32_t *)out)[i] =
          first ? ((const int32_t *)src)[i] : ((int32_t *)out)[i] + ((const int32_t *)src)[i];
      break;
    case FG_I64:
      ((int64_t *)out)[i] =
          first ? ((const int64_t *)src)[i] : ((int64_t *)out)[i] + ((const int64_t *)src)[i];
      break;
    default: break;
    }
  }
}

/* The all_reduce reference over ranks grouped by host (host[p]: rank p's
 * host, numbered in order of each host's first rank; NULL: one host):
 * each host's ranks summed in rank order, then the hosts' sums in host
 * order, per element, then / n (a division) for the mean. Rank p's data is
 * rank first + p's (tests that change the data every round). */
static inline void reduce_expected_hosts(fg_dtype dt, void *out, int first, int n, const int *host,
                                         int64_t count, int mean) {
  size_t es = fg_dtype_size(dt);
  unsigned char *tmp = calloc((size_t)count + 1, es), *part = calloc((size_t)count + 1, es);
  int hosts = 1;
  for (int p = 0; host && p < n; p++)
    if (host[p] + 1 > hosts) hosts = host[p] + 1;
  for (int h = 0; h < hosts; h++) {
    int firstp = 1;
    for (int p = 0; p < n; p++) {
      if (host && host[p] != h) continue;
      reduce_fill(dt, tmp, first + p, count);
      reduce_acc(dt, part, tmp, count, firstp);
      firstp = 0;
    }
    reduce_acc(dt, out, part, count, h == 0);
  }
  if (mean) {
    for (int64_t i = 0; i < count; i++) {
      switch (dt) {
      case FG_F32: ((float *)out)[i] /= (float)n; break;
      case FG_F64: ((double *)out)[i] /= (double)n; break;
      case FG_I32: ((int32_t *)out)[i] /= n; break;
      case FG_I64: ((int64_t *)out)[i] /= n; break;
      default: break;
      }
    }
  }
  free(tmp);
  free(part);
}

/* The all_reduce reference when rank p filled its buffer as rank first + p
 * (tests that change the data every round): rank 0 + rank 1 + ... in that
 * order, per element, then / n (a division) for the mean. */
static inline void reduce_expected_from(fg_dtype dt, void *out, int first, int n, int64_t count,
                                        int mean) {
  reduce_expected_hosts(dt, out, first, n, NULL, count, mean);
}

static inline void reduce_expected(fg_dtype dt, void *out, int n, int64_t count, int mean) {
  reduce_expected_from(dt, out, 0, n, count, mean);
}

/* ---- point-to-point ------------------------------------------------------ */

/* Element i of the k-th message from rank src to rank dst. */
static inline double p2p_value(int src, int dst, int k, int64_t i) {
  return sin(0.01 * (double)i + src + 0.3 * k) * 1000.0 + dst;
}

static inline void p2p_fill(fg_dtype dt, void *buf, int src, int dst, int k, int64_t count) {
  for (int64_t i = 0; i < count; i++) {
    double v = p2p_value(src, dst, k, i);
    switch (dt) {
    case FG_F32: ((float *)buf)[i] = (float)v; break;
    case FG_F64: ((double *)buf)[i] = v; break;
    case FG_I32: ((int32_t *)buf)[i] = (int32_t)(v * 1000.0); break;
    case FG_I64: ((int64_t *)buf)[i] = (int64_t)(v * 1e9) * 7; break;
    default: break;
    }
  }
}

/* Index of the first element of buf that is not message (src, dst, k), or
 * -1 when all match. */
static inline int64_t p2p_mismatch(fg_dtype dt, const void *buf, int src, int dst, int k,
                                   int64_t count) {
  size_t es = fg_dtype_size(dt);
  unsigned char *want = malloc((size_t)count * es + 1);
  p2p_fill(dt, want, src, dst, k, count);
  int64_t bad = -1;
  for (int64_t i = 0; i < count && bad < 0; i++)
    if (memcmp((const unsigned char *)buf + i * (int64_t)es, want + i * (int64_t)es, es) != 0)
      bad = i;
  free(want);
  return bad;
}

enum { P2P_BIG = 1 << 20 }; /* doubles: 8 MB */

/* Iteration `it` of one thread of the two-threads-per-rank test. Role 0
 * sends P2P_BIG doubles to the right and receives them back from there;
 * role 1 receives from the left and sends back (so a send waiting for its
 * peer must not hold up another thread's recv); role 2 all-reduces the
 * n_ar floats of ar. buf holds P2P_BIG doubles. Adds a wrong value to
 * *bad; returns the communicator's 0 or -1. */
static inline int p2p_duplex_step(fg_comm *c, int role, int it, double *buf, float *ar, int n_ar,
                                  int *bad, fg_status *st) {
  int right = (c->rank + 1) % c->size, left = (c->rank + c->size - 1) % c->size;
  int rc = 0;
  if (role == 0) {
    p2p_fill(FG_F64, buf, c->rank, right, 100 + it, P2P_BIG);
    rc = c->ops->send(c, buf, (int64_t)P2P_BIG * 8, right, 100 + it, st);
    if (rc == 0) rc = c->ops->recv(c, buf, (int64_t)P2P_BIG * 8, right, 200 + it, st);
    if (rc == 0 && p2p_mismatch(FG_F64, buf, right, c->rank, 200 + it, P2P_BIG) >= 0) (*bad)++;
  } else if (role == 1) {
    rc = c->ops->recv(c, buf, (int64_t)P2P_BIG * 8, left, 100 + it, st);
    if (rc == 0 && p2p_mismatch(FG_F64, buf, left, c->rank, 100 + it, P2P_BIG) >= 0) (*bad)++;
    p2p_fill(FG_F64, buf, c->rank, left, 200 + it, P2P_BIG);
    if (rc == 0) rc = c->ops->send(c, buf, (int64_t)P2P_BIG * 8, left, 200 + it, st);
  } else {
    for (int i = 0; i < n_ar; i++)
      ar[i] = (float)(c->rank + i % 13);
    rc = c->ops->all_reduce(c, ar, n_ar, FG_F32, 0, st);
    /* sum over r of (r + i % 13): n(n-1)/2 + n (i % 13), exact in f32. */
    for (int i = 0; rc == 0 && i < n_ar; i++)
      if (ar[i] != (float)(c->size * (c->size - 1) / 2 + c->size * (i % 13))) {
        (*bad)++;
        break;
      }
  }
  return rc;
}

#endif
