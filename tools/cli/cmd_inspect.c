/* `flowgraph inspect MODEL.fgb`: inputs, outputs, the node table, parameter
 * counts, FLOPs and metadata of a model. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "plan.h"
#include "flowgraph/dist.h"
#include "flowgraph/io.h"

#define CELL 512

/* Appends to a cell, truncating with "..." rather than overflowing. */
static void cell_append(char *cell, const char *text) {
  size_t n = strlen(cell), m = strlen(text);
  if (n + m + 1 <= CELL) {
    memcpy(cell + n, text, m + 1);
  } else if (n + 4 <= CELL) {
    memcpy(cell + n, "...", 4);
  }
}

/* The node table fits in LINE_WIDTH columns where the other columns allow:
 * the inputs column takes what they leave (at least INPUTS_MIN), and a
 * longer input list shows its first inputs and "+N more". */
#define LINE_WIDTH 120
#define INPUTS_MIN 30

typedef struct row {
  char id[24], name[CELL], op[64], outputs[CELL], device[128], flops[32];
  size_t inputs_len; /* of the whole list, "a:0, b:1" */
} row;

/* "name:index" of input k of node id. */
static void input_str(const fg_graph *g, int id, int k, char *buf, size_t size) {
  fg_output in = fg_node_input(g, id, k);
  const char *nm = fg_node_name(g, in.node);
  snprintf(buf, size, "%s:%d", nm ? nm : "?", in.index);
}

/* The inputs of node id as "a:0, b:1", or as many as fit in `width` columns
 * followed by "+N more" (N the inputs left out); "-" when none. */
static void inputs_cell(const fg_graph *g, int id, size_t width, char *cell) {
  int ni = fg_node_num_inputs(g, id), shown = 0;
  char in[CELL], more[48];
  size_t used = 0, whole = 0;
  for (int k = 0; k < ni; k++) {
    input_str(g, id, k, in, sizeof in);
    whole += (k ? 2 : 0) + strlen(in);
  }
  snprintf(cell, CELL, "%s", ni > 0 ? "" : "-");
  for (int k = 0; k < ni; k++) {
    input_str(g, id, k, in, sizeof in);
    /* Room for this input, and for "+N more" after it unless all fit. */
    snprintf(more, sizeof more, ", +%d more", ni - k - 1);
    size_t need = (k ? 2 : 0) + strlen(in) + (whole <= width && whole < CELL ? 0 : strlen(more));
    if (used + need > width || used + need >= CELL) break;
    used += (size_t)snprintf(cell + used, CELL - used, "%s%s", k ? ", " : "", in);
    shown++;
  }
  if (shown < ni) snprintf(cell + used, CELL - used, "%s+%d more", shown ? ", " : "", ni - shown);
}

/* One table line: the cells padded to widths w[] (the last one not), the
 * device column (5) left out when `no_device`. */
static void print_line(const char *const cells[7], const size_t w[7], int no_device) {
  printf(" ");
  for (int c = 0; c < 6; c++)
    if (c != 5 || !no_device) printf(" %-*s ", (int)w[c], cells[c]);
  printf(" %s\n", cells[6]);
}

static void print_rows(const fg_graph *g, const row *rows, int n) {
  const char *hdr[7] = {"id", "name", "op", "inputs", "output", "device", "flops"};
  size_t w[7];
  int same_device = 1; /* one device for all: said once, above the table */
  for (int c = 0; c < 7; c++)
    w[c] = strlen(hdr[c]);
  for (int i = 0; i < n; i++) {
    const char *cells[7] = {rows[i].id,      rows[i].name,   rows[i].op,   "",
                            rows[i].outputs, rows[i].device, rows[i].flops};
    for (int c = 0; c < 7; c++)
      if (strlen(cells[c]) > w[c]) w[c] = strlen(cells[c]);
    if (rows[i].inputs_len > w[3]) w[3] = rows[i].inputs_len;
    same_device &= strcmp(rows[i].device, rows[0].device) == 0;
  }
  if (n > 0 && same_device) printf("  device of every node: %s\n", rows[0].device);
  /* 2 columns of indent and 2 between columns. */
  size_t others =
      2 + 2 * (same_device ? 5 : 6) + w[0] + w[1] + w[2] + w[4] + w[6] + (same_device ? 0 : w[5]);
  size_t room = others + INPUTS_MIN < LINE_WIDTH ? LINE_WIDTH - others : INPUTS_MIN;
  if (w[3] > room) w[3] = room;
  print_line(hdr, w, same_device);
  char inputs[CELL];
  for (int i = 0; i < n; i++) {
    inputs_cell(g, i, w[3], inputs);
    const char *cells[7] = {rows[i].id,      rows[i].name,   rows[i].op,   inputs,
                            rows[i].outputs, rows[i].device, rows[i].flops};
    print_line(cells, w, same_device);
  }
}

