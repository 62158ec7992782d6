/* fg_session_plan_info (flowgraph/profile.h): the plan a run would use,
 * described without running it. */
#include <stdlib.h>
#include <string.h>

#include "executor/session_internal.h"

static const char *slot_kind_name(int kind) {
  switch (kind) {
  case FG_SLOT_FEED: return "feed";
  case FG_SLOT_CONSTANT: return "constant";
  case FG_SLOT_VARIABLE: return "variable";
  case FG_SLOT_PINNED: return "fetch";
  case FG_SLOT_REMOTE: return "remote";
  default: return "arena";
  }
}

/* The tensors array of a plan's info, and after it room for the names of
 * the constants the passes appended (node ids past the user's graph),
 * which the session owns: the info keeps its names after the session is
 * freed. *names: where those names go. */
static fg_plan_tensor *tensors_block(const fg_session *s, const fg_graph *g, const fg_plan *plan,
                                     char **names) {
  size_t head = ((size_t)plan->n_slots + 1) * sizeof(fg_plan_tensor), bytes = 0;
  for (int k = 0; k < plan->n_slots; k++)
    if (plan->slot_node[k] >= s->g->n_nodes) bytes += strlen(g->nodes[plan->slot_node[k]].name) + 1;
  fg_plan_tensor *t = calloc(1, head + bytes);
  *names = t ? (char *)t + head : NULL;
  return t;
}

