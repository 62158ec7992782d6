/* "Did you mean" for unknown names: the closest candidate by edit
 * distance (fg_closest_name in flowgraph/graph.h), fed one candidate at a
 * time so callers can walk their own tables. */
#ifndef FG_GRAPH_SUGGEST_H
#define FG_GRAPH_SUGGEST_H

#include <stddef.h>

typedef struct fg_suggest {
  const char *name; /* what was asked for */
  int limit;        /* the most edits a suggestion may be away */
  int best_d;       /* the best distance so far */
  const char *best; /* its candidate, or NULL */
} fg_suggest;

void fg_suggest_init(fg_suggest *s, const char *name);
/* Considers one candidate (NULL is skipped). */
void fg_suggest_try(fg_suggest *s, const char *candidate);
/* "; did you mean 'x'?" into buf when there is a suggestion, else "".
 * Returns buf. */
const char *fg_suggest_tail(const fg_suggest *s, char *buf, size_t size);

#endif
