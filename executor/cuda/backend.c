/* The CUDA executor (see executor/cuda_backend.h): per-session streams and
 * cuBLAS handles, device copies of variables and constants, per-plan device
 * buffers, the launch loop over streams with events on cross-stream edges,
 * CUDA Graph capture and replay, and CUDA-event timing.
 *
 * A run is: copy the feeds to the plan's fixed device feed buffers on
 * stream 0 (through the plan's pinned staging, a host memcpy, unless a feed
 * is page-locked already), then on stream 0 zero the kernels' error
 * records, fork the other streams from stream 0,
 * launch every step on its stream (waiting on the events of cross-stream
 * predecessors, recording its own event when a successor is elsewhere), join
 * the streams back into stream 0, copy fetches and error records to pinned
 * host memory, and synchronise stream 0 once. Everything after the feed
 * copies is the same work every time with the same pointers, so from the
 * second run on it is captured once into a CUDA Graph and replayed. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor/cuda/cuda_internal.h"
#include "graph/op_table.h"
#include "graph/tensor_internal.h"

/* ---- devices --------------------------------------------------------------- */

int fg_cuda_device_count(void) {
  static atomic_int cached = -1;
  int n = atomic_load(&cached);
  if (n >= 0) return n;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 0) {
    (void)cudaGetLastError(); /* no driver or no device: not an error here */
    n = 0;
  }
  atomic_store(&cached, n);
  return n;
}

/* fg_tensor_new_pinned's memory. Without a device, cudaHostAlloc would
 * start the driver for nothing (and fail): NULL then, and the tensor is an
 * ordinary one. Portable, so a session on any of the GPUs feeds it
 * directly. */
void *fg_pinned_alloc(size_t bytes) {
  if (fg_cuda_device_count() < 1) return NULL;
  void *p = NULL;
  if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  return p;
}

void fg_pinned_free(void *p) {
  if (p) (void)cudaFreeHost(p);
}

/* Entry points switch to the session's device and back, so a caller's own
 * current device is left as it was. */
int fgc_enter(int device, int *prev, fg_status *st) {
  if (cudaGetDevice(prev) != cudaSuccess) *prev = -1;
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    fg_status_set(st, FG_INTERNAL, "cuda:%d: cannot select the device: %s", device,
                  cudaGetErrorString(e));
    return -1;
  }
  return 0;
}

void fgc_leave(int prev) {
  if (prev >= 0) (void)cudaSetDevice(prev);
}

int fg_cuda_ctx_enter(const fg_cuda_ctx *c, int *prev, fg_status *st) {
  return fgc_enter(c->device, prev, st);
}

void fg_cuda_ctx_leave(int prev) { fgc_leave(prev); }

int fgc_fail(fg_status *st, int device, const char *what, cudaError_t e) {
  fg_status_set(st, e == cudaErrorMemoryAllocation ? FG_RESOURCE_EXHAUSTED : FG_INTERNAL,
                "cuda:%d: %s: %s", device, what, cudaGetErrorString(e));
  (void)cudaGetLastError();
  return -1;
}

/* cudaMalloc with the message the issue asks for: the bytes asked for. */
int fgc_dev_alloc(void **p, size_t bytes, int device, const char *what, fg_status *st) {
  *p = NULL;
  if (bytes == 0) return 0;
  cudaError_t e = cudaMalloc(p, bytes);
  if (e == cudaSuccess) return 0;
  *p = NULL;
  (void)cudaGetLastError();
  if (e == cudaErrorMemoryAllocation) {
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    fg_status_set(st, FG_RESOURCE_EXHAUSTED,
                  "cuda:%d: cannot allocate %zu bytes for %s (cudaMalloc: out of memory; %zu of "
                  "%zu bytes free)",
                  device, bytes, what, free_b, total_b);
  } else {
    fg_status_set(st, FG_INTERNAL, "cuda:%d: cudaMalloc of %zu bytes for %s: %s", device, bytes,
                  what, cudaGetErrorString(e));
  }
  return -1;
}

int fgc_host_alloc(void **p, size_t bytes, int device, const char *what, fg_status *st) {
  *p = NULL;
  if (bytes == 0) return 0;
  cudaError_t e = cudaHostAlloc(p, bytes, cudaHostAllocDefault);
  if (e == cudaSuccess) return 0;
  *p = NULL;
  (void)cudaGetLastError();
  fg_status_set(st, FG_RESOURCE_EXHAUSTED,
                "cuda:%d: cannot allocate %zu bytes of pinned host memory for %s: %s", device,
                bytes, what, cudaGetErrorString(e));
  return -1;
}

