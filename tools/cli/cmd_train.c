/* `flowgraph train`: run a model's training step over minibatches of .npy
 * feeds for some epochs, report the loss (and eval fetches) per epoch, and
 * save the trained variables with fg_session_save.
 *
 * Feeds are checked by run_feeds.c (names, placeholders, dtypes, shapes);
 * train_data.c adds what minibatching needs: every -i has the same leading
 * size, and the rows are sliced (or gathered, with --shuffle) per step. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist_cli.h"
#include "flowgraph/comm.h"
#include "flowgraph/autodiff.h"
#include "flowgraph/dist.h"
#include "flowgraph/io.h"
#include "run.h"

#define MAX_BATCH  10000000
#define MAX_EPOCHS 10000000

#include "train.h"

static void free_args(void *args) {
  train_args *a = args;
  cli_free_pairs(a->inputs, a->n_inputs);
  cli_free_pairs(a->eval_inputs, a->n_eval_inputs);
  free(a->evals);
  train_report_free_args(&a->rep);
}

static int parse_args(int argc, char **argv, void *args, int *help) {
  const cli_command *cmd = &cli_train_command;
  train_args *a = args;
  size_t cap = (size_t)argc;
  a->inputs = calloc(cap, sizeof *a->inputs);
  a->eval_inputs = calloc(cap, sizeof *a->eval_inputs);
  a->evals = calloc(cap, sizeof *a->evals);
  if (!a->inputs || !a->eval_inputs || !a->evals)
    return cli_fail(FG_RESOURCE_EXHAUSTED, "out of memory");
  int have_batch = 0, have_epochs = 0, dist_loss_given = 0, dist_comm_given = 0;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *v = NULL;
    int r, rc = CLI_OK;
    if (cli_is_help(arg)) {
      *help = 1;
      return CLI_OK;
    }
    if ((r = cli_opt_value(argc, argv, &i, "-i", "--input", &v)) != 0) {
      rc = cli_pair_opt(cmd, arg, r, v, "input", "NAME=FILE.npy", &a->inputs[a->n_inputs]);
      if (rc == CLI_OK) a->n_inputs++;
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--eval-input", &v)) != 0) {
      rc = cli_pair_opt(cmd, arg, r, v, "eval input", "NAME=FILE.npy",
                        &a->eval_inputs[a->n_eval_inputs]);
      if (rc == CLI_OK) a->n_eval_inputs++;
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--target", &v)) != 0) {
      rc = cli_value_opt(cmd, "--target", "a node name", r, v, "--target", &a->target);
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--loss", &v)) != 0) {
      rc = cli_value_opt(cmd, "--loss", "a node name", r, v, "--loss", &a->loss);
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--eval", &v)) != 0) {
      rc = cli_value_opt(cmd, "--eval", "a node name", r, v, NULL, &a->evals[a->n_evals++]);
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--save", &v)) != 0) {
      rc = cli_value_opt(cmd, "--save", "a path OUT.fgb", r, v, "--save", &a->save);
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--batch", &v)) != 0) {
      rc = cli_int_opt(cmd, "--batch", r, v, 1, MAX_BATCH, &a->batch);
      have_batch = 1;
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--epochs", &v)) != 0) {
      rc = cli_int_opt(cmd, "--epochs", r, v, 1, MAX_EPOCHS, &a->epochs);
      have_epochs = 1;
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--shuffle", &v)) != 0) {
      int64_t x;
      if (r < 0 || cli_parse_i64(v, 0, INT64_MAX, &x) != 0)
        return cli_usage(cmd, "--shuffle needs a non-negative integer seed");
      a->shuffle = 1;
      a->seed = (uint64_t)x;
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--threads", &v)) != 0) {
      rc = cli_threads_opt(cmd, r, v, &a->threads, &a->threads_set);
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--device", &v)) != 0) {
      rc = cli_value_opt(cmd, "--device", "a device name (cpu:0 or cuda:N)", r, v, "--device",
                         &cli_session_limits.device);
    } else if (strcmp(arg, "--quiet") == 0 || strcmp(arg, "-q") == 0) {
      a->quiet = 1;
    } else if (strcmp(arg, "--trainable") == 0) {
      cli_onnx_trainable = 1;
    } else if (cli_dist_opt(cmd, argc, argv, &i, &a->dist_mpi, &a->dist_timeout, &rc)) {
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--optimizer", &v)) != 0) {
      static const char *const kinds[4] = {"sgd", "momentum", "adam", "adamw"};
      a->optimizer = 0;
      for (int k = 0; k < 4 && r > 0; k++)
        if (strcmp(v, kinds[k]) == 0) a->optimizer = k + 1; /* fg_optimizer_kind */
      if (!a->optimizer) return cli_usage(cmd, "--optimizer needs sgd, momentum, adam or adamw");
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--lr", &v)) != 0) {
      char *end = NULL;
      a->lr = r > 0 ? strtod(v, &end) : 0;
      if (r < 0 || !end || *end || !(a->lr > 0) || a->lr > 1e6)
        return cli_usage(cmd, "--lr needs a learning rate in (0, 1e6]");
    } else if (strcmp(arg, "--dist-sync-bn") == 0) {
      a->dist_sync_bn = 1;
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--dist-bucket", &v)) != 0) {
      rc = cli_int_opt(cmd, "--dist-bucket", r, v, 1, INT64_MAX, &a->dist_bucket);
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--micro-batches", &v)) != 0) {
      rc = cli_int_opt(cmd, "--micro-batches", r, v, 1, FG_MAX_MICRO_BATCHES, &a->micro);
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--in-flight", &v)) != 0) {
      rc = cli_in_flight_opt(cmd, r, v, &a->in_flight);
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--dist-loss", &v)) != 0) {
      if (r < 0 || (strcmp(v, "mean") != 0 && strcmp(v, "sum") != 0))
        return cli_usage(cmd, "--dist-loss needs mean or sum (how the loss adds up over rows)");
      a->dist_loss_sum = strcmp(v, "sum") == 0;
      dist_loss_given = 1;
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--dist-comm", &v)) != 0) {
      static const char *const modes[3] = {"auto", "mpi", "nccl"};
      a->dist_comm = -1;
      for (int k = 0; k < 3 && r > 0; k++)
        if (strcmp(v, modes[k]) == 0) a->dist_comm = k;
      if (a->dist_comm < 0)
        return cli_usage(cmd, "--dist-comm needs auto, mpi or nccl (the gradients' all_reduce)");
      dist_comm_given = 1;
    } else if (train_sched_opt(cmd, argc, argv, &i, &a->sched, &rc)) {
    } else if (cli_session_opt(cmd, argc, argv, &i, 1, &rc)) {
    } else if (train_report_opt(cmd, argc, argv, &i, a, &rc)) {
    } else {
      rc = cli_model_arg(cmd, arg, &a->model);
    }
    if (rc != CLI_OK) return rc;
  }
  if (!a->model) return cli_usage(cmd, "missing MODEL.fgb");
  if (a->n_inputs == 0) return cli_usage(cmd, "missing -i NAME=FILE.npy (the training data)");
  if (!have_batch) return cli_usage(cmd, "missing --batch N");
  if (!have_epochs) return cli_usage(cmd, "missing --epochs N");
  if (a->n_eval_inputs > 0 && a->n_evals == 0)
    return cli_usage(cmd, "--eval-input needs --eval NAME (what to compute on it)");
  if (!a->dist_mpi && (a->dist_timeout || a->dist_bucket || dist_comm_given))
    return cli_usage(cmd, "--dist-timeout, --dist-bucket and --dist-comm need --dist mpi");
  if (a->optimizer && !a->loss)
    return cli_usage(cmd, "--optimizer needs --loss NAME (the scalar the step minimises)");
  if (train_sched_check(cmd, &a->sched, a->optimizer) != CLI_OK) return CLI_USAGE;
  if (!a->dist_mpi && a->dist_sync_bn)
    return cli_usage(cmd, "--dist-sync-bn needs --dist mpi (batch norm over every rank's rows)");
  /* The loss form matters wherever a batch is cut: across ranks, or into
   * micro-batches. */
  if (a->in_flight && a->micro < 2) return cli_usage(cmd, "--in-flight needs --micro-batches");
  if (!a->dist_mpi && a->micro < 2 && dist_loss_given)
    return cli_usage(cmd, "--dist-loss needs --dist mpi or --micro-batches");
  if (!a->dist_mpi && cli_dist_is_local_gpu(cli_session_limits.device))
    return cli_usage(cmd,
                     "--device cuda:local needs --dist mpi (each rank takes a GPU of its host)");
  if (train_report_check(cmd, a) != CLI_OK) return CLI_USAGE;
  return a->save ? cli_check_model_path(cmd, a->save) : CLI_OK;
}

