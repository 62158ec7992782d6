/* The NCCL communicator; see dist/comm/comm_nccl.h for the contract.
 *
 * Why nonblocking mode (ncclConfig_t.blocking = 0): a blocking
 * ncclCommInitRank or a collective whose peer died waits forever inside
 * NCCL. In nonblocking mode every call returns at once (ncclInProgress),
 * and this file polls ncclCommGetAsyncError and cudaStreamQuery against a
 * deadline, aborting the communicator when it passes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm/comm_nccl.h"

#ifndef FG_HAVE_NCCL

int fg_nccl_built(void) { return 0; }

fg_comm *fg_comm_nccl_new(fg_comm *boot, int device, double timeout_s, fg_status *st) {
  (void)boot;
  (void)device;
  (void)timeout_s;
  fg_status_set(st, FG_UNIMPLEMENTED,
                "this flowgraph was built without NCCL (needs the CUDA toolkit with nccl.h)");
  return NULL;
}

fg_comm *fg_comm_nccl_new_file(const char *path, int rank, int size, int device, double timeout_s,
                               fg_status *st) {
  (void)path;
  (void)rank;
  (void)size;
  return fg_comm_nccl_new(NULL, device, timeout_s, st);
}

#else

#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT_S 60.0

typedef struct nccl_comm {
  fg_comm base;
  ncclComm_t comm;
  cudaStream_t stream;
  int device;
  int broken;
  uint64_t *dev_u64; /* size slots for all_gather_u64 */
  pthread_mutex_t mu;
  /* Set by nccl_abort (any thread); the thread holding mu aborts the
   * communicator, so ncclCommAbort never races a call in flight's own
   * abort. why: the reason, written once before stop is set. */
  atomic_int claimed, stop;
  char why[256];
} nccl_comm;

int fg_nccl_built(void) { return 1; }

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void nap(void) {
  struct timespec ts = {0, 20000};
  nanosleep(&ts, NULL);
}

static double timeout_of(const fg_comm *c) {
  return c->timeout_s > 0 ? c->timeout_s : DEFAULT_TIMEOUT_S;
}

/* Aborts the NCCL communicator: after a timeout or an async error it may
 * never finish a destroy. */
static void break_comm(nccl_comm *m) {
  if (m->broken) return;
  m->broken = 1;
  ncclCommAbort(m->comm);
}

/* Waits until NCCL's pending calls are issued, and, with `stream`, until
 * the stream drained; fails on an async error or at the deadline. */
static int wait_done(nccl_comm *m, const char *op, int stream, fg_status *st) {
  double t0 = now_s(), timeout = timeout_of(&m->base);
  for (;;) {
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(m->comm, &async);
    if (r != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
      fg_status_set(st, FG_DEADLINE_EXCEEDED,
                    "%s on rank %d of %d (cuda:%d): NCCL error: %s; a peer died or failed", op,
                    m->base.rank, m->base.size, m->device,
                    ncclGetErrorString(r != ncclSuccess ? r : async));
      break_comm(m);
      return -1;
    }
    if (atomic_load(&m->stop)) {
      fg_status_set(st, FG_ABORTED, "%s on rank %d of %d (cuda:%d): stopped: %s", op, m->base.rank,
                    m->base.size, m->device, m->why);
      break_comm(m);
      return -1;
    }
    if (async == ncclSuccess) {
      if (!stream) return 0;
      cudaError_t e = cudaStreamQuery(m->stream);
      if (e == cudaSuccess) return 0;
      if (e != cudaErrorNotReady) {
        fg_status_set(st, FG_INTERNAL, "%s on rank %d (cuda:%d): CUDA error: %s", op, m->base.rank,
                      m->device, cudaGetErrorString(e));
        break_comm(m);
        return -1;
      }
    }
    if (now_s() - t0 > timeout) {
      fg_status_set(st, FG_DEADLINE_EXCEEDED,
                    "%s on rank %d of %d (cuda:%d): no progress for %.1f s (timeout); a peer "
                    "died or is stuck, the NCCL communicator was aborted",
                    op, m->base.rank, m->base.size, m->device, timeout);
      break_comm(m);
      return -1;
    }
    nap();
  }
}

static int usable(nccl_comm *m, const char *op, fg_status *st) {
  if (atomic_load(&m->stop)) {
    fg_status_set(st, FG_ABORTED, "%s on rank %d of %d (cuda:%d): stopped: %s", op, m->base.rank,
                  m->base.size, m->device, m->why);
    break_comm(m);
    return -1;
  }
  if (!m->broken) return 0;
  fg_status_set(st, FG_INTERNAL, "%s on rank %d: the NCCL communicator failed earlier", op,
                m->base.rank);
  return -1;
}