/* ---- session state --------------------------------------------------------- */

void fg_cuda_ctx_free(fg_cuda_ctx *c) {
  if (!c) return;
  int prev;
  fg_status *st = fg_status_new();
  int ok = fgc_enter(c->device, &prev, st) == 0;
  fg_status_free(st);
  if (ok) {
    for (int k = 0; k < c->n_streams; k++) {
      if (c->stream[k]) (void)cudaStreamSynchronize(c->stream[k]);
      if (c->blas[k]) cublasDestroy(c->blas[k]);
      if (c->stream[k]) (void)cudaStreamDestroy(c->stream[k]);
      (void)cudaFree(c->scratch[k]);
      (void)cudaFree(c->blas_ws[k]);
    }
    for (int i = 0; i < c->n_node_mem; i++)
      (void)cudaFree(c->node_mem[i]);
    fgc_leave(prev);
  }
  free(c->node_mem);
  free(c->node_var);
  free(c->node_bytes);
  free(c);
}

fg_cuda_ctx *fg_cuda_ctx_new(int index, const fg_session_options *opts, fg_status *st) {
  int n_streams = fg_streams_from_option(opts ? opts->num_streams : 0);
  if (n_streams < 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "num_streams = %d; must be 0 to %d", opts->num_streams,
                  FG_MAX_STREAMS);
    return NULL;
  }
  fg_cuda_ctx *c = calloc(1, sizeof *c);
  if (!c) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "cuda:%d: out of memory", index);
    return NULL;
  }
  c->device = index;
  c->allow_tf32 = opts && opts->allow_tf32 ? 1 : 0;
  c->use_graphs = !opts || opts->cuda_graphs >= 0;
  int prev;
  if (fgc_enter(index, &prev, st) != 0) {
    free(c);
    return NULL;
  }
  int rc = 0;
  for (int k = 0; k < n_streams && rc == 0; k++) {
    c->n_streams = k + 1;
    /* Non-blocking: no implicit synchronisation with the legacy stream. */
    cudaError_t e = cudaStreamCreateWithFlags(&c->stream[k], cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      c->stream[k] = NULL;
      rc = fgc_fail(st, index, "cannot create a stream", e);
      break;
    }
    cublasStatus_t b = cublasCreate(&c->blas[k]);
    if (b != CUBLAS_STATUS_SUCCESS) {
      c->blas[k] = NULL;
      fg_status_set(st, b == CUBLAS_STATUS_ALLOC_FAILED ? FG_RESOURCE_EXHAUSTED : FG_INTERNAL,
                    "cuda:%d: cublasCreate: %s", index, cublasGetStatusString(b));
      rc = -1;
      break;
    }
    if (fgc_dev_alloc(&c->scratch[k], SCRATCH_BYTES, index, "kernel scratch", st) != 0 ||
        fgc_dev_alloc(&c->blas_ws[k], BLAS_WORKSPACE_BYTES, index, "the cuBLAS workspace", st) !=
            0) {
      rc = -1;
      break;
    }
    if ((b = cublasSetStream(c->blas[k], c->stream[k])) != CUBLAS_STATUS_SUCCESS ||
        (b = cublasSetWorkspace(c->blas[k], c->blas_ws[k], BLAS_WORKSPACE_BYTES)) !=
            CUBLAS_STATUS_SUCCESS ||
        (b = cublasSetMathMode(c->blas[k],
                               c->allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH)) !=
            CUBLAS_STATUS_SUCCESS) {
      fg_status_set(st, FG_INTERNAL, "cuda:%d: cuBLAS setup: %s", index, cublasGetStatusString(b));
      rc = -1;
    }
  }
  fgc_leave(prev);
  if (rc != 0) {
    fg_cuda_ctx_free(c);
    return NULL;
  }
  return c;
}

/* Grows the per-node tables to n nodes. */
static int node_tables(fg_cuda_ctx *c, int n, fg_status *st) {
  if (n <= c->n_node_mem) return 0;
  void **mem = realloc(c->node_mem, (size_t)n * sizeof *mem);
  if (mem) c->node_mem = mem;
  char *var = realloc(c->node_var, (size_t)n);
  if (var) c->node_var = var;
  size_t *bytes = realloc(c->node_bytes, (size_t)n * sizeof *bytes);
  if (bytes) c->node_bytes = bytes;
  if (!mem || !var || !bytes) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "cuda:%d: out of memory (node tables)", c->device);
    return -1;
  }
  for (int i = c->n_node_mem; i < n; i++)
    c->node_mem[i] = NULL, c->node_var[i] = 0, c->node_bytes[i] = 0;
  c->n_node_mem = n;
  return 0;
}

