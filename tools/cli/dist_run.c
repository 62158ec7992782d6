/* `flowgraph run --dist mpi` on a model that places no node on a rank:
 * data-parallel inference, the way torch.distributed or Horovod users shard
 * a batch. Every rank reads the same feeds, keeps its fg_shard_rows of each
 * input whose first dimension the model leaves open (the batch), runs the
 * whole graph on that shard, and rank 0 concatenates the ranks' fetches in
 * rank order. For graphs that work row by row, rank 0 then holds the very
 * bits one process computes on the whole batch.
 *
 * What cannot be split is refused before anything runs, on every rank
 * alike (the caller's ready-check keeps a rank that could start from
 * waiting for one that could not): a fetch without a batch dimension (a
 * mean over the batch is not the concatenation of per-shard means), split
 * inputs that disagree on their rows, and a batch with fewer rows than
 * ranks. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist_cli.h"
#include "flowgraph/dist.h"

/* Sent before each piece so that rank 0 can size the whole tensor before
 * any data moves: dtype, rank, dims. */
enum { HDR_LEN = 2 + FG_MAX_RANK };
/* The session gets no transfers in this mode (no node names a rank), so
 * the gather owns the point-to-point tags; messages of one (sender, tag)
 * arrive in order, so one tag serves every fetch. */
#define GATHER_TAG 0

static int is_placeholder(const fg_graph *g, int id) {
  const char *op = fg_node_op(g, id);
  return op && strcmp(op, "placeholder") == 0;
}

/* Only a first dimension the model leaves open can be concatenated: a
 * scalar or a known first dimension (a value over the whole batch), an
 * unknown shape, or another open dimension (a [?,?] batch-by-batch value)
 * would come back wrong. */
static int check_fetch(const fg_graph *g, const char *name, fg_status *st) {
  fg_output o = fg_graph_find_output(g, name);
  int64_t dims[FG_MAX_RANK];
  int rank = fg_output_shape(g, o, dims);
  const char *why = NULL;
  if (rank < 0)
    why = "its shape is unknown";
  else if (rank == 0)
    why = "a scalar, with no batch dimension";
  else if (dims[0] != FG_DIM_UNKNOWN)
    why = "its first dimension is fixed, not the batch ('?')";
  for (int k = 1; !why && k < rank; k++)
    if (dims[k] == FG_DIM_UNKNOWN) why = "it depends on the batch beyond its first dimension";
  if (!why) return 0;
  char desc[300];
  fg_status_set(st, FG_INVALID_ARGUMENT,
                "--dist mpi: fetch '%s' is %s: %s, so it cannot be assembled from the ranks' "
                "shards of the batch; fetch per-row outputs (first dimension '?') or run "
                "without --dist",
                name, cli_describe_output(g, o, desc, sizeof desc), why);
  return -1;
}

/* Feed i splits when a fetch or target needs it and its placeholder's
 * first dimension is open. */
static int splits(const fg_graph *g, const run_feeds *f, int i) {
  int id = fg_graph_find(g, f->feeds[i].name);
  if (id < 0 || id >= f->n_nodes || !f->needed[id] || !is_placeholder(g, id)) return 0;
  int64_t dims[FG_MAX_RANK];
  return fg_output_shape(g, (fg_output){id, 0}, dims) >= 1 && dims[0] == FG_DIM_UNKNOWN;
}

/* Where feed i came from, for messages: its -i file, or --random-inputs
 * (run_feeds_load puts the -i feeds first, in order). */
static const char *source(const run_args *a, int i) {
  return i < a->n_inputs ? a->inputs[i].path : "--random-inputs";
}

