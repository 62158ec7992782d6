/* The serial order of a plan's steps, which the memory plan is made on.
 *
 * Node order, except that updates (ops that write a variable: apply_*,
 * assign) and groups move up to just after the last node they wait for. A
 * graph lists a training step's updates after the whole backward pass
 * (fg_minimize adds them last), so in node order every gradient stays live
 * until the step's tail and an update can start only there. Moved up, a
 * layer's update follows its gradient, the gradient's bytes are free for
 * reuse from then on, and the update runs beside the rest of the backward
 * pass.
 *
 * An update also waits for every node before it in node order that reads
 * or writes one of the variables it writes, so each variable's reads and
 * writes keep their node order and results stay those of node order. The
 * other nodes keep their relative order.
 *
 * In a graph with all_reduce nodes, every node that waits for one (through
 * its inputs or an earlier access to a variable it touches) then goes after
 * every node that does not, both sides in the order above: see
 * defer_after_collectives in plan_order.c. Collectives (all_reduce, and
 * the fused updates, which do not move up) keep node order
 * among themselves on every rank, whatever else a run needs: ranks pair
 * their k-th collectives. */
#ifndef FG_PLAN_ORDER_H
#define FG_PLAN_ORDER_H

#include "graph/graph_internal.h"

/* Fills order[] with the ids of the nodes marked in needed[] (sources
 * first, in node order, then the rest as above) and returns how many; -1
 * when out of memory. With hoist == 0 the order is plain node order (sources
 * first). */
int fg_plan_order(const fg_graph *g, const char *needed, int hoist, int *order);

#endif
