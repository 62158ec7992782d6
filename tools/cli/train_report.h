/* What `flowgraph train` reports and keeps while it trains: the progress
 * line, the epoch line's figures, --log (CSV) and --plot (SVG) in
 * train_report.c and train_plot.c; validation (--val), --save-best and
 * --checkpoint-every in train_val.c. cmd_train.c calls in through the
 * functions below and owns the loop. */
#ifndef FG_CLI_TRAIN_REPORT_H
#define FG_CLI_TRAIN_REPORT_H

#include <stdint.h>

#include "run.h"

struct train_args;

/* The options of this part, kept in train_args.rep. */
typedef struct train_report_args {
  cli_pair *val; /* --val NAME=FILE.npy[,NAME=FILE.npy...], repeatable */
  int n_val, cap_val;
  const char *save_best;      /* --save-best OUT */
  const char *log;            /* --log FILE.csv */
  const char *plot;           /* --plot FILE.svg */
  const char *checkpoint_dir; /* --checkpoint-dir DIR */
  int64_t checkpoint_every;   /* --checkpoint-every N epochs (0: off) */
  int64_t keep;               /* --keep K (0: the default, 3) */
} train_report_args;

/* parse_args' hook: 1 when argv[*i] is one of this part's options (*rc
 * then CLI_OK or the exit code of the usage error it printed), else 0. */
int train_report_opt(const cli_command *cmd, int argc, char **argv, int *i, struct train_args *a,
                     int *rc);
/* After all options: the rules between them. CLI_OK or CLI_USAGE (printed). */
int train_report_check(const cli_command *cmd, const struct train_args *a);
void train_report_free_args(train_report_args *r);

/* One run's report. Validation columns: the loss, then each --eval NAME,
 * or, without --eval, a scalar node named "accuracy" when the model has
 * one. */
typedef struct train_report {
  const struct train_args *a;
  const fg_graph *g;
  int tty;    /* a \r progress line on stderr */
  int writer; /* writes files (rank 0 under --dist mpi) */
  int64_t steps, epoch_rows, done_steps;
  double t_start, t_epoch, t_steps_end, last_draw;
  int drawn; /* characters of the progress line now on the terminal */
  /* Columns of the history: loss, evals, validation metrics. */
  int n_evals, n_val_fetch;
  const char **val_fetch; /* loss, then the validation metrics */
  run_feeds val;
  double *eval_now; /* the evals of the epoch in progress */
  /* One row per finished epoch: epoch, step, loss, evals..., validation...,
   * samples/s, learning rate, seconds since the start. */
  int n_cols;
  double *hist;
  int64_t n_rows, cap_rows;
  double last_log_write;
  int log_pending;
  /* --save-best, --checkpoint-every */
  double best_val;
  int64_t best_epoch;
  char **ckpt; /* the checkpoints this run wrote and keeps, oldest first */
  int64_t n_ckpt, n_ckpt_written;
  /* The optimizer's learning-rate input (train_report_lr), when found. */
  char lr_name[256];
} train_report;

/* Index of the columns after the evals and validation metrics. */
#define TR_COL_EPOCH 0
#define TR_COL_STEP  1
#define TR_COL_LOSS  2
#define TR_COL_EVAL  3

/* Sets up the report for a run over `n_rows` training rows: loads and checks --val, checks every
 * output path and the checkpoint folder (made when missing) before training starts. `dist`: under
 * --dist mpi (no progress line); `writer`: this process writes the files. NULL with st set on
 * failure. */
train_report *train_report_new(const fg_graph *g, const struct train_args *a, int64_t n_rows,
                               int dist, int writer, fg_status *st);
/* Writes any pending --log rows and frees; accepts NULL. */
void train_report_free(train_report *r);
/* After step s (from 0) of epoch e (from 1): rows_done rows of the epoch
 * done, `running` the mean loss over them. Redraws the progress line. */
void train_report_step(train_report *r, int64_t e, int64_t s, int64_t rows_done, double running);
/* The value of eval k this epoch (run_evals). */
void train_report_eval(train_report *r, int k, double v);
/* After epoch e, whose loss is `loss` and whose line so far (with the
 * evals) is `line`: validation, --save-best, checkpoints, the epoch line
 * on stdout, the history row and --log. 0, or -1 with st set. */
int train_report_epoch(train_report *r, fg_session *s, int64_t e, double loss, const char *line,
                       fg_status *st);
/* After the last epoch: the summary of best model and checkpoints, --log
 * and --plot. 0, or -1 with st set. */
int train_report_finish(train_report *r, fg_status *st);
/* Wipes the progress line (before a full line or an error). */
void train_report_clear(void);
/* The learning rate the step uses now: the rate input of the model's
 * first optimizer update, fetched from the session (a constant, or the
 * variable a schedule writes); NaN when the model has none found. */
double train_report_lr(train_report *r, fg_session *s);

/* train_val.c */
/* Loads --val and picks the validation metrics. 0 or -1. */
int train_val_prepare(train_report *r, fg_status *st);
/* Runs the validation fetches on the --val data into vals[0..n_val_fetch). */
int train_val_run(train_report *r, fg_session *s, double *vals, fg_status *st);
/* Checks that --checkpoint-dir can take files (making it when missing). */
int train_val_check_dir(const char *dir, fg_status *st);
/* --save-best after epoch e with validation loss v: writes when it is the
 * best so far; *improved says so. */
int train_val_save_best(train_report *r, fg_session *s, int64_t e, double v, int *improved,
                        fg_status *st);
/* --checkpoint-every: writes epoch e's checkpoint when due, dropping the
 * oldest beyond --keep. */
int train_val_checkpoint(train_report *r, fg_session *s, int64_t e, fg_status *st);
void train_val_free(train_report *r);

/* train_plot.c: --plot, the curves of r's history. */
int train_plot_write(const train_report *r, const char *path, fg_status *st);
/* The name of history column c (after the fixed ones): "loss", an eval's
 * name, "val_NAME"; for labels and the CSV header. */
void train_report_col_name(const train_report *r, int c, char *buf, size_t size);

#endif
