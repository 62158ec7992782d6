/* The CUDA executor's steps that run on the host (see cuda_internal.h):
 * all_reduce, staged through pinned memory or handed to NCCL, and a GPU
 * session's host steps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor/cuda/cuda_internal.h"
#include "graph/op_table.h"
#include "kernels/collective.h"
#include "kernels/kernel_shape.h"

/* ---- runs ------------------------------------------------------------------- */

/* A kernel's own error (bad value, bad shape) is FG_INVALID_ARGUMENT, as on
 * the CPU; a failing CUDA call is FG_INTERNAL. Both name the node. */
int fgc_node_fail(fg_status *st, fg_code code, const fg_graph *g, const fg_plan *plan, int si,
                  int device, const char *msg) {
  const fg_node *n = &g->nodes[plan->steps[si].node];
  fg_status_set(st, code, "node '%s' (%s) on %s%d: %s", n->name, fg_op_table[n->op].name,
                plan->steps[si].host ? "the host, in a session on cuda:" : "cuda:", device, msg);
  return -1;
}

/* The pinned bytes a staged step's input i takes: none for a control
 * input, whose bytes are never read (and which the memory plan may already
 * have handed to another step: executor/plan_memory.c control_input). */
static size_t stage_in_bytes(const fg_graph *g, const fg_step *step, int i, const fg_kbuf *b) {
  return fg_dist_control_input(&g->nodes[step->node], i) ? 0 : fgc_align_up(fgc_kbuf_bytes(b));
}

/* ... and its output o: host steps' outputs have buffers of their own,
 * except an update's output 0, which is its variable (input 0); an
 * all_reduce reduces in place. */
static size_t stage_out_bytes(const fg_graph *g, const fg_step *step, int o, const fg_kbuf *b) {
  if (!step->host || (o == 0 && fg_op_table[g->nodes[step->node].op].mutable_inputs)) return 0;
  return fgc_align_up(fgc_kbuf_bytes(b));
}

/* all_reduce steps, and a GPU session's host steps (nodes placed on a CPU
 * device), run on the host (the backend table gives them the CPU kernel);
 * all_reduce with the communicator the run's request attaches. An NCCL communicator on this
 * GPU reduces the device buffers in place (run_nccl). Any other (MPI, in
 * process) works on host memory: the inputs are copied to pinned memory,
 * the CPU kernel calls the communicator there, and the result goes back
 * (run_staged). That costs two PCIe copies of the gradients, but serves
 * every communicator, one GPU shared by several ranks included. Either way
 * the host waits for the step's stream, so a plan with such steps is never
 * captured into a CUDA Graph. A host step queued on its stream instead
 * (cudaLaunchHostFunc, which also allows capture) was slower in
 * fg_bench_gpu gpu_host_steps, most likely the wake-up of CUDA's callback
 * thread, paid once per host step. The pinned block is allocated
 * only when a run first stages through it: with NCCL it is never needed. */
int fgc_stage_steps(fg_cuda_ctx *c, const fg_graph *g, fg_plan *plan, cuda_plan *cp,
                    fg_status *st) {
  size_t total = 0;
  cp->stage_off = malloc(((size_t)plan->n_steps + 1) * sizeof *cp->stage_off);
  if (!cp->stage_off) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "cuda:%d: out of memory (plan)", c->device);
    return -1;
  }
  int max_out = 0;
  for (int si = 0; si < plan->n_steps; si++) {
    const fg_step *step = &plan->steps[si];
    cp->stage_off[si] = SIZE_MAX;
    if (step->xfer || (g->nodes[step->node].op != FG_OP_ALL_REDUCE && !step->host)) continue;
    cp->stage_off[si] = total;
    for (int i = 0; i < step->n_in; i++)
      total += stage_in_bytes(g, step, i, &plan->slots[step->in_slots[i]]);
    for (int o = 0; o < step->n_out; o++)
      total += stage_out_bytes(g, step, o, &plan->slots[step->out_slots[o]]);
    if (step->n_in > cp->max_in) cp->max_in = step->n_in;
    if (step->n_out > max_out) max_out = step->n_out;
    cp->graph_state = -1;
  }
  cp->stage_bytes = total;
  cp->hkb = malloc(((size_t)cp->max_in + (size_t)max_out + 1) * sizeof *cp->hkb);
  if (!cp->hkb) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "cuda:%d: out of memory (plan)", c->device);
    return -1;
  }
  return 0;
}

