/* A program test_mpi.c starts under mpirun to exercise dist/comm_mpi.c.
 *
 *   mpi_comm_check collectives TIMEOUT   all_reduce / all_gather / broadcast
 *   mpi_comm_check kill K TIMEOUT        rank 1 dies (SIGKILL) before all_reduce K
 *   mpi_comm_check stuck K TIMEOUT       rank 1 sleeps 3*TIMEOUT before all_reduce K
 *   mpi_comm_check hash same|mismatch    the M2 graph-hash check
 *
 * Each rank prints "rank R: ..." lines. Expected values are computed here
 * by a plain loop over every rank's data (each rank can regenerate all of
 * it), never by the communicator. Exit codes: 0 all good, 1 a wrong value,
 * 3 a collective failed (the code name and message are printed). */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dist/comm_mpi.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Values of mixed magnitude, so that a different summation order would
 * change the low bits (and the bitwise comparison would notice). */
static double value(int rank, int64_t i) {
  return sin(0.37 * (double)i + 1.3 * rank) * pow(10.0, (double)((i + rank) % 7) - 3.0);
}

static void fill(fg_dtype dt, void *buf, int rank, int64_t count) {
  for (int64_t i = 0; i < count; i++) {
    double v = value(rank, i);
    switch (dt) {
    case FG_F32: ((float *)buf)[i] = (float)v; break;
    case FG_F64: ((double *)buf)[i] = v; break;
    case FG_I32: ((int32_t *)buf)[i] = (int32_t)(v * 1000.0) + rank; break;
    case FG_I64: ((int64_t *)buf)[i] = (int64_t)(v * 1e6) * 1000003 + rank; break;
    default: break;
    }
  }
}

/* The reference: rank 0 + rank 1 + ... in that order, per element. */
static void expected(fg_dtype dt, void *out, int n, int64_t count, int mean) {
  size_t es = fg_dtype_size(dt);
  void *tmp = malloc((size_t)count * es + 1);
  for (int p = 0; p < n; p++) {
    fill(dt, tmp, p, count);
    for (int64_t i = 0; i < count; i++) {
      switch (dt) {
      case FG_F32:
        ((float *)out)[i] = p ? ((float *)out)[i] + ((float *)tmp)[i] : ((float *)tmp)[i];
        break;
      case FG_F64:
        ((double *)out)[i] = p ? ((double *)out)[i] + ((double *)tmp)[i] : ((double *)tmp)[i];
        break;
      case FG_I32:
        ((int32_t *)out)[i] = p ? ((int32_t *)out)[i] + ((int32_t *)tmp)[i] : ((int32_t *)tmp)[i];
        break;
      case FG_I64:
        ((int64_t *)out)[i] = p ? ((int64_t *)out)[i] + ((int64_t *)tmp)[i] : ((int64_t *)tmp)[i];
        break;
      default: break;
      }
    }
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
}

static int fail_status(fg_comm *c, const char *what, fg_status *st, double t0) {
  printf("rank %d: %s failed: %s after %.2f s: %s\n", c->rank, what,
         fg_code_name(fg_status_code(st)), now_s() - t0, fg_status_message(st));
  fflush(stdout);
  return 3;
}

static int collectives(fg_comm *c, fg_status *st) {
  static const fg_dtype dts[] = {FG_F32, FG_F64, FG_I32, FG_I64};
  const int64_t counts[] = {0, 1, 3, c->size - 1, c->size + 1, 1000, 10007, 200003};
  int bad = 0, checks = 0;
  double t0 = now_s();
  for (size_t d = 0; d < 4; d++) {
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
      for (int mean = 0; mean < 2; mean++) {
        fg_dtype dt = dts[d];
        int64_t n = counts[k];
        size_t es = fg_dtype_size(dt);
        unsigned char *buf = malloc((size_t)n * es + 1), *want = malloc((size_t)n * es + 1);
        fill(dt, buf, c->rank, n);
        expected(dt, want, c->size, n, mean);
        if (c->ops->all_reduce(c, buf, n, dt, mean, st) != 0) {
          free(buf);
          free(want);
          return fail_status(c, "all_reduce", st, t0);
        }
        if (memcmp(buf, want, (size_t)n * es) != 0) {
          int64_t i = 0;
          while (memcmp(buf + i * (int64_t)es, want + i * (int64_t)es, es) == 0)
            i++;
          printf("rank %d: all_reduce %s count %lld mean %d differs at [%lld]\n", c->rank,
                 fg_dtype_name(dt), (long long)n, mean, (long long)i);
          bad++;
        }
        checks++;
        free(buf);
        free(want);
      }
    }
  }
  /* Bad arguments are refused on every rank before any message moves, so
   * the group stays in step. */
  char dummy[8] = {0};
  if (c->ops->all_reduce(c, dummy, 8, FG_BOOL, 0, st) == 0 ||
      fg_status_code(st) != FG_INVALID_ARGUMENT) {
    printf("rank %d: bool all_reduce was not refused\n", c->rank);
    bad++;
  }
  if (c->ops->all_reduce(c, dummy, -1, FG_F32, 0, st) == 0 ||
      fg_status_code(st) != FG_INVALID_ARGUMENT) {
    printf("rank %d: negative count was not refused\n", c->rank);
    bad++;
  }
  checks += 2;
  uint64_t *all = calloc((size_t)c->size, sizeof *all);
  if (c->ops->all_gather_u64(c, 1000003ull * (uint64_t)c->rank + 7, all, st) != 0) {
    free(all);
    return fail_status(c, "all_gather_u64", st, t0);
  }
  for (int r = 0; r < c->size; r++)
    if (all[r] != 1000003ull * (uint64_t)r + 7) {
      printf("rank %d: all_gather_u64[%d] = %llu\n", c->rank, r, (unsigned long long)all[r]);
      bad++;
    }
  checks++;
  free(all);
  const int64_t nb = 1000003;
  unsigned char *b = malloc((size_t)nb);
  int root = c->size - 1;
  for (int64_t i = 0; i < nb; i++)
    b[i] = (unsigned char)(c->rank == root ? i * 7 + 3 : 0);
  if (c->ops->broadcast(c, b, nb, root, st) != 0) {
    free(b);
    return fail_status(c, "broadcast", st, t0);
  }
  for (int64_t i = 0; i < nb; i++)
    if (b[i] != (unsigned char)(i * 7 + 3)) {
      printf("rank %d: broadcast byte %lld = %d\n", c->rank, (long long)i, b[i]);
      bad++;
      break;
    }
  checks++;
  free(b);
  printf("rank %d: %d checks, %d wrong\n", c->rank, checks, bad);
  return bad ? 1 : 0;
}

