/* Runs of a prepared GPU plan (see cuda_internal.h and the top of
 * backend.c): feeds, the launch loop over streams, CUDA Graph capture and
 * replay, check_numerics and CUDA-event timings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor/cuda/cuda_internal.h"
#include "graph/op_table.h"
#include "graph/tensor_internal.h"
#include "kernels/kernel_shape.h"

/* 1 when p is page-locked host memory CUDA knows (cudaHostAlloc,
 * cudaMallocHost, cudaHostRegister). Pageable memory reads as
 * cudaMemoryTypeUnregistered; device and managed memory are not fed
 * directly, since the host-side checks of a run may read a feed. */
static int host_pinned(const void *p) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return a.type == cudaMemoryTypeHost;
}

/* Copies the feeds into the plan's device feed buffers on stream 0, ahead
 * of the run and outside any captured CUDA Graph, so a feed's source can
 * change from run to run. A feed in page-locked memory
 * (fg_tensor_new_pinned, or a wrapped buffer the caller page-locked) goes
 * straight to the device; any other is first copied into the plan's pinned
 * staging on the host, which adds a host copy to every step. */
static int copy_feeds(fg_cuda_ctx *c, fg_plan *plan, cuda_plan *cp, const fg_plan_request *req,
                      fg_status *st) {
  for (int i = 0; i < plan->n_feeds; i++) {
    if (plan->feed_slots[i] < 0 || cp->feed_bytes[i] == 0) continue;
    const void *src = req->feed_tensors[i]->data;
    if (!host_pinned(src)) {
      memcpy((char *)cp->feed_host + cp->feed_off[i], src, cp->feed_bytes[i]);
      src = (char *)cp->feed_host + cp->feed_off[i];
    }
    cudaError_t e = cudaMemcpyAsync((char *)cp->feed_dev + cp->feed_off[i], src, cp->feed_bytes[i],
                                    cudaMemcpyHostToDevice, c->stream[0]);
    if (e != cudaSuccess) return fgc_fail(st, c->device, "copying the feeds to the device", e);
  }
  return 0;
}

/* check_numerics (the first node that made a NaN or Inf is named) after
 * step si's kernels on stream sk:
 * counts the NaN and Inf of its floating-point outputs there and waits for
 * them, so the run stops at the first node in plan order that produced one
 * (or whose kernel recorded an error), as the CPU run does; nothing after it
 * runs. The wait per node makes such runs slow and never captured: a
 * debugging mode. */