/* The names train uses: the target node, the loss and the eval fetches,
 * defaulting to the metadata fg_minimize records. */
static int resolve_names(const fg_graph *g, train_args *a, fg_status *st) {
  char desc[300];
  if (!a->target) a->target = fg_graph_metadata(g, "train_target");
  if (!a->target) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "%s records no training target (metadata 'train_target'): pass --target NAME",
                  a->model);
    return -1;
  }
  if (fg_graph_find(g, a->target) < 0) {
    fg_status_set(st, FG_NOT_FOUND, "target '%s': %s has no node of that name", a->target,
                  a->model);
    return -1;
  }
  if (!a->loss) a->loss = fg_graph_metadata(g, "loss");
  if (!a->loss) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s records no loss (metadata 'loss'): pass --loss NAME",
                  a->model);
    return -1;
  }
  for (int i = -1; i < a->n_evals; i++) {
    const char *name = i < 0 ? a->loss : a->evals[i];
    const char *what = i < 0 ? "loss" : "eval";
    fg_output o = fg_graph_find_output(g, name);
    if (o.node < 0) return cli_fail_missing_output(st, g, what, name, a->model);
    fg_dtype dt = fg_output_dtype(g, o);
    /* Only a known dimension other than 1 rules out a scalar here; an
     * unknown batch dimension is checked on the fetched value. */
    int64_t dims[FG_MAX_RANK];
    int rank = fg_output_shape(g, o, dims), not_scalar = rank < 0;
    for (int k = 0; k < rank; k++)
      not_scalar |= dims[k] >= 0 && dims[k] != 1;
    if ((i < 0 && !fg_dtype_is_float(dt)) || fg_dtype_size(dt) == 0 || not_scalar) {
      fg_status_set(st, FG_INVALID_ARGUMENT, "%s '%s' is %s: train needs a %s scalar", what, name,
                    cli_describe_output(g, o, desc, sizeof desc), i < 0 ? "float" : "numeric");
      return -1;
    }
  }
  return 0;
}

/* A fetched scalar as a double; -1 when the tensor is not one value. */
int scalar_value(const fg_tensor *t, const char *what, const char *name, double *v, fg_status *st) {
  const void *d = fg_tensor_data(t);
  if (fg_tensor_num_elements(t) != 1 || !d) {
    char desc[300];
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s '%s' gave %s: train needs a scalar", what, name,
                  cli_describe_tensor(t, desc, sizeof desc));
    return -1;
  }
  switch (fg_tensor_dtype(t)) {
  case FG_F32: *v = *(const float *)d; return 0;
  case FG_F64: *v = *(const double *)d; return 0;
  case FG_I32: *v = *(const int32_t *)d; return 0;
  case FG_I64: *v = (double)*(const int64_t *)d; return 0;
  case FG_BOOL: *v = *(const unsigned char *)d; return 0;
  default: break;
  }
  fg_status_set(st, FG_INVALID_ARGUMENT, "%s '%s' has dtype %s", what, name,
                fg_dtype_name(fg_tensor_dtype(t)));
  return -1;
}

/* Checks (through run_feeds.c) the feeds given by `inputs` for running
 * `fetch` and `target`, requiring every placeholder they need to be fed;
 * loads the files unless `prepare_only`. */
int prepare_feeds(const fg_graph *g, const train_args *a, cli_pair *inputs, int n_inputs,
                  const char *const *fetch, int n_fetch, const char *target, const char *option,
                  int prepare_only, run_feeds *f, fg_status *st) {
  run_args ra;
  memset(&ra, 0, sizeof ra);
  ra.model = a->model;
  ra.inputs = inputs;
  ra.n_inputs = n_inputs;
  ra.targets = &target;
  ra.n_targets = target ? 1 : 0;
  /* Skips run's own "not fed" message, which suggests --random-inputs. */
  ra.random_inputs = 1;
  ra.batched = target != NULL; /* the training feeds, cut into batches */
  if (run_feeds_prepare(g, &ra, fetch, n_fetch, f, st) != 0) return -1;
  int id = run_feeds_next_unfed(g, f, n_inputs, 0);
  if (id >= 0) {
    char desc[300];
    const char *name = fg_node_name(g, id);
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "placeholder '%s' (%s) is needed by %s '%s' but not fed: pass %s %s=FILE.npy",
                  name, cli_describe_output(g, (fg_output){id, 0}, desc, sizeof desc),
                  target ? "target" : "eval", target ? target : fetch[0], option, name);
    return -1;
  }
  if (prepare_only) return 0;
  ra.random_inputs = 0;
  return run_feeds_load(g, &ra, f, st);
}

