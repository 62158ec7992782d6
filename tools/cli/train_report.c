/* `flowgraph train`'s reporting: the progress line on a terminal, the
 * figures of the epoch line, the history of the run and --log (CSV), and
 * the options of validation, checkpoints and curves (train_val.c,
 * train_plot.c do the work). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train.h"
#include "trace.h"

#define MAX_KEEP 1000000
/* --log is rewritten whole (temporary file, rename) at most this often,
 * and after the last epoch: the file is never partial, yet follows a long
 * run. */
#define LOG_INTERVAL_S 1.0
/* The progress line is redrawn at most this often. */
#define DRAW_INTERVAL_S 0.1

/* ---- options -------------------------------------------------------------------- */

/* --val NAME=FILE[,NAME=FILE...]: the pairs are cut at the commas (in
 * argv itself, which the pairs then point into). */
static int val_opt(const cli_command *cmd, int r, char *v, train_report_args *ra) {
  if (r < 0) return cli_usage(cmd, "--val needs NAME=FILE.npy[,NAME=FILE.npy...]");
  for (char *p = v; p;) {
    char *comma = strchr(p, ',');
    if (comma) *comma = '\0';
    if (ra->n_val == ra->cap_val) {
      int cap = ra->cap_val * 2 + 4;
      cli_pair *np = realloc(ra->val, (size_t)cap * sizeof *np);
      if (!np) return cli_fail(FG_RESOURCE_EXHAUSTED, "out of memory");
      ra->val = np;
      ra->cap_val = cap;
    }
    int rc = cli_pair_opt(cmd, "--val", 1, p, "--val column", "NAME=FILE.npy", &ra->val[ra->n_val]);
    if (rc != CLI_OK) return rc;
    ra->n_val++;
    p = comma ? comma + 1 : NULL;
  }
  return CLI_OK;
}

int train_report_opt(const cli_command *cmd, int argc, char **argv, int *i, train_args *a,
                     int *rc) {
  train_report_args *ra = &a->rep;
  const char *v = NULL;
  int r;
  if ((r = cli_opt_value(argc, argv, i, NULL, "--val", &v)) != 0)
    *rc = val_opt(cmd, r, (char *)v, ra); /* v points into argv[*i] */
  else if ((r = cli_opt_value(argc, argv, i, NULL, "--save-best", &v)) != 0)
    *rc = cli_value_opt(cmd, "--save-best", "a path OUT.fgb", r, v, "--save-best", &ra->save_best);
  else if ((r = cli_opt_value(argc, argv, i, NULL, "--log", &v)) != 0)
    *rc = cli_value_opt(cmd, "--log", "a path FILE.csv", r, v, "--log", &ra->log);
  else if ((r = cli_opt_value(argc, argv, i, NULL, "--plot", &v)) != 0)
    *rc = cli_value_opt(cmd, "--plot", "a path FILE.svg", r, v, "--plot", &ra->plot);
  else if ((r = cli_opt_value(argc, argv, i, NULL, "--checkpoint-dir", &v)) != 0)
    *rc = cli_value_opt(cmd, "--checkpoint-dir", "a folder", r, v, "--checkpoint-dir",
                        &ra->checkpoint_dir);
  else if ((r = cli_opt_value(argc, argv, i, NULL, "--checkpoint-every", &v)) != 0)
    *rc = cli_int_opt(cmd, "--checkpoint-every", r, v, 1, INT64_MAX, &ra->checkpoint_every);
  else if ((r = cli_opt_value(argc, argv, i, NULL, "--keep", &v)) != 0)
    *rc = cli_int_opt(cmd, "--keep", r, v, 1, MAX_KEEP, &ra->keep);
  else
    return 0;
  return 1;
}

int train_report_check(const cli_command *cmd, const train_args *a) {
  const train_report_args *ra = &a->rep;
  if (ra->save_best && ra->n_val == 0)
    return cli_usage(cmd, "--save-best needs --val NAME=FILE.npy,... (the loss it compares)");
  if (ra->checkpoint_every && !ra->checkpoint_dir)
    return cli_usage(cmd, "--checkpoint-every needs --checkpoint-dir DIR (where they go)");
  if (!ra->checkpoint_every && (ra->checkpoint_dir || ra->keep))
    return cli_usage(cmd, "--checkpoint-dir and --keep need --checkpoint-every N (epochs)");
  if (ra->save_best && cli_check_model_path(cmd, ra->save_best) != CLI_OK) return CLI_USAGE;
  return CLI_OK;
}

