/* Counting this process's threads by name, for tests that check which
 * threads a session starts. flowgraph names its own "fg-pool" (thread
 * pool workers) and "fg-lane" (device lanes); other threads in a test
 * process are the CUDA driver's or Open MPI's. */
#ifndef FG_TEST_THREADS_UTIL_H
#define FG_TEST_THREADS_UTIL_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>

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

#endif
