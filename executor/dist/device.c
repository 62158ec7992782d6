/* Device names: "cpu:N" (N < FG_MAX_CPU_DEVICES, virtual devices sharing
 * the process's cores) and "cuda:N" (N below the GPUs the process sees),
 * either after "rank:R/" (the MPI rank running it; its GPUs are not this
 * process's to count). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor/cuda_backend.h"
#include "flowgraph/dist.h"

/* A decimal without sign below 10^9 (no overflow); -1 otherwise. */
static int parse_index(const char *p) {
  if (!*p || strlen(p) > 9) return -1;
  for (const char *q = p; *q; q++)
    if (!isdigit((unsigned char)*q)) return -1;
  return atoi(p);
}

const char *fg_device_str(fg_device d, char *buf, size_t size) {
  const char *kind = d.kind == FG_DEVICE_CUDA ? "cuda" : "cpu";
  if (buf && size) {
    if (d.rank >= 0)
      snprintf(buf, size, "rank:%d/%s:%d", d.rank, kind, d.index);
    else
      snprintf(buf, size, "%s:%d", kind, d.index);
  }
  return buf;
}

/* Splits "rank:R/rest": *rank = R and returns rest; without the prefix
 * *rank = -1 and returns name; NULL when the prefix is malformed (-2 in
 * *rank) or R is too large (R in *rank). */
static const char *split_rank(const char *name, int *rank) {
  *rank = -1;
  if (strncmp(name, "rank:", 5) != 0) return name;
  const char *num = name + 5, *slash = strchr(num, '/');
  char digits[12];
  size_t len = slash ? (size_t)(slash - num) : 0;
  int r = -1;
  if (len > 0 && len < sizeof digits) {
    memcpy(digits, num, len);
    digits[len] = '\0';
    r = parse_index(digits);
  }
  if (r < 0) {
    *rank = -2;
    return NULL;
  }
  *rank = r;
  return r < FG_MAX_RANKS ? slash + 1 : NULL;
}

int fg_parse_device(const char *name, fg_device *out, fg_status *st) {
  if (!name || !out) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_parse_device: %s is NULL", name ? "out" : "name");
    return -1;
  }
  fg_device d = {FG_DEVICE_CPU, 0, -1};
  int idx = -2;
  const char *dev = split_rank(name, &d.rank);
  if (!dev && d.rank >= 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "device '%.64s': rank %d is out of range (rank:R/ takes R from 0 to %d)", name,
                  d.rank, FG_MAX_RANKS - 1);
    return -1;
  }
  if (!dev) {
    /* Malformed: leave idx < 0 for the message below. */
  } else if (strcmp(dev, "cpu") == 0) {
    idx = 0;
  } else if (strncmp(dev, "cpu:", 4) == 0) {
    idx = parse_index(dev + 4);
  } else if (strncmp(dev, "cuda:", 5) == 0) {
    d.kind = FG_DEVICE_CUDA;
    idx = parse_index(dev + 5);
  }
  /* The CUDA driver is asked only where a message or a cuda:N name needs
   * it: its first call starts the driver (a thread of its own, address
   * space, a fraction of a second), which a CPU-only graph must not pay. On
   * an H100 machine, a CPU session in a process under a 512 MiB RLIMIT_AS
   * died in that first call. */
  int gpus = idx < 0 || d.kind == FG_DEVICE_CUDA ? fg_cuda_device_count() : 0;
  if (idx < 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "device '%.64s' is not a device name (expected cpu:N with N in [0, %d), "
                  "cuda:N, or rank:R/ before either; this machine has %d CUDA device%s)",
                  name, FG_MAX_CPU_DEVICES, gpus, gpus == 1 ? "" : "s");
    return -1;
  }
  if (d.kind == FG_DEVICE_CPU && idx >= FG_MAX_CPU_DEVICES) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "device '%.64s' does not exist: CPU devices are cpu:0 to cpu:%d", name,
                  FG_MAX_CPU_DEVICES - 1);
    return -1;
  }
  /* Another rank's GPUs may be on another host: only the name is checked. */
  if (d.kind == FG_DEVICE_CUDA && d.rank < 0 && idx >= gpus) {
    if (gpus == 0)
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "device '%.64s' does not exist: no CUDA device is available", name);
    else
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "device '%.64s' does not exist: this machine has %d CUDA device%s (cuda:0 to "
                    "cuda:%d)",
                    name, gpus, gpus == 1 ? "" : "s", gpus - 1);
    return -1;
  }
  d.index = idx;
  *out = d;
  fg_status_clear(st);
  return 0;
}
