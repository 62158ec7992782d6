/* `flowgraph optimize MODEL -o OUT.fgb`: the model after the optimization
 * passes (fg_optimize), saved, with what each pass did. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "flowgraph/passes.h"

typedef cli_rewrite_args optimize_args;

static int parse_args(int argc, char **argv, void *args, int *help) {
  const cli_command *cmd = &cli_optimize_command;
  optimize_args *a = args;
  for (int i = 1; i < argc; i++) {
    int rc;
    if (cli_is_help(argv[i])) {
      *help = 1;
      return CLI_OK;
    }
    if (!cli_passes_opt(cmd, argc, argv, &i, &rc))
      rc = cli_rewrite_arg(cmd, argc, argv, &i, "OUT.fgb", 1, a);
    if (rc != CLI_OK) return rc;
  }
  int rc = cli_rewrite_given(cmd, a, "OUT.fgb");
  return rc != CLI_OK ? rc : cli_check_model_path(cmd, a->out);
}

static int optimize_model(void *args, fg_status *st, const char **failed_load) {
  const optimize_args *a = args;
  if (cli_check_writable(a->out, "-o", st) != 0) return -1;
  fg_graph *g = cli_load_model(a->model, st);
  if (!g) {
    *failed_load = a->model;
    return -1;
  }
  fg_pass_options po;
  cli_pass_options(&po);
  fg_pass_report *r = NULL;
  fg_graph *o = fg_optimize(g, &po, a->fetch, a->n_fetch, &r, st);
  const int was = fg_graph_num_nodes(g);
  /* Freed before the save, which holds the file's bytes: a large model's
   * weights are not held three times. */
  fg_graph_free(g);
  int rc = o ? cli_save_model(o, a->out, st) : -1;
  if (rc == 0 && !a->quiet) {
    cli_print_pass_report(r, &po);
    printf("wrote %s: %d nodes (was %d)\n", a->out, fg_graph_num_nodes(o), was);
  }
  fg_pass_report_free(r);
  fg_graph_free(o);
  return rc;
}

static int optimize_main(int argc, char **argv) {
  static const cli_job job = {&cli_optimize_command, parse_args, optimize_model, cli_rewrite_free,
                              NULL};
  optimize_args a;
  memset(&a, 0, sizeof a);
  return cli_job_main(&job, &a, argc, argv);
}

const cli_command cli_optimize_command = {
    "optimize", "Save a model after the graph optimization passes.",
    "flowgraph optimize MODEL -o OUT.fgb [--fetch NAME ...] [--passes LIST|--no-passes] [-q]",
    "options:\n"
    "  -o, --output OUT.fgb   where to write the optimized model (.fgb or .json)\n"
    "  --fetch NAME           an output that must stay (\"node\" or \"node:index\"); may\n"
    "                         be repeated; default: the model's marked outputs, else\n"
    "                         every node nothing consumes\n"
    "  --passes LIST          the passes to run, comma-separated, in that order\n"
    "                         (default: the passes listed below, in that order)\n"
    "  --no-passes            run none (the model is saved as loaded)\n"
    "  -q, --quiet            print nothing on success\n\n"
    "Variables (with their values), placeholders and stateful nodes always stay;\n"
    "random and stateful nodes are never merged. The optimized model computes the\n"
    "same bits, but for fold_inference's batch_norm folding and update_epilogue's\n"
    "SGD updates (rounded in the GEMM). stop_gradient is removed: take gradients\n"
    "(grad, train) before optimizing, not after. Sessions run the same passes by\n"
    "default (run, train, plan and profile take --passes and --no-passes;\n"
    "FG_PASSES=off turns them off, FG_PASSES=LIST runs LIST).\n"
    "Output: per pass its counts and one line per change, then 'wrote OUT: N nodes\n"
    "(was M)'. OUT is written to a temporary file and renamed.\n",
    optimize_main};
