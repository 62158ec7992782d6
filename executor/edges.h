/* Dependency edges (from, to) between steps or nodes, collected in a
 * growable array: the plan's scheduling edges (executor/plan_schedule.c,
 * plan_memory.c) and the waits of its serial order (executor/plan_order.c).
 * Internal. */
#ifndef FG_EDGES_H
#define FG_EDGES_H

#include <stdlib.h>

typedef struct fg_edges {
  int (*e)[2];
  int n, cap;
} fg_edges;

/* Appends (from, to); a self-edge is dropped. -1 when out of memory. */
static inline int fg_edge_add(fg_edges *E, int from, int to) {
  if (from == to) return 0;
  if (E->n == E->cap) {
    int cap = E->cap ? E->cap * 2 : 256;
    int(*e)[2] = realloc(E->e, (size_t)cap * sizeof *e);
    if (!e) return -1;
    E->e = e;
    E->cap = cap;
  }
  E->e[E->n][0] = from;
  E->e[E->n][1] = to;
  E->n++;
  return 0;
}

#endif
