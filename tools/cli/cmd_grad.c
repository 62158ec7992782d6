/* `flowgraph grad`: append the backward graph of a loss to a saved model and
 * expose each gradient as a named graph output "grad/<wrt>", so that
 * `flowgraph run OUT.fgb --fetch grad/W` computes it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "flowgraph/autodiff.h"

typedef struct grad_args {
  const char *model, *loss, *out;
  char **wrt; /* malloc'ed names, split from the --wrt lists */
  int n_wrt;
} grad_args;

static void free_args(void *args) {
  grad_args *a = args;
  for (int i = 0; i < a->n_wrt; i++)
    free(a->wrt[i]);
  free(a->wrt);
}

/* Splits "a,b,c" into a->wrt; empty items are a usage error. */
static int add_wrt_list(const cli_command *cmd, grad_args *a, int *cap, const char *list) {
  const char *p = list;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t n = comma ? (size_t)(comma - p) : strlen(p);
    if (n == 0) return cli_usage(cmd, "--wrt '%s' has an empty name", list);
    if (a->n_wrt == *cap) {
      int nc = *cap ? *cap * 2 : 8;
      char **w = realloc(a->wrt, (size_t)nc * sizeof *w);
      if (!w) return cli_fail(FG_RESOURCE_EXHAUSTED, "out of memory");
      a->wrt = w;
      *cap = nc;
    }
    char *name = malloc(n + 1);
    if (!name) return cli_fail(FG_RESOURCE_EXHAUSTED, "out of memory");
    memcpy(name, p, n);
    name[n] = '\0';
    a->wrt[a->n_wrt++] = name;
    if (!comma) return CLI_OK;
    p = comma + 1;
  }
}

static int parse_args(int argc, char **argv, void *args, int *help) {
  const cli_command *cmd = &cli_grad_command;
  grad_args *a = args;
  int cap = 0;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *v = NULL;
    int r, rc;
    if (cli_is_help(arg)) {
      *help = 1;
      return CLI_OK;
    }
    if ((r = cli_opt_value(argc, argv, &i, NULL, "--loss", &v)) != 0) {
      rc = cli_value_opt(cmd, "--loss", "a node name", r, v, "--loss", &a->loss);
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--wrt", &v)) != 0) {
      const char *list = NULL;
      rc = cli_value_opt(cmd, "--wrt", "NAME[,NAME...]", r, v, NULL, &list);
      if (rc == CLI_OK) rc = add_wrt_list(cmd, a, &cap, list);
    } else if ((r = cli_opt_value(argc, argv, &i, "-o", "--output", &v)) != 0) {
      rc = cli_value_opt(cmd, arg, "a path OUT.fgb", r, v, "-o", &a->out);
    } else if (strcmp(arg, "--trainable") == 0) {
      cli_onnx_trainable = 1;
      rc = CLI_OK;
    } else {
      rc = cli_model_arg(cmd, arg, &a->model);
    }
    if (rc != CLI_OK) return rc;
  }
  if (!a->model) return cli_usage(cmd, "missing MODEL.fgb");
  if (!a->loss) return cli_usage(cmd, "missing --loss NAME");
  if (a->n_wrt == 0) return cli_usage(cmd, "missing --wrt NAME[,NAME...]");
  if (!a->out) return cli_usage(cmd, "missing -o OUT.fgb");
  return cli_check_model_path(cmd, a->out);
}

/* "grad/<node>" for output 0, "grad/<node>_<i>" for output i > 0 (':' is
 * reserved in node names). */
static void grad_name(const fg_graph *g, fg_output o, char *buf, size_t size) {
  if (o.index == 0)
    snprintf(buf, size, "grad/%s", fg_node_name(g, o.node));
  else
    snprintf(buf, size, "grad/%s_%d", fg_node_name(g, o.node), o.index);
}

/* Looks up every name and checks what can be checked before differentiating,
 * so the message names the argument rather than a graph node. */
static int resolve(const fg_graph *g, const grad_args *a, fg_output *loss, fg_output *xs,
                   fg_status *st) {
  char desc[300], name[1100];
  *loss = fg_graph_find_output(g, a->loss);
  if (loss->node < 0) return cli_fail_missing_output(st, g, "loss", a->loss, a->model);
  if (!fg_dtype_is_float(fg_output_dtype(g, *loss))) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "loss '%s' is %s: only float tensors can be differentiated", a->loss,
                  cli_describe_output(g, *loss, desc, sizeof desc));
    return -1;
  }
  for (int i = 0; i < a->n_wrt; i++) {
    xs[i] = fg_graph_find_output(g, a->wrt[i]);
    if (xs[i].node < 0) return cli_fail_missing_output(st, g, "--wrt", a->wrt[i], a->model);
    if (!fg_dtype_is_float(fg_output_dtype(g, xs[i]))) {
      fg_status_set(st, FG_INVALID_ARGUMENT, "--wrt '%s' is %s: only float tensors have gradients",
                    a->wrt[i], cli_describe_output(g, xs[i], desc, sizeof desc));
      return -1;
    }
    for (int j = 0; j < i; j++)
      if (xs[j].node == xs[i].node && xs[j].index == xs[i].index) {
        fg_status_set(st, FG_INVALID_ARGUMENT, "--wrt names '%s' twice ('%s' and '%s')", a->wrt[i],
                      a->wrt[j], a->wrt[i]);
        return -1;
      }
    grad_name(g, xs[i], name, sizeof name);
    if (fg_graph_find(g, name) >= 0) {
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "--wrt '%s': %s already has a node '%s' (gradients added before?)", a->wrt[i],
                    a->model, name);
      return -1;
    }
  }
  return 0;
}