typedef struct param_sum {
  int64_t elems;
  uint64_t bytes;
  int tensors;
} param_sum;

/* What a variable holds: a parameter the training step updates (or any
 * other variable), or optimizer state, which the update ops keep beside
 * the parameters and which is not part of the model. */
enum { VAR_PARAM, VAR_MOMENTUM, VAR_ADAM, VAR_STEP, VAR_STATE, VAR_LR, VAR_KINDS };

/* The optimizer state of every update op (an op named apply_*, as
 * fg_minimize makes them: input 0 is the parameter it updates): the
 * variables at its other inputs, read directly (momentum buffers, Adam's m
 * and v) or through the assign that advances them (step counters). */
static void mark_optimizer_state(const fg_graph *g, unsigned char *kind) {
  for (int id = 0; id < fg_graph_num_nodes(g); id++) {
    const char *op = fg_node_op(g, id);
    if (!op || strncmp(op, "apply_", 6) != 0) continue;
    for (int k = 1; k < fg_node_num_inputs(g, id); k++) {
      int src = fg_node_input(g, id, k).node, advanced = 0;
      const char *sop = fg_node_op(g, src);
      if (sop && strcmp(sop, "assign") == 0) {
        src = fg_node_input(g, src, 0).node;
        sop = fg_node_op(g, src);
        advanced = 1;
      }
      if (!sop || strcmp(sop, "variable") != 0) continue;
      kind[src] = advanced                            ? VAR_STEP
                  : strcmp(op, "apply_momentum") == 0 ? VAR_MOMENTUM
                  : strcmp(op, "apply_adam") == 0     ? VAR_ADAM
                                                      : VAR_STATE;
    }
  }
  /* fg_minimize's learning rate and step counter, which a schedule's nodes
   * read (not the updates directly), are named in the metadata. */
  static const char *const keys[2] = {"learning_rate", "train_step"};
  for (int k = 0; k < 2; k++) {
    const char *name = fg_graph_metadata(g, keys[k]);
    int id = name ? fg_graph_find(g, name) : -1;
    const char *op = id >= 0 ? fg_node_op(g, id) : NULL;
    if (op && strcmp(op, "variable") == 0) kind[id] = k ? VAR_STEP : VAR_LR;
  }
}

static void print_sum(const char *label, const param_sum *p) {
  printf("%s: %" PRId64 " (%" PRIu64 " bytes) in %d tensor%s\n", label, p->elems, p->bytes,
         p->tensors, p->tensors == 1 ? "" : "s");
}

/* The parameters (variables and constants) and, apart from them, the
 * optimizer state, by kind. */
