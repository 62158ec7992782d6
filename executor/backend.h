/* Backends: where a plan's steps run and which kernels they have, behind one
 * table of functions (internal to the executor). The select stage of plan
 * building (plan_select.c) asks the table, never a backend by name, so a new
 * backend is a new row here and its own file, not an edit of the planner.
 *
 * For each step, the first row whose `runs` claims the node is its backend;
 * `supports` then says whether it can run the node with the step's kernel
 * key, and `kernel` gives the kernel. A node its backend does not support is
 * refused with FG_UNIMPLEMENTED naming the node, op, dtype and device. */
#ifndef FG_BACKEND_H
#define FG_BACKEND_H

#include "executor/plan.h"
#include "graph/op_table.h"

/* What a backend is asked about: one node of one plan request. */
typedef struct fg_backend_query {
  const fg_plan_request *req;
  const fg_node *node;
  int id; /* node id */
  const fg_op_def *def;
  fg_dtype key; /* the kernel's dtype key (input 0's or output 0's: FG_OPF_KERNEL_KEY_INPUT) */
} fg_backend_query;

typedef struct fg_backend {
  const char *name;  /* in messages: "no <name> kernel for dtype ..." */
  const char *where; /* the device its steps run on when the node names none */
  int host;          /* 1: the step runs on the host in a GPU plan (fg_step.host) */
  /* 1 when this backend runs node q->id of a plan for q->req. */
  int (*runs)(const fg_backend_query *q);
  /* 1 when it can run the node with key q->key. 0 otherwise, with the
   * reason in why[] when it is more than a missing kernel (why[0] == 0
   * then: the caller says which kernel is missing). */
  int (*supports)(const fg_backend_query *q, char *why, size_t why_size);
  /* The kernel (non-NULL when supports said 1). */
  fg_kernel_fn (*kernel)(const fg_backend_query *q);
  /* The kernel's plan-time hook (kernels/kernel.h), or NULL: none, or a
   * backend without hooks. */
  const fg_kprep *(*prep)(const fg_backend_query *q);
} fg_backend;

/* The rows, NULL-terminated: cpu, cuda, host. */
extern const fg_backend *const fg_backends[];

/* The backend that runs q's node: the first row of `table` (NULL-terminated,
 * such as fg_backends) claiming it, or NULL. */
const fg_backend *fg_backend_for(const fg_backend *const *table, const fg_backend_query *q);

#endif
