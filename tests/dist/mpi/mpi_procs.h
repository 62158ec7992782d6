/* Shared by tests/dist/test_mpi_train.c and tests/dist/test_mpi_hosts.c: finding an
 * mpirun's ranks among this machine's processes (by a mark in their
 * environment) and watching them through /proc. */
#ifndef FG_TEST_MPI_PROCS_H
#define FG_TEST_MPI_PROCS_H

#include <dirent.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* The pid of a process whose environment holds FG_TEST_MARK=<mark> and
 * OMPI_COMM_WORLD_RANK=<rank> (rank -1: any process with the mark, such as
 * mpirun and its daemons), or -1. Reads each environment into a buffer of
 * its own call, so threads may look at once. */
static inline pid_t find_rank(const char *mark, int rank) {
  DIR *d = opendir("/proc");
  const size_t cap = (size_t)1 << 16;
  char *env = malloc(cap);
  if (!d || !env) {
    if (d) closedir(d);
    free(env);
    return -1;
  }
  char want_mark[64], want_rank[48];
  snprintf(want_mark, sizeof want_mark, "FG_TEST_MARK=%s", mark);
  snprintf(want_rank, sizeof want_rank, "OMPI_COMM_WORLD_RANK=%d", rank);
  pid_t found = -1;
  struct dirent *e;
  while (found < 0 && (e = readdir(d)) != NULL) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char path[300];
    snprintf(path, sizeof path, "/proc/%s/environ", e->d_name);
    FILE *f = fopen(path, "rb");
    if (!f) continue;
    size_t n = fread(env, 1, cap - 1, f);
    fclose(f);
    env[n] = '\0';
    int has_mark = 0, has_rank = rank < 0;
    for (size_t i = 0; i < n; i += strlen(env + i) + 1) {
      if (strcmp(env + i, want_mark) == 0) has_mark = 1;
      if (strcmp(env + i, want_rank) == 0) has_rank = 1;
    }
    if (has_mark && has_rank) found = (pid_t)atoi(e->d_name);
  }
  closedir(d);
  free(env);
  return found;
}

/* CPU seconds (user + system) process `pid` has used, or -1. */
static inline double cpu_seconds(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  /* Fields 14 and 15 (utime, stime) follow the ")" that ends the name. */
  const char *p = strrchr(buf, ')');
  unsigned long ut = 0, stime = 0;
  if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &stime) != 2)
    return -1;
  return (double)(ut + stime) / (double)sysconf(_SC_CLK_TCK);
}

/* Whether process `pid` has mapped an all_reduce shared-memory segment
 * ("/dev/shm/fg-mpi-...", dist/comm/comm_mpi.c): ranks map it at their first
 * all_reduce, after joining the group and agreeing on the graph. */
static inline int maps_segment(pid_t pid) {
  char path[64], line[512];
  snprintf(path, sizeof path, "/proc/%ld/maps", (long)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  int found = 0;
  while (!found && fgets(line, sizeof line, f))
    found = strstr(line, "/dev/shm/fg-mpi-") != NULL;
  fclose(f);
  return found;
}

/* Waits (at most `tries` polls of 50 ms, and not past *stop when `stop` is
 * given) until rank `rank` of the run marked `mark` is in its training
 * loop: it has mapped the all_reduce segment and used 0.3 s of CPU since,
 * so a fault then lands among all_reduces. CPU time alone
 * was not enough: under ASan on 2 cores, 0.6 s was sometimes still
 * MPI_Init or the join. Without the shared segment (`no_segment`: the
 * message path, no /dev/shm) there is nothing to wait for but 0.3 s of
 * CPU. Returns its pid, or -1. */
static inline pid_t wait_training(const char *mark, int rank, int no_segment, int tries,
                                  atomic_int *stop) {
  double mapped_at = -1;
  for (int t = 0; t < tries && !(stop && atomic_load(stop)); t++) {
    struct timespec ts = {0, 50000000};
    nanosleep(&ts, NULL);
    pid_t p = find_rank(mark, rank);
    if (p <= 0) continue;
    if (mapped_at < 0 && (no_segment || maps_segment(p)))
      mapped_at = no_segment ? 0.3 : cpu_seconds(p);
    if (mapped_at >= 0 && cpu_seconds(p) >= mapped_at + 0.3) return p;
  }
  return -1;
}

#endif
