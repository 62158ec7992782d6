/* The CUDA executor of a build without the CUDA backend (FG_CUDA=OFF or no
 * toolkit): no devices, so a "cuda:N" session is refused at creation and
 * nothing below is ever reached with a GPU plan. The CUDA build compiles
 * executor/cuda/backend.c, staging.c and run.c instead. */
#include "executor/cuda_backend.h"
#include "graph/tensor_internal.h"

int fg_cuda_device_count(void) { return 0; }

/* No page-locked memory without the backend: fg_tensor_new_pinned falls
 * back to an ordinary tensor. */
void *fg_pinned_alloc(size_t bytes) {
  (void)bytes;
  return NULL;
}
void fg_pinned_free(void *p) { (void)p; }

fg_cuda_ctx *fg_cuda_ctx_new(int index, const fg_session_options *opts, fg_status *st) {
  (void)opts;
  fg_status_set(st, FG_INVALID_ARGUMENT,
                "device 'cuda:%d': this build of flowgraph has no CUDA backend (built with "
                "FG_CUDA=OFF or without the CUDA toolkit)",
                index);
  return NULL;
}

void fg_cuda_ctx_free(fg_cuda_ctx *c) { (void)c; }

int fg_cuda_ctx_enter(const fg_cuda_ctx *c, int *prev, fg_status *st) {
  (void)c, (void)st;
  *prev = -1;
  return 0;
}

void fg_cuda_ctx_leave(int prev) { (void)prev; }

int fg_cuda_plan_prepare(fg_cuda_ctx *c, const fg_graph *g, fg_plan *plan, fg_tensor *const *vars,
                         int n_vars, fg_status *st) {
  (void)c, (void)g, (void)plan, (void)vars, (void)n_vars;
  fg_status_set(st, FG_UNIMPLEMENTED, "no CUDA backend in this build");
  return -1;
}

int fg_cuda_plan_run(fg_cuda_ctx *c, const fg_graph *g, fg_plan *plan, const fg_plan_request *req,
                     int timings, fg_status *st) {
  (void)c, (void)g, (void)plan, (void)req, (void)timings;
  fg_status_set(st, FG_UNIMPLEMENTED, "no CUDA backend in this build");
  return -1;
}

const void *fg_cuda_plan_fetch(const fg_plan *plan, int i) {
  (void)plan, (void)i;
  return NULL;
}

void fg_cuda_plan_release(void *device) { (void)device; }

int fg_cuda_vars_to_host(fg_cuda_ctx *c, fg_tensor **vars, int n_vars, int node, fg_status *st) {
  (void)c, (void)vars, (void)n_vars, (void)node, (void)st;
  return 0;
}

int fg_cuda_vars_to_device(fg_cuda_ctx *c, fg_tensor **vars, int n_vars, fg_status *st) {
  (void)c, (void)vars, (void)n_vars, (void)st;
  return 0;
}

void fg_cuda_graph_changed(fg_cuda_ctx *c) { (void)c; }