int cli_dist_run_prepare(const fg_graph *g, const run_args *a, const run_feeds *f,
                         const char *const *fetch, int n_fetch, const fg_comm *c, cli_dist_run *dr,
                         fg_status *st) {
  memset(dr, 0, sizeof *dr);
  int first = -1;
  for (int i = 0; i < f->n; i++) {
    if (!splits(g, f, i)) continue;
    int64_t rows = fg_tensor_dim(f->tensors[i], 0);
    if (first < 0) {
      first = i;
      dr->rows = rows;
    } else if (rows != dr->rows) {
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "--dist mpi splits every input whose first dimension is '?' into the ranks' "
                    "shards, so they need the same rows: '%s' (%s) has %" PRId64
                    " rows, '%s' (%s) has %" PRId64,
                    f->feeds[first].name, source(a, first), dr->rows, f->feeds[i].name,
                    source(a, i), rows);
      return -1;
    }
  }
  if (first < 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "--dist mpi: %s places no node on a rank and feeds no input with an open first "
                  "dimension (a batch, '?'), so there is nothing to split across processes; run "
                  "it without --dist",
                  a->model);
    return -1;
  }
  if (dr->rows < fg_comm_size(c)) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "--dist mpi with %d ranks: a batch of %" PRId64 " rows ('%s', %s) leaves a rank "
                  "without rows; every rank needs at least one: feed at least %d rows, or start "
                  "fewer ranks",
                  fg_comm_size(c), dr->rows, f->feeds[first].name, source(a, first),
                  fg_comm_size(c));
    return -1;
  }
  for (int i = 0; i < n_fetch; i++)
    if (check_fetch(g, fetch[i], st) != 0) return -1;
  dr->feeds = calloc((size_t)f->n + 1, sizeof *dr->feeds);
  dr->views = calloc((size_t)f->n + 1, sizeof *dr->views);
  if (!dr->feeds || !dr->views) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  dr->n = f->n;
  int64_t lo = 0, len = fg_shard_rows(dr->rows, fg_comm_size(c), fg_comm_rank(c), &lo);
  uint64_t h = FG_HASH_SEED;
  for (int i = 0; i < f->n; i++) {
    const fg_tensor *t = f->tensors[i];
    int rank = fg_tensor_rank(t);
    int64_t meta[2 + FG_MAX_RANK] = {fg_tensor_dtype(t), rank};
    memcpy(meta + 2, fg_tensor_dims(t), (size_t)rank * sizeof meta[0]);
    h = fg_hash_bytes(h, f->feeds[i].name, strlen(f->feeds[i].name) + 1);
    h = fg_hash_bytes(h, meta, sizeof meta);
    dr->feeds[i] = f->feeds[i];
    if (!splits(g, f, i)) continue;
    /* Rows are contiguous in C order: the shard is a view, no copy. */
    size_t row_bytes = fg_tensor_num_bytes(t) / (size_t)dr->rows;
    unsigned char *data = fg_tensor_data(t);
    int64_t dims[FG_MAX_RANK];
    memcpy(dims, fg_tensor_dims(t), (size_t)rank * sizeof dims[0]);
    dims[0] = len;
    if (row_bytes > 0) data += (size_t)lo * row_bytes;
    dr->views[i] =
        fg_tensor_wrap(fg_tensor_dtype(t), rank, dims, data, (size_t)len * row_bytes, st);
    if (!dr->views[i]) return -1;
    dr->feeds[i].tensor = dr->views[i];
  }
  dr->shapes_hash = h;
  return 0;
}

void cli_dist_run_free(cli_dist_run *dr) {
  if (dr->views)
    for (int i = 0; i < dr->n; i++)
      fg_tensor_free(dr->views[i]);
  free(dr->views);
  free(dr->feeds);
  memset(dr, 0, sizeof *dr);
}

static void header_of(const fg_tensor *t, int64_t *h) {
  memset(h, 0, HDR_LEN * sizeof *h);
  h[0] = fg_tensor_dtype(t);
  h[1] = fg_tensor_rank(t);
  memcpy(h + 2, fg_tensor_dims(t), (size_t)h[1] * sizeof *h);
}

/* Rank 0: "[3,2]" for a header's shape. */
static const char *header_shape(const int64_t *h, char *buf, size_t size) {
  return cli_shape_str((int)h[1], h + 2, buf, size);
}

/* Rank 0's side of one fetch: every rank's header first (the pieces'
 * rows), then one tensor of the summed rows, own piece first, the others'
 * data received straight into place. */
