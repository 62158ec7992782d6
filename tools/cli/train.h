/* Shared between cmd_train.c (options, the training loop, --dist mpi) and
 * train_data.c (the training feeds: rows, batches, the shuffle). */
#ifndef FG_CLI_TRAIN_H
#define FG_CLI_TRAIN_H

#include <stdint.h>

#include "flowgraph/autodiff.h"
#include "run.h"
#include "train_report.h"

/* --lr-schedule and its options, and --seed (train_sched.c). */
typedef struct train_sched {
  fg_lr_schedule schedule; /* what was given; zero: fg_minimize's default */
  int kind_set, warmup_set, factor_set, gamma_set, eta_min_set;
  int seed_set;
  int64_t seed;
} train_sched;

typedef struct train_args {
  const char *model, *target, *loss, *save;
  cli_pair *inputs, *eval_inputs;
  int n_inputs, n_eval_inputs;
  const char **evals;
  int n_evals;
  int64_t batch, epochs;
  int shuffle;
  uint64_t seed;
  int threads, threads_set, quiet;
  /* --dist mpi: one replica per MPI rank; each takes its shard of every
   * batch, gradients are averaged by all_reduce, rank 0 alone prints and
   * saves. */
  int dist_mpi;
  int64_t dist_timeout, dist_bucket;
  int dist_loss_sum; /* --dist-loss sum: the loss sums over rows */
  int dist_comm;     /* --dist-comm: CLI_DIST_COMM_AUTO, _MPI or _NCCL */
  int dist_sync_bn;  /* --dist-sync-bn: fg_data_parallel's sync_batch_norm */
  /* --optimizer sgd|momentum|adam|adamw (0: none) and --lr: build the
   * training step with fg_minimize on a model that has none. */
  int optimizer;
  double lr;         /* 0: the optimizer's default */
  train_sched sched; /* --lr-schedule ..., --seed */
  /* --dist mpi on a cross-process graph (devices "rank:R/..."): model
   * parallelism; every rank feeds whole batches and runs its own nodes. */
  int model_parallel;
  /* --dist mpi: how many replicas share each batch and which one this
   * process belongs to (its shard): the ranks for data parallelism, 1 for
   * model parallelism, processes / stages for both (hybrid). */
  int replicas, replica;
  /* --micro-batches M: fg_micro_batch before anything else (1: off). */
  int64_t micro;
  int64_t in_flight; /* --in-flight K (0: fg_micro_batch's default) */
  /* A placeholder fed by -i with a fixed leading dimension (train_check_fixed_batch):
   * its name and row count, and whether the last, partial batch of every
   * epoch is dropped. */
  const char *fixed_name;
  int64_t fixed_rows;
  int drop_last;
  train_report_args rep; /* --val, --save-best, checkpoints, --log, --plot */
} train_args;

/* One training feed: the whole .npy and a buffer for gathered rows. */
typedef struct batch_feed {
  const fg_tensor *all;
  size_t row_bytes;
  unsigned char *rows; /* --shuffle only: batch rows gathered in order */
} batch_feed;

/* train_sched.c. train_sched_opt: 1 when argv[*i] is one of its options
 * (*rc then CLI_OK or a usage error's exit code), else 0; train_sched_check
 * checks them together after parsing (CLI_OK or a usage error);
 * train_sched_apply sets the config's schedule; train_sched_reseed applies
 * --seed to the model (0 or -1). */
int train_sched_opt(const cli_command *cmd, int argc, char **argv, int *i, train_sched *t, int *rc);
int train_sched_check(const cli_command *cmd, const train_sched *t, int optimizer);
void train_sched_apply(const train_sched *t, fg_optimizer_config *cfg);
int train_sched_reseed(const train_sched *t, const char *model, int quiet, fg_graph *g,
                       fg_status *st);

/* Documented in the help: one splitmix64 stream per run, seeded with SEED;
 * each epoch shuffles the identity permutation 0..n-1 with Fisher-Yates,
 * for i = n-1 down to 1 swapping i with j = next() mod (i+1). */
void train_shuffle(int64_t *perm, int64_t n, uint64_t *rng);
/* The rows every training feed has (all the same, at least one), or -1. */
int64_t train_check_rows(const train_args *a, const run_feeds *f, fg_status *st);
/* Checks the batches against placeholders with a fixed leading dimension
 * and sets a->fixed_name, fixed_rows and drop_last; `dp`: every batch is
 * sharded over a->replicas. 0 or -1. */
int train_check_fixed_batch(const fg_graph *g, train_args *a, const run_feeds *f, int dp,
                            int64_t n_rows, fg_status *st);
/* Fills feeds[] with the rows perm[start .. start+b) (or start.. when perm
 * is NULL) of every training feed, through views[] (freed and replaced). */
int train_make_batch(const run_feeds *f, batch_feed *bf, const int64_t *perm, int64_t start,
                     int64_t b, fg_feed *feeds, fg_tensor **views, fg_status *st);

/* cmd_train.c, shared with train_val.c and train_report.c: */
/* Checks the feeds `inputs` for running `fetch` and `target` (every
 * placeholder they need fed; `option` names the flag in that message) and
 * loads the files unless `prepare_only`. 0 or -1. */
int prepare_feeds(const fg_graph *g, const train_args *a, cli_pair *inputs, int n_inputs,
                  const char *const *fetch, int n_fetch, const char *target, const char *option,
                  int prepare_only, run_feeds *f, fg_status *st);
/* A fetched scalar as a double; -1 (st names `what` and `name`) when not. */
int scalar_value(const fg_tensor *t, const char *what, const char *name, double *v, fg_status *st);
/* The session's model with its trained variables, to `path` (.json too). */
int save_trained(fg_session *s, const char *path, fg_status *st);

#endif
