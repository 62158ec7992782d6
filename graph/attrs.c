/* Named, typed node attributes. An fg_attrs is a small array: nodes carry a
 * handful of attributes, so a linear search beats a hash. */
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

char *fg_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

static void attr_release(fg_attr *a) {
  free(a->s);
  free(a->ints);
  free(a->floats);
  fg_tensor_free(a->t);
  a->s = NULL;
  a->ints = NULL;
  a->floats = NULL;
  a->t = NULL;
  a->n = 0;
}

fg_attrs *fg_attrs_new(void) { return calloc(1, sizeof(fg_attrs)); }

void fg_attrs_clear(struct fg_attrs *a) {
  if (!a) return;
  for (int i = 0; i < a->n; i++) {
    attr_release(&a->items[i]);
    free(a->items[i].name);
  }
  free(a->items);
  a->items = NULL;
  a->n = a->cap = 0;
}

void fg_attrs_free(fg_attrs *a) {
  fg_attrs_clear(a);
  free(a);
}

const fg_attr *fg_attrs_find(const struct fg_attrs *a, const char *name) {
  if (!a || !name) return NULL;
  for (int i = 0; i < a->n; i++)
    if (strcmp(a->items[i].name, name) == 0) return &a->items[i];
  return NULL;
}

/* The slot for `name`: the existing one emptied, or a new one. */
static fg_attr *slot(fg_attrs *a, const char *name) {
  if (!a || !name) return NULL;
  for (int i = 0; i < a->n; i++)
    if (strcmp(a->items[i].name, name) == 0) {
      attr_release(&a->items[i]);
      return &a->items[i];
    }
  if (a->n == a->cap) {
    int cap = a->cap ? a->cap * 2 : 4;
    fg_attr *items = realloc(a->items, (size_t)cap * sizeof *items);
    if (!items) return NULL;
    a->items = items;
    a->cap = cap;
  }
  fg_attr *s = &a->items[a->n];
  memset(s, 0, sizeof *s);
  s->name = fg_strdup(name);
  if (!s->name) return NULL;
  a->n++;
  return s;
}

int fg_attrs_set_int(fg_attrs *a, const char *name, int64_t v) {
  fg_attr *s = slot(a, name);
  if (!s) return -1;
  s->type = FG_ATTR_INT;
  s->i = v;
  return 0;
}

int fg_attrs_set_float(fg_attrs *a, const char *name, double v) {
  fg_attr *s = slot(a, name);
  if (!s) return -1;
  s->type = FG_ATTR_FLOAT;
  s->f = v;
  return 0;
}

int fg_attrs_set_string(fg_attrs *a, const char *name, const char *v) {
  if (!v) return -1;
  fg_attr *s = slot(a, name);
  if (!s) return -1;
  s->type = FG_ATTR_STRING;
  s->s = fg_strdup(v);
  return s->s ? 0 : -1;
}

int fg_attrs_set_ints(fg_attrs *a, const char *name, const int64_t *v, int n) {
  if (n < 0 || (n > 0 && !v)) return -1;
  fg_attr *s = slot(a, name);
  if (!s) return -1;
  s->type = FG_ATTR_INTS;
  s->ints = malloc((size_t)(n ? n : 1) * sizeof *s->ints);
  if (!s->ints) return -1;
  if (n) memcpy(s->ints, v, (size_t)n * sizeof *v);
  s->n = n;
  return 0;
}

int fg_attrs_set_floats(fg_attrs *a, const char *name, const double *v, int n) {
  if (n < 0 || (n > 0 && !v)) return -1;
  fg_attr *s = slot(a, name);
  if (!s) return -1;
  s->type = FG_ATTR_FLOATS;
  s->floats = malloc((size_t)(n ? n : 1) * sizeof *s->floats);
  if (!s->floats) return -1;
  if (n) memcpy(s->floats, v, (size_t)n * sizeof *v);
  s->n = n;
  return 0;
}

int fg_attrs_take_tensor(fg_attrs *a, const char *name, fg_tensor *v) {
  if (!v) return -1;
  fg_attr *s = slot(a, name);
  if (!s) return -1;
  s->type = FG_ATTR_TENSOR;
  s->t = v;
  return 0;
}

int fg_attrs_set_tensor(fg_attrs *a, const char *name, const fg_tensor *v) {
  if (!v) return -1;
  fg_tensor *copy = fg_tensor_clone(v, NULL);
  if (!copy) return -1;
  if (fg_attrs_take_tensor(a, name, copy) != 0) {
    fg_tensor_free(copy);
    return -1;
  }
  return 0;
}

int fg_attrs_copy(struct fg_attrs *dst, const struct fg_attrs *src) {
  if (!src) return 0;
  for (int i = 0; i < src->n; i++) {
    const fg_attr *a = &src->items[i];
    int rc = -1;
    switch (a->type) {
    case FG_ATTR_INT: rc = fg_attrs_set_int(dst, a->name, a->i); break;
    case FG_ATTR_FLOAT: rc = fg_attrs_set_float(dst, a->name, a->f); break;
    case FG_ATTR_STRING: rc = fg_attrs_set_string(dst, a->name, a->s); break;
    case FG_ATTR_INTS: rc = fg_attrs_set_ints(dst, a->name, a->ints, a->n); break;
    case FG_ATTR_FLOATS: rc = fg_attrs_set_floats(dst, a->name, a->floats, a->n); break;
    case FG_ATTR_TENSOR: rc = fg_attrs_set_tensor(dst, a->name, a->t); break;
    }
    if (rc != 0) return -1;
  }
  return 0;
}

int64_t fg_attr_int_or(const fg_node *n, const char *name, int64_t dflt) {
  const fg_attr *a = fg_attrs_find(&n->attrs, name);
  return (a && a->type == FG_ATTR_INT) ? a->i : dflt;
}

double fg_attr_float_or(const fg_node *n, const char *name, double dflt) {
  const fg_attr *a = fg_attrs_find(&n->attrs, name);
  if (a && a->type == FG_ATTR_FLOAT) return a->f;
  if (a && a->type == FG_ATTR_INT) return (double)a->i;
  return dflt;
}