void train_report_free_args(train_report_args *ra) {
  cli_free_pairs(ra->val, ra->n_val);
  ra->val = NULL;
  ra->n_val = 0;
}

/* ---- the run's report ----------------------------------------------------------- */

/* Whether a progress line is on the terminal, for train_report_clear
 * (the error path has no report at hand). */
static int progress_chars;

void train_report_clear(void) {
  if (!progress_chars) return;
  fprintf(stderr, "\r%*s\r", progress_chars, "");
  fflush(stderr);
  progress_chars = 0;
}

/* The name a model's first optimizer update reads its rate from. */
static void find_lr(train_report *r) {
  static const struct {
    const char *op;
    int input;
  } rate_input[] = {{"apply_sgd", 2},
                    {"apply_momentum", 3},
                    {"apply_adam", 4},
                    {"all_reduce_apply_sgd", 2},
                    {"sufficient_factor_apply_sgd", 2},
                    {"matmul_apply_sgd", 2}};
  int n = fg_graph_num_nodes(r->g);
  for (int id = 0; id < n; id++) {
    const char *op = fg_node_op(r->g, id);
    for (size_t k = 0; op && k < sizeof rate_input / sizeof rate_input[0]; k++) {
      if (strcmp(op, rate_input[k].op) != 0 || fg_node_num_inputs(r->g, id) <= rate_input[k].input)
        continue;
      cli_output_name(r->g, fg_node_input(r->g, id, rate_input[k].input), r->lr_name,
                      sizeof r->lr_name);
      return;
    }
  }
}

double train_report_lr(train_report *r, fg_session *s) {
  if (!r->lr_name[0]) return NAN;
  const char *fetch = r->lr_name;
  fg_tensor *t = NULL;
  fg_status *st = fg_status_new();
  double v = NAN;
  if (st && fg_session_run(s, NULL, 0, &fetch, 1, &t, NULL, 0, st) == 0 &&
      scalar_value(t, "learning rate", r->lr_name, &v, st) != 0)
    v = NAN;
  fg_tensor_free(t);
  fg_status_free(st);
  return v;
}

static int check_out(const char *path, const char *what, fg_status *st) {
  return path ? cli_check_writable(path, what, st) : 0;
}

train_report *train_report_new(const fg_graph *g, const train_args *a, int64_t n_rows, int dist,
                               int writer, fg_status *st) {
  train_report *r = calloc(1, sizeof *r);
  if (!r) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
    return NULL;
  }
  r->a = a;
  r->g = g;
  r->writer = writer;
  /* mpirun forwards output through a pty: no \r progress lines there. */
  r->tty = !a->quiet && !dist && isatty(STDERR_FILENO);
  /* As train_epochs counts them: only whole batches under drop_last. */
  r->steps = a->drop_last ? n_rows / a->batch : (n_rows + a->batch - 1) / a->batch;
  r->epoch_rows = r->steps * a->batch < n_rows ? r->steps * a->batch : n_rows;
  r->best_val = INFINITY;
  /* An epoch starts where the last one's report ended. */
  r->t_start = r->t_epoch = cli_now_s();
  r->n_evals = a->n_evals;
  find_lr(r);
  const train_report_args *ra = &a->rep;
  /* Under model parallelism each rank holds its own variables until the
   * final gather (a collective): rank 0 alone cannot save them midway. */
  if (a->model_parallel && (ra->save_best || ra->checkpoint_every)) {
    fg_status_set(st, FG_UNIMPLEMENTED,
                  "--save-best and --checkpoint-every: the model places nodes on several ranks "
                  "(model parallelism), whose variables only the end of training gathers; use "
                  "--save");
    goto fail;
  }
  if (train_val_prepare(r, st) != 0) goto fail;
  r->n_cols = TR_COL_EVAL + r->n_evals + r->n_val_fetch + 3;
  r->eval_now = calloc((size_t)r->n_evals + 1, sizeof *r->eval_now);
  if (!r->eval_now) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
    goto fail;
  }
  if (writer) {
    if (check_out(ra->log, "--log", st) != 0 || check_out(ra->plot, "--plot", st) != 0 ||
        check_out(ra->save_best, "--save-best", st) != 0)
      goto fail;
    if (ra->checkpoint_every && train_val_check_dir(ra->checkpoint_dir, st) != 0) goto fail;
  }
  return r;
fail:
  train_report_free(r);
  return NULL;
}