/* Writes the session's graph with the trained variables; the JSON form goes
 * through a temporary .fgb. */
int save_trained(fg_session *s, const char *path, fg_status *st) {
  if (!cli_has_ext(path, ".json")) return fg_session_save(s, path, st);
  size_t len = strlen(path) + 64;
  char *tmp = malloc(len);
  if (!tmp) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  snprintf(tmp, len, "%s.part.%ld.fgb", path, (long)getpid());
  int rc = fg_session_save(s, tmp, st);
  if (rc == 0) {
    fg_graph *g = fg_graph_load(tmp, st);
    rc = g ? fg_graph_save_json(g, path, st) : -1;
    fg_graph_free(g);
  }
  unlink(tmp);
  free(tmp);
  return rc;
}

/* Communicators of a --dist mpi run: `world` (every process; the
 * graph-hash checks), `p2p` (what the session attaches: the world, or the replica's
 * group of a hybrid run), `data` (hybrid: this stage's group across the
 * replicas) and `loss` (the group whose ranks hold different shards'
 * losses: the world for data parallelism, `data` for hybrid, none for
 * model parallelism). */
typedef struct train_comms {
  fg_comm *world, *p2p, *data, *loss;
} train_comms;

/* Hybrid parallelism: the graph names `stages` ranks and the world has a
 * multiple of them. Process w is stage w % stages of replica w / stages:
 * its replica's group carries the transfers, its stage's group the
 * gradients' all_reduce. */
static int hybrid_comms(train_args *a, int stages, train_comms *c, fg_status *st) {
  int w = fg_comm_rank(c->world), n = fg_comm_size(c->world);
  if (n % stages != 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "--dist mpi: the model places nodes on %d ranks (rank:0 .. rank:%d), and %d "
                  "processes are not a multiple of %d: start %d for model parallelism, or %d, "
                  "%d, ... to also train that many replicas of it",
                  stages, stages - 1, n, stages, stages, 2 * stages, 3 * stages);
    return -1;
  }
  a->replicas = n / stages;
  a->replica = w / stages;
  if (a->replicas == 1) {
    c->p2p = c->world;
    return 0;
  }
  c->p2p = fg_comm_mpi_split(c->world, w / stages, w % stages, st);
  if (!c->p2p) return -1;
  c->data = c->loss = fg_comm_mpi_split(c->world, w % stages, w / stages, st);
  return c->data ? 0 : -1;
}

/* --micro-batches M: every -i is a batch input, cut into M shards per
 * step (fg_micro_batch); before the data-parallel rewrite, which then
 * all-reduces the combined gradients. */
static int rewrite_micro(const train_args *a, fg_graph **g, fg_status *st) {
  if (a->micro < 2) return 0;
  const char **names = calloc((size_t)a->n_inputs + 1, sizeof *names);
  if (!names) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  for (int i = 0; i < a->n_inputs; i++)
    names[i] = a->inputs[i].name;
  fg_graph *mg = cli_micro_batch(*g, a->micro, a->in_flight, names, a->n_inputs,
                                 a->dist_loss_sum ? FG_DP_LOSS_SUM : FG_DP_LOSS_MEAN, st);
  free(names);
  if (!mg) return -1;
  fg_graph_free(*g);
  *g = mg;
  return 0;
}

/* The smallest batch of an epoch: all the data when it is under one batch,
 * else the last, shorter batch, if any (*is_last then says so). */
static int64_t smallest_batch(const train_args *a, int64_t n_rows, int *is_last) {
  int64_t last = a->drop_last ? 0 : n_rows % a->batch;
  *is_last = n_rows >= a->batch && last > 0;
  return n_rows < a->batch ? n_rows : *is_last ? last : a->batch;
}

/* Every micro-batch needs a row: the smallest batch, cut over the replicas
 * as fg_shard_rows does, must leave each at least M rows. */
static int check_micro_rows(const train_args *a, int64_t n_rows, fg_status *st) {
  if (a->micro < 2) return 0;
  int64_t replicas = a->replicas > 0 ? a->replicas : 1;
  int is_last;
  int64_t small = smallest_batch(a, n_rows, &is_last);
  int64_t least = small / replicas; /* fg_shard_rows' smallest shard */
  if (least >= a->micro) return 0;
  fg_status_set(st, FG_INVALID_ARGUMENT,
                "--micro-batches %" PRId64 ": a batch of %" PRId64 " rows%s gives %s%" PRId64
                " rows, fewer than the micro-batches (%" PRId64 " rows in all); pick another "
                "--batch or fewer micro-batches",
                a->micro, small, is_last ? " (the last batch)" : "",
                replicas > 1 ? "a replica " : "", least, n_rows);
  return -1;
}

/* The replicas = 1 rewrite: this process (or process group) is one
 * replica; all_reduce buckets go on the gradients. */
static fg_graph *rewrite_for_dp(const train_args *a, const fg_graph *g, fg_status *st) {
  const char **names = calloc((size_t)a->n_inputs + 1, sizeof *names);
  if (!names) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
    return NULL;
  }
  for (int i = 0; i < a->n_inputs; i++)
    names[i] = a->inputs[i].name;
  fg_data_parallel_options o;
  cli_dist_dp_options(cli_session_limits.device, &o);
  if (a->dist_bucket) o.bucket_bytes = a->dist_bucket;
  o.loss_reduction = a->dist_loss_sum ? FG_DP_LOSS_SUM : FG_DP_LOSS_MEAN;
  o.sync_batch_norm = a->dist_sync_bn;
  fg_graph *dp = fg_data_parallel(g, 1, names, a->n_inputs, &o, st);
  free(names);
  return dp;
}

/* --dist mpi before the session exists: joins the MPI group, checks that
 * every rank has the same graph, then: a graph naming no rank is rewritten
 * with all_reduce buckets (one replica per process); a graph naming S
 * ranks runs model-parallel on S processes, or on K x S as K replicas
 * (hybrid: the same rewrite, per stage). Non-zero ranks turn quiet and do
 * not save. */
