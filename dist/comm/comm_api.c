/* The public face of the communicators (flowgraph/comm.h): handles are
 * used through their ops table inside the library; programs, the CLI
 * included, go through these functions and never see struct fg_comm. */
#include <stdint.h>
#include <string.h>

#include "dist/comm/comm.h"
#include "dist/comm/comm_mpi.h"
#include "dist/comm/shm_arena.h"
#include "flowgraph/comm.h"

void fg_comm_free(fg_comm *c) {
  if (c && c->ops && c->ops->free) c->ops->free(c);
}

int fg_comm_rank(const fg_comm *c) { return c ? c->rank : -1; }

int fg_comm_size(const fg_comm *c) { return c ? c->size : 0; }

int fg_comm_cuda_device(const fg_comm *c) { return fg_comm_gpu(c); }

void fg_comm_abort(fg_comm *c, const char *why) {
  if (c && c->ops && c->ops->abort) c->ops->abort(c, why ? why : "aborted");
}

/* A NULL handle or one whose kind lacks the operation: refused, never a
 * crash. */
static int usable(const fg_comm *c, const void *op, const char *what, fg_status *st) {
  if (!c || !c->ops) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s: no communicator", what);
    return 0;
  }
  if (!op) {
    fg_status_set(st, FG_UNIMPLEMENTED, "%s: this communicator has none", what);
    return 0;
  }
  return 1;
}

int fg_comm_all_reduce(fg_comm *c, void *buf, int64_t count, fg_dtype dtype, int mean,
                       fg_status *st) {
  if (!usable(c, c ? (const void *)c->ops->all_reduce : NULL, "all_reduce", st)) return -1;
  return c->ops->all_reduce(c, buf, count, dtype, mean, st);
}

int fg_comm_all_gather_u64(fg_comm *c, uint64_t value, uint64_t *out, fg_status *st) {
  if (!usable(c, c ? (const void *)c->ops->all_gather_u64 : NULL, "all_gather", st)) return -1;
  return c->ops->all_gather_u64(c, value, out, st);
}

int fg_comm_broadcast(fg_comm *c, void *buf, int64_t bytes, int root, fg_status *st) {
  if (!usable(c, c ? (const void *)c->ops->broadcast : NULL, "broadcast", st)) return -1;
  return c->ops->broadcast(c, buf, bytes, root, st);
}

int fg_comm_send(fg_comm *c, const void *buf, int64_t bytes, int peer, int tag, fg_status *st) {
  if (!usable(c, c ? (const void *)c->ops->send : NULL, "send", st)) return -1;
  return c->ops->send(c, buf, bytes, peer, tag, st);
}

int fg_comm_recv(fg_comm *c, void *buf, int64_t bytes, int peer, int tag, fg_status *st) {
  if (!usable(c, c ? (const void *)c->ops->recv : NULL, "recv", st)) return -1;
  return c->ops->recv(c, buf, bytes, peer, tag, st);
}

void fg_comm_get_stats(const fg_comm *c, fg_comm_stats *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!c) return;
  /* The fg_comm_mpi_ readers answer 0 for handles of other kinds; only
   * the path is told apart, by the MPI handle's own answer. */
  out->in_place_reduces = fg_comm_mpi_in_place_count(c);
  out->fused_updates = fg_comm_mpi_fused_count(c);
  out->message_bytes = fg_comm_mpi_message_bytes(c);
  out->shares_arenas = fg_comm_mpi_shares_arenas(c);
  out->reduce_path = fg_comm_mpi_reduce_path(c);
}

void *fg_shared_host_alloc(size_t bytes) { return fg_shm_arena_alloc_host(bytes); }

void fg_shared_host_free(void *p) { fg_shm_arena_free(p); }