/* Issues one NCCL call (its result r) and waits for it. */
static int finish(nccl_comm *m, ncclResult_t r, const char *op, fg_status *st) {
  if (r != ncclSuccess && r != ncclInProgress) {
    fg_status_set(st, FG_INTERNAL, "%s on rank %d: %s", op, m->base.rank, ncclGetErrorString(r));
    break_comm(m);
    return -1;
  }
  return wait_done(m, op, 1, st);
}

/* NCCL's type for an all_reduce of `dtype`, or -1 with `st` set. */
static int nccl_type(fg_dtype dtype, ncclDataType_t *t, fg_status *st) {
  switch (dtype) {
  case FG_F32: *t = ncclFloat32; return 0;
  case FG_F64: *t = ncclFloat64; return 0;
  case FG_I32: *t = ncclInt32; return 0;
  case FG_I64: *t = ncclInt64; return 0;
  default:
    fg_status_set(st, FG_INVALID_ARGUMENT, "NCCL all_reduce: dtype %s is not supported",
                  fg_dtype_name(dtype));
    return -1;
  }
}

/* The in-place ncclAllReduce of both entry points: with `scaled`, the
 * pre-multiplied sum (scale x buf summed over ranks), else the sum or, with
 * `mean`, the average. */
static int reduce(fg_comm *c, void *buf, int64_t count, fg_dtype dtype, int mean, int scaled,
                  double scale, fg_status *st) {
  nccl_comm *m = (nccl_comm *)c;
  ncclDataType_t t;
  if (nccl_type(dtype, &t, st) != 0) return -1;
  if (count < 0 || (count > 0 && !buf)) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "NCCL all_reduce: count %lld with buffer %p",
                  (long long)count, buf);
    return -1;
  }
  if (scaled && dtype != FG_F32 && dtype != FG_F64) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "NCCL scaled all_reduce: dtype %s (f32 or f64 only, the scale is a float)",
                  fg_dtype_name(dtype));
    return -1;
  }
  pthread_mutex_lock(&m->mu);
  int rc = usable(m, "all_reduce", st);
  if (rc == 0 && count > 0) {
    cudaSetDevice(m->device);
    ncclRedOp_t op = mean ? ncclAvg : ncclSum;
    /* The scalar is read when the call is made (host immediate), so a
     * local is enough; the op is this communicator's, destroyed after. */
    float s32 = (float)scale;
    double s64 = scale;
    ncclResult_t r = ncclSuccess;
    if (scaled)
      r = ncclRedOpCreatePreMulSum(&op, dtype == FG_F32 ? (void *)&s32 : (void *)&s64, t,
                                   ncclScalarHostImmediate, m->comm);
    /* A nonblocking communicator may answer "in progress": wait for it as
     * for any call (no stream work is involved). */
    if (r == ncclInProgress) {
      rc = wait_done(m, "ncclRedOpCreatePreMulSum", 0, st);
    } else if (r != ncclSuccess) {
      fg_status_set(st, FG_INTERNAL, "ncclRedOpCreatePreMulSum on rank %d: %s", m->base.rank,
                    ncclGetErrorString(r));
      /* The peers are already in the collective: abort rather than leave
       * them waiting out their deadline. */
      break_comm(m);
      rc = -1;
    }
    if (rc == 0) {
      rc = finish(m, ncclAllReduce(buf, buf, (size_t)count, t, op, m->comm, m->stream),
                  "all_reduce", st);
      if (scaled && !m->broken) (void)ncclRedOpDestroy(op, m->comm);
    }
  }
  pthread_mutex_unlock(&m->mu);
  if (rc == 0) fg_status_clear(st);
  return rc;
}

static int nccl_all_reduce(fg_comm *c, void *buf, int64_t count, fg_dtype dtype, int mean,
                           fg_status *st) {
  return reduce(c, buf, count, dtype, mean, 0, 1.0, st);
}

static int nccl_all_gather_u64(fg_comm *c, uint64_t value, uint64_t *out, fg_status *st) {
  nccl_comm *m = (nccl_comm *)c;
  if (!out) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "NCCL all_gather_u64: NULL output");
    return -1;
  }
  pthread_mutex_lock(&m->mu);
  int rc = usable(m, "all_gather_u64", st);
  if (rc == 0) {
    cudaSetDevice(m->device);
    uint64_t *mine = m->dev_u64 + c->rank;
    cudaError_t e = cudaMemcpyAsync(mine, &value, sizeof value, cudaMemcpyHostToDevice, m->stream);
    if (e == cudaSuccess)
      rc = finish(m, ncclAllGather(mine, m->dev_u64, 1, ncclUint64, m->comm, m->stream),
                  "all_gather_u64", st);
    if (e == cudaSuccess && rc == 0)
      e = cudaMemcpy(out, m->dev_u64, (size_t)c->size * sizeof *out, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
      fg_status_set(st, FG_INTERNAL, "all_gather_u64 (cuda:%d): %s", m->device,
                    cudaGetErrorString(e));
      rc = -1;
    }
  }
  pthread_mutex_unlock(&m->mu);
  if (rc == 0) fg_status_clear(st);
  return rc;
}

