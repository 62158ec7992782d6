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
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor/dist/exec.h"
#include "executor/cuda_backend.h"
#include "executor/streams.h"
#include "graph/op_table.h"
#include "graph/tensor_internal.h"
#include "kernels/collective.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kernel_shape.h"

/* Per-stream device scratch for the kernels (reductions' partials) and the
 * cuBLAS workspace (set explicitly so graph capture never makes cuBLAS
 * allocate; 32 MiB is NVIDIA's recommendation for Hopper). */
#define SCRATCH_BYTES        ((size_t)FG_CUDA_SCRATCH_MIN)
#define BLAS_WORKSPACE_BYTES ((size_t)32 << 20)
#define DEV_ALIGN            256

struct fg_cuda_ctx {
  int device;
  int n_streams;
  int allow_tf32;
  int use_graphs; /* cuda_graphs option >= 0 */
  cudaStream_t stream[FG_MAX_STREAMS];
  cublasHandle_t blas[FG_MAX_STREAMS];
  void *scratch[FG_MAX_STREAMS];
  void *blas_ws[FG_MAX_STREAMS];
  void **node_mem; /* per node id: device copy of a variable or constant, or NULL */
  char *node_var;  /* per node id: 1 when node_mem holds a variable */
  size_t *node_bytes;
  int n_node_mem;
};

typedef struct cuda_plan {
  int device;
  void *arena, *fetch_dev, *feed_dev; /* device */
  void *feed_host, *fetch_host;       /* pinned staging */
  size_t *feed_off, *feed_bytes;      /* per feed */
  size_t *fetch_off, *fetch_bytes;    /* per fetch */
  fg_cuda_error *err_dev, *err_host;  /* per step */
  unsigned long long *num_dev;        /* check_numerics: NaN, Inf per output of a step */
  int num_outputs;                    /* ... of num_dev's capacity */
  fg_kcuda *kc;                       /* per step */
  fg_stream_plan sp;
  cudaEvent_t *events; /* sp.n_events, no timing */
  cudaEvent_t fork, join[FG_MAX_STREAMS];
  cudaEvent_t *tev; /* 1 + 2 * n_steps timing events, made on the first profiled run */
  /* all_reduce steps: per step, the offset of its inputs' copies in the
   * pinned block `stage` (stage_bytes, allocated by the first run that
   * stages through the host), or SIZE_MAX for other steps. */
  size_t *stage_off;
  size_t stage_bytes;
  void *stage;
  /* The host views of a staged step's inputs (hkb) and outputs (hkb +
   * max_in), as wide as the widest such step. */
  fg_kbuf *hkb;
  int max_in;
  const fg_dist_exec *dist;     /* the running request's (its communicators), set per run */
  const fg_kparallel *host_par; /* ... and its threads for host steps (NULL: inline) */
  int runs;
  int graph_state; /* 0: not captured yet, 1: exec holds the run, -1: capture failed */
  cudaGraphExec_t exec;
} cuda_plan;

static int stage_steps(fg_cuda_ctx *c, const fg_graph *g, fg_plan *plan, cuda_plan *cp,
                       fg_status *st);

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

/* Entry points switch to the session's device and back, so a caller's own
 * current device is left as it was. */
static int enter(int device, int *prev, fg_status *st) {
  if (cudaGetDevice(prev) != cudaSuccess) *prev = -1;
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    fg_status_set(st, FG_INTERNAL, "cuda:%d: cannot select the device: %s", device,
                  cudaGetErrorString(e));
    return -1;
  }
  return 0;
}

static void leave(int prev) {
  if (prev >= 0) (void)cudaSetDevice(prev);
}

static int cuda_fail(fg_status *st, int device, const char *what, cudaError_t e) {
  fg_status_set(st, e == cudaErrorMemoryAllocation ? FG_RESOURCE_EXHAUSTED : FG_INTERNAL,
                "cuda:%d: %s: %s", device, what, cudaGetErrorString(e));
  (void)cudaGetLastError();
  return -1;
}

