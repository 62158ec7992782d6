/* Internal to the CUDA executor (the .c files of executor/cuda, see
 * executor/cuda_backend.h): its session and plan state and the helpers its
 * files share. backend.c: devices, session state, plans; staging.c: steps
 * run on the host (all_reduce, host steps) and over NCCL; run.c: runs. */
#ifndef FG_CUDA_INTERNAL_H
#define FG_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "executor/dist/exec.h"
#include "executor/cuda_backend.h"
#include "executor/streams.h"
#include "kernels/cuda/cuda_kernels.h"

/* Per-stream device scratch for the kernels (reductions' partials, cuDNN's
 * convolution workspaces: with 1 MiB its heuristics' fast algorithms did
 * not fit and ResNet-18's convolutions ran an order of magnitude slower on
 * an H200) and the cuBLAS workspace (set explicitly so graph capture never
 * makes cuBLAS allocate; 32 MiB is NVIDIA's recommendation for Hopper). */
#define SCRATCH_BYTES        ((size_t)64 << 20)
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

/* Entry points switch to the session's device and back, so a caller's own
 * current device is left as it was. */
int fgc_enter(int device, int *prev, fg_status *st);
void fgc_leave(int prev);
/* A failed CUDA call: FG_RESOURCE_EXHAUSTED when out of memory, else
 * FG_INTERNAL, naming the device and what failed. Returns -1. */
int fgc_fail(fg_status *st, int device, const char *what, cudaError_t e);
/* cudaMalloc and cudaHostAlloc (bytes 0: NULL) with messages naming the
 * bytes and what they are for. 0 or -1. */
int fgc_dev_alloc(void **p, size_t bytes, int device, const char *what, fg_status *st);
int fgc_host_alloc(void **p, size_t bytes, int device, const char *what, fg_status *st);

static inline size_t fgc_align_up(size_t x) {
  return (x + DEV_ALIGN - 1) & ~(size_t)(DEV_ALIGN - 1);
}

static inline size_t fgc_kbuf_bytes(const fg_kbuf *b) {
  size_t n = fg_dtype_size(b->dtype);
  for (int d = 0; d < b->rank; d++)
    n *= (size_t)b->dims[d]; /* checked at plan time */
  return n;
}

/* staging.c */
/* A step's failure, naming its node and device. Returns -1. */
int fgc_node_fail(fg_status *st, fg_code code, const fg_graph *g, const fg_plan *plan, int si,
                  int device, const char *msg);
/* A failed CUDA call while step si was `what`. Returns -1. */
int fgc_step_fail(fg_status *st, const fg_graph *g, const fg_plan *plan, int si, int device,
                  const char *what, cudaError_t e);
/* Lays out the pinned staging of the steps that run on the host. */
int fgc_stage_steps(fg_cuda_ctx *c, const fg_graph *g, fg_plan *plan, cuda_plan *cp, fg_status *st);
/* Runs such a step (cp->stage_off[si] != SIZE_MAX) on stream sk. */
int fgc_run_staged(fg_cuda_ctx *c, const fg_graph *g, fg_plan *plan, cuda_plan *cp, int si,
                   cudaStream_t sk, fg_status *st);

#endif
