/* Placement and partitioning: every node gets a device by the rules in
 * flowgraph/dist.h, and every edge between devices becomes one transfer
 * (a send/recv pair with a unique key). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/rewrite/partition.h"
#include "flowgraph/dist.h"
#include "graph/op_table.h"

struct fg_partition {
  int n_nodes;
  int *node_dev; /* per node: index into devs */
  fg_device *devs;
  int n_devs;
  int *dev_count; /* nodes per device */
  fg_transfer *xfers;
  int n_xfers;
  int n_ranks; /* 0: not cross-process; else 1 + the largest rank */
};

/* A device as one sortable 64-bit key: rank + 1 (0: no rank) in bits 32
 * and up, then cuda in bit 30 (cpu first), then the index (< 10^9 < 2^30).
 * Never negative, so -1 can mean "not placed yet". */
#define CODE_CUDA  ((int64_t)1 << 30)
#define CODE_RANK1 ((int64_t)1 << 32)
static int64_t code_of(fg_device d) {
  return (int64_t)(d.rank + 1) * CODE_RANK1 + (d.kind == FG_DEVICE_CUDA ? CODE_CUDA : 0) + d.index;
}
static fg_device device_of(int64_t code) {
  fg_device d = {code & CODE_CUDA ? FG_DEVICE_CUDA : FG_DEVICE_CPU, (int)(code & (CODE_CUDA - 1)),
                 (int)(code / CODE_RANK1) - 1};
  return d;
}
static int code_rank(int64_t code) { return (int)(code / CODE_RANK1) - 1; }

static int is_source(const fg_node *n) { return (fg_op_table[n->op].flags & FG_OPF_SOURCE) != 0; }
static int is_update(const fg_node *n) { return fg_op_table[n->op].mutable_inputs != 0; }

