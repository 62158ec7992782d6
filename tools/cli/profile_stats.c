/* Latency percentiles and peak memory for `flowgraph profile`
 * (profile_stats.h). */
#include "profile_stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

double prof_percentile(const double *sorted, int64_t n, int p) {
  if (n < 1) return 0;
  /* Integer arithmetic: 0.9 * 10 must be rank 9 exactly, not 9.000...1. */
  int64_t rank = ((int64_t)p * n + 99) / 100;
  if (rank < 1) rank = 1;
  if (rank > n) rank = n;
  return sorted[rank - 1];
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

int prof_latency_of(const double *v, int64_t n, prof_latency *out) {
  memset(out, 0, sizeof *out);
  if (n < 1) return -1;
  double *s = malloc((size_t)n * sizeof *s);
  if (!s) return -1;
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < n; i++)
    sum += s[i];
  double mean = sum / (double)n;
  for (int64_t i = 0; i < n; i++)
    sq += (s[i] - mean) * (s[i] - mean);
  out->n = n;
  out->min = s[0];
  out->max = s[n - 1];
  out->mean = mean;
  out->std = sqrt(sq / (double)n);
  out->p50 = prof_percentile(s, n, 50);
  out->p90 = prof_percentile(s, n, 90);
  out->p99 = prof_percentile(s, n, 99);
  free(s);
  return 0;
}

int64_t prof_peak_rss_bytes(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  while (f && fgets(line, sizeof line, f)) {
    long long kb;
    if (sscanf(line, "VmHWM: %lld kB", &kb) == 1) {
      fclose(f);
      return (int64_t)kb * 1024;
    }
  }
  if (f) fclose(f);
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) == 0 && ru.ru_maxrss > 0) return (int64_t)ru.ru_maxrss * 1024;
  return -1;
}
