/* `flowgraph profile --dist mpi` on a model split across processes: each
 * rank times its own steps; rank 0 receives every rank's timings after the
 * runs and reports them together (profile_dist.c). */
#ifndef FG_CLI_PROFILE_DIST_H
#define FG_CLI_PROFILE_DIST_H

#include <stdint.h>

#include "dist/comm/comm.h"
#include "flowgraph/graph.h"
#include "flowgraph/profile.h"

typedef struct prof_rec prof_rec; /* one step's timing, names left out */

/* What a step of run metadata did, from its op: a kernel, or the receiving
 * or sending half of a transfer. */
enum { PROF_COMPUTE, PROF_RECV, PROF_SEND };
int prof_step_kind(const char *op);

/* One rank's measured runs. */
typedef struct prof_runs {
  int64_t n_runs;
  int64_t *start;  /* n_runs + 1: each run's first record */
  int64_t *run_ns; /* n_runs */
  int64_t *t0_ns;  /* n_runs: fg_run_metadata.start_ns, this rank's clock */
  prof_rec *recs;
  int64_t n, cap;
  int threads;
  uint64_t arena_bytes;
  fg_node_timing *md_nodes; /* prof_runs_md's buffer */
} prof_runs;

/* Appends one run's timings. 0 or -1 (out of memory). */
int prof_runs_add(prof_runs *r, const fg_run_metadata *md, fg_status *st);

/* Every rank calls it after its runs. Rank 0 receives each other rank's
 * runs into all[1 .. c->size - 1] (all[0] is left alone); the others send
 * `mine`. A rank whose run count differs from rank 0's is refused. 0 or -1. */
int prof_runs_exchange(fg_comm *c, const prof_runs *mine, prof_runs *all, fg_status *st);

/* Run j of r as metadata: node names and ops from g (the graph every rank
 * loaded), "recv" and "send" for transfers. Valid until the next call on
 * r. 0, or -1 (out of memory or a node id that g lacks). */
int prof_runs_md(prof_runs *r, const fg_graph *g, int64_t j, fg_run_metadata *md, fg_status *st);

void prof_runs_free(prof_runs *r); /* also a zeroed one */

/* Every rank calls it. Rank 0 measures each other rank's CLOCK_MONOTONIC
 * against its own, by ping-pong as NTP does: of `rounds` exchanges it keeps
 * the one with the shortest round trip and takes the peer's reading minus
 * the midpoint of rank 0's send and receive. off[r] (rank r's clock minus
 * rank 0's) is then off by at most rtt[r] / 2; off[0] = rtt[0] = 0. On one
 * host the clocks are the same and off[r] estimates 0. 0 or -1. */
int prof_clock_offsets(fg_comm *c, int rounds, int64_t *off, int64_t *rtt, fg_status *st);

#endif