static int cmp_code(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

void fg_partition_free(fg_partition *p) {
  if (!p) return;
  for (int i = 0; i < p->n_xfers; i++)
    free((char *)p->xfers[i].key);
  free(p->xfers);
  free(p->node_dev);
  free(p->devs);
  free(p->dev_count);
  free(p);
}

/* The placement rules of flowgraph/dist.h into code[] (device codes). */
static int place(const fg_graph *g, int64_t dflt, int64_t *code, fg_status *st) {
  int n = g->n_nodes;
  for (int i = 0; i < n; i++) {
    const fg_node *nd = &g->nodes[i];
    code[i] = -1;
    if (!nd->device) continue;
    fg_device d;
    if (fg_parse_device(nd->device, &d, st) != 0) {
      char msg[600];
      snprintf(msg, sizeof msg, "%s", fg_status_message(st));
      fg_status_set(st, FG_INVALID_ARGUMENT, "node '%s' (%s): %s", nd->name,
                    fg_op_table[nd->op].name, msg);
      return -1;
    }
    code[i] = code_of(d);
  }
  /* Ranks: one device naming a rank makes the graph cross-process, and
   * then a device without one is rank 0's (before the rules below copy
   * codes around, and before the conflict check compares them). */
  int cross = code_rank(dflt) >= 0;
  for (int i = 0; i < n && !cross; i++)
    cross = code[i] >= 0 && code_rank(code[i]) >= 0;
  if (cross) {
    if (code_rank(dflt) < 0) dflt += CODE_RANK1;
    for (int i = 0; i < n; i++)
      if (code[i] >= 0 && code_rank(code[i]) < 0) code[i] += CODE_RANK1;
  }
  /* Rule 2: non-sources colocate with the node their FG_COLOCATE_ATTR
   * names (backward nodes with their forward node), else with their first
   * placed input (update ops excluded as inputs: they follow their
   * variable, rule 4). Update ops themselves wait for rule 4. */
  for (int i = 0; i < n; i++) {
    const fg_node *nd = &g->nodes[i];
    if (code[i] >= 0 || is_source(nd) || is_update(nd)) continue;
    int f = fg_node_colocate(g, nd);
    /* Only an earlier node has its code here (ids are topological); a name
     * that is missing, later or not yet placed leaves the input rule. */
    if (f >= 0 && f < i && code[f] >= 0) {
      code[i] = code[f];
      continue;
    }
    for (int k = 0; k < nd->n_inputs && code[i] < 0; k++) {
      int p = nd->inputs[k].node;
      if (!is_update(&g->nodes[p]) && code[p] >= 0) code[i] = code[p];
    }
    if (code[i] < 0) code[i] = dflt;
  }
  /* Rule 3, first half: unplaced sources follow their first consumer that
   * is not an update op (node ids are topological: the lowest id first). */
  for (int i = 0; i < n; i++) {
    const fg_node *nd = &g->nodes[i];
    if (is_source(nd) || is_update(nd)) continue;
    for (int k = 0; k < nd->n_inputs; k++) {
      int p = nd->inputs[k].node;
      if (code[p] < 0 && is_source(&g->nodes[p]) && !g->nodes[p].device) code[p] = code[i];
    }
  }
  /* Rule 4: unplaced updates go with their variable; a variable used only
   * by updates takes the update's device, which then follows rule 2. */
  for (int i = 0; i < n; i++) {
    const fg_node *nd = &g->nodes[i];
    if (code[i] >= 0 || !is_update(nd)) continue;
    int var = nd->inputs[0].node;
    if (code[var] >= 0) {
      code[i] = code[var];
      continue;
    }
    for (int k = 0; k < nd->n_inputs && code[i] < 0; k++) {
      int p = nd->inputs[k].node;
      if (!is_update(&g->nodes[p]) && code[p] >= 0) code[i] = code[p];
    }
    if (code[i] < 0) code[i] = dflt;
    code[var] = code[i];
  }
  /* Rule 3, second half: sources used only by updates, or by nothing. */
  for (int i = 0; i < n; i++) {
    const fg_node *nd = &g->nodes[i];
    for (int k = 0; k < nd->n_inputs; k++) {
      int p = nd->inputs[k].node;
      if (code[p] < 0) code[p] = code[i];
    }
  }
  for (int i = 0; i < n; i++)
    if (code[i] < 0) code[i] = dflt;
  /* Conflicts: a variable lives on one device with its updates. */
  for (int i = 0; i < n; i++) {
    const fg_node *nd = &g->nodes[i];
    for (int k = 0; k < nd->n_inputs; k++) {
      if (!fg_node_writes_input(nd, k)) continue;
      int var = nd->inputs[k].node;
      if (code[var] == code[i]) continue;
      char a[32], b[32];
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "node '%s' (%s) updates variable '%s' in place but is placed on '%s' while "
                    "the variable is on '%s'; place the update with its variable",
                    nd->name, fg_op_table[nd->op].name, g->nodes[var].name,
                    fg_device_str(device_of(code[i]), a, sizeof a),
                    fg_device_str(device_of(code[var]), b, sizeof b));
      return -1;
    }
  }
  return 0;
}

static int add_transfers(const fg_graph *g, fg_partition *p, fg_status *st) {
  int n = g->n_nodes, cap = 0;
  for (int i = 0; i < n; i++) {
    const fg_node *nd = &g->nodes[i];
    for (int k = 0; k < nd->n_inputs; k++) {
      fg_output src = nd->inputs[k];
      int sd = p->node_dev[src.node], dd = p->node_dev[i];
      if (sd == dd) continue;
      int dup = 0;
      for (int t = 0; t < p->n_xfers && !dup; t++)
        dup = p->xfers[t].src.node == src.node && p->xfers[t].src.index == src.index &&
              p->xfers[t].dst_device == dd;
      if (dup) continue;
      if (p->n_xfers == cap) {
        cap = cap ? 2 * cap : 16;
        fg_transfer *x = realloc(p->xfers, (size_t)cap * sizeof *x);
        if (!x) goto oom;
        p->xfers = x;
      }
      char dev[32];
      fg_device_str(p->devs[dd], dev, sizeof dev);
      size_t len = strlen(g->nodes[src.node].name) + 48;
      char *key = malloc(len);
      if (!key) goto oom;
      snprintf(key, len, "%s:%d->%s", g->nodes[src.node].name, src.index, dev);
      size_t bytes = 0;
      const fg_tinfo *ti = fg_graph_tinfo(g, src);
      int64_t b = ti && fg_tinfo_bytes(ti, &bytes) == 0 ? (int64_t)bytes : -1;
      /* A control input (group, the ctrl inputs of updates and all_reduce)
       * only orders: the pair carries no bytes. */
      if (fg_dist_control_input(nd, k)) b = 0;
      p->xfers[p->n_xfers++] = (fg_transfer){key, src, sd, dd, b};
    }
  }
  return 0;
oom:
  fg_status_set(st, FG_RESOURCE_EXHAUSTED, "partition: out of memory");
  return -1;
}