static int nccl_broadcast(fg_comm *c, void *buf, int64_t bytes, int root, fg_status *st) {
  nccl_comm *m = (nccl_comm *)c;
  if (root < 0 || root >= c->size || bytes < 0 || (bytes > 0 && !buf)) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "NCCL broadcast: root %d of %d ranks, %lld bytes", root,
                  c->size, (long long)bytes);
    return -1;
  }
  pthread_mutex_lock(&m->mu);
  int rc = usable(m, "broadcast", st);
  if (rc == 0 && bytes > 0) {
    cudaSetDevice(m->device);
    rc = finish(m, ncclBroadcast(buf, buf, (size_t)bytes, ncclUint8, root, m->comm, m->stream),
                "broadcast", st);
  }
  pthread_mutex_unlock(&m->mu);
  if (rc == 0) fg_status_clear(st);
  return rc;
}

static void nccl_free(fg_comm *c) {
  nccl_comm *m = (nccl_comm *)c;
  if (!m) return;
  cudaSetDevice(m->device);
  if (m->comm && !m->broken) ncclCommDestroy(m->comm);
  if (m->stream) cudaStreamDestroy(m->stream);
  cudaFree(m->dev_u64);
  pthread_mutex_destroy(&m->mu);
  fg_comm_free_base(&m->base);
  free(m);
}

/* Not done with ncclSend/ncclRecv: NCCL has no tags and no way to learn a
 * message's size, and one communicator runs its calls in stream order, so a
 * send waiting for its peer would hold up a recv of another device thread
 * (the deadlock comm.h promises to avoid). Cross-process transfers go over
 * the MPI communicator. */
static int nccl_p2p(fg_comm *c, const char *op, int peer, int tag, fg_status *st) {
  fg_status_set(st, FG_UNIMPLEMENTED,
                "NCCL %s (rank %d, peer %d, tag %d): point-to-point is not implemented on the NCCL "
                "communicator; use the MPI communicator for cross-process transfers",
                op, c->rank, peer, tag);
  return -1;
}

static int nccl_send(fg_comm *c, const void *buf, int64_t bytes, int peer, int tag, fg_status *st) {
  (void)buf;
  (void)bytes;
  return nccl_p2p(c, "send", peer, tag, st);
}

static int nccl_recv(fg_comm *c, void *buf, int64_t bytes, int peer, int tag, fg_status *st) {
  (void)buf;
  (void)bytes;
  return nccl_p2p(c, "recv", peer, tag, st);
}

/* This rank failed a step: its waits end with FG_ABORTED and the NCCL
 * communicator is aborted (ncclCommAbort), which ends this rank's kernels
 * in flight. NCCL has no message to tell the peers why; their collectives
 * fail through NCCL's own error detection or at their deadline. With
 * nothing in flight the abort happens here; otherwise the waiting thread,
 * which holds mu, does it at its next poll. */
static void nccl_abort(fg_comm *c, const char *why) {
  nccl_comm *m = (nccl_comm *)c;
  int none = 0;
  if (!m || !atomic_compare_exchange_strong(&m->claimed, &none, 1)) return; /* idempotent */
  snprintf(m->why, sizeof m->why, "this rank failed: %s", why && why[0] ? why : "(no reason)");
  atomic_store(&m->stop, 1);
  if (pthread_mutex_trylock(&m->mu) == 0) {
    cudaSetDevice(m->device);
    break_comm(m);
    pthread_mutex_unlock(&m->mu);
  }
}

static int nccl_gpu(const fg_comm *c) { return ((const nccl_comm *)c)->device; }

static int nccl_all_reduce_scaled(fg_comm *c, void *buf, int64_t count, fg_dtype dtype,
                                  double scale, fg_status *st) {
  return reduce(c, buf, count, dtype, 0, 1, scale, st);
}

/* No peer buffers: all_reduce_apply and gather_factors are NULL (the fused
 * updates have no CUDA kernel). */