/* A failed CUDA call while step si was `what`. */
int fgc_step_fail(fg_status *st, const fg_graph *g, const fg_plan *plan, int si, int device,
                  const char *what, cudaError_t e) {
  char msg[256];
  snprintf(msg, sizeof msg, "%s: %s", what, cudaGetErrorString(e));
  (void)cudaGetLastError();
  return fgc_node_fail(st, FG_INTERNAL, g, plan, si, device, msg);
}

/* all_reduce step si over NCCL communicator `comm` on device buffers, in
 * place in the output. The weighted form reads its two small count inputs
 * on the host and, for uneven shards, reduces with NCCL's pre-multiplied
 * sum (each rank scales by rows / total), which is the CPU kernel's
 * sum(x_r * rows_r) / total up to rounding; an empty shard contributes
 * zeros, even where its gradient is NaN, as on the CPU. */
static int run_nccl(fg_cuda_ctx *c, const fg_graph *g, fg_plan *plan, int si, cudaStream_t sk,
                    fg_comm *comm, fg_status *st) {
  fg_step *step = &plan->steps[si];
  const fg_kbuf *x = &step->in[0];
  fg_kbuf *y = &plan->slots[step->out_slots[0]];
  size_t bytes = fgc_kbuf_bytes(x);
  int64_t n = fgk_numel(x);
  int mean = step->params.all_reduce.mean, plain = 1;
  double w = 1, total = 1;
  cudaError_t e = cudaSuccess;
  if (step->params.all_reduce.weighted && comm->size > 1) {
    double rows = 0, sums[2] = {0, 0};
    if (step->n_in < 3 || step->in[1].dtype != FG_F64 || step->in[2].dtype != FG_F64 ||
        fgk_numel(&step->in[1]) != 1 || fgk_numel(&step->in[2]) != 2)
      return fgc_node_fail(st, FG_INVALID_ARGUMENT, g, plan, si, c->device,
                           "weighted all_reduce needs an f64 rows scalar and an f64 [2] of sums");
    e = cudaStreamSynchronize(sk);
    if (e == cudaSuccess) e = cudaMemcpy(&rows, step->in[1].data, sizeof rows, cudaMemcpyDefault);
    if (e == cudaSuccess) e = cudaMemcpy(sums, step->in[2].data, sizeof sums, cudaMemcpyDefault);
    if (e != cudaSuccess)
      return fgc_step_fail(st, g, plan, si, c->device, "reading its row counts", e);
    char err[256];
    if (fgk_all_reduce_weights(rows, sums, comm->size, &plain, &w, &total, err, sizeof err) != 0)
      return fgc_node_fail(st, FG_INVALID_ARGUMENT, g, plan, si, c->device, err);
  }
  if (!plain && w == 0)
    e = bytes ? cudaMemsetAsync(y->data, 0, bytes, sk) : cudaSuccess;
  else if (y->data != x->data && bytes)
    e = cudaMemcpyAsync(y->data, x->data, bytes, cudaMemcpyDeviceToDevice, sk);
  /* NCCL runs on its own stream: the output must be written first. */
  if (e == cudaSuccess) e = cudaStreamSynchronize(sk);
  if (e != cudaSuccess) return fgc_step_fail(st, g, plan, si, c->device, "preparing its output", e);
  fg_status *cst = fg_status_new();
  if (!cst)
    return fgc_node_fail(st, FG_RESOURCE_EXHAUSTED, g, plan, si, c->device, "out of memory");
  int rc = plain ? comm->ops->all_reduce(comm, y->data, n, y->dtype, mean, cst)
                 : fg_comm_all_reduce_scaled(comm, y->data, n, y->dtype, w / total, cst);
  if (rc != 0) {
    /* The communicator's code matters (deadline vs bad input). */
    char msg[512];
    snprintf(msg, sizeof msg, "%s: %s", fg_code_name(fg_status_code(cst)), fg_status_message(cst));
    fgc_node_fail(st, fg_status_code(cst), g, plan, si, c->device, msg);
  }
  fg_status_free(cst);
  return rc;
}

/* Runs step si (see stage_steps) on stream sk from the host: an all_reduce
 * (over NCCL on the device, or staged through the host with the plan's
 * communicator) or a host step (a node placed on a CPU device,
 * step->host). Staging copies the inputs into the pinned block `stage` and
 * synchronises the stream; the CPU kernel runs there (a host step's with
 * the session's threads, an all_reduce's on this thread), writing an
 * all_reduce's result in place and a host step's outputs into host buffers
 * of their own after the inputs; the results, and the variables an
 * optimizer update wrote in place, are queued back onto sk. */
