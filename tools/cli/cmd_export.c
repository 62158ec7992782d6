/* `flowgraph export MODEL.fgb -o MODEL.onnx`: the model's inference graph
 * as an ONNX file (fg_onnx_save), for ONNX Runtime, TensorRT or a browser. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "flowgraph/onnx.h"

typedef struct export_args {
  cli_rewrite_args w; /* first: cli_rewrite_free frees it */
  int64_t opset;
} export_args;

static int parse_args(int argc, char **argv, void *args, int *help) {
  const cli_command *cmd = &cli_export_command;
  export_args *a = args;
  for (int i = 1; i < argc; i++) {
    const char *v = NULL;
    int r, rc;
    if (cli_is_help(argv[i])) {
      *help = 1;
      return CLI_OK;
    }
    if ((r = cli_opt_value(argc, argv, &i, NULL, "--opset", &v)) != 0) {
      if (a->opset) return cli_usage(cmd, "--opset given twice");
      rc = cli_int_opt(cmd, "--opset", r, v, 11, 17, &a->opset);
    } else {
      rc = cli_rewrite_arg(cmd, argc, argv, &i, "OUT.onnx", 0, &a->w);
    }
    if (rc != CLI_OK) return rc;
  }
  int rc = cli_rewrite_given(cmd, &a->w, "OUT.onnx");
  if (rc != CLI_OK) return rc;
  if (!cli_has_ext(a->w.out, ".onnx"))
    return cli_usage(cmd, "'%s' does not end in .onnx: export writes ONNX files only", a->w.out);
  return CLI_OK;
}

static int export_model(void *args, fg_status *st, const char **failed_load) {
  const export_args *a = args;
  fg_graph *g = cli_load_model(a->w.model, st);
  if (!g) {
    *failed_load = a->w.model;
    return -1;
  }
  fg_onnx_export_options o;
  fg_onnx_export_options_init(&o);
  o.opset = (int)a->opset;
  o.fetches = a->w.fetch;
  o.n_fetches = a->w.n_fetch;
  int rc = fg_onnx_save(g, a->w.out, &o, st);
  if (rc == 0) {
    printf("wrote %s (opset %d, outputs:", a->w.out, o.opset ? o.opset : 17);
    if (a->w.n_fetch)
      for (int i = 0; i < a->w.n_fetch; i++)
        printf(" %s", a->w.fetch[i]);
    else
      for (int i = 0; i < fg_graph_num_outputs(g); i++) {
        char name[600];
        cli_output_name(g, fg_graph_output(g, i), name, sizeof name);
        printf(" %s", name);
      }
    printf(")\n");
  }
  fg_graph_free(g);
  return rc;
}

static int export_main(int argc, char **argv) {
  static const cli_job job = {&cli_export_command, parse_args, export_model, cli_rewrite_free,
                              NULL};
  export_args a;
  memset(&a, 0, sizeof a);
  return cli_job_main(&job, &a, argc, argv);
}

const cli_command cli_export_command = {
    "export", "Write a model's inference graph as an ONNX file.",
    "flowgraph export MODEL.fgb -o OUT.onnx [--fetch NAME ...] [--opset N]",
    "options:\n"
    "  -o, --output OUT.onnx  where to write the ONNX model\n"
    "  --fetch NAME           an output of the ONNX model (\"node\" or \"node:index\");\n"
    "                         may be repeated; default: the model's marked outputs\n"
    "  --opset N              the ONNX opset to write, 11 to 17 (default 17)\n\n"
    "Only what the outputs need is written: gradients, optimizer updates and their\n"
    "state are left out, and an output that needs one is an error naming it.\n"
    "Variables are written as initializers holding their values in MODEL (a model\n"
    "saved by `flowgraph train` holds the trained values); placeholders become the\n"
    "model's inputs, an unknown batch dimension the symbolic dim \"batch\". batch_norm\n"
    "and dropout are written in their inference form. MODEL may be .fgb, .json or\n"
    "ONNX (read by content, so an imported model can be written back).\n"
    "OUT is written to a temporary file and renamed, so a failure leaves none.\n",
    export_main};
