/* Shared by cmd_plan.c and cmd_profile.c: their
 * command tables, their common arguments and opening a model for planning
 * or profiling (load, fetches, feeds, session). Lives in cmd_plan.c. */
#ifndef FG_CLI_PLAN_H
#define FG_CLI_PLAN_H

#include <stdint.h>

#include "cli.h"
#include "flowgraph/profile.h"
#include "run.h"

/* --batch N of inspect, plan and profile: 1 to CLI_MAX_BATCH. */
#define CLI_MAX_BATCH 1000000

extern const cli_command cli_plan_command;
extern const cli_command cli_profile_command;

typedef struct plan_args {
  /* model, -i, --fetch, --target, --random-inputs, --seed, --batch and
   * (profile) --threads, in the form run_feeds.c takes them. */
  run_args run;
  const char *memory_svg;
  const char *trace;    /* profile only */
  int64_t runs, warmup; /* profile only */
  int64_t micro;        /* --micro-batches M (1: off), both commands */
  int64_t in_flight;    /* --in-flight K (0: fg_micro_batch's default) */
  int profile;          /* parsed for profile (else plan) */
  int batch_set;        /* --batch given: a placeholder must have a '?' */
  int train;            /* profile --train: the model's training step */
  int format;           /* profile --format: PROF_FORMAT_* (profile_report.h) */
} plan_args;

/* Parses the arguments of `cmd`; `profile` enables --runs, --warmup,
 * --threads and --trace. Returns CLI_OK or the exit code of a usage error
 * (already printed); *help is set for -h/--help. */
int plan_parse_args(const cli_command *cmd, int profile, int argc, char **argv, plan_args *a,
                    int *help);
void plan_args_free(plan_args *a);

typedef struct plan_model {
  fg_graph *graph;
  fg_session *session;
  run_feeds feeds;
  char **fetch; /* malloc'ed names */
  int n_fetch;
  const char **targets; /* point into argv or the graph's metadata */
  int n_targets;
  double session_ms; /* time fg_session_new took */
  /* --micro-batches: graph is fg_micro_batch's rewrite of `loaded` (the
   * model as loaded, which the fetch and target names may point into),
   * over the batch inputs micro_inputs lists. NULL without. */
  fg_graph *loaded;
  char micro_inputs[256];
} plan_model;

/* A fed input (m->feeds.feeds[i]) whose placeholder's first dimension is
 * '?': a batch input, which data parallelism shards and micro-batches cut. */
int plan_is_batch_input(const plan_model *m, int i);
/* "micro-batches: M per run (...)" under --micro-batches, else nothing. */
void plan_print_micro(const plan_args *a, const plan_model *m);

/* The session options of both commands: --threads, --check-numerics and
 * --max-memory. */
void plan_session_options(const plan_args *a, fg_session_options *opts);

/* Loads the model, resolves the fetches and targets (see the commands'
 * help for the defaults), checks that the output files can be written,
 * loads the feeds and creates the session. Returns 0, or -1 with `st` set;
 * *load_failed tells a load error apart (its message may lack the path). */
int plan_model_open(const plan_args *a, plan_model *m, fg_status *st, int *load_failed);
void plan_model_close(plan_model *m);
/* --batch N on a model none of whose placeholders has an unknown
 * dimension: INVALID_ARGUMENT naming the model (inspect, plan, profile). */
int cli_check_batch_dim(const fg_graph *g, const char *model, int64_t batch, fg_status *st);

/* Parses args, opens the model and runs `body`; maps errors to exit codes.
 * The common frame of both commands. */
int plan_command_main(const cli_command *cmd, int profile, int argc, char **argv,
                      int (*body)(const plan_args *a, plan_model *m, fg_status *st));

double plan_now_ms(void);

/* The session's partition (flowgraph/dist.h): devices with their step
 * counts and every send/recv transfer with its bytes for the plan's shapes.
 * n_ranks 0: infos[0] is the plan (NULL: the graph's static shapes); a
 * cross-process model: infos[r] is rank r's plan, which holds its devices'
 * steps. Prints nothing for a single-device plan. */
void plan_print_partition(const plan_model *m, const fg_plan_info *const *infos, int n_ranks);
/* A cross-process model's plans, infos[r] as rank r would make it (an
 * in-process communicator stands for the ranks; planning sends nothing).
 * Leaves the session without a communicator. 0, or -1 with infos NULL. */
int plan_rank_infos(const char *model, plan_model *m, int ranks, fg_plan_info **infos,
                    fg_status *st);

#endif