static int dist_setup(train_args *a, fg_graph **g, train_comms *c, fg_status *st) {
  /* The bucket size, the loss form and the micro-batches change the
   * rewritten graph, and
   * ranks choosing different communicators (or only some resolving
   * cuda:local, a collective) would wait for each other: part of the
   * graph hash. */
  int64_t shape[7] = {a->dist_bucket, a->dist_loss_sum,
                      a->dist_comm,   cli_dist_is_local_gpu(cli_session_limits.device),
                      a->micro,       a->in_flight,
                      a->dist_sync_bn};
  /* So are what the step runs and fetches: --target, --loss and the
   * --eval runs (with their inputs) add runs or collectives that a rank
   * without them would pair with its next training step. */
  uint64_t h = fg_hash_bytes(FG_HASH_SEED, shape, sizeof shape);
  const char *names[2] = {a->target ? a->target : "", a->loss ? a->loss : ""};
  for (int i = 0; i < 2; i++)
    h = fg_hash_bytes(h, names[i], strlen(names[i]) + 1);
  for (int i = 0; i < a->n_evals; i++)
    h = fg_hash_bytes(h, a->evals[i], strlen(a->evals[i]) + 1);
  for (int i = 0; i < a->n_eval_inputs; i++)
    h = fg_hash_bytes(h, a->eval_inputs[i].name, strlen(a->eval_inputs[i].name) + 1);
  if (cli_dist_join("train", a->model, &h, sizeof h, a->dist_timeout, &c->world, st) != 0)
    return -1;
  fg_partition *part = fg_partition_new(*g, NULL, st);
  if (!part) return -1;
  int stages = fg_partition_num_ranks(part);
  fg_partition_free(part);
  a->model_parallel = stages > 0;
  if (fg_comm_rank(c->world) != 0) {
    a->quiet = 1;
    a->save = NULL;
  }
  if (cli_dist_is_local_gpu(cli_session_limits.device) && cli_dist_use_local_gpu(c->world, st) != 0)
    return -1;
  if (a->model_parallel && a->dist_comm == CLI_DIST_COMM_NCCL) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "--dist-comm nccl: the model places nodes on %d ranks (model parallelism runs "
                  "on cpu:N devices, over MPI)",
                  stages);
    return -1;
  }
  if (a->model_parallel) {
    if (hybrid_comms(a, stages, c, st) != 0) return -1;
    /* Model parallelism alone: the graph itself says which rank runs what. */
    if (a->replicas == 1) return 0;
  } else {
    c->p2p = c->loss = c->world;
    a->replicas = fg_comm_size(c->world);
    a->replica = fg_comm_rank(c->world);
    /* On GPUs the gradients go over NCCL where it can run (the session
     * gets it; the loss sums stay on MPI). */
    fg_comm *nccl = NULL;
    if (cli_dist_gpu_comm(c->world, cli_session_limits.device, a->dist_comm,
                          (double)a->dist_timeout, &nccl, st) != 0)
      return -1;
    if (nccl) c->p2p = nccl;
    if (!a->quiet && cli_session_limits.device &&
        strncmp(cli_session_limits.device, "cuda", 4) == 0)
      printf("--dist mpi: %d ranks on GPUs; gradients all-reduced %s\n", fg_comm_size(c->world),
             nccl ? "with NCCL on the GPUs" : "through host memory over MPI");
  }
  fg_graph *dp = rewrite_for_dp(a, *g, st);
  if (!dp) return -1;
  fg_graph_free(*g);
  *g = dp;
  return 0;
}

/* Every rank needs at least one row of every batch (batches split as
 * fg_shard_rows does; the all_reduce weighs the ranks by their rows, so
 * uneven splits give the full batch's gradient); the ranks must also agree
 * on the data's size and the batch order. */
static int dist_check_batches(const train_args *a, fg_comm *comm, int64_t n_rows, fg_status *st) {
  int64_t n = a->replicas;
  int is_last;
  int64_t small = smallest_batch(a, n_rows, &is_last);
  if (small < n) {
    const char *who = a->model_parallel ? "replicas" : "ranks";
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "--dist mpi with %" PRId64 " %s: a batch of %" PRId64 " rows%s leaves a "
                  "%.*s without rows (%" PRId64 " rows in all); every batch needs at least %" PRId64
                  " rows: pick another --batch",
                  n, who, small, is_last ? " (the last batch)" : "", (int)strlen(who) - 1, who,
                  n_rows, n);
    return -1;
  }
  uint64_t v[4] = {(uint64_t)n_rows, (uint64_t)a->batch, (uint64_t)a->epochs,
                   a->shuffle ? a->seed ^ 0x5bd1e995u : 0};
  return fg_comm_check_same(comm, fg_hash_bytes(FG_HASH_SEED, v, sizeof v),
                            "training data size and options", CLI_SAME_HINT, st);
}

typedef struct trainer {
  fg_session *s;
  run_feeds train, eval;
  batch_feed *bf;
  fg_feed *feeds;
  fg_tensor **views, **outs;
  int64_t *perm;
  const char **fetch; /* loss, then the evals */
  train_comms c;      /* --dist mpi, else all NULL */
  train_report *rep;  /* progress, validation, checkpoints, --log, --plot */
} trainer;

static void trainer_free(trainer *t, int n_fetch) {
  if (t->views)
    for (int i = 0; i < t->train.n; i++)
      fg_tensor_free(t->views[i]);
  if (t->outs)
    for (int i = 0; i < n_fetch; i++)
      fg_tensor_free(t->outs[i]);
  if (t->bf)
    for (int i = 0; i < t->train.n; i++)
      free(t->bf[i].rows);
  free(t->bf);
  free(t->views);
  free(t->outs);
  free(t->feeds);
  free(t->perm);
  free(t->fetch);
  fg_session_free(t->s);
  run_feeds_free(&t->train);
  run_feeds_free(&t->eval);
  train_report_free(t->rep);
}

/* Runs the eval fetches on the eval feeds (or the whole training set) and
 * appends "  NAME V" for each to `line`. */
static int run_evals(trainer *t, const train_args *a, char *line, size_t size, fg_status *st) {
  const run_feeds *ef = a->n_eval_inputs > 0 ? &t->eval : &t->train;
  if (fg_session_run(t->s, ef->feeds, ef->n, t->fetch + 1, a->n_evals, t->outs + 1, NULL, 0, st) !=
      0)
    return -1;
  for (int k = 0; k < a->n_evals; k++) {
    double v;
    if (scalar_value(t->outs[1 + k], "eval", a->evals[k], &v, st) != 0) return -1;
    size_t used = strlen(line);
    snprintf(line + used, size - used, "  %s %.6g", a->evals[k], v);
    train_report_eval(t->rep, k, v);
    fg_tensor_free(t->outs[1 + k]);
    t->outs[1 + k] = NULL;
  }
  return 0;
}

/* Whether the loss alone (no update) fails with `code` on the first `len`
 * rows of the batch at `start`. */
static int prefix_fails(trainer *t, const train_args *a, int64_t start, int64_t len, fg_code code,
                        fg_status *st) {
  if (train_make_batch(&t->train, t->bf, a->shuffle ? t->perm : NULL, start, len, t->feeds,
                       t->views, st) != 0)
    return 0;
  int rc = fg_session_run(t->s, t->feeds, t->train.n, t->fetch, 1, t->outs, NULL, 0, st);
  fg_tensor_free(t->outs[0]);
  t->outs[0] = NULL;
  return rc != 0 && fg_status_code(st) == code;
}

