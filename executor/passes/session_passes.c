/* The passes a session runs on its copy of the graph (passes.h). */
#include <stdlib.h>
#include <string.h>

#include "executor/passes/passes.h"

int fg_passes_env_off(void) {
  const char *e = getenv("FG_PASSES");
  return e && (strcmp(e, "off") == 0 || strcmp(e, "0") == 0);
}

/* FG_PASSES holding a pass list (not "off", "0", "on" or empty) replaces
 * the default pipeline of sessions whose options name none: a whole
 * program's runs with some passes only, for ablations. */
static const char *env_list(void) {
  const char *e = getenv("FG_PASSES");
  return e && *e && strcmp(e, "on") != 0 && !fg_passes_env_off() ? e : NULL;
}

/* Rewrites stay within one device: per node its device, host steps of a
 * GPU session apart. NULL (one group) when neither is given. */
static int *device_groups(const fg_graph *g, const int *node_dev, const unsigned char *host) {
  int *group = malloc(((size_t)g->n_nodes + 1) * sizeof *group);
  for (int id = 0; group && id < g->n_nodes; id++)
    group[id] = 2 * (node_dev ? node_dev[id] : 0) + (host ? host[id] : 0);
  return group;
}

fg_pass_graph *fg_passes_for_session(const fg_graph *g, const fg_pass_options *opts,
                                     const int *node_dev, const unsigned char *host, int gpu,
                                     fg_status *st) {
  fg_status_clear(st);
  if ((opts && opts->disable) || fg_passes_env_off()) return NULL;
  size_t n = (size_t)g->n_nodes + 1;
  int *group = node_dev || host ? device_groups(g, node_dev, host) : NULL;
  /* Every node stays: a run may fetch any name, and each name must keep
   * computing its value. What no run needs, the plan leaves out anyway. */
  unsigned char *keep = malloc(n), *dead = calloc(n, 1);
  int ok = keep && dead && (group || !(node_dev || host));
  fg_pass_graph *w = ok ? fg_pass_graph_new(g, st) : NULL;
  if (!ok) fg_status_set(st, FG_RESOURCE_EXHAUSTED, "session: out of memory (passes)");
  if (w) {
    memset(keep, 1, n);
    /* Passes may add constants (fold_inference's folded weights): the
     * plan binds constants by node id alone, and a multi-device plan
     * places each on its node's device (fg_session_plan_for). A GPU
     * session's host steps are marked in an array sized by the source's
     * node count, so there nothing is added. */
    w->may_append = !host;
    w->gpu = gpu;
    fg_pass_options env = {0, env_list()};
    if (env.passes && (!opts || !opts->passes)) opts = &env;
    if (fg_pass_pipeline_run(w, opts, keep, group, dead, NULL, st) != 0) {
      fg_pass_graph_free(w);
      w = NULL;
    }
  }
  free(keep);
  free(dead);
  free(group);
  return w;
}

int *fg_passes_node_devices(const fg_pass_graph *w, const int *node_dev, int *failed) {
  *failed = 0;
  if (w->g.n_nodes <= w->n_src) return NULL;
  int *nd = malloc(((size_t)w->g.n_nodes + 1) * sizeof *nd);
  *failed = !nd;
  for (int id = 0; nd && id < w->g.n_nodes; id++)
    nd[id] = node_dev[fg_pass_graph_placed_as(w, id)];
  return nd;
}
