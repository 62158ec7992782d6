/* The shapes of a growing graph's outputs with every placeholder's unknown
 * dimensions taken as one batch size, resolved incrementally: a lookup
 * first resolves the nodes added since the last one, so following a graph
 * as it is built costs one shape inference per node. The ONNX importer
 * keeps two (batch 2 and 4) to learn how an unknown dimension of a value
 * depends on the batch (Shape of a tensor whose leading dimension merged
 * the batch with others is k x batch, not batch). Graph-internal. */
#ifndef FG_GRAPH_BATCH_SHAPES_H
#define FG_GRAPH_BATCH_SHAPES_H

#include <stddef.h>
#include <stdint.h>

#include "graph/graph_internal.h"

typedef struct fg_batch_shapes {
  int64_t batch;
  int n_done; /* nodes resolved so far */
  int *first; /* per resolved node: the index of its output 0 in shapes */
  int cap_first;
  fg_tinfo *shapes; /* rank -1: not resolved (inference failed at this batch) */
  size_t n_shapes, cap_shapes;
} fg_batch_shapes;

void fg_batch_shapes_init(fg_batch_shapes *s, int64_t batch);
void fg_batch_shapes_free(fg_batch_shapes *s);
/* o's shape at s->batch, after resolving the nodes added since the last
 * call; NULL when out of memory, or when inference of o's node (or one it
 * depends on) fails at this batch. */
const fg_tinfo *fg_batch_shapes_get(fg_batch_shapes *s, const fg_graph *g, fg_output o);

#endif
