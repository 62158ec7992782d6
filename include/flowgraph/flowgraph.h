/* flowgraph: a static dataflow graph engine in C.
 *
 * Conventions
 * - Objects are opaque handles with _new/_free pairs; every _free accepts
 *   NULL. Whoever calls _new (or receives a tensor from fg_session_run or
 *   fg_npy_read) owns the result and frees it.
 * - Every fallible call takes an fg_status * last. On failure it returns
 *   NULL or -1 and fills the status with a code and a message naming the
 *   node, input and values; on success it resets the status to FG_OK.
 * - Graph builders are chainable: the first error sticks on the graph, later
 *   builders return FG_NO_OUTPUT, and fg_graph_status() / fg_session_new()
 *   report the first error. So one check after building is enough.
 * - Byte sizes are size_t, element counts and dimensions int64_t, indices
 *   and counts of things (nodes, inputs) int.
 * - Nothing in the library aborts, asserts or exits on bad input.
 *
 * Example: y = relu(x @ w + b) for a batch of unknown size.
 *
 *   fg_status *st = fg_status_new();
 *   fg_graph *g = fg_graph_new();
 *   int64_t xd[2] = {-1, 3}, wd[2] = {3, 2}, bd[1] = {2};
 *   float w_data[6] = {1, 0, 0, 1, 1, 1}, b_data[2] = {2.5f, 0.5f};
 *   fg_tensor *w = fg_tensor_from_data(FG_F32, 2, wd, w_data, sizeof w_data, st);
 *   fg_tensor *b = fg_tensor_from_data(FG_F32, 1, bd, b_data, sizeof b_data, st);
 *   fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
 *   fg_output y = fg_relu(g, fg_add(g, fg_matmul(g, x, fg_constant(g, "w", w), 0, 0),
 *                                   fg_constant(g, "b", b)));
 *   fg_set_name(g, y, "y");
 *   fg_session *s = fg_session_new(g, NULL, st);   // reports any builder error
 *   float x_data[3] = {1, 2, 3};
 *   int64_t x_dims[2] = {1, 3};
 *   fg_tensor *xt = fg_tensor_wrap(FG_F32, 2, x_dims, x_data, sizeof x_data, st);
 *   fg_feed feed = {"x", xt};
 *   const char *fetch = "y";
 *   fg_tensor *out = NULL;
 *   if (s && fg_session_run(s, &feed, 1, &fetch, 1, &out, NULL, 0, st) == 0)
 *     printf("%g %g\n", ((float *)fg_tensor_data(out))[0], ((float *)fg_tensor_data(out))[1]);
 *   else
 *     fprintf(stderr, "%s\n", fg_status_message(st));   // names the culprit
 *   fg_tensor_free(out); fg_tensor_free(xt); fg_tensor_free(w); fg_tensor_free(b);
 *   fg_session_free(s); fg_graph_free(g); fg_status_free(st);
 */
#ifndef FLOWGRAPH_H
#define FLOWGRAPH_H

#include "flowgraph/autodiff.h"
#include "flowgraph/comm.h"
#include "flowgraph/dist.h"
#include "flowgraph/export.h"
#include "flowgraph/graph.h"
#include "flowgraph/io.h"
#include "flowgraph/onnx.h"
#include "flowgraph/passes.h"
#include "flowgraph/profile.h"
#include "flowgraph/session.h"
#include "flowgraph/status.h"
#include "flowgraph/tensor.h"
#include "flowgraph/types.h"

#define FLOWGRAPH_VERSION_MAJOR  0
#define FLOWGRAPH_VERSION_MINOR  1
#define FLOWGRAPH_VERSION_PATCH  0
#define FLOWGRAPH_VERSION_STRING "0.1.0"

#endif
