/* The CUDA row of the backend table (backend.h). It is in every build: a
 * build without the CUDA backend has no CUDA kernels (kernels/cuda_stub.c),
 * so its GPU plans are refused here like any op without a kernel. */
#include "executor/dist/exec.h"
#include "executor/backend.h"
#include "kernels/kernel.h"

/* Every step of a GPU plan but its host steps (backend.c). */
static int cuda_runs(const fg_backend_query *q) {
  return q->req->cuda && !(q->req->host_nodes && q->req->host_nodes[q->id]);
}

/* 1 when some device of dx has a communicator for its collectives. */
static int any_comm(const fg_dist_exec *dx) {
  for (int d = 0; dx && dx->comm && d < dx->n_dev; d++)
    if (dx->comm[d]) return 1;
  return 0;
}

/* all_reduce runs the CPU kernel on host copies: the CUDA executor stages
 * it (executor/cuda/staging.c) or hands it to NCCL, so the MPI and
 * in-process communicators serve GPU sessions too. The fused updates have
 * no CUDA kernel (their communicators reduce host memory), so a GPU plan
 * refuses them as any op without one; except all_reduce_apply_sgd with no
 * communicator (a group of one), whose plain update is the fused one: a
 * model trained on CPUs over MPI and saved goes on training on a GPU. */
static fg_kernel_fn cuda_kernel(const fg_backend_query *q) {
  int op = q->node->op;
  if (op == FG_OP_ALL_REDUCE) return fg_cpu_kernel(q->def->name, q->key);
  if (op == FG_OP_ALL_REDUCE_APPLY_SGD && !any_comm(q->req->dist))
    return fg_cuda_kernel(fg_op_table[FG_OP_APPLY_SGD].name, q->key);
  return fg_cuda_kernel(q->def->name, q->key);
}

/* The plan-time hook of a CUDA kernel (fused_elementwise compiles its
 * kernel there); none for the collectives cuda_kernel redirects. */
static const fg_kprep *cuda_prep(const fg_backend_query *q) {
  int op = q->node->op;
  if (op == FG_OP_ALL_REDUCE || op == FG_OP_ALL_REDUCE_APPLY_SGD) return NULL;
  return fg_cuda_kernel_prep(q->def->name, q->key);
}

static int cuda_supports(const fg_backend_query *q, char *why, size_t why_size) {
  (void)why;
  (void)why_size;
  return cuda_kernel(q) != NULL;
}

const fg_backend fg_backend_cuda = {"CUDA",        "the session's GPU", 0,        cuda_runs,
                                    cuda_supports, cuda_kernel,         cuda_prep};