/* The device copy of a variable's or constant's value, uploaded on first use
 * (outside any run: a synchronous copy is fine here). */
static void *node_upload(fg_cuda_ctx *c, const fg_graph *g, int node, const void *host,
                         size_t bytes, int is_var, fg_status *st) {
  if (c->node_mem[node] || bytes == 0) return c->node_mem[node];
  char what[300];
  snprintf(what, sizeof what, "%s '%s'", is_var ? "variable" : "constant", g->nodes[node].name);
  if (fgc_dev_alloc(&c->node_mem[node], bytes, c->device, what, st) != 0) return NULL;
  /* Not plain cudaMemcpy: from pageable memory it may return before the DMA
   * lands, and it runs on the legacy stream, which the session's
   * non-blocking streams do not wait for. On stream 0 and synchronised, the
   * value is on the device before any run reads it. */
  cudaError_t e =
      cudaMemcpyAsync(c->node_mem[node], host, bytes, cudaMemcpyHostToDevice, c->stream[0]);
  if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream[0]);
  if (e != cudaSuccess) {
    (void)cudaFree(c->node_mem[node]);
    c->node_mem[node] = NULL;
    fgc_fail(st, c->device, what, e);
    return NULL;
  }
  c->node_var[node] = (char)is_var;
  c->node_bytes[node] = bytes;
  return c->node_mem[node];
}

void fg_cuda_graph_changed(fg_cuda_ctx *c) {
  if (!c) return;
  int prev;
  fg_status *st = fg_status_new();
  int ok = fgc_enter(c->device, &prev, st) == 0;
  fg_status_free(st);
  for (int i = 0; i < c->n_node_mem; i++)
    if (c->node_mem[i] && !c->node_var[i]) {
      if (ok) (void)cudaFree(c->node_mem[i]);
      c->node_mem[i] = NULL;
    }
  if (ok) fgc_leave(prev);
}

/* Copies variable `node` (-1: every variable the device holds) between
 * its device copy and vars[node]->data, in direction `kind`. */
static int copy_vars(fg_cuda_ctx *c, fg_tensor **vars, int n_vars, int node,
                     enum cudaMemcpyKind kind, fg_status *st) {
  if (!c) return 0;
  int prev;
  if (fgc_enter(c->device, &prev, st) != 0) return -1;
  int rc = 0;
  const int to_host = kind == cudaMemcpyDeviceToHost;
  for (int i = node < 0 ? 0 : node; rc == 0 && i < (node < 0 ? c->n_node_mem : node + 1); i++) {
    if (i >= c->n_node_mem || i >= n_vars || !c->node_var[i] || !c->node_mem[i] || !vars[i])
      continue;
    size_t bytes = c->node_bytes[i] < vars[i]->bytes ? c->node_bytes[i] : vars[i]->bytes;
    cudaError_t e = to_host ? cudaMemcpy(vars[i]->data, c->node_mem[i], bytes, kind)
                            : cudaMemcpy(c->node_mem[i], vars[i]->data, bytes, kind);
    if (e != cudaSuccess)
      rc = fgc_fail(st, c->device,
                    to_host ? "copying a variable to the host" : "copying a variable to the device",
                    e);
  }
  fgc_leave(prev);
  return rc;
}

int fg_cuda_vars_to_host(fg_cuda_ctx *c, fg_tensor **vars, int n_vars, int node, fg_status *st) {
  return copy_vars(c, vars, n_vars, node, cudaMemcpyDeviceToHost, st);
}

int fg_cuda_vars_to_device(fg_cuda_ctx *c, fg_tensor **vars, int n_vars, fg_status *st) {
  return copy_vars(c, vars, n_vars, -1, cudaMemcpyHostToDevice, st);
}
/* ---- plans ------------------------------------------------------------------ */