static int numerics_step(fg_cuda_ctx *c, const fg_graph *g, fg_plan *plan, cuda_plan *cp, int si,
                         cudaStream_t sk, fg_status *st) {
  const fg_step *step = &plan->steps[si];
  if (step->n_out > cp->num_outputs) {
    (void)cudaFree(cp->num_dev);
    cp->num_dev = NULL;
    cp->num_outputs = 0;
    if (fgc_dev_alloc((void **)&cp->num_dev, (size_t)step->n_out * 2 * sizeof(unsigned long long),
                      c->device, "check_numerics counts", st) != 0)
      return -1;
    cp->num_outputs = step->n_out;
  }
  cudaError_t e =
      step->n_out > 0
          ? cudaMemsetAsync(cp->num_dev, 0, (size_t)step->n_out * 2 * sizeof *cp->num_dev, sk)
          : cudaSuccess;
  for (int o = 0; o < step->n_out && e == cudaSuccess; o++) {
    const fg_kbuf *b = &plan->slots[step->out_slots[o]];
    if (b->dtype != FG_F32 && b->dtype != FG_F64) continue;
    if (fg_cuda_count_nonfinite(b->data, (long long)fgk_numel(b), b->dtype, cp->num_dev + 2 * o,
                                sk) != 0)
      e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = cudaStreamSynchronize(sk);
  fg_cuda_error rec;
  if (e == cudaSuccess) e = cudaMemcpy(&rec, cp->err_dev + si, sizeof rec, cudaMemcpyDeviceToHost);
  char msg[512];
  if (e == cudaSuccess && fg_cuda_error_message(&rec, msg, sizeof msg) != FG_CUDA_ERR_NONE)
    return fgc_node_fail(st, FG_INVALID_ARGUMENT, g, plan, si, c->device, msg);
  for (int o = 0; o < step->n_out && e == cudaSuccess; o++) {
    unsigned long long n[2];
    e = cudaMemcpy(n, cp->num_dev + 2 * o, sizeof n, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess && n[0] + n[1] > 0) {
      snprintf(msg, sizeof msg, "produced %llu NaN and %llu Inf in output %d (check_numerics)",
               n[0], n[1], o);
      return fgc_node_fail(st, FG_INVALID_ARGUMENT, g, plan, si, c->device, msg);
    }
  }
  if (e != cudaSuccess) return fgc_step_fail(st, g, plan, si, c->device, "check_numerics", e);
  return 0;
}

/* Enqueues one run (see the top of the file). On a host-side failure the
 * streams are left forked; the caller synchronises (or ends the capture). */
static int enqueue(fg_cuda_ctx *c, const fg_graph *g, fg_plan *plan, cuda_plan *cp, int timings,
                   int numerics, fg_status *st) {
  cudaStream_t s0 = c->stream[0];
  const fg_stream_plan *sp = &cp->sp;
  int ns = plan->n_steps;
  cudaError_t e = cudaSuccess;
  if (timings) e = cudaEventRecord(cp->tev[0], s0);
  if (e == cudaSuccess && ns > 0)
    e = cudaMemsetAsync(cp->err_dev, 0, (size_t)ns * sizeof(fg_cuda_error), s0);
  if (e == cudaSuccess && sp->n_streams > 1) {
    e = cudaEventRecord(cp->fork, s0);
    for (int k = 1; k < sp->n_streams && e == cudaSuccess; k++)
      e = cudaStreamWaitEvent(c->stream[k], cp->fork, 0);
  }
  if (e != cudaSuccess) return fgc_fail(st, c->device, "starting a run", e);
  for (int si = 0; si < ns; si++) {
    fg_step *step = &plan->steps[si];
    cudaStream_t sk = c->stream[sp->stream[si]];
    for (int w = sp->wait_off[si]; w < sp->wait_off[si + 1] && e == cudaSuccess; w++)
      e = cudaStreamWaitEvent(sk, cp->events[sp->event_of[sp->wait[w]]], 0);
    if (e == cudaSuccess && timings) e = cudaEventRecord(cp->tev[1 + 2 * si], sk);
    if (e != cudaSuccess)
      return fgc_step_fail(st, g, plan, si, c->device, "waiting for its inputs", e);
    for (int i = 0; i < step->n_in; i++)
      step->in[i] = plan->slots[step->in_slots[i]];
    if (cp->stage_off[si] != SIZE_MAX) {
      if (fgc_run_staged(c, g, plan, cp, si, sk, st) != 0) return -1;
      if (timings) e = cudaEventRecord(cp->tev[2 + 2 * si], sk);
      /* an all_reduce's result is checked too, as on the CPU */
      if (e == cudaSuccess && numerics && numerics_step(c, g, plan, cp, si, sk, st) != 0) return -1;
      if (e == cudaSuccess && sp->event_of[si] >= 0)
        e = cudaEventRecord(cp->events[sp->event_of[si]], sk);
      if (e != cudaSuccess) return fgc_fail(st, c->device, "after a step run on the host", e);
      continue;
    }
    char err[512];
    fg_kctx ctx =
        fg_plan_step_kctx(plan, step, step->in, &plan->slots[step->out_slots[0]], err, sizeof err);
    ctx.cuda = &cp->kc[si];
    ctx.state = step->kstate;
    if (step->fn(&ctx) != 0) {
      (void)cudaGetLastError();
      return fgc_node_fail(st, FG_INVALID_ARGUMENT, g, plan, si, c->device,
                           err[0] ? err : "kernel failed");
    }
    e = cudaGetLastError(); /* a launch the kernel did not check */
    /* the node's end event comes before the check, so a profile times the
     * node alone */
    if (e == cudaSuccess && timings) e = cudaEventRecord(cp->tev[2 + 2 * si], sk);
    if (e == cudaSuccess && numerics && numerics_step(c, g, plan, cp, si, sk, st) != 0) return -1;
    if (e == cudaSuccess && sp->event_of[si] >= 0)
      e = cudaEventRecord(cp->events[sp->event_of[si]], sk);
    if (e != cudaSuccess)
      return fgc_step_fail(st, g, plan, si, c->device, "launching its kernel", e);
  }
  for (int k = 1; k < sp->n_streams && e == cudaSuccess; k++) {
    e = cudaEventRecord(cp->join[k], c->stream[k]);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(s0, cp->join[k], 0);
  }
  for (int i = 0; i < plan->n_fetches && e == cudaSuccess; i++)
    if (cp->fetch_bytes[i] > 0)
      e = cudaMemcpyAsync((char *)cp->fetch_host + cp->fetch_off[i],
                          plan->slots[plan->fetch_slots[i]].data, cp->fetch_bytes[i],
                          cudaMemcpyDeviceToHost, s0);
  if (e == cudaSuccess && ns > 0)
    e = cudaMemcpyAsync(cp->err_host, cp->err_dev, (size_t)ns * sizeof(fg_cuda_error),
                        cudaMemcpyDeviceToHost, s0);
  if (e != cudaSuccess) return fgc_fail(st, c->device, "finishing a run", e);
  return 0;
}

/* After a host-side failure: let what was enqueued finish on every stream. */
static void drain(fg_cuda_ctx *c, const cuda_plan *cp) {
  for (int k = 0; k < cp->sp.n_streams; k++)
    (void)cudaStreamSynchronize(c->stream[k]);
  (void)cudaGetLastError();
}

/* Captures the run into a CUDA Graph: 1 when cp->exec holds it, 0 when it
 * could not be captured (nothing ran; the caller runs plainly, and a plain
 * run reports any error a kernel gives, with its node). */
static int capture(fg_cuda_ctx *c, const fg_graph *g, fg_plan *plan, cuda_plan *cp) {
  cudaStream_t s0 = c->stream[0];
  if (cudaStreamBeginCapture(s0, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  fg_status *scratch = fg_status_new();
  int rc = enqueue(c, g, plan, cp, 0, 0, scratch);
  fg_status_free(scratch);
  cudaGraph_t graph = NULL;
  cudaError_t e = cudaStreamEndCapture(s0, &graph);
  if (rc != 0 || e != cudaSuccess || !graph) {
    if (graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    return 0;
  }
  e = cudaGraphInstantiate(&cp->exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  if (e != cudaSuccess) {
    cp->exec = NULL;
    (void)cudaGetLastError();
    return 0;
  }
  return 1;
}

static int read_timings(fg_plan *plan, cuda_plan *cp) {
  for (int si = 0; si < plan->n_steps; si++) {
    float a = 0, b = 0;
    if (cudaEventElapsedTime(&a, cp->tev[0], cp->tev[1 + 2 * si]) != cudaSuccess ||
        cudaEventElapsedTime(&b, cp->tev[0], cp->tev[2 + 2 * si]) != cudaSuccess) {
      (void)cudaGetLastError();
      return -1;
    }
    fg_node_timing *t = &plan->timings[si];
    t->thread = cp->sp.stream[si];
    t->start_ns = (int64_t)((double)a * 1e6);
    t->end_ns = (int64_t)((double)b * 1e6);
  }
  return 0;
}

int fg_cuda_plan_run(fg_cuda_ctx *c, const fg_graph *g, fg_plan *plan, const fg_plan_request *req,
                     int timings, fg_status *st) {
  cuda_plan *cp = plan->device;
  if (!c || !cp) {
    fg_status_set(st, FG_INTERNAL, "cuda: the plan was not prepared for the device");
    return -1;
  }
  int prev;
  if (fgc_enter(c->device, &prev, st) != 0) return -1;
  int rc = -1;
  if (copy_feeds(c, plan, cp, req, st) != 0) goto done;
  cp->runs++;
  cp->dist = req->dist;
  cp->host_par = req->host_par;
  if (timings && !cp->tev) {
    int n = 1 + 2 * plan->n_steps;
    cp->tev = calloc((size_t)n, sizeof *cp->tev);
    cudaError_t e = cp->tev ? cudaSuccess : cudaErrorMemoryAllocation;
    for (int i = 0; i < n && e == cudaSuccess; i++)
      e = cudaEventCreate(&cp->tev[i]);
    if (e != cudaSuccess) {
      fgc_fail(st, c->device, "cannot create timing events", e);
      goto done;
    }
  }
  /* check_numerics waits after every node: never captured; nor a plan
   * whose kernels read the run's training step or mode, which a captured
   * launch would freeze. */
  const int graphs = c->use_graphs && !req->check_numerics && !plan->run_state;
  if (!timings && cp->graph_state == 0 && graphs && cp->runs >= 2) {
    cp->graph_state = capture(c, g, plan, cp) ? 1 : -1;
  }
  cudaError_t e;
  if (!timings && graphs && cp->graph_state == 1) {
    e = cudaGraphLaunch(cp->exec, c->stream[0]);
    if (e != cudaSuccess) {
      fgc_fail(st, c->device, "launching the captured run (CUDA Graph)", e);
      goto done;
    }
  } else if (enqueue(c, g, plan, cp, timings, req->check_numerics, st) != 0) {
    drain(c, cp);
    goto done;
  }
  e = cudaStreamSynchronize(c->stream[0]);
  if (e != cudaSuccess) {
    /* Kernels run asynchronously: the failing node cannot be told apart
     * from the others of the run at this point. */
    fg_status_set(st, FG_INTERNAL,
                  "cuda:%d: the run failed on the device: %s (one of the %d nodes of the plan; "
                  "a run with check_numerics on, which waits after every node, names it)",
                  c->device, cudaGetErrorString(e), plan->n_steps);
    (void)cudaGetLastError();
    goto done;
  }
  for (int si = 0; si < plan->n_steps; si++) {
    if (cp->err_host[si].code == FG_CUDA_ERR_NONE) continue;
    char msg[512];
    fg_cuda_error_message(&cp->err_host[si], msg, sizeof msg);
    fgc_node_fail(st, FG_INVALID_ARGUMENT, g, plan, si, c->device, msg);
    goto done;
  }
  if (timings && read_timings(plan, cp) != 0) {
    fg_status_set(st, FG_INTERNAL, "cuda:%d: cannot read the timing events", c->device);
    goto done;
  }
  rc = 0;
done:
  /* On every failure, let stream 0 finish what it holds: the feed copies
   * read the caller's memory (pinned feeds) and the plan's staging, which
   * must not be in use once the run returns. */
  if (rc != 0) {
    (void)cudaStreamSynchronize(c->stream[0]);
    (void)cudaGetLastError();
  }
  /* Peers waiting in an all_reduce for this rank stop now, told why,
   * instead of at their deadline (as the CPU executor does). */
  if (rc != 0 && req->dist) fg_dist_abort(req->dist, fg_status_message(st));
  fgc_leave(prev);
  return rc;
}