/* "12.3 s", "4m05s", "2h07m". */
static void duration_str(double s, char *buf, size_t size) {
  if (!(s >= 0) || s > 1e9) {
    snprintf(buf, size, "?");
  } else if (s < 60) {
    snprintf(buf, size, "%.1f s", s);
  } else if (s < 3600) {
    int m = (int)(s / 60);
    snprintf(buf, size, "%dm%02ds", m, (int)(s - 60.0 * m));
  } else {
    int h = (int)(s / 3600);
    snprintf(buf, size, "%dh%02dm", h, (int)((s - 3600.0 * h) / 60));
  }
}

void train_report_step(train_report *r, int64_t e, int64_t s, int64_t rows_done, double running) {
  const train_args *a = r->a;
  double now = cli_now_s();
  r->done_steps++;
  if (s + 1 == r->steps) r->t_steps_end = now;
  /* The \r progress line is for people watching a terminal only; logs
   * and pipes get the epoch lines alone. */
  if (!r->tty || (now - r->last_draw < DRAW_INTERVAL_S && s + 1 < r->steps)) return;
  /* Throughput of this epoch's steps so far; the ETA from the whole run's
   * time per step (evals and validation included). */
  double epoch_s = now - r->t_epoch, per_step = (now - r->t_start) / (double)r->done_steps;
  double left = per_step * (double)(a->epochs * r->steps - r->done_steps);
  char eta[32], line[256];
  duration_str(left, eta, sizeof eta);
  int n = snprintf(line, sizeof line,
                   "epoch %" PRId64 "/%" PRId64 "  step %" PRId64 "/%" PRId64
                   "  loss %.6g  %.0f samples/s  ETA %s",
                   e, a->epochs, s + 1, r->steps, running,
                   epoch_s > 0 ? (double)rows_done / epoch_s : 0.0, eta);
  if (n < 0) return;
  if (n >= (int)sizeof line) n = (int)sizeof line - 1;
  /* Spaces over what is left of a longer previous line. */
  int pad = progress_chars > n ? progress_chars - n : 0;
  fprintf(stderr, "\r%s%*s", line, pad, "");
  fflush(stderr);
  progress_chars = n + pad;
  r->last_draw = now;
}

void train_report_eval(train_report *r, int k, double v) {
  if (k >= 0 && k < r->n_evals) r->eval_now[k] = v;
}

static int add_row(train_report *r, fg_status *st) {
  if (r->n_rows == r->cap_rows) {
    int64_t cap = r->cap_rows * 2 + 16;
    double *nh = realloc(r->hist, (size_t)cap * (size_t)r->n_cols * sizeof *nh);
    if (!nh) {
      fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
      return -1;
    }
    r->hist = nh;
    r->cap_rows = cap;
  }
  r->n_rows++;
  return 0;
}

