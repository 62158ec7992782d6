/* Internal view of the graph IR, shared by graph/, schema/, autodiff/,
 * executor/ and dist/. Users see only include/flowgraph/. */
#ifndef FG_GRAPH_INTERNAL_H
#define FG_GRAPH_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "flowgraph/graph.h"
#include "flowgraph/status.h"
#include "flowgraph/tensor.h"
#include "flowgraph/types.h"

/* dtype and shape of one tensor; dims may hold FG_DIM_UNKNOWN. */
typedef struct fg_tinfo {
  fg_dtype dtype;
  int rank;
  int64_t dims[FG_MAX_RANK];
} fg_tinfo;

typedef struct fg_attr {
  char *name;
  fg_attr_type type;
  int64_t i;      /* FG_ATTR_INT */
  double f;       /* FG_ATTR_FLOAT */
  char *s;        /* FG_ATTR_STRING */
  int64_t *ints;  /* FG_ATTR_INTS, n entries */
  double *floats; /* FG_ATTR_FLOATS, n entries */
  int n;
  fg_tensor *t; /* FG_ATTR_TENSOR, owned */
} fg_attr;

struct fg_attrs {
  fg_attr *items;
  int n, cap;
};

typedef struct fg_node {
  char *name;
  int op; /* index into fg_op_table */
  char *device;
  int n_inputs;
  fg_output *inputs;
  struct fg_attrs attrs;
  int n_outputs;
  fg_tinfo *outputs;
  unsigned flags; /* FG_NODE_* bits */
} fg_node;

/* fg_node.flags. FG_NODE_MADE_BY_GRADIENTS: fg_gradients made this node (a
 * backward node). Rewrites that must tell the backward pass from the
 * forward one (dist/rewrite/) read this bit, never the node's name: a
 * user's node may be called "gradients_mask". Saved in .fgb files. */
#define FG_NODE_MADE_BY_GRADIENTS 1u

struct fg_graph {
  fg_node *nodes;
  int n_nodes, cap_nodes;
  fg_status *error; /* the sticky first error */
  uint64_t version;
  fg_output *outputs; /* named graph outputs */
  int n_outputs, cap_outputs;
  char **meta_keys, **meta_vals;
  int n_meta, cap_meta;
  int *name_index; /* open-addressing hash of node ids by name, -1 = empty */
  int name_cap;    /* power of two */
  unsigned auto_name;
  char *scope; /* prefix of automatic names ("gradients/"), or NULL */
};

/* malloc'ed copy of a NUL-terminated string; NULL when out of memory. */
char *fg_strdup(const char *s);

/* ---- attributes --------------------------------------------------------- */
/* String attribute naming the node whose device this node takes when it is
 * not placed explicitly (placement rule 2 in flowgraph/dist.h). fg_gradients
 * sets it on every backward node; users may set it through fg_op. */
#define FG_COLOCATE_ATTR "_colocate"
const fg_attr *fg_attrs_find(const struct fg_attrs *a, const char *name);
/* Deep copy of src into dst (dst must be empty/zeroed). 0 or -1 (ENOMEM). */
int fg_attrs_copy(struct fg_attrs *dst, const struct fg_attrs *src);
void fg_attrs_clear(struct fg_attrs *a);
/* Sets tensor attribute `name` to v itself, not a copy: 0 and a owns v, or
 * -1 (out of memory) and v is still the caller's. */
int fg_attrs_take_tensor(struct fg_attrs *a, const char *name, fg_tensor *v);
/* fg_op, but the node takes attrs' contents (attrs is left empty) where
 * fg_op copies them; the caller frees attrs either way. For builders of
 * large tensors (the ONNX importer's weights), which would otherwise be
 * held twice while the node is made. */
fg_output fg_op_move(fg_graph *g, const char *op, const char *name, const fg_output *inputs,
                     int n_inputs, fg_attrs *attrs);
/* A constant (variable 0) or variable (1) holding `value` itself: the
 * graph takes it, and frees it when the node cannot be made. */
fg_output fg_source_take(fg_graph *g, const char *name, fg_tensor *value, int variable);
/* Typed reads with a default when absent. They do not check the type. */
int64_t fg_attr_int_or(const fg_node *n, const char *name, int64_t dflt);
double fg_attr_float_or(const fg_node *n, const char *name, double dflt);
/* The node FG_COLOCATE_ATTR of n names in g, or -1 (absent, not a string,
 * or no such node). */
static inline int fg_node_colocate(const fg_graph *g, const fg_node *n) {
  const fg_attr *co = fg_attrs_find(&n->attrs, FG_COLOCATE_ATTR);
  return co && co->type == FG_ATTR_STRING && co->s ? fg_graph_find(g, co->s) : -1;
}

/* ---- graph -------------------------------------------------------------- */
/* Records the first error on the graph (later errors are dropped). */
void fg_graph_fail(fg_graph *g, fg_code code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
int fg_graph_failed(const fg_graph *g);
/* Sets the prefix of automatic node names (NULL or "" clears it). Names
 * given explicitly are not prefixed. 0, or -1 for a bad scope. */
int fg_graph_set_scope(fg_graph *g, const char *scope);
const char *fg_graph_scope(const fg_graph *g);
const fg_node *fg_graph_node(const fg_graph *g, int id); /* NULL for bad id */
/* The tinfo of an output, or NULL when it does not exist. */
const fg_tinfo *fg_graph_tinfo(const fg_graph *g, fg_output o);

/* ---- hashes (graph/hash.c) ---------------------------------------------- */
/* A fast 64-bit hash of n bytes continuing from h (not cryptographic). */
uint64_t fg_hash64(uint64_t h, const void *data, size_t n);
/* The graph's nodes in order: op, name, the rank its device names
 * ("rank:R/", not the device within the process), inputs, attributes (with
 * constants' values, without variables' values) and output types. Equal
 * graphs hash equal in every process and build. */
uint64_t fg_graph_structure_hash(const fg_graph *g);

/* ---- shapes ------------------------------------------------------------- */
/* Elements of a fully known shape, with overflow checks: returns 0 and sets
 * *out, or -1 on overflow or an unknown/negative dim. */
int fg_shape_elements(int rank, const int64_t *dims, int64_t *out);
/* Same for bytes of a dtype. */
int fg_tinfo_bytes(const fg_tinfo *t, size_t *out);
/* "[2,?,3]" into buf. Returns buf. */
const char *fg_shape_str(int rank, const int64_t *dims, char *buf, size_t size);
#define FG_SHAPE_STR_MAX 200

/* Runs the op's shape inference for `node` given the input tinfos `in`,
 * writing n_outputs tinfos to `out`. Used when building (dims may be
 * unknown) and by the executor at run time (all dims known). On failure
 * sets `status` (FG_INVALID_GRAPH, message naming the node) and returns -1. */
int fg_infer(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status);
/* resize ops' attribute strings, indexed by fg_resize_coord and
 * fg_resize_nearest_mode (graph/infer_resize.c). */
extern const char *const fg_resize_coord_names[4];
extern const char *const fg_resize_nearest_names[4];

#endif