void fg_cuda_plan_release(void *device) {
  cuda_plan *cp = device;
  if (!cp) return;
  int prev;
  fg_status *st = fg_status_new();
  int ok = fgc_enter(cp->device, &prev, st) == 0;
  fg_status_free(st);
  if (ok) {
    if (cp->exec) (void)cudaGraphExecDestroy(cp->exec);
    for (int i = 0; cp->events && i < cp->sp.n_events; i++)
      if (cp->events[i]) (void)cudaEventDestroy(cp->events[i]);
    for (int i = 0; cp->tev && i < 1 + 2 * cp->sp.n_steps; i++)
      if (cp->tev[i]) (void)cudaEventDestroy(cp->tev[i]);
    if (cp->fork) (void)cudaEventDestroy(cp->fork);
    for (int k = 0; k < FG_MAX_STREAMS; k++)
      if (cp->join[k]) (void)cudaEventDestroy(cp->join[k]);
    (void)cudaFree(cp->arena);
    (void)cudaFree(cp->fetch_dev);
    (void)cudaFree(cp->feed_dev);
    (void)cudaFree(cp->err_dev);
    (void)cudaFree(cp->num_dev);
    (void)cudaFreeHost(cp->feed_host);
    (void)cudaFreeHost(cp->fetch_host);
    (void)cudaFreeHost(cp->err_host);
    (void)cudaFreeHost(cp->stage);
    fgc_leave(prev);
  }
  free(cp->events);
  free(cp->tev);
  free(cp->feed_off);
  free(cp->feed_bytes);
  free(cp->fetch_off);
  free(cp->fetch_bytes);
  free(cp->kc);
  free(cp->stage_off);
  free(cp->hkb);
  fg_stream_plan_free(&cp->sp);
  free(cp);
}

/* Points every slot at device memory. Slots come in node order, so an
 * update's output (the variable itself) comes after the variable's slot. */
static int bind_slots(fg_cuda_ctx *c, const fg_graph *g, fg_plan *plan, cuda_plan *cp,
                      fg_tensor *const *vars, int n_vars, const int *feed_of_slot, fg_status *st) {
  for (int s = 0; s < plan->n_slots; s++) {
    fg_kbuf *b = &plan->slots[s];
    int node = plan->slot_node[s], step = plan->slot_step[s];
    size_t bytes = fgc_kbuf_bytes(b);
    switch (plan->slot_kind[s]) {
    case FG_SLOT_FEED: b->data = (char *)cp->feed_dev + cp->feed_off[feed_of_slot[s]]; break;
    case FG_SLOT_CONSTANT:
      b->data = node_upload(c, g, node, b->data, bytes, 0, st);
      if (!b->data && bytes) return -1;
      break;
    case FG_SLOT_VARIABLE:
      if (step >= 0) { /* an update's result: the variable it updated */
        b->data = plan->slots[plan->steps[step].in_slots[0]].data;
      } else {
        if (node >= n_vars || !vars[node]) {
          fg_status_set(st, FG_INTERNAL, "variable '%s': no value", g->nodes[node].name);
          return -1;
        }
        b->data = node_upload(c, g, node, vars[node]->data, bytes, 1, st);
        if (!b->data && bytes) return -1;
      }
      break;
    case FG_SLOT_PINNED:
      /* plan_memory.c laid the fetched outputs out in its host block; the device
       * block mirrors that layout. */
      b->data = (char *)cp->fetch_dev + ((char *)b->data - (char *)plan->pinned);
      break;
    default: b->data = cp->arena ? (char *)cp->arena + plan->slot_offset[s] : NULL; break;
    }
  }
  return 0;
}

