/* Stream assignment and event placement; see streams.h. */
#include "executor/streams.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fg_streams_from_option(int num_streams) {
  if (num_streams < 0 || num_streams > FG_MAX_STREAMS) return -1;
  return num_streams == 0 ? FG_DEFAULT_STREAMS : num_streams;
}

void fg_stream_plan_free(fg_stream_plan *sp) {
  if (!sp) return;
  free(sp->stream);
  free(sp->event_of);
  free(sp->wait_off);
  free(sp->wait);
  memset(sp, 0, sizeof *sp);
}

int fg_stream_plan_build(int n_steps, const int *succ_off, const int *succ, int max_streams,
                         fg_stream_plan *out, char *err, size_t err_size) {
  memset(out, 0, sizeof *out);
  if (n_steps < 0 || max_streams < 1 || max_streams > FG_MAX_STREAMS ||
      (n_steps > 0 && (!succ_off || (!succ && succ_off[n_steps] > 0)))) {
    snprintf(err, err_size, "stream plan: bad arguments (steps %d, streams %d; must be 1 to %d)",
             n_steps, max_streams, FG_MAX_STREAMS);
    return -1;
  }
  size_t n1 = (size_t)n_steps + 1;
  int n_edges = n_steps > 0 ? succ_off[n_steps] : 0;
  for (int u = 0; u < n_steps; u++) {
    if (succ_off[u] > succ_off[u + 1] || succ_off[u] < 0) {
      snprintf(err, err_size, "stream plan: successor offsets of step %d decrease", u);
      return -1;
    }
    for (int i = succ_off[u]; i < succ_off[u + 1]; i++)
      if (succ[i] <= u || succ[i] >= n_steps) {
        snprintf(err, err_size, "stream plan: edge %d -> %d does not go forward to a step below %d",
                 u, succ[i], n_steps);
        return -1;
      }
  }
  /* Predecessor lists (CSR) from the successor lists. */
  int *pred_off = calloc(n1 + 1, sizeof *pred_off);
  int *pred = malloc(((size_t)n_edges + 1) * sizeof *pred);
  int *fill = calloc(n1, sizeof *fill);
  int tail[FG_MAX_STREAMS]; /* last step on each stream, -1 when unused */
  out->stream = malloc(n1 * sizeof *out->stream);
  out->event_of = malloc(n1 * sizeof *out->event_of);
  out->wait_off = calloc(n1, sizeof *out->wait_off);
  out->wait = malloc(((size_t)n_edges + 1) * sizeof *out->wait);
  if (!pred_off || !pred || !fill || !out->stream || !out->event_of || !out->wait_off ||
      !out->wait) {
    free(pred_off), free(pred), free(fill);
    fg_stream_plan_free(out);
    snprintf(err, err_size, "stream plan: out of memory (%d steps)", n_steps);
    return -1;
  }
  out->n_steps = n_steps;
  for (int u = 0; u < n_steps; u++)
    for (int i = succ_off[u]; i < succ_off[u + 1]; i++)
      pred_off[succ[i] + 1]++;
  for (int v = 0; v < n_steps; v++)
    pred_off[v + 1] += pred_off[v];
  for (int u = 0; u < n_steps; u++)
    for (int i = succ_off[u]; i < succ_off[u + 1]; i++) {
      int v = succ[i];
      pred[pred_off[v] + fill[v]++] = u;
    }
  for (int k = 0; k < max_streams; k++)
    tail[k] = -1;

  for (int v = 0; v < n_steps; v++) {
    /* Continue the chain of the latest predecessor still at its stream's
     * tail; a chain then needs no event. */
    int pick = -1, best = -1;
    for (int i = pred_off[v]; i < pred_off[v + 1]; i++) {
      int u = pred[i];
      if (tail[out->stream[u]] == u && u > best) best = u, pick = out->stream[u];
    }
    if (pick < 0) {
      /* No chain to extend: an unused stream, else the one whose last step
       * is oldest (the likeliest to be idle). */
      for (int k = 0; k < max_streams && pick < 0; k++)
        if (tail[k] < 0) pick = k;
      if (pick < 0) {
        pick = 0;
        for (int k = 1; k < max_streams; k++)
          if (tail[k] < tail[pick]) pick = k;
      }
    }
    out->stream[v] = pick;
    tail[pick] = v;
    if (pick + 1 > out->n_streams) out->n_streams = pick + 1;
  }

  /* Events: one per step with a successor on another stream; waits on
   * every cross-stream predecessor. */
  for (int u = 0; u < n_steps; u++) {
    out->event_of[u] = -1;
    for (int i = succ_off[u]; i < succ_off[u + 1]; i++)
      if (out->stream[succ[i]] != out->stream[u]) {
        out->event_of[u] = out->n_events++;
        break;
      }
  }
  int w = 0;
  for (int v = 0; v < n_steps; v++) {
    out->wait_off[v] = w;
    for (int i = pred_off[v]; i < pred_off[v + 1]; i++) {
      int u = pred[i];
      if (out->stream[u] != out->stream[v]) out->wait[w++] = u;
    }
  }
  out->wait_off[n_steps] = w;
  free(pred_off);
  free(pred);
  free(fill);
  return 0;
}