static void print_parameters(const fg_graph *g) {
  int n = fg_graph_num_nodes(g);
  unsigned char *kind = calloc((size_t)n + 1, 1);
  param_sum vars[VAR_KINDS], consts = {0, 0, 0}, all = {0, 0, 0}, state = {0, 0, 0};
  memset(vars, 0, sizeof vars);
  if (kind) mark_optimizer_state(g, kind);
  for (int id = 0; id < n; id++) {
    const char *op = fg_node_op(g, id);
    const fg_tensor *t = NULL;
    if (!op || (strcmp(op, "variable") != 0 && strcmp(op, "constant") != 0)) continue;
    /* A variable made with an initialiser (fg_variable_init) has no value
     * in the file: its dtype and shape count. */
    int64_t elems = -1, dims[FG_MAX_RANK];
    if (fg_node_attr_tensor(g, id, "value", &t) == 0 && t) {
      elems = fg_tensor_num_elements(t);
    } else if (op[0] == 'v') {
      int rank = fg_output_shape(g, (fg_output){id, 0}, dims);
      elems = rank >= 0 ? 1 : -1;
      for (int d = 0; d < rank; d++)
        elems *= dims[d];
    }
    if (elems < 0) continue;
    int k = kind ? kind[id] : VAR_PARAM;
    param_sum *p[2] = {op[0] == 'v' ? &vars[k] : &consts, k == VAR_PARAM ? &all : &state};
    for (int j = 0; j < 2; j++) {
      p[j]->elems += elems;
      p[j]->bytes += (uint64_t)elems * fg_dtype_size(fg_output_dtype(g, (fg_output){id, 0}));
      p[j]->tensors++;
    }
  }
  free(kind);
  print_sum("parameters", &all);
  print_sum("  trainable (variables)", &vars[VAR_PARAM]);
  print_sum("  constants", &consts);
  if (state.tensors == 0) return;
  print_sum("optimizer state (kept by the update ops, not counted above)", &state);
  static const char *const names[VAR_KINDS] = {NULL,
                                               "  momentum buffers",
                                               "  Adam m and v",
                                               "  step counters",
                                               "  other update op inputs",
                                               "  learning rates"};
  for (int k = 1; k < VAR_KINDS; k++)
    if (vars[k].tensors > 0) print_sum(names[k], &vars[k]);
}

/* Devices, nodes per device, the send/recv transfers between them and the
 * all_reduce nodes of a data-parallel graph. */
static void print_placement(const fg_graph *g, const fg_partition *part, const fg_status *pst) {
  if (!part) {
    printf("placement: invalid (%s)\n", fg_status_message(pst));
    return;
  }
  int nd = fg_partition_num_devices(part), nt = fg_partition_num_transfers(part), n_ar = 0;
  char dev[32], dev2[32];
  int n_fused = 0; /* all_reduce_apply_sgd and sufficient_factor_apply_sgd */
  for (int id = 0; id < fg_graph_num_nodes(g); id++) {
    n_ar += strcmp(fg_node_op(g, id), "all_reduce") == 0;
    n_fused += strcmp(fg_node_op(g, id), "all_reduce_apply_sgd") == 0 ||
               strcmp(fg_node_op(g, id), "sufficient_factor_apply_sgd") == 0;
  }
  printf("devices (%d):", nd);
  for (int d = 0; d < nd; d++)
    printf(" %s (%d nodes)%s", fg_device_str(fg_partition_device(part, d), dev, sizeof dev),
           fg_partition_num_nodes(part, d), d + 1 < nd ? "," : "\n");
  if (nt > 0) printf("transfers (%d send/recv pairs):\n", nt);
  for (int i = 0; i < nt; i++) {
    const fg_transfer *t = fg_partition_transfer(part, i);
    char bytes[32] = "?";
    if (t->bytes >= 0) snprintf(bytes, sizeof bytes, "%" PRId64, t->bytes);
    printf("  %s  %s -> %s  %s bytes\n", t->key,
           fg_device_str(fg_partition_device(part, t->src_device), dev, sizeof dev),
           fg_device_str(fg_partition_device(part, t->dst_device), dev2, sizeof dev2), bytes);
  }
  if (n_ar > 0) printf("all_reduce nodes: %d\n", n_ar);
  if (n_fused > 0)
    printf("fused updates (all_reduce_apply_sgd, sufficient_factor_apply_sgd): %d\n", n_fused);
}

/* batch > 0 (--batch): FLOPs with the placeholders' unknown dimensions of
 * that size (fg_graph_flops_at_batch, into flops_at); else NULL. */