/* A training step failed on the batch of `b` rows at `start`: the error
 * gets where, in terms of the data: the epoch, the step and, when one row
 * causes it (a label out of range, a NaN under --check-numerics), that
 * row's index in the -i files, whatever the shuffle. The row is found by
 * running the loss alone on prefixes of the batch (a bisection): the
 * shortest that fails the same way ends with it. Not under --dist mpi (a
 * run pairs with other ranks), --micro-batches (a prefix must fill every
 * micro-batch) or a fixed batch dimension (nothing shorter can be fed). */
static void locate_error(trainer *t, const train_args *a, int64_t e, int64_t s, int64_t steps,
                         int64_t start, int64_t b, fg_status *st) {
  fg_code code = fg_status_code(st);
  char msg[2048], where[512];
  snprintf(msg, sizeof msg, "%s", fg_status_message(st));
  int64_t bad = -1; /* the culprit's row in the batch */
  fg_status *probe = t->c.world || a->micro > 1 || a->fixed_name ? NULL : fg_status_new();
  if (probe && prefix_fails(t, a, start, b, code, probe)) {
    int64_t lo = 1, hi = b; /* the first hi rows fail */
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      if (prefix_fails(t, a, start, mid, code, probe))
        hi = mid;
      else
        lo = mid + 1;
    }
    bad = hi - 1;
  }
  fg_status_free(probe);
  int n = snprintf(where, sizeof where, "epoch %" PRId64 "/%" PRId64 ", step %" PRId64 "/%" PRId64,
                   e, a->epochs, s + 1, steps);
  if (bad >= 0)
    snprintf(where + n, sizeof where - (size_t)n,
             ": row %" PRId64 " of the -i files (counting from 0; row %" PRId64 " of the%s batch)",
             a->shuffle ? t->perm[start + bad] : start + bad, bad, a->shuffle ? " shuffled" : "");
  else if (a->shuffle) {
    /* The batch's first rows in the -i files (12 numbers fit in `where`). */
    n += snprintf(where + n, sizeof where - (size_t)n, " (rows");
    for (int64_t r = 0; r < b && r < 12; r++)
      n += snprintf(where + n, sizeof where - (size_t)n, "%s %" PRId64, r ? "," : "",
                    t->perm[start + r]);
    snprintf(where + n, sizeof where - (size_t)n, "%s of the -i files, counting from 0)",
             b > 12 ? ", ..." : "");
  } else
    snprintf(where + n, sizeof where - (size_t)n,
             " (rows %" PRId64 "..%" PRId64 " of the -i files, counting from 0)", start,
             start + b - 1);
  fg_status_set(st, code, "%s: %s", where, msg);
}

static int train_epochs(trainer *t, const train_args *a, int64_t n_rows, fg_status *st) {
  /* drop_last: only whole batches (train_check_fixed_batch). */
  int64_t steps = a->drop_last ? n_rows / a->batch : (n_rows + a->batch - 1) / a->batch;
  int64_t epoch_rows = steps * a->batch < n_rows ? steps * a->batch : n_rows;
  uint64_t rng = a->seed;
  double first_loss = 0, last_loss = 0, t_start = cli_now_s();
  for (int64_t e = 1; e <= a->epochs; e++) {
    double sum = 0;
    if (a->shuffle) train_shuffle(t->perm, n_rows, &rng);
    for (int64_t s = 0; s < steps; s++) {
      int64_t start = s * a->batch;
      int64_t b = n_rows - start < a->batch ? n_rows - start : a->batch;
      /* Under MPI every rank walks the same batches and feeds its
       * replica's fg_shard_rows of each (dist_check_batches: at least
       * one). */
      int dp = t->c.loss != NULL;
      int64_t lo = 0, len = dp ? fg_shard_rows(b, a->replicas, a->replica, &lo) : b;
      if (train_make_batch(&t->train, t->bf, a->shuffle ? t->perm : NULL, start + lo, len, t->feeds,
                           t->views, st) != 0)
        return -1;
      const char *target = a->target;
      if (fg_session_run(t->s, t->feeds, t->train.n, t->fetch, 1, t->outs, &target, 1, st) != 0) {
        locate_error(t, a, e, s, steps, start + lo, len, st);
        return -1;
      }
      double loss;
      int rc = scalar_value(t->outs[0], "loss", a->loss, &loss, st);
      fg_tensor_free(t->outs[0]);
      t->outs[0] = NULL;
      if (rc != 0) return -1;
      /* The batch loss is the replicas' losses weighted by their rows
       * (for equal shards, the plain mean). Model parallelism: every rank
       * of a replica fetched the same loss. */
      if (dp) {
        /* A summed loss sums over the replicas too. */
        double wl = a->dist_loss_sum ? loss : loss * (double)len;
        if (fg_comm_all_reduce(t->c.loss, &wl, 1, FG_F64, 0, st) != 0) return -1;
        loss = a->dist_loss_sum ? wl : wl / (double)b;
      }
      sum += loss * (double)b;
      train_report_step(t->rep, e, s, start + b, sum / (double)(start + b));
    }
    double epoch_loss = sum / (double)epoch_rows;
    if (e == 1) first_loss = epoch_loss;
    last_loss = epoch_loss;
    char line[4096];
    snprintf(line, sizeof line, "epoch %" PRId64 "/%" PRId64 "  loss %.6g", e, a->epochs,
             epoch_loss);
    if (a->n_evals > 0 && run_evals(t, a, line, sizeof line, st) != 0) {
      char msg[2048];
      snprintf(msg, sizeof msg, "%s", fg_status_message(st));
      fg_status_set(st, fg_status_code(st), "evals after epoch %" PRId64 "/%" PRId64 ": %s", e,
                    a->epochs, msg);
      return -1;
    }
    if (train_report_epoch(t->rep, t->s, e, epoch_loss, line, st) != 0) return -1;
  }
  if (!a->quiet)
    printf("trained %" PRId64 " epoch%s of %" PRId64 " step%s in %.2f s: loss %.6g -> %.6g\n",
           a->epochs, a->epochs == 1 ? "" : "s", steps, steps == 1 ? "" : "s",
           cli_now_s() - t_start, first_loss, last_loss);
  return 0;
}

/* --optimizer: the training step a model without one gets, as a C
 * program would build it (fg_minimize over every float variable the loss
 * depends on: an ONNX model's weights when imported with --trainable). */
/* --lr without --optimizer: the model's own step gets the rate, through
 * the learning-rate variable fg_minimize names in the metadata. */
