/* `--dist mpi` pieces shared by `flowgraph train` and `flowgraph run`
 * (dist_cli.c), and run's data-parallel mode (dist_run.c). */
#ifndef FG_CLI_DIST_H
#define FG_CLI_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "cli.h"
#include "dist/comm/comm_mpi.h"
#include "dist/comm/comm_nccl.h"
#include "flowgraph/dist.h"
#include "flowgraph/status.h"
#include "run.h"

/* --dist mpi and --dist-timeout SECONDS (1 to 86400) at argv[*i]: 1 when
 * it is one of them (*rc: CLI_OK, or a usage error's exit code, already
 * printed), else 0. */
int cli_dist_opt(const cli_command *cmd, int argc, char **argv, int *i, int *dist_mpi,
                 int64_t *timeout_s, int *rc);

/* Joins the MPI group (refused, naming `command`, outside mpirun) with a
 * collective timeout of `timeout_s` (0: 60 s), then checks that every rank
 * loaded the same model file with the same options (`opts`, `opts_len`
 * bytes hashed after the file; BAD_INPUTS M2), so that ranks that would
 * run different graphs are refused before they exchange anything. 0 with
 * *comm set, or -1 (*comm is then NULL, or set when the check failed: the
 * caller frees it). */
int cli_dist_join(const char *command, const char *model, const void *opts, size_t opts_len,
                  int64_t timeout_s, fg_comm **comm, fg_status *st);

/* "<prefix>gradients all-reduced over <path>" (fg_comm_mpi_reduce_path),
 * and "; N all_reduces read the ranks' buffers in place" when some did
 * (sessions' arenas, dist/shm_arena.h; small buffers go through the
 * segment). */
void cli_print_reduce_path(const char *prefix, const fg_comm *c);

/* ---- GPUs under --dist mpi (dist_cli.c) ---------------------------------- */

/* The gradients' communicator for --dist-comm: auto, mpi or nccl. */
enum { CLI_DIST_COMM_AUTO, CLI_DIST_COMM_MPI, CLI_DIST_COMM_NCCL };

/* --device cuda:local under --dist mpi: every rank takes cuda:L mod G, L
 * its position among the ranks on its host (by host name, in rank order),
 * G the GPUs it sees. cli_dist_is_local_gpu tells the name;
 * cli_dist_use_local_gpu, a collective over `world`, makes the resolved
 * name (a static buffer) the session device. 0, or -1 with `st` set on
 * every rank when any rank sees no GPU. */
int cli_dist_is_local_gpu(const char *device);
/* The data-parallel rewrite of `train --dist mpi` (and its profile) for
 * sessions on `device` (NULL: cpu:0): fused SGD updates on CPUs, where
 * they give the same bits with less memory traffic; GPU sessions refuse
 * those nodes (fg_data_parallel_options.fused_update). */
void cli_dist_dp_options(const char *device, fg_data_parallel_options *o);
int cli_dist_use_local_gpu(fg_comm *world, fg_status *st);

/* Chooses the communicator of the gradients' all_reduce for data
 * parallelism on `device` (every rank's own): NCCL (*nccl set, to be
 * freed by the caller; `world` bootstraps it) when `mode` allows, this
 * build has NCCL and every rank runs on a GPU of its own (no two ranks on
 * one host name the same cuda:N); otherwise NULL, and the all_reduce goes
 * through host memory over `world`. `mode` CLI_DIST_COMM_NCCL where NCCL
 * cannot run fails naming why. A collective over `world`, and every rank
 * decides alike. 0 or -1. */
int cli_dist_gpu_comm(fg_comm *world, const char *device, int mode, double timeout_s,
                      fg_comm **nccl, fg_status *st);

/* ---- run --dist mpi on a model that names no rank (dist_run.c) ---------- */

/* Data-parallel inference: each rank runs the whole graph on its shard of
 * the batch, rank 0 concatenates the fetches. */
typedef struct cli_dist_run {
  fg_feed *feeds;    /* n: this rank's feeds (shards of the split inputs,
                        the other feeds as run_feeds has them); NULL when
                        the run is not data-parallel */
  fg_tensor **views; /* n: the shards (borrowing run_feeds' buffers), else NULL */
  int n;
  int64_t rows;         /* the batch: rows of every split input */
  uint64_t shapes_hash; /* every feed's name, dtype and shape, for the ranks to compare */
} cli_dist_run;

/* Checks, on this rank alone and before anything runs, that the fetches
 * can be assembled from shards (first dimension '?', no other open
 * dimension), that some needed input has an open first dimension, that all
 * such inputs have the same rows and at least c->size of them; then makes
 * this rank's feeds (fg_shard_rows of the split inputs, the others whole).
 * 0, or -1 with `st` naming the fetch or inputs; `dr` is then for
 * cli_dist_run_free only. */
int cli_dist_run_prepare(const fg_graph *g, const run_args *a, const run_feeds *f,
                         const char *const *fetch, int n_fetch, const fg_comm *c, cli_dist_run *dr,
                         fg_status *st);
void cli_dist_run_free(cli_dist_run *dr); /* also on a zeroed or failed one */

/* Every rank, after its runs: rank 0 replaces each outs[i] by the ranks'
 * pieces concatenated along axis 0 in rank order (the others send theirs
 * and keep them), and every rank's *total_ms becomes the slowest rank's.
 * 0, or -1 with `st` set: the caller must then abort `c` so that no peer
 * waits out the timeout. */
int cli_dist_run_gather(fg_comm *c, const char *const *fetch, fg_tensor **outs, int n_fetch,
                        double *total_ms, fg_status *st);

#endif
