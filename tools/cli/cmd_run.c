/* `flowgraph run`: load a model, feed .npy files or random data, run it,
 * write or print the fetches. Feed handling lives in run_feeds.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist_cli.h"
#include "flowgraph/dist.h"
#include "flowgraph/io.h"
#include "run.h"

#define MAX_REPEAT 10000000
#define MAX_BATCH  1000000

static void free_args(void *args) {
  run_args *a = args;
  cli_free_pairs(a->inputs, a->n_inputs);
  cli_free_pairs(a->outputs, a->n_outputs);
  free(a->fetch);
  free(a->targets);
}

/* Returns CLI_OK or the exit code of a usage error (already printed). */
static int parse_args(int argc, char **argv, void *args, int *help) {
  const cli_command *cmd = &cli_run_command;
  run_args *a = args;
  size_t cap = (size_t)argc;
  a->inputs = calloc(cap, sizeof *a->inputs);
  a->outputs = calloc(cap, sizeof *a->outputs);
  a->fetch = calloc(cap, sizeof *a->fetch);
  a->targets = calloc(cap, sizeof *a->targets);
  if (!a->inputs || !a->outputs || !a->fetch || !a->targets)
    return cli_fail(FG_RESOURCE_EXHAUSTED, "out of memory");
  a->batch = 1;
  a->repeat = 1;
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
    } else if ((r = cli_opt_value(argc, argv, &i, "-o", "--output", &v)) != 0) {
      rc = cli_pair_opt(cmd, arg, r, v, "output", "NAME=OUT.npy", &a->outputs[a->n_outputs]);
      if (rc == CLI_OK) a->n_outputs++;
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--fetch", &v)) != 0) {
      rc = cli_value_opt(cmd, "--fetch", "a node name", r, v, NULL, &a->fetch[a->n_fetch++]);
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--target", &v)) != 0) {
      rc = cli_value_opt(cmd, "--target", "a node name", r, v, NULL, &a->targets[a->n_targets++]);
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--seed", &v)) != 0) {
      int64_t x;
      if (r < 0 || cli_parse_i64(v, 0, INT64_MAX, &x) != 0)
        return cli_usage(cmd, "--seed needs a non-negative integer");
      a->seed = (uint64_t)x;
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--batch", &v)) != 0) {
      rc = cli_int_opt(cmd, "--batch", r, v, 1, MAX_BATCH, &a->batch);
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--repeat", &v)) != 0) {
      rc = cli_int_opt(cmd, "--repeat", r, v, 1, MAX_REPEAT, &a->repeat);
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--threads", &v)) != 0) {
      rc = cli_threads_opt(cmd, r, v, &a->threads, &a->threads_set);
    } else if (strcmp(arg, "--random-inputs") == 0) {
      a->random_inputs = 1;
    } else if (cli_session_opt(cmd, argc, argv, &i, 1, &rc)) {
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--device", &v)) != 0) {
      rc = cli_value_opt(cmd, "--device", "a device name (cpu:0 or cuda:N)", r, v, "--device",
                         &cli_session_limits.device);
    } else if (cli_dist_opt(cmd, argc, argv, &i, &a->dist_mpi, &a->dist_timeout, &rc)) {
    } else {
      rc = cli_model_arg(cmd, arg, &a->model);
    }
    if (rc != CLI_OK) return rc;
  }
  if (!a->model) return cli_usage(cmd, "missing MODEL.fgb");
  if (!a->dist_mpi && a->dist_timeout) return cli_usage(cmd, "--dist-timeout needs --dist mpi");
  if (!a->dist_mpi && cli_dist_is_local_gpu(cli_session_limits.device))
    return cli_usage(cmd,
                     "--device cuda:local needs --dist mpi (each rank takes a GPU of its host)");
  return CLI_OK;
}

/* Fetch names: the -o names, then --fetch; else the graph's outputs; else
 * the last node. Strings are malloc'ed. */
