/* `flowgraph convert IN OUT`: .json <-> .fgb, picked by the extensions. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "flowgraph/io.h"

static int convert_main(int argc, char **argv) {
  const cli_command *cmd = &cli_convert_command;
  const char *pos[2];
  int n_pos = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (cli_is_help(a)) {
      cli_print_help(cmd);
      return CLI_OK;
    }
    if (strcmp(a, "--") == 0) {
      for (i++; i < argc; i++) {
        if (n_pos >= 2) return cli_usage(cmd, "unexpected argument '%s'", argv[i]);
        pos[n_pos++] = argv[i];
      }
      break;
    }
    if (a[0] == '-' && a[1] != '\0') return cli_unknown_option(cmd, a);
    if (n_pos >= 2) return cli_usage(cmd, "unexpected argument '%s'", a);
    pos[n_pos++] = a;
  }
  if (n_pos != 2)
    return cli_usage(cmd, "expected IN and OUT, got %d path%s", n_pos, n_pos == 1 ? "" : "s");
  const char *in = pos[0], *out = pos[1];
  int rc = cli_check_model_path(cmd, in);
  if (rc == CLI_OK) rc = cli_check_model_path(cmd, out);
  if (rc != CLI_OK) return rc;
  if (cli_has_ext(in, ".json") == cli_has_ext(out, ".json"))
    return cli_usage(cmd, "'%s' and '%s' have the same format; convert goes .fgb <-> .json", in,
                     out);

  fg_status *st = fg_status_new();
  if (!st) return cli_fail(FG_RESOURCE_EXHAUSTED, "out of memory");
  fg_graph *g = cli_load_model(in, st);
  if (!g) {
    rc = cli_fail_load(st, in);
    goto done;
  }
  if (cli_save_model(g, out, st) != 0) {
    rc = cli_fail_status(st);
    goto done;
  }
  printf("wrote %s (%d nodes)\n", out, fg_graph_num_nodes(g));
done:
  fg_graph_free(g);
  fg_status_free(st);
  return rc;
}

const cli_command cli_convert_command = {
    "convert", "Convert a model between .fgb and its JSON form.", "flowgraph convert IN OUT",
    "The direction is chosen by the extensions: IN.json -> OUT.fgb or IN.fgb ->\n"
    "OUT.json. The output is written to a temporary file and renamed, so a failed\n"
    "conversion leaves no partial file.\n",
    convert_main};