/* cudaMalloc with the message the issue asks for: the bytes asked for. */
static int dev_alloc(void **p, size_t bytes, int device, const char *what, fg_status *st) {
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

static int host_alloc(void **p, size_t bytes, int device, const char *what, fg_status *st) {
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

static size_t align_up(size_t x) { return (x + DEV_ALIGN - 1) & ~(size_t)(DEV_ALIGN - 1); }

static size_t kbuf_bytes(const fg_kbuf *b) {
  size_t n = fg_dtype_size(b->dtype);
  for (int d = 0; d < b->rank; d++)
    n *= (size_t)b->dims[d]; /* checked at plan time */
  return n;
}

/* ---- session state --------------------------------------------------------- */

void fg_cuda_ctx_free(fg_cuda_ctx *c) {
  if (!c) return;
  int prev;
  fg_status *st = fg_status_new();
  int ok = enter(c->device, &prev, st) == 0;
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
    leave(prev);
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
  if (enter(index, &prev, st) != 0) {
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
      rc = cuda_fail(st, index, "cannot create a stream", e);
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
    if (dev_alloc(&c->scratch[k], SCRATCH_BYTES, index, "kernel scratch", st) != 0 ||
        dev_alloc(&c->blas_ws[k], BLAS_WORKSPACE_BYTES, index, "the cuBLAS workspace", st) != 0) {
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
  leave(prev);
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
  if (dev_alloc(&c->node_mem[node], bytes, c->device, what, st) != 0) return NULL;
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
    cuda_fail(st, c->device, what, e);
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
  int ok = enter(c->device, &prev, st) == 0;
  fg_status_free(st);
  for (int i = 0; i < c->n_node_mem; i++)
    if (c->node_mem[i] && !c->node_var[i]) {
      if (ok) (void)cudaFree(c->node_mem[i]);
      c->node_mem[i] = NULL;
    }
  if (ok) leave(prev);
}

/* Copies variable `node` (-1: every variable the device holds) between
 * its device copy and vars[node]->data, in direction `kind`. */
static int copy_vars(fg_cuda_ctx *c, fg_tensor **vars, int n_vars, int node,
                     enum cudaMemcpyKind kind, fg_status *st) {
  if (!c) return 0;
  int prev;
  if (enter(c->device, &prev, st) != 0) return -1;
  int rc = 0;
  const int to_host = kind == cudaMemcpyDeviceToHost;
  for (int i = node < 0 ? 0 : node; rc == 0 && i < (node < 0 ? c->n_node_mem : node + 1); i++) {
    if (i >= c->n_node_mem || i >= n_vars || !c->node_var[i] || !c->node_mem[i] || !vars[i])
      continue;
    size_t bytes = c->node_bytes[i] < vars[i]->bytes ? c->node_bytes[i] : vars[i]->bytes;
    cudaError_t e = to_host ? cudaMemcpy(vars[i]->data, c->node_mem[i], bytes, kind)
                            : cudaMemcpy(c->node_mem[i], vars[i]->data, bytes, kind);
    if (e != cudaSuccess)
      rc = cuda_fail(
          st, c->device,
          to_host ? "copying a variable to the host" : "copying a variable to the device", e);
  }
  leave(prev);
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
  int ok = enter(cp->device, &prev, st) == 0;
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
    leave(prev);
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
    size_t bytes = kbuf_bytes(b);
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
      /* plan.c laid the fetched outputs out in its host block; the device
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
  if (enter(c->device, &prev, st) != 0) return -1;
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
  if (dev_alloc(&cp->arena, plan->arena_bytes, c->device, "the plan's arena", st) != 0) goto done;
  size_t fetch_block = 0, feed_block = 0, fetch_stage = 0;
  for (int s = 0; s < plan->n_slots; s++) {
    feed_of_slot[s] = -1;
    if (plan->slot_kind[s] != FG_SLOT_PINNED) continue;
    size_t end =
        (size_t)((char *)plan->slots[s].data - (char *)plan->pinned) + kbuf_bytes(&plan->slots[s]);
    if (end > fetch_block) fetch_block = end;
  }
  for (int i = 0; i < plan->n_feeds; i++) {
    int s = plan->feed_slots[i];
    if (s < 0) continue;
    feed_of_slot[s] = i;
    cp->feed_off[i] = feed_block;
    cp->feed_bytes[i] = kbuf_bytes(&plan->slots[s]);
    feed_block += align_up(cp->feed_bytes[i]);
  }
  for (int i = 0; i < plan->n_fetches; i++) {
    cp->fetch_off[i] = fetch_stage;
    cp->fetch_bytes[i] = kbuf_bytes(&plan->slots[plan->fetch_slots[i]]);
    fetch_stage += align_up(cp->fetch_bytes[i]);
  }
  if (dev_alloc(&cp->fetch_dev, fetch_block, c->device, "fetched outputs", st) != 0 ||
      dev_alloc(&cp->feed_dev, feed_block, c->device, "feeds", st) != 0 ||
      host_alloc(&cp->feed_host, feed_block, c->device, "feeds", st) != 0 ||
      host_alloc(&cp->fetch_host, fetch_stage, c->device, "fetched outputs", st) != 0 ||
      dev_alloc((void **)&cp->err_dev, (size_t)ns * sizeof(fg_cuda_error), c->device,
                "kernel error records", st) != 0 ||
      host_alloc((void **)&cp->err_host, (size_t)ns * sizeof(fg_cuda_error), c->device,
                 "kernel error records", st) != 0)
    goto done;
  if (bind_slots(c, g, plan, cp, vars, n_vars, feed_of_slot, st) != 0) goto done;
  if (stage_steps(c, g, plan, cp, st) != 0) goto done;

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
    cuda_fail(st, c->device, "cannot create events", e);
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
  leave(prev);
  return rc; /* on failure plan->device is freed with the plan */
}

const void *fg_cuda_plan_fetch(const fg_plan *plan, int i) {
  const cuda_plan *cp = plan->device;
  return cp && cp->fetch_host ? (const char *)cp->fetch_host + cp->fetch_off[i] : NULL;
}

/* ---- runs ------------------------------------------------------------------- */

/* A kernel's own error (bad value, bad shape) is FG_INVALID_ARGUMENT, as on
 * the CPU; a failing CUDA call is FG_INTERNAL. Both name the node. */
static int node_fail(fg_status *st, fg_code code, const fg_graph *g, const fg_plan *plan, int si,
                     int device, const char *msg) {
  const fg_node *n = &g->nodes[plan->steps[si].node];
  fg_status_set(st, code, "node '%s' (%s) on %s%d: %s", n->name, fg_op_table[n->op].name,
                plan->steps[si].host ? "the host, in a session on cuda:" : "cuda:", device, msg);
  return -1;
}

/* The pinned bytes a staged step's input i takes: none for a control
 * input, whose bytes are never read (and which the memory plan may already
 * have handed to another step: plan.c control_input). */
static size_t stage_in_bytes(const fg_graph *g, const fg_step *step, int i, const fg_kbuf *b) {
  return fg_dist_control_input(&g->nodes[step->node], i) ? 0 : align_up(kbuf_bytes(b));
}

/* ... and its output o: host steps' outputs have buffers of their own,
 * except an update's output 0, which is its variable (input 0); an
 * all_reduce reduces in place. */
static size_t stage_out_bytes(const fg_graph *g, const fg_step *step, int o, const fg_kbuf *b) {
  if (!step->host || (o == 0 && fg_op_table[g->nodes[step->node].op].mutable_inputs)) return 0;
  return align_up(kbuf_bytes(b));
}

/* all_reduce steps, and a GPU session's host steps (nodes placed on a CPU
 * device), run on the host (plan.c gives them the CPU kernel); all_reduce with
 * the communicator the run's request attaches. An NCCL communicator on this
 * GPU reduces the device buffers in place (run_nccl). Any other (MPI, in
 * process) works on host memory: the inputs are copied to pinned memory,
 * the CPU kernel calls the communicator there, and the result goes back
 * (run_staged). That costs two PCIe copies of the gradients, but serves
 * every communicator, one GPU shared by several ranks included. Either way
 * the host waits for the step's stream, so a plan with such steps is never
 * captured into a CUDA Graph. A host step queued on its stream instead
 * (cudaLaunchHostFunc, which also allows capture) was slower: the small
 * MLP's training step with layer 1 on the host took 0.59 to 0.64 ms
 * against 0.37 to 0.39 ms waiting here (fg_bench_gpu gpu_host_steps, 3
 * alternating pairs on an H200; all on the GPU: 0.12 ms), most likely
 * the wake-up of CUDA's callback thread, paid once per host step. The pinned block is allocated
 * only when a run first stages through it: with NCCL it is never needed. */
static int stage_steps(fg_cuda_ctx *c, const fg_graph *g, fg_plan *plan, cuda_plan *cp,
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
static int step_cuda_fail(fg_status *st, const fg_graph *g, const fg_plan *plan, int si, int device,
                          const char *what, cudaError_t e) {
  char msg[256];
  snprintf(msg, sizeof msg, "%s: %s", what, cudaGetErrorString(e));
  (void)cudaGetLastError();
  return node_fail(st, FG_INTERNAL, g, plan, si, device, msg);
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
  size_t bytes = kbuf_bytes(x);
  int64_t n = fgk_numel(x);
  int mean = step->params.mean, plain = 1;
  double w = 1, total = 1;
  cudaError_t e = cudaSuccess;
  if (step->params.weighted && comm->size > 1) {
    double rows = 0, sums[2] = {0, 0};
    if (step->n_in < 3 || step->in[1].dtype != FG_F64 || step->in[2].dtype != FG_F64 ||
        fgk_numel(&step->in[1]) != 1 || fgk_numel(&step->in[2]) != 2)
      return node_fail(st, FG_INVALID_ARGUMENT, g, plan, si, c->device,
                       "weighted all_reduce needs an f64 rows scalar and an f64 [2] of sums");
    e = cudaStreamSynchronize(sk);
    if (e == cudaSuccess) e = cudaMemcpy(&rows, step->in[1].data, sizeof rows, cudaMemcpyDefault);
    if (e == cudaSuccess) e = cudaMemcpy(sums, step->in[2].data, sizeof sums, cudaMemcpyDefault);
    if (e != cudaSuccess)
      return step_cuda_fail(st, g, plan, si, c->device, "reading its row counts", e);
    char err[256];
    if (fgk_all_reduce_weights(rows, sums, comm->size, &plain, &w, &total, err, sizeof err) != 0)
      return node_fail(st, FG_INVALID_ARGUMENT, g, plan, si, c->device, err);
  }
  if (!plain && w == 0)
    e = bytes ? cudaMemsetAsync(y->data, 0, bytes, sk) : cudaSuccess;
  else if (y->data != x->data && bytes)
    e = cudaMemcpyAsync(y->data, x->data, bytes, cudaMemcpyDeviceToDevice, sk);
  /* NCCL runs on its own stream: the output must be written first. */
  if (e == cudaSuccess) e = cudaStreamSynchronize(sk);
  if (e != cudaSuccess)
    return step_cuda_fail(st, g, plan, si, c->device, "preparing its output", e);
  fg_status *cst = fg_status_new();
  if (!cst) return node_fail(st, FG_RESOURCE_EXHAUSTED, g, plan, si, c->device, "out of memory");
  int rc = plain ? comm->ops->all_reduce(comm, y->data, n, y->dtype, mean, cst)
                 : fg_comm_all_reduce_scaled(comm, y->data, n, y->dtype, w / total, cst);
  if (rc != 0) {
    /* The communicator's code matters (deadline vs bad input). */
    char msg[512];
    snprintf(msg, sizeof msg, "%s: %s", fg_code_name(fg_status_code(cst)), fg_status_message(cst));
    node_fail(st, fg_status_code(cst), g, plan, si, c->device, msg);
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
static int run_staged(fg_cuda_ctx *c, const fg_graph *g, fg_plan *plan, cuda_plan *cp, int si,
                      cudaStream_t sk, fg_status *st) {
  fg_step *step = &plan->steps[si];
  const unsigned mut = fg_op_table[g->nodes[step->node].op].mutable_inputs;
  fg_kbuf *hin = cp->hkb, *hout = cp->hkb + cp->max_in;
  if (!step->host && (step->n_in > 4 || step->n_out != 1))
    return node_fail(st, FG_INTERNAL, g, plan, si, c->device, "unexpected all_reduce arity");
  fg_comm *comm = NULL;
  if (!step->host) {
    const int d = plan->step_dev ? plan->step_dev[si] : 0;
    comm = cp->dist ? cp->dist->comm[d] : NULL;
    int gpu = fg_comm_gpu(comm);
    if (gpu >= 0 && gpu != c->device) {
      char msg[160];
      snprintf(msg, sizeof msg, "its NCCL communicator reduces memory of cuda:%d, not this GPU's",
               gpu);
      return node_fail(st, FG_INVALID_ARGUMENT, g, plan, si, c->device, msg);
    }
    if (gpu >= 0) return run_nccl(c, g, plan, si, sk, comm, st);
  }
  if (!cp->stage && host_alloc(&cp->stage, cp->stage_bytes, c->device, "host step staging", st))
    return -1;
  char *p = (char *)cp->stage + cp->stage_off[si];
  cudaError_t e = cudaSuccess;
  for (int i = 0; i < step->n_in && e == cudaSuccess; i++) {
    hin[i] = step->in[i];
    hin[i].data = p; /* a control input's: never read */
    size_t bytes = kbuf_bytes(&hin[i]), room = stage_in_bytes(g, step, i, &hin[i]);
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
    return step_cuda_fail(st, g, plan, si, c->device,
                          "copying its inputs to the host (or an earlier kernel on its stream "
                          "failed)",
                          e);
  char err[512];
  err[0] = '\0';
  const fg_kparallel *par = step->host ? cp->host_par : NULL;
  fg_kctx ctx = {hin, step->n_in, hout, step->n_out, &step->params,
                 err, sizeof err, par,  NULL,        comm};
  /* A collective's failure keeps its code (a peer's deadline stays one). */
  if (step->fn(&ctx) != 0)
    return node_fail(
        st, step->host ? FG_INVALID_ARGUMENT : fg_comm_error_code(err, FG_INVALID_ARGUMENT), g,
        plan, si, c->device, err[0] ? err : "kernel failed");
  /* Back to the device: the outputs (an update's output 0 is its
   * variable's storage, copied with the mutable inputs), then the
   * variables the update wrote in place. */
  for (int o = 0; o < step->n_out && e == cudaSuccess; o++) {
    size_t bytes = kbuf_bytes(&hout[o]);
    if (bytes && !(o == 0 && mut && step->host))
      e = cudaMemcpyAsync(plan->slots[step->out_slots[o]].data, hout[o].data, bytes,
                          cudaMemcpyHostToDevice, sk);
  }
  for (int i = 0; step->host && i < step->n_in && e == cudaSuccess; i++) {
    size_t bytes = kbuf_bytes(&hin[i]);
    if (i < 32 && (mut >> i & 1u) && bytes)
      e = cudaMemcpyAsync(step->in[i].data, hin[i].data, bytes, cudaMemcpyHostToDevice, sk);
  }
  /* No wait for these copies: the step's part of the stage is its own,
   * and the host writes it again only in the next run, after this stream
   * has been synchronised again. */
  if (e != cudaSuccess)
    return step_cuda_fail(st, g, plan, si, c->device, "copying its result to the device", e);
  return 0;
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
 * staging on the host (for the 1 MB batch of a 256-row MLP training step
 * on an H100, 344 us a step against 264 with the batch pinned). */
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
    if (e != cudaSuccess) return cuda_fail(st, c->device, "copying the feeds to the device", e);
  }
  return 0;
}

/* check_numerics (BAD_INPUTS M4) after step si's kernels on stream sk:
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
    if (dev_alloc((void **)&cp->num_dev, (size_t)step->n_out * 2 * sizeof(unsigned long long),
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
    return node_fail(st, FG_INVALID_ARGUMENT, g, plan, si, c->device, msg);
  for (int o = 0; o < step->n_out && e == cudaSuccess; o++) {
    unsigned long long n[2];
    e = cudaMemcpy(n, cp->num_dev + 2 * o, sizeof n, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess && n[0] + n[1] > 0) {
      snprintf(msg, sizeof msg, "produced %llu NaN and %llu Inf in output %d (check_numerics)",
               n[0], n[1], o);
      return node_fail(st, FG_INVALID_ARGUMENT, g, plan, si, c->device, msg);
    }
  }
  if (e != cudaSuccess) return step_cuda_fail(st, g, plan, si, c->device, "check_numerics", e);
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
  if (e != cudaSuccess) return cuda_fail(st, c->device, "starting a run", e);
  for (int si = 0; si < ns; si++) {
    fg_step *step = &plan->steps[si];
    cudaStream_t sk = c->stream[sp->stream[si]];
    for (int w = sp->wait_off[si]; w < sp->wait_off[si + 1] && e == cudaSuccess; w++)
      e = cudaStreamWaitEvent(sk, cp->events[sp->event_of[sp->wait[w]]], 0);
    if (e == cudaSuccess && timings) e = cudaEventRecord(cp->tev[1 + 2 * si], sk);
    if (e != cudaSuccess)
      return step_cuda_fail(st, g, plan, si, c->device, "waiting for its inputs", e);
    for (int i = 0; i < step->n_in; i++)
      step->in[i] = plan->slots[step->in_slots[i]];
    if (cp->stage_off[si] != SIZE_MAX) {
      if (run_staged(c, g, plan, cp, si, sk, st) != 0) return -1;
      if (timings) e = cudaEventRecord(cp->tev[2 + 2 * si], sk);
      /* an all_reduce's result is checked too, as on the CPU */
      if (e == cudaSuccess && numerics && numerics_step(c, g, plan, cp, si, sk, st) != 0) return -1;
      if (e == cudaSuccess && sp->event_of[si] >= 0)
        e = cudaEventRecord(cp->events[sp->event_of[si]], sk);
      if (e != cudaSuccess) return cuda_fail(st, c->device, "after a step run on the host", e);
      continue;
    }
    char err[512];
    err[0] = '\0';
    fg_kctx ctx = {step->in,    step->n_in,    &plan->slots[step->out_slots[0]],
                   step->n_out, &step->params, err,
                   sizeof err,  NULL,          &cp->kc[si],
                   NULL};
    if (step->fn(&ctx) != 0) {
      (void)cudaGetLastError();
      return node_fail(st, FG_INVALID_ARGUMENT, g, plan, si, c->device,
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
      return step_cuda_fail(st, g, plan, si, c->device, "launching its kernel", e);
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
  if (e != cudaSuccess) return cuda_fail(st, c->device, "finishing a run", e);
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
  if (enter(c->device, &prev, st) != 0) return -1;
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
      cuda_fail(st, c->device, "cannot create timing events", e);
      goto done;
    }
  }
  /* check_numerics waits after every node: never captured. */
  const int graphs = c->use_graphs && !req->check_numerics;
  if (!timings && cp->graph_state == 0 && graphs && cp->runs >= 2) {
    cp->graph_state = capture(c, g, plan, cp) ? 1 : -1;
  }
  cudaError_t e;
  if (!timings && graphs && cp->graph_state == 1) {
    e = cudaGraphLaunch(cp->exec, c->stream[0]);
    if (e != cudaSuccess) {
      cuda_fail(st, c->device, "launching the captured run (CUDA Graph)", e);
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
    node_fail(st, FG_INVALID_ARGUMENT, g, plan, si, c->device, msg);
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
  leave(prev);
  return rc;
}