static int resolve_fetches(const fg_graph *g, const run_args *a, char ***names, int *n,
                           fg_status *st) {
  int count = a->n_outputs + a->n_fetch;
  if (count == 0) count = fg_graph_num_outputs(g);
  if (count == 0 && fg_graph_num_nodes(g) > 0) count = 1;
  if (count <= 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s has no nodes to fetch", a->model);
    return -1;
  }
  char **out = calloc((size_t)count, sizeof *out);
  if (!out) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  *names = out;
  *n = count;
  char buf[1024];
  for (int i = 0; i < count; i++) {
    if (a->n_outputs + a->n_fetch > 0) {
      const char *s = i < a->n_outputs ? a->outputs[i].name : a->fetch[i - a->n_outputs];
      snprintf(buf, sizeof buf, "%s", s);
    } else {
      fg_output o = fg_graph_num_outputs(g) > 0 ? fg_graph_output(g, i)
                                                : (fg_output){fg_graph_num_nodes(g) - 1, 0};
      if (!fg_node_name(g, o.node)) {
        fg_status_set(st, FG_INVALID_GRAPH, "%s: graph output %d refers to no node", a->model, i);
        return -1;
      }
      cli_output_name(g, o, buf, sizeof buf);
    }
    out[i] = strdup(buf);
    if (!out[i]) {
      fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
      return -1;
    }
    if (fg_graph_find_output(g, out[i]).node < 0)
      return cli_fail_missing_output(st, g, "fetch", out[i], a->model);
  }
  for (int i = 0; i < a->n_targets; i++)
    if (fg_graph_find(g, a->targets[i]) < 0) {
      char hint[600];
      fg_graph_output_hint(g, a->targets[i], hint, sizeof hint);
      fg_status_set(st, FG_NOT_FOUND, "target '%s': %s has no node of that name%s%s", a->targets[i],
                    a->model, hint[0] ? "; " : "", hint);
      return -1;
    }
  return 0;
}

/* Checks that each -o path can be written before spending time running. */
static int check_output_paths(const run_args *a, fg_status *st) {
  for (int i = 0; i < a->n_outputs; i++) {
    const char *name = a->outputs[i].name, *p = a->outputs[i].path;
    char dir[4096];
    switch (cli_path_problem(p, dir, sizeof dir)) {
    case CLI_PATH_IS_DIR:
      fg_status_set(st, FG_IO_ERROR, "output '%s': %s is a directory", name, p);
      return -1;
    case CLI_PATH_NO_DIR:
      fg_status_set(st, FG_IO_ERROR, "output '%s': cannot write %s: directory %s does not exist",
                    name, p, dir);
      return -1;
    case CLI_PATH_READ_ONLY:
      if (strcmp(dir, p) == 0) /* a device, FIFO or link, written in place */
        fg_status_set(st, FG_IO_ERROR, "output '%s': cannot write %s: %s", name, p,
                      strerror(errno));
      else
        fg_status_set(st, FG_IO_ERROR, "output '%s': cannot write %s: directory %s: %s", name, p,
                      dir, strerror(errno));
      return -1;
    default: break;
    }
  }
  return 0;
}

/* "output 'NAME' -> PATH: " before st's message. */
static void output_failed(const run_args *a, int i, fg_status *st) {
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", fg_status_message(st));
  fg_status_set(st, fg_status_code(st), "output '%s' -> %s: %s", a->outputs[i].name,
                a->outputs[i].path, msg);
}

/* Every -o file is first written beside its target under a temporary
 * name; only when all succeeded are they renamed, so a failure leaves no
 * output file at all. A device or FIFO (-o y=/dev/stdout) is written in
 * place instead, after those and before the renames (flowgraph/io.h). */
static int write_outputs(const run_args *a, fg_tensor **outs, fg_status *st) {
  if (a->n_outputs == 0) return 0;
  /* Per output: its temporary file and the file it is renamed over (a
   * link's target; flowgraph/io.h); both NULL for one written in
   * place. */
  char **tmp = calloc((size_t)a->n_outputs, sizeof *tmp);
  char **target = calloc((size_t)a->n_outputs, sizeof *target);
  int rc = tmp && target ? 0 : -1, written = 0;
  if (rc != 0) fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
  for (int i = 0; i < a->n_outputs && rc == 0; i++) {
    written = i + 1;
    if (fg_path_write_in_place(a->outputs[i].path)) continue;
    target[i] = fg_path_write_target(a->outputs[i].path);
    size_t len = target[i] ? strlen(target[i]) + 48 : 0;
    tmp[i] = target[i] ? malloc(len) : NULL;
    if (!tmp[i]) {
      fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
      rc = -1;
      written = i; /* nothing of this one on disk */
      break;
    }
    snprintf(tmp[i], len, "%s.part.%ld.%d", target[i], (long)getpid(), i);
    if (fg_npy_write(tmp[i], outs[i], st) != 0) {
      output_failed(a, i, st);
      rc = -1;
    }
  }
  /* Devices and FIFOs next: they cannot be taken back, so they are
   * written only once every file beside its target is. */
  for (int i = 0; i < written && rc == 0; i++)
    if (!tmp[i] && fg_npy_write(a->outputs[i].path, outs[i], st) != 0) {
      output_failed(a, i, st);
      rc = -1;
    }
  for (int i = 0; i < written && rc == 0; i++)
    if (tmp[i] && rename(tmp[i], target[i]) != 0) {
      fg_status_set(st, FG_IO_ERROR, "output '%s': cannot rename into %s: %s", a->outputs[i].name,
                    target[i], strerror(errno));
      rc = -1;
      /* Files renamed before this one stay: the rename of a file onto its
       * own directory entry is the only step that can fail here. */
    }
  if (rc != 0)
    for (int i = 0; i < written; i++)
      if (tmp[i]) unlink(tmp[i]);
  for (int i = 0; tmp && target && i < a->n_outputs; i++) {
    free(tmp[i]);
    free(target[i]);
  }
  free(tmp);
  free(target);
  return rc;
}