static int set_rate(const train_args *a, fg_graph *g, fg_status *st) {
  const char *name = fg_graph_metadata(g, "learning_rate");
  const int id = name ? fg_graph_find(g, name) : -1;
  if (id < 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "--lr %g: %s has no learning-rate variable (metadata 'learning_rate', which "
                  "fg_minimize writes)%s",
                  a->lr, a->model,
                  fg_graph_metadata(g, "train_target")
                      ? ""
                      : "; a model without a training step needs --optimizer to build one");
    return -1;
  }
  fg_tensor *t = fg_tensor_new(fg_output_dtype(g, (fg_output){id, 0}), 0, NULL, st);
  if (!t) return -1;
  if (fg_tensor_dtype(t) == FG_F64)
    *(double *)fg_tensor_data(t) = a->lr;
  else if (fg_tensor_dtype(t) == FG_F32)
    *(float *)fg_tensor_data(t) = (float)a->lr;
  int rc = fg_tensor_dtype(t) == FG_F64 || fg_tensor_dtype(t) == FG_F32
               ? fg_variable_set_value(g, name, t, st)
               : -1;
  if (rc != 0 && fg_status_code(st) == FG_OK)
    fg_status_set(st, FG_INVALID_ARGUMENT, "--lr: learning-rate variable '%s' is %s, not a float",
                  name, fg_dtype_name(fg_tensor_dtype(t)));
  fg_tensor_free(t);
  return rc;
}

static int build_step(const train_args *a, fg_graph *g, fg_status *st) {
  if (fg_graph_metadata(g, "train_target")) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "%s already has a training step (metadata 'train_target'); --optimizer builds "
                  "one for a model without",
                  a->model);
    return -1;
  }
  fg_output loss = fg_graph_find_output(g, a->loss);
  if (loss.node < 0) {
    fg_status_set(st, FG_NOT_FOUND, "loss '%s': %s has no node of that name", a->loss, a->model);
    return -1;
  }
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, (fg_optimizer_kind)a->optimizer);
  if (a->lr > 0) cfg.learning_rate = a->lr;
  train_sched_apply(&a->sched, &cfg);
  if (fg_minimize(g, loss, NULL, 0, &cfg, st).node >= 0) return 0;
  if (cli_is_onnx(a->model) && !cli_onnx_trainable) {
    char msg[512]; /* the status's message is this call's argument */
    snprintf(msg, sizeof msg, "%s", fg_status_message(st));
    fg_status_set(st, fg_status_code(st),
                  "%s (an ONNX model's weights are constants unless imported with --trainable)",
                  msg);
  }
  return -1;
}

static int train_model(void *args, fg_status *st, const char **failed_load) {
  train_args *a = args;
  int rc = -1, n_fetch = 1 + a->n_evals;
  trainer t;
  memset(&t, 0, sizeof t);
  fg_graph *g = cli_load_model(a->model, st);
  if (!g) {
    *failed_load = a->model;
    return -1;
  }
  t.fetch = calloc((size_t)n_fetch, sizeof *t.fetch);
  t.outs = calloc((size_t)n_fetch, sizeof *t.outs);
  if (!t.fetch || !t.outs) goto oom;
  if (a->optimizer && build_step(a, g, st) != 0) goto done;
  if (!a->optimizer && a->lr > 0 && set_rate(a, g, st) != 0) goto done;
  if (train_sched_reseed(&a->sched, a->model, a->quiet, g, st) != 0) goto done;
  /* Before resolve_names: the default names point into the graph, which
   * the rewrite replaces. */
  if (rewrite_micro(a, &g, st) != 0) goto done;
  if (a->dist_mpi && dist_setup(a, &g, &t.c, st) != 0) goto done;
  if (resolve_names(g, a, st) != 0) goto done;
  t.fetch[0] = a->loss;
  for (int i = 0; i < a->n_evals; i++)
    t.fetch[1 + i] = a->evals[i];
  if (prepare_feeds(g, a, a->inputs, a->n_inputs, t.fetch, 1, a->target, "-i", 0, &t.train, st) !=
      0)
    goto done;
  if (a->n_evals > 0) {
    /* Without --eval-input the evals run on the training feeds, which must
     * then cover what they need. */
    int own = a->n_eval_inputs > 0;
    if (prepare_feeds(g, a, own ? a->eval_inputs : a->inputs, own ? a->n_eval_inputs : a->n_inputs,
                      t.fetch + 1, a->n_evals, NULL, own ? "--eval-input" : "-i", !own, &t.eval,
                      st) != 0)
      goto done;
  }
  int64_t n_rows = train_check_rows(a, &t.train, st);
  if (n_rows < 0 || train_check_fixed_batch(g, a, &t.train, t.c.loss != NULL, n_rows, st) != 0)
    goto done;
  if (t.c.world && dist_check_batches(a, t.c.world, n_rows, st) != 0) goto done;
  if (check_micro_rows(a, n_rows, st) != 0) goto done;
  if (a->save && cli_check_writable(a->save, "--save", st) != 0) goto done;
  t.rep = train_report_new(g, a, n_rows, t.c.world != NULL,
                           !t.c.world || fg_comm_rank(t.c.world) == 0, st);
  if (!t.rep) goto done;
  int nf = t.train.n;
  t.bf = calloc((size_t)nf, sizeof *t.bf);
  t.feeds = calloc((size_t)nf, sizeof *t.feeds);
  t.views = calloc((size_t)nf, sizeof *t.views);
  if (!t.bf || !t.feeds || !t.views) goto oom;
  int64_t batch_rows = a->batch < n_rows ? a->batch : n_rows;
  for (int i = 0; i < nf; i++) {
    t.bf[i].all = t.train.tensors[i];
    /* rows divides the byte size exactly, and a batch is at most all rows,
     * so nothing here can overflow. */
    t.bf[i].row_bytes = fg_tensor_num_bytes(t.bf[i].all) / (size_t)n_rows;
    if (a->shuffle && t.bf[i].row_bytes > 0) {
      t.bf[i].rows = malloc((size_t)batch_rows * t.bf[i].row_bytes);
      if (!t.bf[i].rows) goto oom;
    }
  }
  if (a->shuffle && !(t.perm = malloc((size_t)n_rows * sizeof *t.perm))) goto oom;
  t.s = cli_new_session(g, a->threads_set, a->threads, st);
  if (!t.s) goto done;
  if (t.c.p2p && fg_session_set_comm(t.s, t.c.p2p, st) != 0) goto done;
  if (t.c.data && fg_session_set_data_comm(t.s, t.c.data, st) != 0) goto done;
  if (!a->quiet)
    printf("training %s: target '%s', loss '%s', %" PRId64 " examples, batch %" PRId64 ", %" PRId64
           " epoch%s%s",
           a->model, a->target, a->loss, n_rows, a->batch, a->epochs, a->epochs == 1 ? "" : "s",
           a->shuffle ? ", shuffled" : "");
  if (!a->quiet && a->micro > 1) printf(", %" PRId64 " micro-batches per step", a->micro);
  if (!a->quiet) printf("\n");
  if (!a->quiet && a->drop_last)
    printf("placeholder '%s' takes batches of exactly %" PRId64 " rows: the last %" PRId64
           " rows of every epoch%s are left out\n",
           a->fixed_name, a->fixed_rows, n_rows % a->batch, a->shuffle ? " (shuffled)" : "");
  if (train_epochs(&t, a, n_rows, st) != 0 || train_report_finish(t.rep, st) != 0) goto done;
  /* Which path the gradients took, decided by the first all_reduce: one
   * shared segment when every rank is on this host, else MPI messages. */
  fg_comm *grads = a->model_parallel ? t.c.data : t.c.p2p;
  if (!a->quiet && grads && fg_comm_cuda_device(grads) < 0)
    cli_print_reduce_path("--dist mpi: ", grads);
  /* Each rank updated only its own variables: rank 0 collects them. */
  if (a->model_parallel && fg_session_gather_variables(t.s, 0, st) != 0) goto done;
  if (a->save && (!t.c.world || fg_comm_rank(t.c.world) == 0)) {
    if (save_trained(t.s, a->save, st) != 0) goto done;
    if (!a->quiet) printf("wrote %s\n", a->save);
  }
  rc = 0;
  goto done;
oom:
  fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
done:
  trainer_free(&t, n_fetch);
  fg_graph_free(g);
  if (t.c.world) {
    /* The groups split from the world first. */
    if (t.c.data) fg_comm_free(t.c.data);
    if (t.c.p2p && t.c.p2p != t.c.world) fg_comm_free(t.c.p2p);
    fg_comm_free(t.c.world);
    /* A failed collective leaves MPI unable to finalize: the error is
     * printed by the caller, and the process exits without MPI_Finalize. */
    if (rc == 0) fg_mpi_shutdown(0);
  }
  return rc;
}

