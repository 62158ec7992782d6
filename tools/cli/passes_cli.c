/* The optimization passes on the command line: --passes LIST and
 * --no-passes (every command that makes a session, and optimize), and the
 * per-pass report that `plan --passes` and `optimize` print. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "flowgraph/passes.h"

/* A value after a bare `plan --passes` is a pass list only when it cannot
 * be the model: pass names hold no '.' or '/', model paths do (.fgb, .json,
 * .onnx). */
static int looks_like_pass_list(const char *s) {
  return s[0] != '-' && !strchr(s, '.') && !strchr(s, '/');
}

int cli_passes_opt(const cli_command *cmd, int argc, char **argv, int *i, int *rc) {
  const char *a = argv[*i], *v = NULL;
  int report = strcmp(cmd->name, "plan") == 0;
  *rc = CLI_OK;
  if (strcmp(a, "--no-passes") == 0) {
    cli_session_limits.no_passes = 1;
    return 1;
  }
  if (report && strcmp(a, "--passes") == 0 &&
      (*i + 1 >= argc || !looks_like_pass_list(argv[*i + 1]))) {
    cli_session_limits.show_passes = 1;
    return 1;
  }
  int r = cli_opt_value(argc, argv, i, NULL, "--passes", &v);
  if (r == 0) return 0;
  if (r < 0) {
    *rc = cli_usage(cmd, "--passes needs a comma-separated list of passes");
    return 1;
  }
  fg_status *st = fg_status_new();
  if (fg_pass_list_check(v, st) != 0) *rc = cli_usage(cmd, "--passes: %s", fg_status_message(st));
  fg_status_free(st);
  cli_session_limits.passes = v;
  cli_session_limits.show_passes |= report;
  return 1;
}

void cli_pass_options(fg_pass_options *po) {
  po->disable = cli_session_limits.no_passes;
  po->passes = cli_session_limits.passes;
}

static int count_pass(const fg_pass_report *r, const char *pass, const char *action) {
  int n = 0;
  for (int i = 0; i < fg_pass_report_size(r); i++) {
    const fg_pass_change *c = fg_pass_report_change(r, i);
    n += strcmp(c->pass, pass) == 0 && strcmp(c->action, action) == 0;
  }
  return n;
}

void cli_print_pass_report(const fg_pass_report *r, const fg_pass_options *po) {
  if (po->disable) {
    printf("passes: off\n");
    return;
  }
  printf("passes: %s\n", po->passes ? po->passes : "default");
  for (int p = 0; p < fg_pass_count(); p++) {
    const char *name = fg_pass_name(p);
    printf("  %s: %d removed, %d merged, %d simplified, %d folded, %d fused\n", name,
           count_pass(r, name, "removed"), count_pass(r, name, "merged"),
           count_pass(r, name, "simplified"), count_pass(r, name, "folded"),
           count_pass(r, name, "fused"));
    for (int i = 0; i < fg_pass_report_size(r); i++) {
      const fg_pass_change *c = fg_pass_report_change(r, i);
      if (strcmp(c->pass, name) != 0) continue;
      printf("    %s %s", c->action, c->node);
      if (c->into) printf(" -> %s", c->into);
      if (c->rule) printf(" (%s)", c->rule);
      printf("\n");
    }
  }
}

int cli_pass_report(const fg_graph *g, const char *const *fetches, int n_fetches, fg_status *st) {
  fg_pass_options po;
  cli_pass_options(&po);
  fg_pass_report *r = NULL;
  fg_graph *o = fg_optimize(g, &po, fetches, n_fetches, &r, st);
  if (!o) return -1;
  cli_print_pass_report(r, &po);
  fg_pass_report_free(r);
  fg_graph_free(o);
  return 0;
}