static void print_values(const fg_tensor *t) {
  int64_t n = fg_tensor_num_elements(t);
  const void *d = fg_tensor_data(t);
  int64_t show = n < 10 ? n : 10;
  printf("  [");
  for (int64_t i = 0; i < show && d; i++) {
    if (i) printf(", ");
    switch (fg_tensor_dtype(t)) {
    case FG_F32: printf("%.7g", (double)((const float *)d)[i]); break;
    case FG_F64: printf("%.15g", ((const double *)d)[i]); break;
    case FG_I32: printf("%" PRId32, ((const int32_t *)d)[i]); break;
    case FG_I64: printf("%" PRId64, ((const int64_t *)d)[i]); break;
    case FG_BOOL: printf("%s", ((const unsigned char *)d)[i] ? "true" : "false"); break;
    default: printf("?"); break;
    }
  }
  if (n > show)
    printf(", ...] (%" PRId64 " values)\n", n);
  else
    printf("]\n");
}

/* --dist mpi. A model that names ranks runs split across the processes
 * (each rank runs its nodes; see flowgraph/dist.h), every rank fed the same
 * inputs. A model that names none runs data-parallel (dist_run.c): each
 * rank runs all of it on its shard of the batch. Either way every rank
 * must have loaded the same file and been given the same fetches, targets
 * and feeds' options, which the graph-hash check covers. Only rank 0 writes and
 * prints, so only it checks the -o paths; then all ranks agree that
 * everyone could start, so none waits out a timeout for a rank that
 * already gave up. */
static int dist_start(const run_args *a, const fg_graph *g, char **fetch, int n_fetch,
                      const run_feeds *feeds, fg_comm **comm, cli_dist_run *dr, fg_status *st) {
  /* cuda:local names no rank, so the count does not need it resolved. */
  int local = cli_dist_is_local_gpu(cli_session_limits.device);
  fg_partition *p = fg_partition_new(g, local ? NULL : cli_session_limits.device, st);
  if (!p) return -1;
  int ranks = fg_partition_num_ranks(p);
  fg_partition_free(p);
  uint64_t h = FG_HASH_SEED;
  for (int i = 0; i < n_fetch; i++)
    h = fg_hash_bytes(h, fetch[i], strlen(fetch[i]) + 1);
  for (int i = 0; i < a->n_targets; i++)
    h = fg_hash_bytes(h, a->targets[i], strlen(a->targets[i]) + 1);
  int64_t v[6] = {a->random_inputs, (int64_t)a->seed, a->batch, a->repeat, a->n_inputs, local};
  h = fg_hash_bytes(h, v, sizeof v);
  if (cli_dist_join("run", a->model, &h, sizeof h, a->dist_timeout, comm, st) != 0) return -1;
  if (local && cli_dist_use_local_gpu(*comm, st) != 0) return -1;
  /* The data-parallel checks fail alike on every rank, so each names the
   * problem itself rather than "rank 0 could not start". */
  int ok = ranks > 0 || cli_dist_run_prepare(g, a, feeds, (const char *const *)fetch, n_fetch,
                                             *comm, dr, st) == 0;
  if (ok && fg_comm_rank(*comm) == 0) ok = check_output_paths(a, st) == 0;
  uint64_t *all = calloc((size_t)fg_comm_size(*comm), sizeof *all);
  fg_status *gst = fg_status_new();
  int rc = all && gst && fg_comm_all_gather_u64(*comm, !ok, all, gst) == 0 ? 0 : -1;
  if (rc != 0 && ok)
    fg_status_set(st, gst ? fg_status_code(gst) : FG_RESOURCE_EXHAUSTED, "--dist mpi: %s",
                  gst ? fg_status_message(gst) : "out of memory");
  for (int r = 0; rc == 0 && r < fg_comm_size(*comm); r++)
    if (all[r]) {
      rc = -1;
      if (ok)
        fg_status_set(st, FG_ABORTED, "--dist mpi: rank %d could not start (its error says why)",
                      r);
    }
  free(all);
  fg_status_free(gst);
  /* Each rank read the inputs itself: shards of different files would
   * overlap or leave rows out, so at least their shapes must agree. */
  if (ok && rc == 0 && ranks == 0)
    rc = fg_comm_check_same(*comm, dr->shapes_hash, "input shapes", CLI_SAME_HINT, st);
  return ok ? rc : -1;
}