static int receive_fetch(fg_comm *c, const char *name, fg_tensor **out, fg_status *st) {
  int n = fg_comm_size(c);
  int64_t(*hdr)[HDR_LEN] = calloc((size_t)n, sizeof *hdr);
  if (!hdr) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  const fg_tensor *mine = *out;
  header_of(mine, hdr[0]);
  int64_t rows = hdr[0][2];
  int rc = 0;
  for (int r = 1; rc == 0 && r < n; r++) {
    rc = fg_comm_recv(c, hdr[r], sizeof hdr[r], r, GATHER_TAG, st);
    int same = rc == 0 && hdr[r][0] == hdr[0][0] && hdr[r][1] == hdr[0][1] && hdr[r][2] >= 0;
    for (int k = 3; same && k < 2 + hdr[0][1]; k++)
      same = hdr[r][k] == hdr[0][k];
    if (rc == 0 && !same) {
      char s0[256], sr[256];
      int ok_rank = hdr[r][1] >= 0 && hdr[r][1] <= FG_MAX_RANK;
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "--dist mpi: fetch '%s' is %s %s on rank %d but %s %s on rank 0: only the "
                    "first dimension may differ between the ranks' shards",
                    name, fg_dtype_name((fg_dtype)hdr[r][0]),
                    ok_rank ? header_shape(hdr[r], sr, sizeof sr) : "[?]", r,
                    fg_dtype_name((fg_dtype)hdr[0][0]), header_shape(hdr[0], s0, sizeof s0));
      rc = -1;
    } else if (rc == 0 && hdr[r][2] > INT64_MAX - rows) {
      fg_status_set(st, FG_INVALID_ARGUMENT, "--dist mpi: fetch '%s': the ranks' rows overflow",
                    name);
      rc = -1;
    } else if (rc == 0) {
      rows += hdr[r][2];
    }
  }
  fg_tensor *all = NULL;
  if (rc == 0) {
    int64_t dims[FG_MAX_RANK];
    memcpy(dims, hdr[0] + 2, (size_t)hdr[0][1] * sizeof dims[0]);
    dims[0] = rows;
    all = fg_tensor_new(fg_tensor_dtype(mine), (int)hdr[0][1], dims, st);
    rc = all ? 0 : -1;
  }
  if (rc == 0) {
    size_t row_bytes = rows > 0 ? fg_tensor_num_bytes(all) / (size_t)rows : 0;
    unsigned char *data = fg_tensor_data(all);
    size_t off = fg_tensor_num_bytes(mine);
    if (off > 0) memcpy(data, fg_tensor_data(mine), off);
    for (int r = 1; rc == 0 && r < n; r++) {
      size_t bytes = (size_t)hdr[r][2] * row_bytes;
      rc = fg_comm_recv(c, bytes ? data + off : NULL, (int64_t)bytes, r, GATHER_TAG, st);
      off += bytes;
    }
  }
  free(hdr);
  if (rc != 0) {
    fg_tensor_free(all);
    return -1;
  }
  fg_tensor_free(*out);
  *out = all;
  return 0;
}

int cli_dist_run_gather(fg_comm *c, const char *const *fetch, fg_tensor **outs, int n_fetch,
                        double *total_ms, fg_status *st) {
  /* The slowest rank sets the pace of a data-parallel run: report its
   * time. This collective also finds a rank whose run failed (it aborted
   * the group) before any fetch moves. */
  uint64_t *ns = calloc((size_t)fg_comm_size(c), sizeof *ns);
  if (!ns) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  int rc = fg_comm_all_gather_u64(c, (uint64_t)(*total_ms * 1e6), ns, st);
  for (int r = 0; rc == 0 && r < fg_comm_size(c); r++)
    if ((double)ns[r] * 1e-6 > *total_ms) *total_ms = (double)ns[r] * 1e-6;
  free(ns);
  for (int i = 0; rc == 0 && i < n_fetch; i++) {
    /* cli_dist_run_prepare saw a batch dimension in the declared shape;
     * a session that returned less is a bug, not something to concatenate. */
    if (fg_tensor_rank(outs[i]) < 1) {
      fg_status_set(st, FG_INTERNAL, "--dist mpi: fetch '%s' came back as a scalar", fetch[i]);
      rc = -1;
    } else if (fg_comm_rank(c) == 0) {
      rc = receive_fetch(c, fetch[i], &outs[i], st);
    } else {
      int64_t h[HDR_LEN];
      header_of(outs[i], h);
      int64_t bytes = (int64_t)fg_tensor_num_bytes(outs[i]);
      rc = fg_comm_send(c, h, sizeof h, 0, GATHER_TAG, st);
      if (rc == 0)
        rc = fg_comm_send(c, bytes ? fg_tensor_data(outs[i]) : NULL, bytes, 0, GATHER_TAG, st);
    }
  }
  return rc;
}
