/* `flowgraph inspect MODEL.fgb`: inputs, outputs, the node table, parameter
 * counts, FLOPs and metadata of a model. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
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

typedef struct row {
  char id[24], name[CELL], op[64], inputs[CELL], outputs[CELL], device[128], flops[32];
} row;

static void print_rows(const row *rows, int n) {
  const char *hdr[7] = {"id", "name", "op", "inputs", "output", "device", "flops"};
  size_t w[7];
  for (int c = 0; c < 7; c++)
    w[c] = strlen(hdr[c]);
  for (int i = 0; i < n; i++) {
    const char *cells[7] = {rows[i].id,      rows[i].name,   rows[i].op,   rows[i].inputs,
                            rows[i].outputs, rows[i].device, rows[i].flops};
    for (int c = 0; c < 7; c++)
      if (strlen(cells[c]) > w[c]) w[c] = strlen(cells[c]);
  }
  printf("  %-*s  %-*s  %-*s  %-*s  %-*s  %-*s  %s\n", (int)w[0], hdr[0], (int)w[1], hdr[1],
         (int)w[2], hdr[2], (int)w[3], hdr[3], (int)w[4], hdr[4], (int)w[5], hdr[5], hdr[6]);
  for (int i = 0; i < n; i++)
    printf("  %-*s  %-*s  %-*s  %-*s  %-*s  %-*s  %s\n", (int)w[0], rows[i].id, (int)w[1],
           rows[i].name, (int)w[2], rows[i].op, (int)w[3], rows[i].inputs, (int)w[4],
           rows[i].outputs, (int)w[5], rows[i].device, rows[i].flops);
}

typedef struct param_sum {
  int64_t elems;
  uint64_t bytes;
  int tensors;
} param_sum;

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

static void inspect_graph(const fg_graph *g, const char *path) {
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
  param_sum vars = {0, 0, 0}, consts = {0, 0, 0};
  int64_t flops_total = 0;
  int flops_unknown = 0;
  for (int id = 0; id < n; id++) {
    const char *op = fg_node_op(g, id);
    int64_t fl = fg_node_flops(g, id);
    if (fl >= 0) {
      if (flops_total <= INT64_MAX - fl) flops_total += fl;
    } else {
      flops_unknown++;
    }
    if (op && (strcmp(op, "variable") == 0 || strcmp(op, "constant") == 0)) {
      const fg_tensor *t = NULL;
      if (fg_node_attr_tensor(g, id, "value", &t) == 0 && t) {
        param_sum *p = op[0] == 'v' ? &vars : &consts;
        p->elems += fg_tensor_num_elements(t);
        p->bytes += fg_tensor_num_bytes(t);
        p->tensors++;
      }
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
    for (int k = 0; k < ni; k++) {
      fg_output in = fg_node_input(g, id, k);
      const char *nm = fg_node_name(g, in.node);
      snprintf(buf, sizeof buf, "%s%s:%d", k ? ", " : "", nm ? nm : "?", in.index);
      cell_append(r->inputs, buf);
    }
    if (ni <= 0) cell_append(r->inputs, "-");
    int no = fg_node_num_outputs(g, id);
    for (int k = 0; k < no; k++) {
      cli_describe_output(g, (fg_output){id, k}, shape, sizeof shape);
      snprintf(buf, sizeof buf, "%s%s", k ? "; " : "", shape);
      cell_append(r->outputs, buf);
    }
    if (no <= 0) cell_append(r->outputs, "-");
  }
  printf("nodes (%d):\n", n);
  if (rows) print_rows(rows, n);
  free(rows);
  print_placement(g, part, pst);
  fg_partition_free(part);
  fg_status_free(pst);

  int nt = vars.tensors + consts.tensors;
  printf("parameters: %" PRId64 " (%" PRIu64 " bytes) in %d tensor%s\n", vars.elems + consts.elems,
         vars.bytes + consts.bytes, nt, nt == 1 ? "" : "s");
  printf("  trainable (variables): %" PRId64 " (%" PRIu64 " bytes) in %d tensor%s\n", vars.elems,
         vars.bytes, vars.tensors, vars.tensors == 1 ? "" : "s");
  printf("  constants: %" PRId64 " (%" PRIu64 " bytes) in %d tensor%s\n", consts.elems,
         consts.bytes, consts.tensors, consts.tensors == 1 ? "" : "s");
  if (flops_unknown == 0)
    printf("total flops: %" PRId64 "\n", flops_total);
  else
    printf("total flops: %" PRId64 " over known shapes (%d node%s with unknown shapes)\n",
           flops_total, flops_unknown, flops_unknown == 1 ? "" : "s");
}

static int inspect_main(int argc, char **argv) {
  const cli_command *cmd = &cli_inspect_command;
  const char *model = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (cli_is_help(a)) {
      cli_print_help(cmd);
      return CLI_OK;
    }
    if (a[0] == '-' && a[1] != '\0') return cli_usage(cmd, "unknown option '%s'", a);
    if (model) return cli_usage(cmd, "unexpected argument '%s'", a);
    model = a;
  }
  if (!model) return cli_usage(cmd, "missing MODEL.fgb");
  fg_status *st = fg_status_new();
  if (!st) return cli_fail(FG_RESOURCE_EXHAUSTED, "out of memory");
  fg_graph *g = cli_load_model(model, st);
  int rc = CLI_OK;
  if (!g)
    rc = cli_fail_load(st, model);
  else
    inspect_graph(g, model);
  fg_graph_free(g);
  fg_status_free(st);
  return rc;
}

const cli_command cli_inspect_command = {
    "inspect", "Show a model's inputs, outputs, nodes, parameters and FLOPs.",
    "flowgraph inspect MODEL.fgb",
    "Prints the graph inputs (placeholders) and marked outputs with dtypes and\n"
    "shapes ('?' is a dimension known only when fed), the metadata, a node table\n"
    "(id, name, op, inputs as name:index, output dtype and shape, device, FLOPs;\n"
    "'-' where the FLOPs depend on an unknown dimension), the parameter count\n"
    "and bytes (variables = trainable, and constants) and the total FLOPs over\n"
    "the nodes whose shapes are known. A .json model is read in its JSON form.\n",
    inspect_main};