static int run_model(void *args, fg_status *st, const char **failed_load) {
  const run_args *a = args;
  int rc = -1, n_fetch = 0;
  char **fetch = NULL;
  fg_session *s = NULL;
  fg_comm *comm = NULL; /* --dist mpi */
  /* --dist mpi, from a successful start until this rank's part of the
   * exchange is over: a failure then must stop the peers at once (abort)
   * rather than leave them waiting out the timeout. */
  int live = 0;
  cli_dist_run dr = {0}; /* --dist mpi on a model without ranks */
  fg_tensor **outs = NULL;
  run_feeds feeds = {0};
  char desc[300];
  fg_graph *g = cli_load_model(a->model, st);
  if (!g) {
    *failed_load = a->model;
    return -1;
  }
  if (resolve_fetches(g, a, &fetch, &n_fetch, st) != 0) goto done;
  if (run_feeds_prepare(g, a, (const char *const *)fetch, n_fetch, &feeds, st) != 0) goto done;
  if (!a->dist_mpi && check_output_paths(a, st) != 0) goto done;
  if (run_feeds_load(g, a, &feeds, st) != 0) goto done;
  if (a->dist_mpi) {
    if (dist_start(a, g, fetch, n_fetch, &feeds, &comm, &dr, st) != 0) goto done;
    live = 1;
  }
  s = cli_new_session(g, a->threads_set, a->threads, st);
  if (!s) goto done;
  if (comm && fg_session_set_comm(s, comm, st) != 0) goto done;
  outs = calloc((size_t)n_fetch, sizeof *outs);
  if (!outs) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
    goto done;
  }
  /* Data-parallel: this rank's shards; else the whole feeds. */
  const fg_feed *in = dr.feeds ? dr.feeds : feeds.feeds;
  double total = 0;
  for (int64_t r = 0; r < a->repeat; r++) {
    for (int i = 0; i < n_fetch; i++) {
      fg_tensor_free(outs[i]);
      outs[i] = NULL;
    }
    double t0 = cli_now_s();
    if (fg_session_run(s, in, feeds.n, (const char *const *)fetch, n_fetch, outs, a->targets,
                       a->n_targets, st) != 0)
      goto done;
    total += (cli_now_s() - t0) * 1e3; /* ms */
  }
  for (int i = 0; i < n_fetch; i++)
    if (!outs[i]) {
      fg_status_set(st, FG_INTERNAL, "fetch '%s': the session returned no tensor", fetch[i]);
      goto done;
    }
  if (dr.feeds &&
      cli_dist_run_gather(comm, (const char *const *)fetch, outs, n_fetch, &total, st) != 0)
    goto done;
  live = 0;
  if (comm && fg_comm_rank(comm) != 0) { /* rank 0 has the fetches and reports */
    rc = 0;
    goto done;
  }
  if (write_outputs(a, outs, st) != 0) goto done;
  for (int i = 0; i < n_fetch; i++) {
    cli_describe_tensor(outs[i], desc, sizeof desc);
    if (i < a->n_outputs) {
      printf("wrote %s: %s -> %s\n", fetch[i], desc, a->outputs[i].path);
    } else {
      printf("%s: %s\n", fetch[i], desc);
      print_values(outs[i]);
    }
  }
  if (a->repeat > 1)
    printf("ran %" PRId64 " times: total %.3f ms, avg %.3f ms\n", a->repeat, total,
           total / (double)a->repeat);
  rc = 0;
done:
  /* Idempotent, and a no-op for an abort that came from a peer. */
  if (live && rc != 0) fg_comm_abort(comm, fg_status_message(st));
  if (outs)
    for (int i = 0; i < n_fetch; i++)
      fg_tensor_free(outs[i]);
  free(outs);
  fg_session_free(s);
  cli_dist_run_free(&dr);
  run_feeds_free(&feeds);
  if (fetch)
    for (int i = 0; i < n_fetch; i++)
      free(fetch[i]);
  free(fetch);
  fg_graph_free(g);
  if (comm) {
    fg_comm_free(comm);
    /* After a failed exchange MPI cannot finalize: the caller prints the
     * error and the process exits without MPI_Finalize. */
    if (rc == 0) fg_mpi_shutdown(0);
  }
  return rc;
}