/* A gradient that is zero because the path to the loss is cut (the
 * gradient of an accuracy, through argmax) is a likely mistake, but not an
 * error: a warning on stderr naming the node that stops it. */
static void warn_blocked(const fg_graph *g, const grad_args *a, fg_output loss,
                         const fg_output *xs) {
  for (int i = 0; i < a->n_wrt; i++) {
    int cut = -1;
    if (fg_gradient_blocked(g, loss, xs[i], &cut) != 1) continue;
    fprintf(stderr,
            "flowgraph grad: warning: d %s / d %s is identically zero: no differentiable path "
            "from '%s' to '%s'; node '%s' (%s) stops the gradient\n",
            a->loss, a->wrt[i], a->wrt[i], a->loss, cut >= 0 ? fg_node_name(g, cut) : "?",
            cut >= 0 ? fg_node_op(g, cut) : "?");
  }
}

static int grad_model(void *args, fg_status *st, const char **failed_load) {
  const grad_args *a = args;
  int rc = -1;
  fg_output *xs = calloc((size_t)a->n_wrt, sizeof *xs);
  fg_output *dxs = calloc((size_t)a->n_wrt, sizeof *dxs);
  fg_graph *g = NULL;
  if (!xs || !dxs) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
    goto done;
  }
  g = cli_load_model(a->model, st);
  if (!g) {
    *failed_load = a->model;
    goto done;
  }
  fg_output loss;
  if (resolve(g, a, &loss, xs, st) != 0) goto done;
  int before = fg_graph_num_nodes(g);
  if (fg_gradients(g, &loss, 1, xs, a->n_wrt, NULL, dxs, st) != 0) goto done;
  char name[1100];
  for (int i = 0; i < a->n_wrt; i++) {
    /* An identity gives the gradient a stable, user-facing name whatever
     * node fg_gradients returned (possibly a shared zeros node). */
    grad_name(g, xs[i], name, sizeof name);
    fg_output o = fg_set_name(g, fg_identity(g, dxs[i]), name);
    fg_graph_add_output(g, o);
  }
  if (fg_graph_status(g, st) != FG_OK) goto done;
  if (cli_save_model(g, a->out, st) != 0) goto done;
  /* After the last thing that can fail: an error stays one line. The
   * added nodes come after the loss, so the answer is the source graph's. */
  warn_blocked(g, a, loss, xs);
  char desc[300];
  for (int i = 0; i < a->n_wrt; i++) {
    fg_output o = fg_graph_output(g, fg_graph_num_outputs(g) - a->n_wrt + i);
    printf("%s: %s (d %s / d %s)\n", fg_node_name(g, o.node),
           cli_describe_output(g, o, desc, sizeof desc), a->loss, a->wrt[i]);
  }
  printf("wrote %s (%d nodes, %d added)\n", a->out, fg_graph_num_nodes(g),
         fg_graph_num_nodes(g) - before);
  rc = 0;
done:
  fg_graph_free(g);
  free(xs);
  free(dxs);
  return rc;
}

static int grad_main(int argc, char **argv) {
  static const cli_job job = {&cli_grad_command, parse_args, grad_model, free_args, NULL};
  grad_args a;
  memset(&a, 0, sizeof a);
  return cli_job_main(&job, &a, argc, argv);
}

const cli_command cli_grad_command = {
    "grad", "Add the gradients of a loss to a model.",
    "flowgraph grad MODEL.fgb --loss NAME --wrt NAME[,NAME...] -o OUT.fgb [--trainable]",
    "options:\n"
    "  --loss NAME          the float tensor to differentiate (\"node\" or \"node:index\");\n"
    "                       a non-scalar loss is summed (its gradient seed is ones)\n"
    "  --wrt NAME[,NAME]    float tensors to differentiate with respect to; may be\n"
    "                       repeated\n"
    "  -o, --output OUT     where to write the model with its backward graph (.fgb,\n"
    "                       or .json for the JSON form)\n"
    "  --trainable          an ONNX MODEL's floating-point initializers load as\n"
    "                       variables (else constants), so --wrt can name them\n\n"
    "The backward nodes are named under \"gradients/\". Each gradient also gets an\n"
    "identity node named \"grad/NODE\" (\"grad/NODE_I\" for output I > 0 of NODE),\n"
    "marked as a graph output, so it can be fetched:\n"
    "  flowgraph run OUT.fgb -i x=X.npy --fetch grad/W\n"
    "A tensor the loss does not depend on gets a zero gradient. MODEL may be .fgb,\n"
    ".json or ONNX. OUT is written to a temporary file and renamed, so a failure\n"
    "leaves none.\n",
    grad_main};
