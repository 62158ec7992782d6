/* Shared between cmd_run.c (arguments, running, outputs) and run_feeds.c
 * (checking and building the feeds). */
#ifndef FG_CLI_RUN_H
#define FG_CLI_RUN_H

#include <stdint.h>

#include "cli.h"

typedef struct run_args {
  const char *model;
  cli_pair *inputs;
  int n_inputs;
  cli_pair *outputs;
  int n_outputs;
  const char **fetch;
  int n_fetch;
  const char **targets;
  int n_targets;
  int random_inputs;
  uint64_t seed;
  int64_t batch;
  int64_t repeat;
  int threads, threads_set;
  int dist_mpi;         /* --dist mpi: a cross-process model, one rank each */
  int64_t dist_timeout; /* --dist-timeout seconds (0: 60) */
  /* train: axis 0 of every -i holds the rows that are cut into batches, so
   * only the other axes are checked here; the caller checks each batch. */
  int batched;
} run_args;

typedef struct run_feeds {
  fg_feed *feeds;      /* n entries; names point into the graph */
  fg_tensor **tensors; /* owned, n entries */
  int n;
  int *node_of_input;    /* placeholder node of each -i */
  unsigned char *needed; /* per node: needed by the fetches/targets */
  int n_nodes;
} run_feeds;

/* Checks the -i names (exist, placeholders, not repeated), works out which
 * placeholders the fetches and targets need and, without --random-inputs,
 * that all of them are fed. */
int run_feeds_prepare(const fg_graph *g, const run_args *a, const char *const *fetch, int n_fetch,
                      run_feeds *f, fg_status *st);
/* The first placeholder at or after node `from` that the fetches and
 * targets need and no -i feeds, or -1. */
int run_feeds_next_unfed(const fg_graph *g, const run_feeds *f, int n_inputs, int from);
/* Reads the -i files, checks them against their placeholders and makes the
 * random feeds. */
int run_feeds_load(const fg_graph *g, const run_args *a, run_feeds *f, fg_status *st);
void run_feeds_free(run_feeds *f);

#endif