static void inspect_graph(const fg_graph *g, const char *path, int64_t batch,
                          const int64_t *flops_at) {
  int n = fg_graph_num_nodes(g);
  char buf[2 * CELL], shape[CELL];
  printf("model: %s\n", path);
  printf("nodes: %d\n", n);

  int n_meta = fg_graph_num_metadata(g);
  printf("metadata:%s\n", n_meta > 0 ? "" : " (none)");
  for (int i = 0; i < n_meta; i++) {
    const char *k = fg_graph_metadata_key(g, i);
    const char *v = k ? fg_graph_metadata(g, k) : NULL;
    printf("  %s: %s\n", k ? k : "?", v ? v : "");
  }

  int n_in = 0;
  for (int id = 0; id < n; id++) {
    const char *op = fg_node_op(g, id);
    if (!op || strcmp(op, "placeholder") != 0) continue;
    if (n_in++ == 0) printf("inputs:\n");
    cli_describe_output(g, (fg_output){id, 0}, shape, sizeof shape);
    printf("  %s: %s\n", fg_node_name(g, id), shape);
  }
  if (n_in == 0) printf("inputs: (none)\n");

  int n_out = fg_graph_num_outputs(g);
  printf("outputs:%s\n", n_out > 0 ? "" : " (none marked)");
  for (int i = 0; i < n_out; i++) {
    fg_output o = fg_graph_output(g, i);
    cli_output_name(g, o, buf, sizeof buf);
    cli_describe_output(g, o, shape, sizeof shape);
    printf("  %s: %s\n", buf, shape);
  }

  /* Placement (flowgraph/dist.h): unplaced nodes show where the placer
   * puts them, marked "(auto)". NULL when a device name is invalid. */
  fg_status *pst = fg_status_new();
  fg_partition *part = fg_partition_new(g, NULL, pst);
  row *rows = n > 0 ? calloc((size_t)n, sizeof *rows) : NULL;
  int64_t flops_total = 0;
  int flops_unknown = 0;
  for (int id = 0; id < n; id++) {
    const char *op = fg_node_op(g, id);
    int64_t fl = flops_at ? flops_at[id] : fg_node_flops(g, id);
    if (fl >= 0) {
      if (flops_total <= INT64_MAX - fl) flops_total += fl;
    } else {
      flops_unknown++;
    }
    if (!rows) continue;
    row *r = &rows[id];
    snprintf(r->id, sizeof r->id, "%d", id);
    snprintf(r->name, sizeof r->name, "%s", fg_node_name(g, id) ? fg_node_name(g, id) : "?");
    snprintf(r->op, sizeof r->op, "%s", op ? op : "?");
    char dev[32];
    if (fg_node_device_explicit(g, id))
      snprintf(r->device, sizeof r->device, "%s", fg_node_device_explicit(g, id));
    else if (part)
      snprintf(r->device, sizeof r->device, "%s (auto)",
               fg_device_str(fg_partition_device(part, fg_partition_node_device(part, id)), dev,
                             sizeof dev));
    else
      snprintf(r->device, sizeof r->device, "-");
    if (fl >= 0)
      snprintf(r->flops, sizeof r->flops, "%" PRId64, fl);
    else
      snprintf(r->flops, sizeof r->flops, "-");
    int ni = fg_node_num_inputs(g, id);
    r->inputs_len = ni > 0 ? 0 : 1; /* "-" */
    for (int k = 0; k < ni; k++) {
      input_str(g, id, k, buf, sizeof buf);
      r->inputs_len += (k ? 2 : 0) + strlen(buf);
    }
    int no = fg_node_num_outputs(g, id);
    for (int k = 0; k < no; k++) {
      cli_describe_output(g, (fg_output){id, k}, shape, sizeof shape);
      snprintf(buf, sizeof buf, "%s%s", k ? "; " : "", shape);
      cell_append(r->outputs, buf);
    }
    if (no <= 0) cell_append(r->outputs, "-");
  }
  printf("nodes (%d):\n", n);
  if (rows) print_rows(g, rows, n);
  free(rows);
  print_placement(g, part, pst);
  fg_partition_free(part);
  fg_status_free(pst);

  print_parameters(g);
  char at[48] = "";
  if (flops_at) snprintf(at, sizeof at, " at batch %" PRId64, batch);
  if (flops_unknown == 0)
    printf("total flops: %" PRId64 "%s\n", flops_total, at);
  else
    printf("total flops: %" PRId64 "%s over known shapes (%d node%s with unknown shapes%s)\n",
           flops_total, at, flops_unknown, flops_unknown == 1 ? "" : "s",
           flops_at ? "" : "; --batch N sizes them");
}

