/* fg_session_save: the graph written with the session's variable values
 * (and its training steps) as their initial values, the graph itself left
 * as it was. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor/cuda_backend.h"
#include "executor/session_internal.h"
#include "flowgraph/io.h"
#include "graph/graph_internal.h"

/* The graph's TRAIN_STEPS_KEY back to `kept` (NULL: absent) after a save
 * wrote the session's count there: the graph is unchanged by a save. */
static void restore_steps(fg_graph *g, const char *kept) {
  if (kept) {
    /* On out of memory the saved count stays: harmless, it only seeds masks. */
    (void)fg_graph_set_metadata(g, TRAIN_STEPS_KEY, kept);
    return;
  }
  for (int i = 0; i < g->n_meta; i++)
    if (strcmp(g->meta_keys[i], TRAIN_STEPS_KEY) == 0) {
      free(g->meta_keys[i]);
      free(g->meta_vals[i]);
      g->meta_keys[i] = g->meta_keys[g->n_meta - 1];
      g->meta_vals[i] = g->meta_vals[g->n_meta - 1];
      g->n_meta--;
      return;
    }
}

int fg_session_save(fg_session *s, const char *path, fg_status *st) {
  if (!s || !path) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_session_save: %s is NULL", s ? "path" : "session");
    return -1;
  }
  if (atomic_flag_test_and_set(&s->busy)) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_session_save: session is busy");
    return -1;
  }
  int rc = fg_session_sync(s, st);
  if (rc == 0 && s->cuda) rc = fg_cuda_vars_to_host(s->cuda, s->vars, s->n_vars_cap, -1, st);
  /* Lend the current values to the graph's "value" attributes for the
   * duration of the save, then give them back: no copy of the weights, and
   * the graph is unchanged afterwards (its version is not bumped). */
  fg_tensor **lent = NULL;
  fg_graph *g = s->g;
  if (rc == 0 && !(lent = calloc((size_t)g->n_nodes + 1, sizeof *lent))) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fg_session_save: out of memory");
    rc = -1;
  }
  /* A variable made with an initialiser has no "value": one is added for
   * the save (lent[id] == the session's own tensor marks it) and removed
   * after, so the file resumes from the trained values. */
  for (int id = 0; rc == 0 && id < g->n_nodes; id++) {
    fg_attrs *attrs = &g->nodes[id].attrs;
    fg_attr *v = (fg_attr *)fg_attrs_find(attrs, "value");
    if (g->nodes[id].op != FG_OP_VARIABLE || !s->vars[id]) continue;
    if (!v) {
      if (fg_attrs_set_int(attrs, "value", 0) != 0) {
        fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fg_session_save: out of memory");
        rc = -1;
        break;
      }
      v = &attrs->items[attrs->n - 1]; /* a new attribute goes last */
      v->type = FG_ATTR_TENSOR;
      v->t = NULL;
    } else if (v->type != FG_ATTR_TENSOR) {
      continue;
    }
    lent[id] = v->t ? v->t : s->vars[id];
    v->t = s->vars[id];
  }
  /* The training steps, so a resumed session's masks continue. */
  const char *old_steps = fg_graph_metadata(g, TRAIN_STEPS_KEY);
  char *kept = old_steps ? fg_strdup(old_steps) : NULL;
  char steps[32];
  snprintf(steps, sizeof steps, "%llu", (unsigned long long)s->train_steps);
  if (rc == 0 && ((old_steps && !kept) || fg_graph_set_metadata(g, TRAIN_STEPS_KEY, steps) != 0)) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fg_session_save: out of memory");
    rc = -1;
  }
  if (rc == 0) rc = fg_graph_save(g, path, st);
  restore_steps(g, kept);
  free(kept);
  for (int id = 0; lent && id < g->n_nodes; id++) {
    if (!lent[id]) continue;
    fg_attrs *attrs = &g->nodes[id].attrs;
    fg_attr *v = (fg_attr *)fg_attrs_find(attrs, "value");
    if (lent[id] != s->vars[id]) {
      v->t = lent[id];
      continue;
    }
    /* Added above, so the last: dropped without freeing the lent tensor. */
    v->t = NULL;
    free(v->name);
    attrs->n--;
  }
  free(lent);
  atomic_flag_clear(&s->busy);
  return rc;
}
