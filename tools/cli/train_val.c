/* `flowgraph train --val`: the loss and metrics on held-out data after
 * every epoch, the best model so far (--save-best) and resumable
 * checkpoints (--checkpoint-every N --checkpoint-dir DIR --keep K). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train.h"

#define DEFAULT_KEEP 3

/* A numeric scalar node named "accuracy": the metric a model built like
 * examples/digits has, validated without being asked for. */
static int has_accuracy(const fg_graph *g) {
  fg_output o = fg_graph_find_output(g, "accuracy");
  if (o.node < 0 || fg_dtype_size(fg_output_dtype(g, o)) == 0) return 0;
  int64_t dims[FG_MAX_RANK];
  int rank = fg_output_shape(g, o, dims);
  for (int k = 0; k < rank; k++)
    if (dims[k] != 1) return 0;
  return rank >= 0;
}

/* Prefixes the status's message with "--val: " so that run_feeds'
 * messages ("feed 'z': ... has no node of that name") name the option. */
static void name_option(fg_status *st) {
  char msg[2048];
  snprintf(msg, sizeof msg, "%s", fg_status_message(st));
  fg_status_set(st, fg_status_code(st), "--val: %s", msg);
}

/* Every --val file is one column of the same rows: fed whole, they must
 * agree on the leading size, and have at least one row. */
static int check_val_rows(const train_args *a, const run_feeds *f, fg_status *st) {
  const cli_pair *p = a->rep.val;
  int64_t rows0 = -1;
  for (int i = 0; i < f->n && i < a->rep.n_val; i++) {
    const fg_tensor *t = f->tensors[i];
    int64_t rows = fg_tensor_rank(t) > 0 ? fg_tensor_dim(t, 0) : -1;
    if (rows <= 0) {
      char desc[300];
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "--val %s=%s holds %s: validation needs rows along axis 0", p[i].name,
                    p[i].path, cli_describe_tensor(t, desc, sizeof desc));
      return -1;
    }
    if (i > 0 && rows != rows0) {
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "--val columns disagree on the rows: %s=%s has %" PRId64 ", %s=%s has %" PRId64,
                    p[0].name, p[0].path, rows0, p[i].name, p[i].path, rows);
      return -1;
    }
    rows0 = rows;
  }
  return 0;
}

int train_val_prepare(train_report *r, fg_status *st) {
  const train_args *a = r->a;
  if (a->rep.n_val == 0) return 0;
  int auto_acc = a->n_evals == 0 && has_accuracy(r->g);
  int n = 1 + (a->n_evals > 0 ? a->n_evals : auto_acc);
  r->val_fetch = calloc((size_t)n, sizeof *r->val_fetch);
  if (!r->val_fetch) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  r->val_fetch[0] = a->loss;
  for (int k = 0; k < a->n_evals; k++)
    r->val_fetch[1 + k] = a->evals[k];
  if (auto_acc) r->val_fetch[1] = "accuracy";
  r->n_val_fetch = n;
  /* The same checks as --eval-input's (names, dtypes, shapes; every
   * placeholder the metrics need is fed), the data fed whole. */
  if (prepare_feeds(r->g, a, a->rep.val, a->rep.n_val, r->val_fetch, n, NULL, "--val", 0, &r->val,
                    st) != 0) {
    name_option(st);
    return -1;
  }
  return check_val_rows(a, &r->val, st);
}

int train_val_run(train_report *r, fg_session *s, double *vals, fg_status *st) {
  int n = r->n_val_fetch;
  fg_tensor **outs = calloc((size_t)n, sizeof *outs);
  if (!outs) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  int rc = fg_session_run(s, r->val.feeds, r->val.n, r->val_fetch, n, outs, NULL, 0, st);
  for (int k = 0; rc == 0 && k < n; k++)
    rc = scalar_value(outs[k], k ? "eval" : "loss", r->val_fetch[k], &vals[k], st);
  for (int k = 0; k < n; k++)
    fg_tensor_free(outs[k]);
  free(outs);
  if (rc != 0) name_option(st);
  return rc;
}

int train_val_check_dir(const char *dir, fg_status *st) {
  struct stat sb;
  if (stat(dir, &sb) != 0) {
    /* Made when missing, as Keras' ModelCheckpoint does; one level only:
     * a mistyped parent should be an error, not a new tree. */
    if (mkdir(dir, 0777) != 0) {
      fg_status_set(st, FG_IO_ERROR, "--checkpoint-dir %s: cannot create it: %s", dir,
                    strerror(errno));
      return -1;
    }
    return 0;
  }
  if (!S_ISDIR(sb.st_mode)) {
    fg_status_set(st, FG_IO_ERROR, "--checkpoint-dir %s: not a directory", dir);
    return -1;
  }
  if (access(dir, W_OK | X_OK) != 0) {
    fg_status_set(st, FG_IO_ERROR, "--checkpoint-dir %s: cannot write in it: %s", dir,
                  strerror(errno));
    return -1;
  }
  return 0;
}

int train_val_save_best(train_report *r, fg_session *s, int64_t e, double v, int *improved,
                        fg_status *st) {
  *improved = 0;
  /* Strictly lower: ties keep the earlier epoch; NaN never improves. */
  if (!(v < r->best_val)) return 0;
  if (save_trained(s, r->a->rep.save_best, st) != 0) {
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", fg_status_message(st));
    fg_status_set(st, fg_status_code(st), "--save-best after epoch %" PRId64 ": %s", e, msg);
    return -1;
  }
  r->best_val = v;
  r->best_epoch = e;
  *improved = 1;
  return 0;
}

int train_val_checkpoint(train_report *r, fg_session *s, int64_t e, fg_status *st) {
  const train_report_args *ra = &r->a->rep;
  if (!ra->checkpoint_every || e % ra->checkpoint_every != 0) return 0;
  int64_t keep = ra->keep ? ra->keep : DEFAULT_KEEP;
  size_t len = strlen(ra->checkpoint_dir) + 64;
  char *path = malloc(len);
  if (!path || (r->n_ckpt == 0 && !(r->ckpt = calloc((size_t)keep + 1, sizeof *r->ckpt)))) {
    free(path);
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  /* Zero-padded, so that the names sort by epoch. fg_session_save writes
   * the file under a temporary name beside it and renames it: a
   * checkpoint is whole or absent. */
  snprintf(path, len, "%s/checkpoint-epoch-%06" PRId64 ".fgb", ra->checkpoint_dir, e);
  if (fg_session_save(s, path, st) != 0) {
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", fg_status_message(st));
    fg_status_set(st, fg_status_code(st), "--checkpoint-every after epoch %" PRId64 ": %s", e, msg);
    free(path);
    return -1;
  }
  r->ckpt[r->n_ckpt++] = path;
  r->n_ckpt_written++;
  /* Only the files this run wrote are removed, never others in DIR. */
  if (r->n_ckpt > keep) {
    if (unlink(r->ckpt[0]) != 0 && errno != ENOENT) {
      fg_status_set(st, FG_IO_ERROR, "--keep %" PRId64 ": cannot remove %s: %s", keep, r->ckpt[0],
                    strerror(errno));
      return -1;
    }
    free(r->ckpt[0]);
    memmove(r->ckpt, r->ckpt + 1, (size_t)keep * sizeof *r->ckpt);
    r->n_ckpt--;
  }
  return 0;
}

void train_val_free(train_report *r) {
  for (int64_t i = 0; i < r->n_ckpt; i++)
    free(r->ckpt[i]);
  free(r->ckpt);
  free(r->val_fetch);
  run_feeds_free(&r->val);
}
