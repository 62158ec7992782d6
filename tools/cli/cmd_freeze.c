/* `flowgraph freeze MODEL -o OUT.fgb`: the inference graph of the chosen
 * fetches with the variables they read made constants (fg_freeze). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "flowgraph/passes.h"

typedef cli_rewrite_args freeze_args;

static int parse_args(int argc, char **argv, void *args, int *help) {
  const cli_command *cmd = &cli_freeze_command;
  freeze_args *a = args;
  for (int i = 1; i < argc; i++) {
    if (cli_is_help(argv[i])) {
      *help = 1;
      return CLI_OK;
    }
    const int rc = cli_rewrite_arg(cmd, argc, argv, &i, "OUT.fgb", 1, a);
    if (rc != CLI_OK) return rc;
  }
  int rc = cli_rewrite_given(cmd, a, "OUT.fgb");
  return rc != CLI_OK ? rc : cli_check_model_path(cmd, a->out);
}

/* Bytes of the variables' values the frozen graph's constants came from:
 * what a frozen file should be close to. */
static long long weight_bytes(const fg_graph *src, const fg_graph *frozen) {
  long long sum = 0;
  for (int id = 0; id < fg_graph_num_nodes(frozen); id++) {
    const char *name = fg_node_name(frozen, id);
    const int s = fg_graph_find(src, name);
    const char *op = fg_node_op(src, s);
    if (!op || strcmp(op, "variable") != 0) continue;
    const fg_tensor *t = NULL;
    if (fg_node_attr_tensor(frozen, id, "value", &t) == 0 && t)
      sum += (long long)fg_tensor_num_bytes(t);
  }
  return sum;
}

static int freeze_model(void *args, fg_status *st, const char **failed_load) {
  const freeze_args *a = args;
  if (cli_check_writable(a->out, "-o", st) != 0) return -1;
  fg_graph *g = cli_load_model(a->model, st);
  if (!g) {
    *failed_load = a->model;
    return -1;
  }
  /* The names first, so an unknown one is reported against the model
   * with a suggestion, as run reports it. */
  for (int i = 0; i < a->n_fetch; i++)
    if (fg_graph_find_output(g, a->fetch[i]).node < 0) {
      cli_fail_missing_output(st, g, "fetch", a->fetch[i], a->model);
      fg_graph_free(g);
      return -1;
    }
  fg_graph *f = fg_freeze(g, a->fetch, a->n_fetch, st);
  int rc = f ? cli_save_model(f, a->out, st) : -1;
  if (rc == 0 && !a->quiet) {
    int vars = 0;
    for (int id = 0; id < fg_graph_num_nodes(f); id++) {
      const char *op = fg_node_op(g, fg_graph_find(g, fg_node_name(f, id)));
      vars += op && strcmp(op, "variable") == 0;
    }
    printf("wrote %s: %d nodes (was %d), %d variables made constants (%lld bytes of values)\n",
           a->out, fg_graph_num_nodes(f), fg_graph_num_nodes(g), vars, weight_bytes(g, f));
  }
  fg_graph_free(f);
  fg_graph_free(g);
  return rc;
}

static int freeze_main(int argc, char **argv) {
  static const cli_job job = {&cli_freeze_command, parse_args, freeze_model, cli_rewrite_free,
                              NULL};
  freeze_args a;
  memset(&a, 0, sizeof a);
  return cli_job_main(&job, &a, argc, argv);
}

const cli_command cli_freeze_command = {
    "freeze", "Save the inference graph of a trained model, variables made constants.",
    "flowgraph freeze MODEL -o OUT.fgb [--fetch NAME ...] [-q]",
    "options:\n"
    "  -o, --output OUT.fgb   where to write the frozen model (.fgb or .json)\n"
    "  --fetch NAME           an output to keep (\"node\" or \"node:index\"); may be\n"
    "                         repeated; default: the model's marked outputs\n"
    "  -q, --quiet            print nothing on success\n\n"
    "The frozen model holds only the nodes the fetches read, with each variable\n"
    "they read made a constant of its current value (the trained one a saved\n"
    "model holds; a variable never trained gets what a session would draw for\n"
    "it). Gradients, optimizer state and update ops are left out, so the file is\n"
    "about the size of the weights. The fetches become its marked outputs, and\n"
    "`flowgraph run` on it gives the same bits as on MODEL. A fetch that needs the\n"
    "training step (an update op, assign, the step's group) is refused; a model\n"
    "without variables is saved as the part its fetches read (all of it: a copy).\n"
    "Output: 'wrote OUT: N nodes (was M), K variables made constants (B bytes of\n"
    "values)'. OUT is written to a temporary file and renamed.\n",
    freeze_main};