/* Loads the model and prints it; with batch > 0 its FLOPs at that batch. */
static int inspect_model(const char *model, int64_t batch) {
  fg_status *st = fg_status_new();
  if (!st) return cli_fail(FG_RESOURCE_EXHAUSTED, "out of memory");
  fg_graph *g = cli_load_model(model, st);
  int rc = CLI_OK;
  int64_t *flops = NULL;
  if (!g) {
    rc = cli_fail_load(st, model);
  } else if (batch > 0) {
    flops = malloc(((size_t)fg_graph_num_nodes(g) + 1) * sizeof *flops);
    if (!flops)
      rc = cli_fail(FG_RESOURCE_EXHAUSTED, "out of memory");
    else if (cli_check_batch_dim(g, model, batch, st) != 0 ||
             fg_graph_flops_at_batch(g, batch, flops, st) != 0)
      rc = cli_fail_status(st);
  }
  if (rc == CLI_OK) inspect_graph(g, model, batch, flops);
  free(flops);
  fg_graph_free(g);
  fg_status_free(st);
  return rc;
}

static int inspect_main(int argc, char **argv) {
  const cli_command *cmd = &cli_inspect_command;
  const char *model = NULL;
  int64_t batch = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    int r;
    if (cli_is_help(a)) {
      cli_print_help(cmd);
      return CLI_OK;
    }
    if ((r = cli_opt_value(argc, argv, &i, NULL, "--batch", &v)) != 0) {
      /* The same range as plan's and profile's --batch. */
      int rc = cli_int_opt(cmd, "--batch", r, v, 1, CLI_MAX_BATCH, &batch);
      if (rc != CLI_OK) return rc;
      continue;
    }
    if (a[0] == '-' && a[1] != '\0') return cli_unknown_option(cmd, a);
    if (model) return cli_usage(cmd, "unexpected argument '%s'", a);
    model = a;
  }
  if (!model) return cli_usage(cmd, "missing MODEL.fgb");
  return inspect_model(model, batch);
}

const cli_command cli_inspect_command = {
    "inspect", "Show a model's inputs, outputs, nodes, parameters and FLOPs.",
    "flowgraph inspect MODEL.fgb [--batch N]",
    "options:\n"
    "  --batch N                   count FLOPs with the placeholders' unknown\n"
    "                              dimensions ('?') of size N (1..1000000): the\n"
    "                              shapes are inferred again from them, so the flops\n"
    "                              column and the total cover every node (a model\n"
    "                              without '?' refuses it)\n\n"
    "Prints the graph inputs (placeholders) and marked outputs with dtypes and\n"
    "shapes ('?' is a dimension known only when fed), the metadata, a node table\n"
    "(id, name, op, inputs as name:index, output dtype and shape, device, FLOPs;\n"
    "'-' where the FLOPs depend on an unknown dimension), the parameter count\n"
    "and bytes (variables = trainable, and constants), the optimizer state apart\n"
    "from them (momentum buffers, Adam m and v, step counters: the variables the\n"
    "update ops apply_* read besides the parameter they update) and the total\n"
    "FLOPs over the nodes whose shapes are known (all of them with --batch). The table keeps lines "
    "within\n"
    "120 columns where names allow: a long input list shows its first inputs and\n"
    "\"+N more\", and when every node has the same device it is printed once,\n"
    "above the table, instead of a column. A .json model is read in its JSON form,\n"
    "an ONNX model (recognised by its first bytes) is imported as 'flowgraph\n"
    "import' would.\n",
    inspect_main};