fg_partition *fg_partition_new(const fg_graph *g, const char *default_device, fg_status *st) {
  if (!g) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_partition_new: graph is NULL");
    return NULL;
  }
  if (fg_graph_status(g, st) != FG_OK) return NULL;
  fg_device dd;
  if (fg_parse_device(default_device ? default_device : "cpu:0", &dd, st) != 0) return NULL;
  fg_partition *p = calloc(1, sizeof *p);
  int n = g->n_nodes;
  int64_t *code = malloc(((size_t)n + 1) * sizeof *code);
  int64_t *sorted = malloc(((size_t)n + 1) * sizeof *sorted);
  if (!p || !code || !sorted) {
    free(code);
    free(sorted);
    free(p);
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "partition: out of memory");
    return NULL;
  }
  p->n_nodes = n;
  if (place(g, code_of(dd), code, st) != 0) goto fail;
  memcpy(sorted, code, (size_t)n * sizeof *sorted);
  qsort(sorted, (size_t)n, sizeof *sorted, cmp_code);
  int nd = 0;
  for (int i = 0; i < n; i++)
    if (i == 0 || sorted[i] != sorted[i - 1]) sorted[nd++] = sorted[i];
  if (nd == 0) sorted[nd++] = code_of(dd);
  p->devs = malloc((size_t)nd * sizeof *p->devs);
  p->dev_count = calloc((size_t)nd, sizeof *p->dev_count);
  p->node_dev = malloc(((size_t)n + 1) * sizeof *p->node_dev);
  if (!p->devs || !p->dev_count || !p->node_dev) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "partition: out of memory");
    goto fail;
  }
  p->n_devs = nd;
  for (int d = 0; d < nd; d++)
    p->devs[d] = device_of(sorted[d]);
  /* Sorted by rank: the last device has the largest. */
  p->n_ranks = p->devs[nd - 1].rank + 1;
  for (int i = 0; i < n; i++) {
    int lo = 0, hi = nd - 1;
    while (lo < hi) {
      int mid = (lo + hi) / 2;
      if (sorted[mid] < code[i])
        lo = mid + 1;
      else
        hi = mid;
    }
    p->node_dev[i] = lo;
    p->dev_count[lo]++;
  }
  if (add_transfers(g, p, st) != 0) goto fail;
  free(code);
  free(sorted);
  fg_status_clear(st);
  return p;
fail:
  free(code);
  free(sorted);
  fg_partition_free(p);
  return NULL;
}

int fg_partition_num_devices(const fg_partition *p) { return p ? p->n_devs : 0; }

fg_device fg_partition_device(const fg_partition *p, int i) {
  fg_device none = {FG_DEVICE_CPU, -1, -1};
  return p && i >= 0 && i < p->n_devs ? p->devs[i] : none;
}

int fg_partition_node_device(const fg_partition *p, int node) {
  return p && node >= 0 && node < p->n_nodes ? p->node_dev[node] : -1;
}

int fg_partition_num_nodes(const fg_partition *p, int device) {
  return p && device >= 0 && device < p->n_devs ? p->dev_count[device] : 0;
}

int fg_partition_num_ranks(const fg_partition *p) { return p ? p->n_ranks : 0; }

int fg_partition_num_transfers(const fg_partition *p) { return p ? p->n_xfers : 0; }

const fg_transfer *fg_partition_transfer(const fg_partition *p, int i) {
  return p && i >= 0 && i < p->n_xfers ? &p->xfers[i] : NULL;
}

/* Internal: the per-node device index array (n_nodes entries). */
const int *fg_partition_node_devices(const fg_partition *p) { return p ? p->node_dev : NULL; }
