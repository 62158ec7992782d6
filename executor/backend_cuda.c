/* The CUDA row of the backend table (backend.h). It is in every build: a
 * build without the CUDA backend has no CUDA kernels (kernels/cuda_stub.c),
 * so its GPU plans are refused here like any op without a kernel. */
#include <stdio.h>

#include "dist/exec.h"
#include "executor/backend.h"
#include "kernels/kernel.h"

/* Every step of a GPU plan but its host steps (backend.c). */
static int cuda_runs(const fg_backend_query *q) {
  return q->req->cuda && !(q->req->host_nodes && q->req->host_nodes[q->id]);
}

/* all_reduce runs the CPU kernel on host copies: the CUDA executor stages
 * it (executor/cuda/staging.c) or hands it to NCCL, so the MPI and
 * in-process communicators serve GPU sessions too. */
static fg_kernel_fn cuda_kernel(const fg_backend_query *q) {
  return q->node->op == FG_OP_ALL_REDUCE ? fg_cpu_kernel(q->def->name, q->key)
                                         : fg_cuda_kernel(q->def->name, q->key);
}

/* 1 when some device of dx has a communicator for its collectives. */
static int any_comm(const fg_dist_exec *dx) {
  for (int d = 0; dx && dx->comm && d < dx->n_dev; d++)
    if (dx->comm[d]) return 1;
  return 0;
}

/* apply_sgd's fused forms (all_reduce = 1, grad_product = 1) share the
 * plain update's op name and so its CUDA kernel, which does neither: they
 * are refused here, by attribute. Once they are ops of their own, which
 * have no CUDA kernel, the generic "no CUDA kernel" refusal of the select
 * stage covers them and this rule goes. */
static int fused_sgd_supported(const fg_backend_query *q, char *why, size_t why_size) {
  const fg_node *n = q->node;
  if (n->op != FG_OP_APPLY_SGD || !fg_node_is_collective(n)) return 1;
  if (any_comm(q->req->dist)) {
    /* The CUDA executor stages all_reduce nodes through the host but has
     * no fused update: refused rather than run as a plain update. With
     * no communicator (a group of one) the plain update is the fused
     * one, so a model trained on CPUs over MPI and saved goes on
     * training on a GPU. */
    snprintf(why, why_size,
             "node '%s' (apply_sgd with all_reduce = 1) reduces over a communicator on "
             "the CPU only; a GPU session with a communicator needs all_reduce and "
             "apply_sgd nodes (fg_data_parallel with fused_update = 0)",
             n->name);
    return 0;
  }
  if (fg_attr_int_or(n, "grad_product", 0) != 0) {
    /* The CUDA apply_sgd reads input 1 as the gradient: the product's
     * factor a would be taken for it. */
    snprintf(why, why_size,
             "node '%s' (apply_sgd with grad_product = 1) runs on the CPU only; a GPU "
             "session needs the gradient made (fg_data_parallel with fused_update = 0)",
             n->name);
    return 0;
  }
  return 1;
}

static int cuda_supports(const fg_backend_query *q, char *why, size_t why_size) {
  return fused_sgd_supported(q, why, why_size) && cuda_kernel(q) != NULL;
}

const fg_backend fg_backend_cuda = {"CUDA",    "the session's GPU", 0,
                                    cuda_runs, cuda_supports,       cuda_kernel};