/* Loops all_reduce; `victim` misbehaves before collective k. */
static int fault(fg_comm *c, int k, int kill_it, double timeout, fg_status *st) {
  float buf[4096];
  for (int step = 0; step < k + 3; step++) {
    if (c->rank == 1 && step == k) {
      printf("rank 1: %s before all_reduce %d\n", kill_it ? "SIGKILL" : "stuck", k);
      fflush(stdout);
      if (kill_it) raise(SIGKILL);
      struct timespec ts = {(time_t)(3 * timeout), 0};
      nanosleep(&ts, NULL);
    }
    for (int i = 0; i < 4096; i++)
      buf[i] = (float)(c->rank + i);
    double t0 = now_s();
    if (c->ops->all_reduce(c, buf, 4096, FG_F32, 1, st) != 0)
      return fail_status(c, "all_reduce", st, t0);
  }
  printf("rank %d: all steps done\n", c->rank);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: mpi_comm_check collectives|kill|stuck|hash ...\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  fg_status *st = fg_status_new();
  const char *mode = argv[1];
  double timeout = strcmp(mode, "collectives") == 0 ? atof(argv[2])
                   : argc > 3                       ? atof(argv[3])
                                                    : 10.0;
  fg_comm *c = fg_comm_mpi_new(timeout, st);
  if (!c) {
    printf("fg_comm_mpi_new: %s: %s\n", fg_code_name(fg_status_code(st)), fg_status_message(st));
    fg_status_free(st);
    return 3;
  }
  int rc;
  if (strcmp(mode, "collectives") == 0) {
    rc = collectives(c, st);
  } else if (strcmp(mode, "kill") == 0 || strcmp(mode, "stuck") == 0) {
    rc = fault(c, atoi(argv[2]), strcmp(mode, "kill") == 0, timeout, st);
  } else {
    /* The last rank hashes another "graph" in mismatch mode. */
    const char *graph =
        strcmp(argv[2], "mismatch") == 0 && c->rank == c->size - 1 ? "graph B" : "graph A";
    uint64_t h = fg_hash_bytes(FG_HASH_SEED, graph, strlen(graph));
    rc = fg_comm_check_same_u64(c, h, "graph", st) == 0 ? 0 : 4;
    printf("rank %d: hash 0x%016llx: %s %s\n", c->rank, (unsigned long long)h,
           fg_code_name(fg_status_code(st)), fg_status_message(st));
  }
  fflush(stdout);
  c->ops->free(c);
  fg_status_free(st);
  fg_mpi_shutdown(rc == 3 ? 3 : 0);
  return rc;
}
