/* Variable initialisers (fg_variable_init) and the names-to-streams rule
 * the random ops share: what graph/ knows of them. The attributes are read
 * and checked here, for shape inference and for the session, which draws
 * the values (executor/var_init.c: graph/ may not include the Philox code
 * in kernels/). */
#ifndef FG_GRAPH_INIT_H
#define FG_GRAPH_INIT_H

#include <stdint.h>

#include "graph/graph_internal.h"

/* The 32-bit FNV-1a hash of a node's name: the Philox stream of a random
 * op, dropout or initialiser whose "stream" attribute is -1. */
uint32_t fg_name_stream(const char *name);

/* Copy `index` of `count` of a node whose op has a "replica" attribute
 * (dropout, dropout_grad), made by a rewrite (fg_data_parallel's replicas,
 * fg_micro_batch's micro-batches): its attributes with "replica" = the
 * original's * count + index, so every copy, through both rewrites, draws
 * its own mask (past 2^16 inference refuses the value, naming the copy),
 * and a stream of -1 fixed to the hash of the original's name (the copy is
 * renamed). 1 when *out (new, the caller frees it) was made, 0 for other
 * ops, -1 out of memory. */
int fg_replica_attrs(const fg_node *node, int index, int count, fg_attrs **out);

/* A variable node's initialiser, read from its attributes. */
typedef struct fg_init_spec {
  int kind; /* fg_init_kind */
  double a, b;
  int fan_out;
  int64_t seed;
  uint32_t stream;
  fg_dtype dtype;
  int rank;
  int64_t dims[FG_MAX_RANK];
  /* Derived: the uniform bounds [lo, hi) or the normal's mean and std
   * (kinds that draw), or the fill value (zeros, ones, constant). */
  double lo, hi, mean, std, fill;
} fg_init_spec;

/* Reads and checks node's initialiser (a variable without "value"): 0, or
 * -1 with FG_INVALID_GRAPH naming the node and the values. */
int fg_init_read(const fg_node *node, fg_init_spec *spec, fg_status *st);

#endif
