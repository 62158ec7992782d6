/* The training feeds of `flowgraph train`: every -i is cut into batches
 * along axis 0 (its rows), in file order or shuffled, and each batch, not
 * the whole file, is what a placeholder's leading dimension must match. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flowgraph/dist.h"
#include "train.h"

/* The order `flowgraph train --help` documents (see train.h). */
void train_shuffle(int64_t *perm, int64_t n, uint64_t *rng) {
  for (int64_t i = 0; i < n; i++)
    perm[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)(cli_splitmix64(rng) % (uint64_t)(i + 1));
    int64_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

/* Every training feed is sliced along axis 0: all need the same number of
 * rows, at least one. */
int64_t train_check_rows(const train_args *a, const run_feeds *f, fg_status *st) {
  int64_t n = -1;
  for (int i = 0; i < f->n; i++) {
    const fg_tensor *t = f->tensors[i];
    char shape[256];
    cli_shape_str(fg_tensor_rank(t), fg_tensor_dims(t), shape, sizeof shape);
    if (fg_tensor_rank(t) < 1) {
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "feed '%s' (%s) is a scalar: train slices every -i into batches along axis 0",
                    a->inputs[i].name, a->inputs[i].path);
      return -1;
    }
    int64_t rows = fg_tensor_dim(t, 0);
    if (rows == 0) {
      fg_status_set(st, FG_INVALID_ARGUMENT, "feed '%s' (%s) has shape %s: no rows to train on",
                    a->inputs[i].name, a->inputs[i].path, shape);
      return -1;
    }
    if (n >= 0 && rows != n) {
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "feeds have different leading sizes: '%s' (%s) has %" PRId64
                    " rows, '%s' (%s) has %" PRId64,
                    a->inputs[0].name, a->inputs[0].path, n, a->inputs[i].name, a->inputs[i].path,
                    rows);
      return -1;
    }
    n = rows;
  }
  return n;
}

/* A placeholder fed by -i whose leading dimension is fixed takes batches of
 * exactly that many rows, so each batch is checked rather than the file:
 * --batch (under --dist mpi, this replica's share of it) must give that
 * many rows, evals on the training set (fed whole) need that many rows in
 * all, and the last, partial batch of every epoch is dropped, as PyTorch's
 * DataLoader does with drop_last=True. `dp`: batches are sharded. */
int train_check_fixed_batch(const fg_graph *g, train_args *a, const run_feeds *f, int dp,
                            int64_t n_rows, fg_status *st) {
  for (int i = 0; i < f->n; i++) {
    fg_output o = {f->node_of_input[i], 0};
    int64_t dims[FG_MAX_RANK];
    if (fg_output_shape(g, o, dims) < 1 || dims[0] < 0) continue;
    char desc[300];
    const char *name = a->inputs[i].name;
    cli_describe_output(g, o, desc, sizeof desc);
    int64_t full = n_rows < a->batch ? n_rows : a->batch;
    int64_t fed = dp ? fg_shard_rows(full, a->replicas, a->replica, NULL) : full;
    if (fed != dims[0] && n_rows < a->batch) {
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "feed '%s' (%s) has %" PRId64 " rows, fewer than --batch %" PRId64
                    ", and placeholder '%s' (%s) takes batches of exactly %" PRId64 " rows%s",
                    name, a->inputs[i].path, n_rows, a->batch, name, desc, dims[0],
                    dp ? " per replica" : "");
      return -1;
    }
    if (fed != dims[0]) {
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "--batch %" PRId64 " feeds %" PRId64 " rows%s per step, but placeholder '%s' "
                    "(%s) takes exactly %" PRId64 ": pass --batch %" PRId64,
                    a->batch, fed, dp ? " to this replica" : "", name, desc, dims[0],
                    dims[0] * (dp ? a->replicas : 1));
      return -1;
    }
    if (a->n_evals > 0 && a->n_eval_inputs == 0 && n_rows != dims[0]) {
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "--eval without --eval-input runs on the whole training set (%" PRId64
                    " rows) at once, but placeholder '%s' (%s) takes exactly %" PRId64
                    " rows: pass --eval-input %s=FILE.npy with %" PRId64 " rows",
                    n_rows, name, desc, dims[0], name, dims[0]);
      return -1;
    }
    a->fixed_name = a->fixed_name ? a->fixed_name : name;
    a->fixed_rows = dims[0];
    a->drop_last = n_rows > a->batch && n_rows % a->batch != 0;
  }
  return 0;
}

int train_make_batch(const run_feeds *f, batch_feed *bf, const int64_t *perm, int64_t start,
                     int64_t b, fg_feed *feeds, fg_tensor **views, fg_status *st) {
  for (int i = 0; i < f->n; i++) {
    const fg_tensor *all = bf[i].all;
    unsigned char *src = fg_tensor_data(all), *data;
    if (bf[i].row_bytes == 0) {
      data = src; /* rows of zero bytes: nothing to slice or copy */
    } else if (perm) {
      for (int64_t r = 0; r < b; r++)
        memcpy(bf[i].rows + (size_t)r * bf[i].row_bytes,
               src + (size_t)perm[start + r] * bf[i].row_bytes, bf[i].row_bytes);
      data = bf[i].rows;
    } else {
      data = src + (size_t)start * bf[i].row_bytes; /* contiguous rows: no copy */
    }
    int64_t dims[FG_MAX_RANK];
    int rank = fg_tensor_rank(all);
    memcpy(dims, fg_tensor_dims(all), (size_t)rank * sizeof dims[0]);
    dims[0] = b;
    fg_tensor_free(views[i]);
    views[i] =
        fg_tensor_wrap(fg_tensor_dtype(all), rank, dims, data, (size_t)b * bf[i].row_bytes, st);
    if (!views[i]) return -1;
    feeds[i] = (fg_feed){f->feeds[i].name, views[i]};
  }
  return 0;
}