static const fg_comm_ops nccl_ops = {.all_reduce = nccl_all_reduce,
                                     .all_gather_u64 = nccl_all_gather_u64,
                                     .broadcast = nccl_broadcast,
                                     .send = nccl_send,
                                     .recv = nccl_recv,
                                     .free = nccl_free,
                                     .abort = nccl_abort,
                                     .gpu = nccl_gpu,
                                     .all_reduce_scaled = nccl_all_reduce_scaled};

/* Joins rank `rank` of `size` on `device` with `id`, without blocking. */
static fg_comm *join(const ncclUniqueId *id, int rank, int size, int device, double timeout_s,
                     fg_status *st) {
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess) n_dev = 0;
  if (device < 0 || device >= n_dev) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "NCCL communicator: device cuda:%d does not exist (this process sees %d GPU%s)",
                  device, n_dev, n_dev == 1 ? "" : "s");
    return NULL;
  }
  nccl_comm *m = calloc(1, sizeof *m);
  if (!m) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "NCCL communicator: out of memory");
    return NULL;
  }
  pthread_mutex_init(&m->mu, NULL);
  m->base.ops = &nccl_ops;
  m->base.rank = rank;
  m->base.size = size;
  m->base.timeout_s = timeout_s > 0 ? timeout_s : DEFAULT_TIMEOUT_S;
  m->device = device;
  cudaSetDevice(device);
  cudaError_t e = cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaMalloc((void **)&m->dev_u64, (size_t)size * sizeof(uint64_t));
  if (e != cudaSuccess) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "NCCL communicator (cuda:%d): %s", device,
                  cudaGetErrorString(e));
    nccl_free(&m->base);
    return NULL;
  }
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&m->comm, size, *id, rank, &cfg);
  if (r != ncclSuccess && r != ncclInProgress) {
    fg_status_set(st, FG_INTERNAL, "ncclCommInitRankConfig (rank %d of %d, cuda:%d): %s", rank,
                  size, device, ncclGetErrorString(r));
    m->comm = NULL;
    nccl_free(&m->base);
    return NULL;
  }
  if (wait_done(m, "NCCL init", 0, st) != 0) {
    nccl_free(&m->base);
    return NULL;
  }
  fg_status_clear(st);
  return &m->base;
}

fg_comm *fg_comm_nccl_new(fg_comm *boot, int device, double timeout_s, fg_status *st) {
  if (!boot || !boot->ops) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "NCCL communicator: no bootstrap communicator");
    return NULL;
  }
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (boot->rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      fg_status_set(st, FG_INTERNAL, "ncclGetUniqueId: %s", ncclGetErrorString(r));
      /* The others still wait in the broadcast; they time out. */
      return NULL;
    }
  }
  if (boot->ops->broadcast(boot, &id, (int64_t)sizeof id, 0, st) != 0) return NULL;
  return join(&id, boot->rank, boot->size, device, timeout_s, st);
}

fg_comm *fg_comm_nccl_new_file(const char *path, int rank, int size, int device, double timeout_s,
                               fg_status *st) {
  if (!path || size < 1 || rank < 0 || rank >= size) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "NCCL communicator: rank %d of %d with path %s", rank,
                  size, path ? path : "(null)");
    return NULL;
  }
  ncclUniqueId id;
  double timeout = timeout_s > 0 ? timeout_s : DEFAULT_TIMEOUT_S;
  if (rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      fg_status_set(st, FG_INTERNAL, "ncclGetUniqueId: %s", ncclGetErrorString(r));
      return NULL;
    }
    /* Temporary file plus rename: a reader never sees half an id. */
    size_t len = strlen(path) + 32;
    char *tmp = malloc(len);
    if (!tmp) {
      fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
      return NULL;
    }
    snprintf(tmp, len, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(&id, sizeof id, 1, f) == 1;
    if (f && fclose(f) != 0) ok = 0;
    if (ok && rename(tmp, path) != 0) ok = 0;
    if (!ok) {
      unlink(tmp);
      fg_status_set(st, FG_IO_ERROR, "NCCL bootstrap: cannot write the unique id to %s", path);
      free(tmp);
      return NULL;
    }
    free(tmp);
  } else {
    double t0 = now_s();
    for (;;) {
      FILE *f = fopen(path, "rb");
      int ok = f && fread(&id, sizeof id, 1, f) == 1;
      if (f) fclose(f);
      if (ok) break;
      if (now_s() - t0 > timeout) {
        fg_status_set(st, FG_DEADLINE_EXCEEDED,
                      "NCCL bootstrap: rank %d waited %.1f s for rank 0 to write %s", rank, timeout,
                      path);
        return NULL;
      }
      struct timespec ts = {0, 10000000};
      nanosleep(&ts, NULL);
    }
  }
  return join(&id, rank, size, device, timeout_s, st);
}

#endif
