/* Device options of a session that concern CUDA, checked in every build (a
 * build without CUDA has no device, so "cuda:0" is refused there with the
 * same message as "cuda:7" on a one-GPU machine). Pure C: the device count
 * comes from executor/cuda/backend.c or executor/cuda/stub.c. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "executor/cuda_backend.h"
#include "executor/streams.h"
#include "graph/graph_internal.h"
#include "graph/op_table.h"

int fg_device_parse(const char *device, int *index) {
  if (!device || strcmp(device, "cpu") == 0 || strcmp(device, "cpu:0") == 0) return 0;
  if (strncmp(device, "cuda:", 5) != 0) return -1;
  const char *p = device + 5;
  if (!*p || strlen(p) > 9) return -1; /* below 10^9: no int overflow */
  for (const char *q = p; *q; q++)
    if (!isdigit((unsigned char)*q)) return -1;
  *index = atoi(p);
  return 1;
}

/* Whether a device string names a CUDA device at all ("cuda:" prefix). */
static int is_cuda_name(const char *d) { return d && strncmp(d, "cuda:", 5) == 0; }

int fg_session_cuda_check(const fg_graph *g, const fg_session_options *o, int *cuda_index,
                          fg_status *st) {
  *cuda_index = -1;
  if (fg_streams_from_option(o->num_streams) < 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "fg_session_new: num_streams = %d; must be 0 (the default, %d) to %d",
                  o->num_streams, FG_DEFAULT_STREAMS, FG_MAX_STREAMS);
    return -1;
  }
  int index = -1;
  if (is_cuda_name(o->device)) {
    if (fg_device_parse(o->device, &index) != 1) {
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "fg_session_new: device '%s' is not a device name (expected cuda:N, N >= 0)",
                    o->device);
      return -1;
    }
    int count = fg_cuda_device_count();
    if (index >= count) {
      if (count == 0)
        fg_status_set(st, FG_INVALID_ARGUMENT,
                      "fg_session_new: device '%s' does not exist: no CUDA device is available "
                      "(%s)",
                      o->device,
#ifdef FG_HAVE_CUDA
                      "no GPU or no driver found"
#else
                      "this build has no CUDA backend"
#endif
        );
      else
        fg_status_set(st, FG_INVALID_ARGUMENT,
                      "fg_session_new: device '%s' does not exist: this machine has %d CUDA "
                      "device%s (cuda:0 to cuda:%d)",
                      o->device, count, count == 1 ? "" : "s", count - 1);
      return -1;
    }
  }
  /* One GPU per session: a GPU session refuses nodes placed on another
   * GPU, a CPU session nodes placed on any. A GPU session runs nodes placed
   * on cpu:N on the host (executor/dist/session_dist.c host_steps); nodes without a
   * device follow the placer (flowgraph/dist.h). */
  for (int id = 0; g && id < g->n_nodes; id++) {
    const char *d = g->nodes[id].device;
    if (!is_cuda_name(d)) continue;
    int node_index;
    if (fg_device_parse(d, &node_index) != 1) {
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "node '%s' (%s): device '%s' is not a device name (expected cuda:N with N >= "
                    "0, or cpu:N)",
                    g->nodes[id].name, fg_op_table[g->nodes[id].op].name, d);
      return -1;
    }
    if (index >= 0 && strcmp(d, o->device) == 0) continue;
    if (index >= 0)
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "node '%s' is placed on '%s' but the session runs on '%s': a session uses "
                    "one GPU (place the node on '%s', or on cpu:0 to run it on the host)",
                    g->nodes[id].name, d, o->device, o->device);
    else
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "node '%s' is placed on '%s' but the session runs on '%s': a CPU session "
                    "runs nothing on a GPU (run the session on '%s'; nodes placed on cpu:0 then "
                    "run on the host)",
                    g->nodes[id].name, d, o->device ? o->device : "cpu:0", d);
    return -1;
  }
  *cuda_index = index;
  return 0;
}
