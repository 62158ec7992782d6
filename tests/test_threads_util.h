/* Counting this process's threads by name, for tests that check which
 * threads a session starts. flowgraph names its own "fg-pool" (thread
 * pool workers) and "fg-lane" (device lanes); other threads in a test
 * process are the CUDA driver's or Open MPI's. */
#ifndef FG_TEST_THREADS_UTIL_H
#define FG_TEST_THREADS_UTIL_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Entries of /proc/self/task whose name starts with "fg-" (ours = 1) or
 * does not (ours = 0); -1 when /proc cannot be read. */
static inline int fgt_count_threads(int ours) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char path[300], comm[32] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue; /* the thread ended meanwhile */
    if (fgets(comm, sizeof comm, f)) n += (strncmp(comm, "fg-", 3) == 0) == ours;
    fclose(f);
  }
  closedir(d);
  return n;
}

/* fgt_count_threads once it equals `want`, or after timeout_s. A thread
 * that was just joined can still be listed in /proc/self/task for a while
 * (the kernel wakes the joiner before it has reaped the task; seen once in
 * a fresh-clone run on the loaded 2-core VM: one thread too many right
 * after a session rebuilt its lanes). Threads only start synchronously, so
 * a count that stays above `want` past the timeout is a real extra one. */
static inline int fgt_threads_reach(int ours, int want, double timeout_s) {
  int n = fgt_count_threads(ours);
  for (long waited_us = 0; n != want && waited_us < (long)(timeout_s * 1e6); waited_us += 1000) {
    struct timespec ms = {0, 1000 * 1000};
    nanosleep(&ms, NULL);
    n = fgt_count_threads(ours);
  }
  return n;
}

#endif