int fgc_run_staged(fg_cuda_ctx *c, const fg_graph *g, fg_plan *plan, cuda_plan *cp, int si,
                   cudaStream_t sk, fg_status *st) {
  fg_step *step = &plan->steps[si];
  const unsigned mut = fg_op_table[g->nodes[step->node].op].mutable_inputs;
  fg_kbuf *hin = cp->hkb, *hout = cp->hkb + cp->max_in;
  if (!step->host && (step->n_in > 4 || step->n_out != 1))
    return fgc_node_fail(st, FG_INTERNAL, g, plan, si, c->device, "unexpected all_reduce arity");
  fg_comm *comm = NULL;
  if (!step->host) {
    const int d = plan->step_dev ? plan->step_dev[si] : 0;
    comm = cp->dist ? cp->dist->comm[d] : NULL;
    int gpu = fg_comm_gpu(comm);
    if (gpu >= 0 && gpu != c->device) {
      char msg[160];
      snprintf(msg, sizeof msg, "its NCCL communicator reduces memory of cuda:%d, not this GPU's",
               gpu);
      return fgc_node_fail(st, FG_INVALID_ARGUMENT, g, plan, si, c->device, msg);
    }
    if (gpu >= 0) return run_nccl(c, g, plan, si, sk, comm, st);
  }
  if (!cp->stage && fgc_host_alloc(&cp->stage, cp->stage_bytes, c->device, "host step staging", st))
    return -1;
  char *p = (char *)cp->stage + cp->stage_off[si];
  cudaError_t e = cudaSuccess;
  for (int i = 0; i < step->n_in && e == cudaSuccess; i++) {
    hin[i] = step->in[i];
    hin[i].data = p; /* a control input's: never read */
    size_t bytes = fgc_kbuf_bytes(&hin[i]), room = stage_in_bytes(g, step, i, &hin[i]);
    if (bytes && room) e = cudaMemcpyAsync(p, step->in[i].data, bytes, cudaMemcpyDeviceToHost, sk);
    p += room;
  }
  for (int o = 0; o < step->n_out; o++) {
    hout[o] = plan->slots[step->out_slots[o]];
    size_t room = stage_out_bytes(g, step, o, &hout[o]);
    /* No room of its own: in place, as the CPU executor may run an
     * all_reduce; an update's output 0 is its variable. */
    hout[o].data = room ? p : hin[0].data;
    p += room;
  }
  if (e == cudaSuccess) e = cudaStreamSynchronize(sk);
  if (e != cudaSuccess)
    return fgc_step_fail(st, g, plan, si, c->device,
                         "copying its inputs to the host (or an earlier kernel on its stream "
                         "failed)",
                         e);
  char err[512];
  const fg_kparallel *par = step->host ? cp->host_par : NULL;
  fg_code code = FG_INVALID_ARGUMENT;
  fg_kctx ctx = fg_plan_step_kctx(plan, step, hin, hout, err, sizeof err);
  ctx.par = par;
  ctx.comm = comm;
  ctx.code = &code;
  ctx.state = step->kstate;
  /* A collective's failure keeps its code (a peer's deadline stays one). */
  if (step->fn(&ctx) != 0)
    return fgc_node_fail(st, code, g, plan, si, c->device, err[0] ? err : "kernel failed");
  /* Back to the device: the outputs (an update's output 0 is its
   * variable's storage, copied with the mutable inputs), then the
   * variables the update wrote in place. */
  for (int o = 0; o < step->n_out && e == cudaSuccess; o++) {
    size_t bytes = fgc_kbuf_bytes(&hout[o]);
    if (bytes && !(o == 0 && mut && step->host))
      e = cudaMemcpyAsync(plan->slots[step->out_slots[o]].data, hout[o].data, bytes,
                          cudaMemcpyHostToDevice, sk);
  }
  for (int i = 0; step->host && i < step->n_in && e == cudaSuccess; i++) {
    size_t bytes = fgc_kbuf_bytes(&hin[i]);
    if (fg_node_writes_input(&g->nodes[step->node], i) && bytes)
      e = cudaMemcpyAsync(step->in[i].data, hin[i].data, bytes, cudaMemcpyHostToDevice, sk);
  }
  /* No wait for these copies: the step's part of the stage is its own,
   * and the host writes it again only in the next run, after this stream
   * has been synchronised again. */
  if (e != cudaSuccess)
    return fgc_step_fail(st, g, plan, si, c->device, "copying its result to the device", e);
  return 0;
}