fg_plan_info *fg_session_plan_info(fg_session *s, const fg_feed *feeds, int n_feeds,
                                   const char *const *fetches, int n_fetches,
                                   const char *const *targets, int n_targets, fg_status *st) {
  if (!s || n_feeds < 0 || n_fetches < 0 || n_targets < 0 || (n_feeds && !feeds) ||
      (n_fetches && !fetches) || (n_targets && !targets) || (n_fetches + n_targets == 0)) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_session_plan_info: %s",
                  !s ? "session is NULL" : "bad feeds, fetches or targets");
    return NULL;
  }
  if (atomic_flag_test_and_set(&s->busy)) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_session_plan_info: session is busy");
    return NULL;
  }
  fg_plan_info *info = NULL;
  char *names = NULL;
  int *feed_nodes = malloc(((size_t)n_feeds + 1) * sizeof *feed_nodes);
  const fg_tensor **feed_tensors = malloc(((size_t)n_feeds + 1) * sizeof *feed_tensors);
  fg_output *fetch_outs = malloc(((size_t)n_fetches + 1) * sizeof *fetch_outs);
  int *target_nodes = malloc(((size_t)n_targets + 1) * sizeof *target_nodes);
  fg_plan_request req;
  fg_plan *plan = NULL;
  const fg_tensor *training = NULL;
  if (!feed_nodes || !feed_tensors || !fetch_outs || !target_nodes) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fg_session_plan_info: out of memory");
    goto done;
  }
  if (fg_session_sync(s, st) != 0 ||
      fg_session_resolve(s, feeds, n_feeds, fetches, n_fetches, targets, n_targets, &req,
                         feed_nodes, fetch_outs, target_nodes, feed_tensors, &training, st) != 0 ||
      !(plan = fg_session_plan_for(s, &req, NULL, st)))
    goto done;
  const fg_graph *pg = plan->built_on;
  info = calloc(1, sizeof *info);
  if (info) {
    info->step_nodes = malloc(((size_t)plan->n_steps + 1) * sizeof(int));
    info->step_devices = malloc(((size_t)plan->n_steps + 1) * sizeof(int));
    info->step_recv = malloc(((size_t)plan->n_steps + 1) * sizeof(int));
    info->step_send = malloc(((size_t)plan->n_steps + 1) * sizeof(int));
    info->step_ops = malloc(((size_t)plan->n_steps + 1) * sizeof(char *));
    /* Room for the partition's devices too (host steps). */
    const fg_partition *pt = fg_dist_session_partition(s->dist);
    info->device_arena_bytes = calloc(
        (size_t)plan->n_dev + (size_t)(pt ? fg_partition_num_devices(pt) : 0) + 1, sizeof(size_t));
    info->tensors = tensors_block(s, pg, plan, &names);
  }
  if (!info || !info->step_nodes || !info->tensors || !info->step_devices || !info->step_recv ||
      !info->step_send || !info->step_ops || !info->device_arena_bytes) {
    fg_plan_info_free(info);
    info = NULL;
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fg_session_plan_info: out of memory");
    goto done;
  }
  info->n_steps = plan->n_steps;
  /* A GPU session's host steps: the partition's devices, the one arena
   * the GPU's, as the run metadata says. */
  const int hosts = fg_dist_session_host_nodes(s->dist) != NULL;
  const int arena_dev = fg_dist_session_arena_device(s->dist);
  for (int si = 0; si < plan->n_steps; si++) {
    info->step_nodes[si] = plan->steps[si].node;
    info->step_devices[si] = fg_session_step_device(s, plan, si);
    info->step_recv[si] = fg_step_is_recv(&plan->steps[si]);
    info->step_send[si] = plan->steps[si].xfer == FG_XFER_SEND;
    info->step_ops[si] = fg_session_op_label(pg, plan->steps[si].node);
  }
  info->n_devices = hosts         ? fg_partition_num_devices(fg_dist_session_partition(s->dist))
                    : plan->n_dev ? plan->n_dev
                                  : 1;
  for (int d = 0; d < info->n_devices; d++)
    info->device_arena_bytes[d] = plan->dev_bytes  ? plan->dev_bytes[d]
                                  : d == arena_dev ? plan->arena_bytes
                                                   : 0;
  info->n_tensors = plan->n_slots;
  for (int k = 0; k < plan->n_slots; k++) {
    fg_plan_tensor *t = &info->tensors[k];
    const fg_kbuf *b = &plan->slots[k];
    int node = plan->slot_node[k];
    t->node = node;
    /* A recv tensor copies its step's input, a slot of `node`. */
    int recv = plan->slot_step[k] >= 0 && fg_step_is_recv(&plan->steps[plan->slot_step[k]]);
    int src = recv ? plan->steps[plan->slot_step[k]].in_slots[0] : k;
    t->output = src - plan->slot_of_output[node];
    /* The empty stand-in of a cross-process graph belongs to no output. */
    if (plan->slot_of_output[node] < 0 || t->output >= pg->nodes[node].n_outputs) t->output = -1;
    t->name = pg->nodes[node].name;
    if (node >= s->g->n_nodes) { /* the session's, copied */
      t->name = strcpy(names, t->name);
      names += strlen(names) + 1;
    }
    t->kind = recv ? "recv" : slot_kind_name(plan->slot_kind[k]);
    /* slot_dev is filled for every plan (0 where one device plans), but
     * only a plan with per-device arenas (dev_bytes) places by it; a GPU
     * session's host-step plan keeps every tensor in the GPU's arena. */
    t->device = plan->slot_kind[k] != FG_SLOT_ARENA ? -1
                : plan->dev_bytes                   ? plan->slot_dev[k]
                                                    : arena_dev;
    t->dtype = b->dtype;
    t->rank = b->rank;
    t->bytes = fg_dtype_size(b->dtype);
    for (int d = 0; d < b->rank; d++)
      t->dims[d] = b->dims[d], t->bytes *= (size_t)b->dims[d];
    t->offset = plan->slot_offset[k];
    t->first_step = plan->slot_step[k];
    t->last_step = plan->slot_last[k];
    t->shared_with = plan->slot_shared[k];
    t->layout = b->layout == FGK_LAYOUT_NC16 ? "nChw16c" : "nchw";
  }
  info->arena_bytes = plan->arena_bytes;
  info->lower_bound_bytes = plan->lower_bound_bytes;
  info->naive_bytes = plan->naive_bytes;
  for (int i = 0; i < plan->n_steps; i++)
    if (plan->steps[i].kbytes)
      info->kernel_bytes +=
          plan->steps[i].kbytes(plan->steps[i].kstate, &info->kernel_shared_bytes);
  fg_status_clear(st);
done:
  free(feed_nodes);
  free(feed_tensors);
  free(fetch_outs);
  free(target_nodes);
  atomic_flag_clear(&s->busy);
  return info;
}

void fg_plan_info_free(fg_plan_info *info) {
  if (!info) return;
  free(info->step_nodes);
  free(info->step_devices);
  free(info->step_recv);
  free(info->step_send);
  free((void *)info->step_ops);
  free(info->device_arena_bytes);
  free(info->tensors);
  free(info);
}
