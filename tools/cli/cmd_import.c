/* `flowgraph import MODEL.onnx -o OUT.fgb [--trainable]`: an ONNX model as
 * a flowgraph model file. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "flowgraph/onnx.h"

static int import_main(int argc, char **argv) {
  const cli_command *cmd = &cli_import_command;
  const char *model = NULL, *out = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    int r, rc = CLI_OK;
    if (cli_is_help(a)) {
      cli_print_help(cmd);
      return CLI_OK;
    }
    if ((r = cli_opt_value(argc, argv, &i, "-o", "--output", &v)) != 0)
      rc = cli_value_opt(cmd, a, "a path OUT.fgb", r, v, "-o", &out);
    else if (strcmp(a, "--trainable") == 0)
      cli_onnx_trainable = 1;
    else
      rc = cli_model_arg(cmd, a, &model);
    if (rc != CLI_OK) return rc;
  }
  if (!model) return cli_usage(cmd, "missing MODEL.onnx");
  if (!out) return cli_usage(cmd, "missing -o OUT.fgb");
  int rc = cli_check_model_path(cmd, out);
  if (rc != CLI_OK) return rc;
  if (!fg_onnx_available())
    return cli_fail(FG_UNIMPLEMENTED, "this flowgraph was built without ONNX support");

  fg_status *st = fg_status_new();
  if (!st) return cli_fail(FG_RESOURCE_EXHAUSTED, "out of memory");
  fg_graph *g = NULL;
  /* Before the import: a bad output path fails fast. */
  if (cli_check_writable(out, "-o", st) != 0) {
    rc = cli_fail_status(st);
    goto done;
  }
  fg_onnx_options o;
  fg_onnx_options_init(&o);
  o.trainable = cli_onnx_trainable;
  g = fg_onnx_load(model, &o, st);
  if (!g) {
    rc = cli_fail_load(st, model);
    goto done;
  }
  if (cli_save_model(g, out, st) != 0) {
    rc = cli_fail_status(st);
    goto done;
  }
  int vars = 0;
  for (int i = 0; i < fg_graph_num_nodes(g); i++)
    vars += strcmp(fg_node_op(g, i), "variable") == 0;
  printf("wrote %s (%d nodes, %d outputs, %d variables)\n", out, fg_graph_num_nodes(g),
         fg_graph_num_outputs(g), vars);
done:
  fg_graph_free(g);
  fg_status_free(st);
  return rc;
}

const cli_command cli_import_command = {
    "import", "Import an ONNX model as a .fgb model.",
    "flowgraph import MODEL.onnx -o OUT.fgb [--trainable]",
    "options:\n"
    "  -o, --output OUT     where to write the model (.fgb, or .json for the JSON form)\n"
    "  --trainable          floating-point initializers become variables (trainable\n"
    "                       with 'flowgraph train' or fg_minimize); else constants\n\n"
    "Reads opsets 7 to 17 of the default ONNX domain. Graph inputs become\n"
    "placeholders and graph outputs marked outputs, both under their ONNX names\n"
    "(':' becomes '_'); a symbolic leading dimension becomes the unknown batch\n"
    "dimension. The model's doc strings, producer and metadata_props become\n"
    "metadata \"onnx.*\". External data is read from MODEL's folder. Ops without\n"
    "a mapping fail the import with every one listed. run, inspect, plan, profile,\n"
    "grad and train also read ONNX models directly. OUT is written to a temporary\n"
    "file and renamed, so a failure leaves none.\n",
    import_main};
