/* Suggestions for unknown names, and why a fetch name finds no output. */
#include "graph/suggest.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

/* Longer names are not typos worth a quadratic table; they get none. */
#define SUGGEST_MAX_LEN 128

/* Optimal string alignment distance between a and b (case-insensitive),
 * or a value above `limit` as soon as it must exceed it. */
static int distance(const char *a, const char *b, int limit) {
  const size_t la = strlen(a), lb = strlen(b);
  if (la > SUGGEST_MAX_LEN || lb > SUGGEST_MAX_LEN) return limit + 1;
  if ((la > lb ? la - lb : lb - la) > (size_t)limit) return limit + 1;
  /* Three rows of the dynamic-programming table: the one before the
   * previous is what a swap of adjacent characters reads. */
  int rows[3][SUGGEST_MAX_LEN + 1];
  int *pp = rows[0], *prev = rows[1], *cur = rows[2];
  for (size_t j = 0; j <= lb; j++)
    prev[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    cur[0] = (int)i;
    int row_min = cur[0];
    const int ca = tolower((unsigned char)a[i - 1]);
    for (size_t j = 1; j <= lb; j++) {
      const int cb = tolower((unsigned char)b[j - 1]);
      int d = prev[j - 1] + (ca != cb);
      if (prev[j] + 1 < d) d = prev[j] + 1;
      if (cur[j - 1] + 1 < d) d = cur[j - 1] + 1;
      if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
          tolower((unsigned char)a[i - 2]) == cb && pp[j - 2] + 1 < d)
        d = pp[j - 2] + 1;
      cur[j] = d;
      if (d < row_min) row_min = d;
    }
    if (row_min > limit) return limit + 1;
    int *t = pp;
    pp = prev, prev = cur, cur = t;
  }
  return prev[lb];
}

void fg_suggest_init(fg_suggest *s, const char *name) {
  const int len = name ? (int)strlen(name) : 0;
  s->name = name;
  s->limit = len / 3 > 1 ? len / 3 : 1;
  /* A one-character name is one edit from every other one. */
  if (s->limit >= len) s->limit = len - 1;
  s->best_d = s->limit + 1;
  s->best = NULL;
}

void fg_suggest_try(fg_suggest *s, const char *candidate) {
  if (!s->name || !candidate || s->limit < 0) return;
  const int d = strcmp(s->name, candidate) == 0 ? -1 : distance(s->name, candidate, s->limit);
  if (d < s->best_d) s->best_d = d, s->best = candidate;
}

const char *fg_suggest_tail(const fg_suggest *s, char *buf, size_t size) {
  if (size == 0) return buf;
  buf[0] = '\0';
  if (s->best) snprintf(buf, size, "; did you mean '%s'?", s->best);
  return buf;
}

const char *fg_closest_name(const char *name, const char *const *candidates, int n) {
  if (!name || !candidates) return NULL;
  fg_suggest s;
  fg_suggest_init(&s, name);
  for (int i = 0; i < n; i++)
    fg_suggest_try(&s, candidates[i]);
  return s.best;
}

/* The node part of "node:index" and the index, when name has that form. */
static int split_index(const char *name, char *node, size_t size, long *index) {
  const char *colon = strrchr(name, ':');
  if (!colon || colon == name || !colon[1] || (size_t)(colon - name) >= size) return 0;
  char *end = NULL;
  *index = strtol(colon + 1, &end, 10);
  if (*end || *index < 0) return 0;
  memcpy(node, name, (size_t)(colon - name));
  node[colon - name] = '\0';
  return 1;
}

const char *fg_graph_output_hint(const fg_graph *g, const char *name, char *buf, size_t size) {
  if (!buf || size == 0) return buf;
  buf[0] = '\0';
  if (!g || !name) return buf;
  char node[300];
  long index = 0;
  const int indexed = split_index(name, node, sizeof node, &index);
  const int id = indexed ? fg_graph_find(g, node) : -1;
  if (id >= 0) {
    const int n = g->nodes[id].n_outputs;
    if (n == 0)
      snprintf(buf, size, "node '%s' (%s) has no outputs", node, fg_node_op(g, id));
    else if (n == 1)
      snprintf(buf, size, "node '%s' (%s) has one output (%s or %s:0)", node, fg_node_op(g, id),
               node, node);
    else
      snprintf(buf, size, "node '%s' (%s) has %d outputs (%s:0 to %s:%d)", node, fg_node_op(g, id),
               n, node, node, n - 1);
    return buf;
  }
  fg_suggest s;
  fg_suggest_init(&s, indexed ? node : name);
  for (int i = 0; i < g->n_nodes; i++)
    fg_suggest_try(&s, g->nodes[i].name);
  if (!s.best) return buf;
  if (indexed)
    snprintf(buf, size, "did you mean '%s:%ld'?", s.best, index);
  else
    snprintf(buf, size, "did you mean '%s'?", s.best);
  return buf;
}
