/* What the passes did, for `flowgraph plan --passes` and fg_optimize's
 * caller (flowgraph/passes.h). */
#include <stdlib.h>
#include <string.h>

#include "executor/passes/passes.h"

static char *dup_or_null(const char *s) { return s ? fg_strdup(s) : NULL; }

static void change_free(fg_pass_change *c) {
  free((char *)c->pass);
  free((char *)c->action);
  free((char *)c->node);
  free((char *)c->into);
  free((char *)c->rule);
}

int fg_pass_report_add(fg_pass_report *r, const char *pass, const char *action, const char *node,
                       const char *into, const char *rule) {
  if (r->n == r->cap) {
    int cap = r->cap ? 2 * r->cap : 16;
    fg_pass_change *items = realloc(r->items, (size_t)cap * sizeof *items);
    if (!items) return -1;
    r->items = items;
    r->cap = cap;
  }
  fg_pass_change c = {dup_or_null(pass), dup_or_null(action), dup_or_null(node), dup_or_null(into),
                      dup_or_null(rule)};
  if (!c.pass || !c.action || !c.node || (into && !c.into) || (rule && !c.rule)) {
    change_free(&c);
    return -1;
  }
  r->items[r->n++] = c;
  return 0;
}

void fg_pass_report_clear(fg_pass_report *r) {
  for (int i = 0; i < r->n; i++)
    change_free(&r->items[i]);
  free(r->items);
  memset(r, 0, sizeof *r);
}

int fg_pass_report_size(const fg_pass_report *r) { return r ? r->n : 0; }

const fg_pass_change *fg_pass_report_change(const fg_pass_report *r, int i) {
  return r && i >= 0 && i < r->n ? &r->items[i] : NULL;
}

void fg_pass_report_free(fg_pass_report *r) {
  if (!r) return;
  fg_pass_report_clear(r);
  free(r);
}