/* A CSV field: quoted when it holds a comma, quote or line break. */
static void csv_field(FILE *f, const char *s) {
  if (!strpbrk(s, ",\"\r\n")) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

void train_report_col_name(const train_report *r, int c, char *buf, size_t size) {
  int last = r->n_cols - 3;
  static const char *const fixed[3] = {"epoch", "step", "loss"};
  static const char *const tail[3] = {"samples_per_s", "lr", "seconds"};
  if (c < TR_COL_EVAL)
    snprintf(buf, size, "%s", fixed[c]);
  else if (c < TR_COL_EVAL + r->n_evals)
    snprintf(buf, size, "%s", r->a->evals[c - TR_COL_EVAL]);
  else if (c < last)
    snprintf(buf, size, "val_%s", r->val_fetch[c - TR_COL_EVAL - r->n_evals]);
  else
    snprintf(buf, size, "%s", tail[c - last]);
}

/* The whole history as CSV: a header, then one row per epoch; an unknown
 * value (no learning rate found) is an empty field. */
static int write_log(train_report *r, fg_status *st) {
  out_file o;
  if (out_open(&o, r->a->rep.log, st) != 0) return -1;
  char name[512];
  for (int c = 0; c < r->n_cols; c++) {
    train_report_col_name(r, c, name, sizeof name);
    if (c) fputc(',', o.f);
    csv_field(o.f, name);
  }
  fputc('\n', o.f);
  for (int64_t i = 0; i < r->n_rows; i++) {
    const double *row = r->hist + i * r->n_cols;
    fprintf(o.f, "%" PRId64 ",%" PRId64, (int64_t)row[TR_COL_EPOCH], (int64_t)row[TR_COL_STEP]);
    for (int c = TR_COL_LOSS; c < r->n_cols; c++) {
      if (c == r->n_cols - 2 && isnan(row[c]))
        fputc(',', o.f); /* no learning rate found */
      else
        fprintf(o.f, ",%.9g", row[c]);
    }
    fputc('\n', o.f);
  }
  r->log_pending = 0;
  r->last_log_write = cli_now_s();
  return out_commit(&o, st);
}

/* Appends " (best)" to the validation loss and the figures in brackets. */
static void print_epoch_line(const train_report *r, const char *line, const double *row,
                             int improved) {
  const train_args *a = r->a;
  char eta[32], buf[8192];
  int64_t e = (int64_t)row[TR_COL_EPOCH];
  double elapsed = cli_now_s() - r->t_start;
  duration_str(elapsed / (double)e * (double)(a->epochs - e), eta, sizeof eta);
  size_t n = (size_t)snprintf(buf, sizeof buf, "%s", line);
  for (int k = 0; k < r->n_val_fetch && n < sizeof buf; k++)
    n += (size_t)snprintf(buf + n, sizeof buf - n, "  val_%s %.6g%s", r->val_fetch[k],
                          row[TR_COL_EVAL + r->n_evals + k], k == 0 && improved ? " (best)" : "");
  if (n >= sizeof buf) n = sizeof buf - 1;
  snprintf(buf + n, sizeof buf - n, "  (%.2f s, step %" PRId64 ", %.0f samples/s%s%s)",
           cli_now_s() - r->t_epoch, (int64_t)row[TR_COL_STEP], row[r->n_cols - 3],
           e < a->epochs ? ", ETA " : "", e < a->epochs ? eta : "");
  printf("%s\n", buf);
}

int train_report_epoch(train_report *r, fg_session *s, int64_t e, double loss, const char *line,
                       fg_status *st) {
  const train_args *a = r->a;
  if (add_row(r, st) != 0) return -1;
  double *row = r->hist + (r->n_rows - 1) * r->n_cols;
  row[TR_COL_EPOCH] = (double)e;
  row[TR_COL_STEP] = (double)r->done_steps;
  row[TR_COL_LOSS] = loss;
  for (int k = 0; k < r->n_evals; k++)
    row[TR_COL_EVAL + k] = r->eval_now[k];
  double *val = row + TR_COL_EVAL + r->n_evals;
  if (r->n_val_fetch > 0 && train_val_run(r, s, val, st) != 0) return -1;
  double steps_s = r->t_steps_end - r->t_epoch;
  row[r->n_cols - 3] = steps_s > 0 ? (double)r->epoch_rows / steps_s : NAN;
  row[r->n_cols - 2] = train_report_lr(r, s);
  row[r->n_cols - 1] = cli_now_s() - r->t_start;
  int improved = 0;
  if (r->writer && a->rep.save_best && train_val_save_best(r, s, e, val[0], &improved, st) != 0)
    return -1;
  if (r->writer && train_val_checkpoint(r, s, e, st) != 0) return -1;
  train_report_clear();
  if (!a->quiet) print_epoch_line(r, line, row, improved);
  fflush(stdout);
  r->log_pending = 1;
  int rc = 0;
  if (r->writer && a->rep.log &&
      (e == a->epochs || cli_now_s() - r->last_log_write >= LOG_INTERVAL_S))
    rc = write_log(r, st);
  r->t_epoch = cli_now_s();
  return rc;
}

int train_report_finish(train_report *r, fg_status *st) {
  const train_args *a = r->a;
  if (!r->writer) return 0;
  if (a->rep.log && r->log_pending && write_log(r, st) != 0) return -1;
  if (a->rep.plot && train_plot_write(r, a->rep.plot, st) != 0) return -1;
  if (a->quiet) return 0;
  if (a->rep.save_best && r->best_epoch > 0)
    printf("best val_%s %.6g at epoch %" PRId64 ": wrote %s\n", r->val_fetch[0], r->best_val,
           r->best_epoch, a->rep.save_best);
  if (r->n_ckpt > 0)
    printf("checkpoints: kept the last %" PRId64 " of %" PRId64 " in %s (newest %s)\n", r->n_ckpt,
           r->n_ckpt_written, a->rep.checkpoint_dir, r->ckpt[r->n_ckpt - 1]);
  if (a->rep.log) printf("wrote %s\n", a->rep.log);
  if (a->rep.plot) printf("wrote %s\n", a->rep.plot);
  return 0;
}

void train_report_free(train_report *r) {
  if (!r) return;
  /* A run that failed keeps the epochs it finished in its log. */
  if (r->writer && r->a->rep.log && r->log_pending) {
    fg_status *st = fg_status_new();
    if (st) write_log(r, st);
    fg_status_free(st);
  }
  train_val_free(r);
  free(r->eval_now);
  free(r->hist);
  free(r);
}