static int train_main(int argc, char **argv) {
  /* The error line must not land at the end of a progress line. */
  static const cli_job job = {&cli_train_command, parse_args, train_model, free_args,
                              train_report_clear};
  train_args a;
  memset(&a, 0, sizeof a);
  return cli_job_main(&job, &a, argc, argv);
}

const cli_command cli_train_command = {
    "train", "Train a model: run its training step over minibatches.",
    "flowgraph train MODEL.fgb [--target NAME] -i NAME=FILE.npy ... --batch N --epochs N "
    "[--shuffle SEED] [--seed N] [--save OUT.fgb] [--loss NAME] [--eval NAME ...] "
    "[--eval-input NAME=FILE.npy ...] [--threads N] [--device NAME] [--quiet] [--trainable] "
    "[--check-numerics] "
    "[--max-memory BYTES] [--passes LIST|--no-passes] [--dist mpi [--dist-timeout SECONDS] "
    "[--dist-bucket BYTES] "
    "[--dist-loss mean|sum] [--dist-comm auto|mpi|nccl] [--dist-sync-bn]] [--lr X] [--optimizer "
    "KIND "
    "[--lr-schedule constant|step|cosine [--lr-step-size N] [--lr-gamma G] [--lr-t-max N] "
    "[--lr-min X]] [--warmup N [--warmup-factor F]]] [--micro-batches M "
    "[--in-flight K|all]] "
    "[--val NAME=FILE.npy[,NAME=FILE.npy...] [--save-best OUT]] [--checkpoint-every N "
    "--checkpoint-dir DIR [--keep K]] [--log FILE.csv] [--plot FILE.svg]",
    "options:\n"
    "  -i, --input NAME=FILE.npy   training data for placeholder NAME; every -i is\n"
    "                              cut into batches along axis 0, so all need the\n"
    "                              same number of rows\n"
    "  --target NAME               the node whose run is one training step (default:\n"
    "                              the model's metadata 'train_target', written by\n"
    "                              fg_minimize)\n"
    "  --loss NAME                 the scalar loss fetched at every step (default:\n"
    "                              metadata 'loss')\n"
    "  --optimizer KIND            a model without a training step (an ONNX model\n"
    "                              imported with --trainable) gets one: --loss\n"
    "                              minimised by sgd, momentum, adam or adamw over\n"
    "                              every float variable it depends on (fg_minimize,\n"
    "                              torch.optim's defaults)\n"
    "  --lr X                      the learning rate of that step (default 0.01 for\n"
    "                              sgd and momentum, 0.001 for adam and adamw); a\n"
    "                              variable of the saved model ('learning_rate'),\n"
    "                              so on a model with a step, --lr alone sets it\n"
    "  --lr-schedule KIND          how that step's rate changes, counted in steps\n"
    "                              (batches) over every run of the model: constant\n"
    "                              (default), step (StepLR: lr * G^floor(t / N)) or\n"
    "                              cosine (CosineAnnealingLR's closed form); t, the\n"
    "                              steps done, is a variable of the saved model, so\n"
    "                              training a --save'd model again continues it\n"
    "  --lr-step-size N            step: steps between decays (required)\n"
    "  --lr-gamma G                step: the factor of each decay, > 0 (default 0.1)\n"
    "  --lr-t-max N                cosine: steps from lr down to --lr-min (required);\n"
    "                              periodic after, as torch's closed form\n"
    "  --lr-min X                  cosine: the lowest rate, >= 0 (default 0)\n"
    "  --warmup N                  first N steps: the rate rises linearly from F * lr\n"
    "                              (LinearLR), then the schedule starts at its step 0\n"
    "                              (SequentialLR with milestone N)\n"
    "  --warmup-factor F           the warm-up's first factor, in (0, 1] (default\n"
    "                              1/3, LinearLR's start_factor)\n"
    "  --batch N                   rows per step (1..10000000); the last, smaller\n"
    "                              batch of an epoch is kept, unless a placeholder\n"
    "                              fed by -i has a fixed leading dimension: then N\n"
    "                              (with --dist mpi, each replica's share of N)\n"
    "                              must equal it and the last, partial batch is\n"
    "                              dropped (PyTorch's drop_last), with a note\n"
    "  --epochs N                  passes over the data (1..10000000)\n"
    "  --shuffle SEED              new row order every epoch (else the file order):\n"
    "                              one splitmix64 stream seeded with SEED; each\n"
    "                              epoch shuffles 0..rows-1 by Fisher-Yates, for i\n"
    "                              from rows-1 down to 1 swapping i and\n"
    "                              j = next() mod (i+1)\n"
    "  --seed N                    reseed the model's random draws (dropout masks,\n"
    "                              random ops, initialisers of variables not yet\n"
    "                              trained) from N (fg_graph_reseed), so runs with\n"
    "                              one N give the same bits and another N other\n"
    "                              draws; the row order stays --shuffle's SEED\n"
    "                              (default: the seeds saved in the model; a\n"
    "                              model that draws nothing gets a note)\n"
    "  --eval NAME                 a scalar computed after every epoch (e.g. accuracy);\n"
    "                              may be repeated\n"
    "  --eval-input NAME=FILE.npy  data for the evals, fed whole (default: the\n"
    "                              whole training set)\n"
    "  --save OUT.fgb              write the trained model (variables' current values\n"
    "                              become their initial values; .json for JSON)\n"
    "  --threads N                 worker threads (default: the session's, 0 = cores)\n"
    "  --device NAME               run on NAME (cpu:0, the default, or cuda:N); with\n"
    "                              --dist mpi every rank trains on its own NAME;\n"
    "                              cuda:local gives each rank cuda:L mod GPUs, L its\n"
    "                              position among the ranks of its host\n"
    "  -q, --quiet                 print nothing but errors\n"
    "  --trainable                 an ONNX MODEL's floating-point initializers load\n"
    "                              as variables (else constants)\n"
    "  --check-numerics            after every node, fail on the first NaN or Inf,\n"
    "                              naming the node, its op and the count\n"
    "  --max-memory BYTES          refuse a plan needing more bytes (arena plus\n"
    "                              fetched outputs; suffix K, M or G; default: the\n"
    "                              machine's memory)\n"
    "  --passes LIST               the graph optimization passes to run, comma-separated,\n"
    "                              in that order (default: all of those listed below)\n"
    "                              (the same bits as without them)\n"
    "  --no-passes                 run no optimization pass (FG_PASSES=off does so for\n"
    "                              every command)\n"
    "  --dist mpi                  data parallelism over MPI ranks (start with\n"
    "                              mpirun -np N): each rank trains on its 1/N of\n"
    "                              every batch, gradients are averaged by\n"
    "                              all_reduce; rank 0 alone prints and saves.\n"
    "                              On CPUs an SGD update of a gradient of 1 MiB\n"
    "                              or more reduces it itself (fused_update).\n"
    "                              A model whose nodes name S ranks (devices\n"
    "                              rank:R/cpu:N) runs model-parallel instead:\n"
    "                              with -np S each rank runs its nodes on whole\n"
    "                              batches; with -np K*S, K replicas of it\n"
    "                              (process w is rank w%S of replica w/S) each\n"
    "                              train on 1/K of every batch\n"
    "  --dist-timeout SECONDS      a peer silent this long fails the run with\n"
    "                              DEADLINE_EXCEEDED (default 60)\n"
    "  --dist-bucket BYTES         gradient bucket size (default 25 MB)\n"
    "  --dist-loss mean|sum        how the loss adds up over a batch's rows: mean\n"
    "                              (default; gradients are averaged, weighted by\n"
    "                              each replica's (micro-batch's) rows) or sum\n"
    "                              (they are added)\n"
    "  --dist-comm auto|mpi|nccl   the gradients' all_reduce on cuda:N devices: nccl\n"
    "                              on the GPUs' memory (one GPU per rank), or mpi\n"
    "                              through host memory; auto (default) takes NCCL\n"
    "                              where this build has it and no two ranks share\n"
    "                              a GPU. cpu:N devices always use MPI\n"
    "  --dist-sync-bn              batch norm takes the statistics of the whole\n"
    "                              batch, all-reduced over the ranks each step\n"
    "                              (torch.nn.SyncBatchNorm); default: each rank's\n"
    "                              own shard's, as PyTorch DDP (CPU devices)\n"
    "  --micro-batches M           cut every step's batch (each replica's shard)\n"
    "                              into M micro-batches (1..1024), GPipe style:\n"
    "                              forward and backward run per micro-batch, the\n"
    "                              gradients are combined by rows and applied once,\n"
    "                              so a model split over devices or ranks runs its\n"
    "                              stages on different micro-batches at once; needs\n"
    "                              M rows in every shard of every batch\n"
    "  --in-flight K|all           with --micro-batches: at most K micro-batches\n"
    "                              in flight on a device (1..1024; default 2 per\n"
    "                              stage; the number of stages: least memory that\n"
    "                              keeps the pipeline full), or all (no bound)\n"
    "  --val NAME=FILE.npy,...     held-out data (one NAME=FILE per placeholder the\n"
    "                              loss needs, comma-separated or repeated), fed\n"
    "                              whole after every epoch: prints val_LOSS (LOSS\n"
    "                              the --loss name) and val_NAME for each --eval\n"
    "                              NAME or, without --eval, for a scalar node\n"
    "                              named accuracy\n"
    "  --save-best OUT             with --val: write the model (as --save) after\n"
    "                              every epoch whose validation loss is the lowest\n"
    "                              so far\n"
    "  --checkpoint-every N        every N epochs, write the model with its\n"
    "                              variables and optimizer state (resumable: train\n"
    "                              it again) to DIR/checkpoint-epoch-EEEEEE.fgb,\n"
    "                              whole or not at all (temporary name, rename)\n"
    "  --checkpoint-dir DIR        where they go (made when missing, one level)\n"
    "  --keep K                    keep the last K checkpoints of this run (default\n"
    "                              3); older ones it wrote are removed\n"
    "  --log FILE.csv              one row per epoch: epoch, step (steps so far),\n"
    "                              loss, the evals, the validation metrics,\n"
    "                              samples_per_s, lr (the optimizer's rate),\n"
    "                              seconds since the start; rewritten whole at\n"
    "                              most once a second and at the end\n"
    "  --plot FILE.svg             the loss and validation curves per epoch (a\n"
    "                              second panel for the other metrics)\n\n"
    "Per epoch it prints \"epoch E/N  loss L  [NAME V ...]  [val_NAME V ...]  (T s,\n"
    "step S, R samples/s, ETA D)\", where L is the mean of the batch losses\n"
    "weighted by batch size, T the epoch's time with its evals, S the steps so\n"
    "far and R the rows per second of its steps; \"(best)\" marks a validation\n"
    "loss that --save-best saved. When stderr is a terminal a progress line\n"
    "(step, loss so far, samples/s, ETA of the run) is redrawn there during\n"
    "the epoch; -q turns both off. MODEL may be .fgb, .json or ONNX. An error\n"
    "in a step names the epoch, the step and, when one row causes it (found by\n"
    "running the loss on parts of the batch), that row's index in the -i files.\n",
    train_main};