int fg_cuda_plan_prepare(fg_cuda_ctx *c, const fg_graph *g, fg_plan *plan, fg_tensor *const *vars,
                         int n_vars, fg_status *st) {
  int prev;
  if (fgc_enter(c->device, &prev, st) != 0) return -1;
  int rc = -1, ns = plan->n_steps;
  int *feed_of_slot = NULL;
  cuda_plan *cp = calloc(1, sizeof *cp);
  if (!cp) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "cuda:%d: out of memory (plan)", c->device);
    goto done;
  }
  cp->device = c->device;
  plan->device = cp;
  size_t nf = (size_t)plan->n_feeds + 1, nx = (size_t)plan->n_fetches + 1;
  cp->feed_off = calloc(nf, sizeof(size_t));
  cp->feed_bytes = calloc(nf, sizeof(size_t));
  cp->fetch_off = calloc(nx, sizeof(size_t));
  cp->fetch_bytes = calloc(nx, sizeof(size_t));
  cp->kc = calloc((size_t)ns + 1, sizeof *cp->kc);
  feed_of_slot = malloc(((size_t)plan->n_slots + 1) * sizeof *feed_of_slot);
  if (!cp->feed_off || !cp->feed_bytes || !cp->fetch_off || !cp->fetch_bytes || !cp->kc ||
      !feed_of_slot || node_tables(c, g->n_nodes, st) != 0) {
    if (fg_status_code(st) == FG_OK)
      fg_status_set(st, FG_RESOURCE_EXHAUSTED, "cuda:%d: out of memory (plan)", c->device);
    goto done;
  }
  /* Device blocks: the arena, fetched outputs (mirroring plan->pinned),
   * feeds (with pinned staging) and the kernels' error records. */
  if (fgc_dev_alloc(&cp->arena, plan->arena_bytes, c->device, "the plan's arena", st) != 0)
    goto done;
  size_t fetch_block = 0, feed_block = 0, fetch_stage = 0;
  for (int s = 0; s < plan->n_slots; s++) {
    feed_of_slot[s] = -1;
    if (plan->slot_kind[s] != FG_SLOT_PINNED) continue;
    size_t end = (size_t)((char *)plan->slots[s].data - (char *)plan->pinned) +
                 fgc_kbuf_bytes(&plan->slots[s]);
    if (end > fetch_block) fetch_block = end;
  }
  for (int i = 0; i < plan->n_feeds; i++) {
    int s = plan->feed_slots[i];
    if (s < 0) continue;
    feed_of_slot[s] = i;
    cp->feed_off[i] = feed_block;
    cp->feed_bytes[i] = fgc_kbuf_bytes(&plan->slots[s]);
    feed_block += fgc_align_up(cp->feed_bytes[i]);
  }
  for (int i = 0; i < plan->n_fetches; i++) {
    cp->fetch_off[i] = fetch_stage;
    cp->fetch_bytes[i] = fgc_kbuf_bytes(&plan->slots[plan->fetch_slots[i]]);
    fetch_stage += fgc_align_up(cp->fetch_bytes[i]);
  }
  if (fgc_dev_alloc(&cp->fetch_dev, fetch_block, c->device, "fetched outputs", st) != 0 ||
      fgc_dev_alloc(&cp->feed_dev, feed_block, c->device, "feeds", st) != 0 ||
      fgc_host_alloc(&cp->feed_host, feed_block, c->device, "feeds", st) != 0 ||
      fgc_host_alloc(&cp->fetch_host, fetch_stage, c->device, "fetched outputs", st) != 0 ||
      fgc_dev_alloc((void **)&cp->err_dev, (size_t)ns * sizeof(fg_cuda_error), c->device,
                    "kernel error records", st) != 0 ||
      fgc_host_alloc((void **)&cp->err_host, (size_t)ns * sizeof(fg_cuda_error), c->device,
                     "kernel error records", st) != 0)
    goto done;
  if (bind_slots(c, g, plan, cp, vars, n_vars, feed_of_slot, st) != 0) goto done;
  if (fgc_stage_steps(c, g, plan, cp, st) != 0) goto done;

  /* Streams and events. */
  char err[256];
  if (fg_stream_plan_build(ns, plan->succ_off, plan->succ, c->n_streams, &cp->sp, err,
                           sizeof err) != 0) {
    fg_status_set(st, FG_INTERNAL, "cuda:%d: %s", c->device, err);
    goto done;
  }
  cp->events = calloc((size_t)cp->sp.n_events + 1, sizeof *cp->events);
  if (!cp->events) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "cuda:%d: out of memory (events)", c->device);
    goto done;
  }
  cudaError_t e = cudaSuccess;
  for (int i = 0; i < cp->sp.n_events && e == cudaSuccess; i++)
    e = cudaEventCreateWithFlags(&cp->events[i], cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&cp->fork, cudaEventDisableTiming);
  for (int k = 1; k < cp->sp.n_streams && e == cudaSuccess; k++)
    e = cudaEventCreateWithFlags(&cp->join[k], cudaEventDisableTiming);
  if (e != cudaSuccess) {
    fgc_fail(st, c->device, "cannot create events", e);
    goto done;
  }
  for (int si = 0; si < ns; si++) {
    int k = cp->sp.stream[si];
    cp->kc[si] = (fg_kcuda){
        c->stream[k], c->blas[k], c->scratch[k], SCRATCH_BYTES, (int *)(cp->err_dev + si),
        c->allow_tf32};
  }
  rc = 0;
done:
  free(feed_of_slot);
  fgc_leave(prev);
  return rc; /* on failure plan->device is freed with the plan */
}

const void *fg_cuda_plan_fetch(const fg_plan *plan, int i) {
  const cuda_plan *cp = plan->device;
  return cp && cp->fetch_host ? (const char *)cp->fetch_host + cp->fetch_off[i] : NULL;
}