static int run_main(int argc, char **argv) {
  static const cli_job job = {&cli_run_command, parse_args, run_model, free_args, NULL};
  run_args a;
  memset(&a, 0, sizeof a);
  return cli_job_main(&job, &a, argc, argv);
}

const cli_command cli_run_command = {
    "run", "Run a model on .npy inputs or random data.",
    "flowgraph run MODEL.fgb [-i NAME=FILE.npy ...] [-o NAME=OUT.npy ...] [--fetch NAME ...] "
    "[--target NAME ...] [--random-inputs] [--seed N] [--batch N] [--repeat N] [--threads N] "
    "[--check-numerics] [--max-memory BYTES] [--passes LIST|--no-passes] [--device NAME] "
    "[--dist mpi [--dist-timeout S]]",
    "options:\n"
    "  -i, --input NAME=FILE.npy   feed placeholder NAME from a .npy file\n"
    "  -o, --output NAME=OUT.npy   fetch NAME (\"node\" or \"node:index\") and write it\n"
    "  --fetch NAME                fetch NAME and print it\n"
    "  --target NAME               also run node NAME for its effect (e.g. an assign)\n"
    "  --random-inputs             feed every needed placeholder not given by -i with\n"
    "                              seeded random data: floats uniform in [-1, 1),\n"
    "                              integers uniform in [0, 10) or in the smaller\n"
    "                              range their readers accept (one_hot's depth,\n"
    "                              gather's table rows, softmax_cross_entropy's\n"
    "                              classes), bools 0/1; unknown dimensions become\n"
    "                              --batch\n"
    "  --seed N                    random seed (default 0); values are drawn in node\n"
    "                              order from one splitmix64 stream\n"
    "  --batch N                   size of unknown dimensions for random inputs\n"
    "                              (default 1, at most 1000000)\n"
    "  --repeat N                  run N times (1..10000000) and print the total and\n"
    "                              average time; outputs come from the last run\n"
    "  --threads N                 worker threads (default: the session's, 0 = cores)\n"
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
    "  --device NAME               run on NAME: cpu:0 (default) or cuda:N (a GPU build\n"
    "                              on a machine with a GPU); with --dist mpi,\n"
    "                              cuda:local gives each rank cuda:L mod GPUs, L its\n"
    "                              position among the ranks of its host\n"
    "  --dist mpi                  run across MPI processes (start with mpirun -np N);\n"
    "                              rank 0 alone prints and writes the outputs. A model\n"
    "                              whose nodes name ranks (rank:R/cpu:N) runs split:\n"
    "                              every rank feeds the same inputs and runs its\n"
    "                              nodes. Any other model runs data-parallel (see\n"
    "                              below)\n"
    "  --dist-timeout SECONDS      a peer silent this long fails the run with\n"
    "                              DEADLINE_EXCEEDED (default 60)\n\n"
    "Without -o and --fetch the graph's marked outputs are fetched (or, when it has\n"
    "none, the last node) and printed: name, dtype, shape and the first 10 values.\n"
    "Every placeholder the fetches and targets depend on must be fed (unless\n"
    "--random-inputs). A feed must match its placeholder's dtype and shape ('?'\n"
    "dimensions accept any size). Output files are written to temporary names and\n"
    "renamed only when all of them succeeded, so a failed run leaves none.\n\n"
    "Data-parallel --dist mpi (a model that names no rank): every needed input\n"
    "whose placeholder has an unknown first dimension (the batch, '?') is split\n"
    "along it over the N ranks as NumPy's array_split does (7 rows over 3 ranks:\n"
    "3+2+2); all of them must have the same rows, at least N; other inputs are fed\n"
    "whole to every rank. Each rank runs the whole graph on its rows and rank 0\n"
    "concatenates every fetch along axis 0 in rank order, so for row-wise models it\n"
    "prints and writes what one process does, bit for bit. Every fetch needs '?' as\n"
    "its first dimension and no other '?': a value over the whole batch (a mean\n"
    "loss) cannot be assembled from shards and is refused before anything runs.\n"
    "Targets run on every rank, on its rows, against its own copy of the variables\n"
    "(run saves none). --repeat N runs every rank N times; the fetches come from\n"
    "the last run and the time printed is the slowest rank's. A rank that fails\n"
    "stops the others at once (ABORTED, naming it).\n",
    run_main};
