/* Device names: "cpu:N" (N < FG_MAX_CPU_DEVICES, virtual devices sharing
 * the process's cores) and "cuda:N" (N below the GPUs the process sees). */
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
  if (buf && size) snprintf(buf, size, "%s:%d", d.kind == FG_DEVICE_CUDA ? "cuda" : "cpu", d.index);
  return buf;
}

int fg_parse_device(const char *name, fg_device *out, fg_status *st) {
  if (!name || !out) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_parse_device: %s is NULL", name ? "out" : "name");
    return -1;
  }
  fg_device d = {FG_DEVICE_CPU, 0};
  int idx = -2;
  if (strcmp(name, "cpu") == 0) {
    idx = 0;
  } else if (strncmp(name, "cpu:", 4) == 0) {
    idx = parse_index(name + 4);
  } else if (strncmp(name, "cuda:", 5) == 0) {
    d.kind = FG_DEVICE_CUDA;
    idx = parse_index(name + 5);
  }
  int gpus = fg_cuda_device_count();
  if (idx < 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "device '%.64s' is not a device name (expected cpu:N with N in [0, %d), or "
                  "cuda:N; this machine has %d CUDA device%s)",
                  name, FG_MAX_CPU_DEVICES, gpus, gpus == 1 ? "" : "s");
    return -1;
  }
  if (d.kind == FG_DEVICE_CPU && idx >= FG_MAX_CPU_DEVICES) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "device '%.64s' does not exist: CPU devices are cpu:0 to cpu:%d", name,
                  FG_MAX_CPU_DEVICES - 1);
    return -1;
  }
  if (d.kind == FG_DEVICE_CUDA && idx >= gpus) {
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
  return 0;
}
