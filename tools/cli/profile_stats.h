/* Figures of `flowgraph profile` over its runs: the latency distribution
 * (nearest-rank percentiles) and the process's peak resident memory. Only
 * libc: tests compile profile_stats.c into their own binary. */
#ifndef FG_CLI_PROFILE_STATS_H
#define FG_CLI_PROFILE_STATS_H

#include <stdint.h>

typedef struct prof_latency {
  int64_t n;
  double min, max, mean, std; /* std: population (divides by n) */
  double p50, p90, p99;
} prof_latency;

/* The nearest-rank p-th percentile (0 < p <= 100, in whole percent) of
 * sorted[0..n), ascending, n >= 1: the value at 1-based rank
 * ceil(p * n / 100). It is always one of the measured values: p50 of
 * {1, 2, 3, 4} is 2, p90 of 10 values is the 9th, p99 of fewer than 100
 * values is the largest. */
double prof_percentile(const double *sorted, int64_t n, int p);

/* The distribution of v[0..n) (not modified; n >= 1). 0, or -1 when out
 * of memory (or n < 1), with *out zeroed. */
int prof_latency_of(const double *v, int64_t n, prof_latency *out);

/* Peak resident memory of this process in bytes: VmHWM from
 * /proc/self/status, else getrusage's ru_maxrss (KiB on Linux); -1 when
 * neither is available. */
int64_t prof_peak_rss_bytes(void);

#endif
