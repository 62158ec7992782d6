/* A session's dist state (executor/dist/exec.h): the partition of its graph, a pool
 * per device when there are several, and the communicators of the
 * all_reduce nodes. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/comm/comm_inproc.h"
#include "dist/comm/comm_mpi.h"
#include "executor/dist/exec.h"
#include "dist/comm/shm_arena.h"
#include "graph/op_table.h"

struct fg_dist_session {
  fg_partition *part;
  fg_dist_exec exec;
  fg_pool **pools;  /* per device (several devices only) */
  fg_comm **owned;  /* the in-process group's handles, per device or NULL */
  fg_comm *process; /* attached with fg_session_set_comm; not owned */
  fg_comm *data;    /* attached with fg_session_set_data_comm; not owned */
  int *dev_rank;    /* cross-process graphs: each device's rank */
  int *local_index; /* per device: its position among this process's, or -1 */
  int use_exec;     /* exec is needed: several devices or a communicator */
  int agreed;       /* the processes were found to hold the same graph */
  /* A GPU session whose graph places nodes on CPU devices: per node id, 1
   * for a node that runs on the host (fg_dist_session_host_nodes); NULL
   * otherwise. */
  unsigned char *host_node;
  int host_gpu; /* ... and the partition's index of the GPU */
};

static void free_parts(fg_dist_session *ds) {
  int nd = ds->exec.n_dev;
  /* The lane threads first: they use the pools and communicators. */
  fg_dist_runner_free(ds->exec.runner);
  ds->exec.runner = NULL;
  for (int d = 0; ds->pools && d < nd; d++)
    fg_pool_free(ds->pools[d]);
  for (int d = 0; ds->owned && d < nd; d++)
    if (ds->owned[d]) ds->owned[d]->ops->free(ds->owned[d]);
  free(ds->pools);
  free(ds->owned);
  free(ds->exec.par);
  free(ds->exec.comm);
  free(ds->dev_rank);
  ds->dev_rank = NULL;
  free(ds->local_index);
  ds->local_index = NULL;
  free(ds->host_node);
  ds->host_node = NULL;
  fg_partition_free(ds->part);
  ds->pools = NULL;
  ds->owned = NULL;
  fg_dist_runner_free(ds->exec.runner);
  ds->exec = (fg_dist_exec){0, NULL, NULL, NULL, NULL, 0, -1, NULL, NULL, 0, NULL, NULL, NULL, 0};
  ds->part = NULL;
  ds->use_exec = 0;
}

void fg_dist_session_free(fg_dist_session *ds) {
  if (!ds) return;
  free_parts(ds);
  free(ds);
}

/* The k-th all_reduce nodes of the devices run as one collective, after
 * the (k-1)-th, so the graph with each such group merged into one node and
 * an edge from each group to the next must have no cycle: a member that
 * needs another member's result, or a later group's, would wait for it
 * forever. Kahn's algorithm over that merged graph; a group left
 * unfinished is named. off/ids as in check_pairs, counts equal per device. */
static int check_pair_order(const fg_graph *g, const fg_partition *part, const int *node_dev,
                            const int *off, const int *ids, int first, fg_status *st) {
  int n = g->n_nodes, k_n = off[first + 1] - off[first];
  int nd = fg_partition_num_devices(part);
  /* unit[id]: the merged node id belongs to; groups are n .. n + k_n - 1. */
  int *unit = malloc(((size_t)n + 1) * sizeof *unit);
  int *indeg = calloc((size_t)n + (size_t)k_n + 1, sizeof *indeg);
  int *queue = malloc(((size_t)n + (size_t)k_n + 1) * sizeof *queue);
  /* Consumers of each node, to walk edges forwards (CSR). */
  int *coff = calloc((size_t)n + 2, sizeof *coff), *cons = NULL;
  if (!unit || !indeg || !queue || !coff) goto oom;
  for (int id = 0; id < n; id++)
    unit[id] = id;
  for (int d = 0; d < nd; d++)
    for (int k = off[d]; k < off[d + 1]; k++)
      unit[ids[k]] = n + (k - off[d]);
  int n_edges = 0;
  for (int id = 0; id < n; id++)
    for (int i = 0; i < g->nodes[id].n_inputs; i++) {
      int p = g->nodes[id].inputs[i].node;
      coff[p + 2]++, n_edges++;
    }
  for (int id = 0; id < n; id++)
    coff[id + 2] += coff[id + 1];
  cons = malloc((size_t)n_edges * sizeof *cons + 1);
  if (!cons) goto oom;
  int self = -1; /* a member reading another member of its own group */
  for (int id = 0; id < n; id++)
    for (int i = 0; i < g->nodes[id].n_inputs; i++) {
      int p = g->nodes[id].inputs[i].node;
      cons[coff[p + 1]++] = id;
      if (unit[p] != unit[id])
        indeg[unit[id]]++;
      else if (p != id && self < 0)
        self = id;
    }
  /* Each device makes its calls in pairing order (executor/plan.c chains
   * them), so group k also waits for group k - 1. Members of group u: its
   * nodes; a group is done when all its edges in are; walking out of it
   * walks out of every member. */
  for (int k = 1; k < k_n; k++)
    indeg[n + k]++;
  int head = 0, tail = 0, done = 0;
  for (int u = 0; u < n + k_n; u++)
    if ((u >= n || unit[u] == u) && indeg[u] == 0) queue[tail++] = u;
  while (head < tail) {
    int u = queue[head++];
    done++;
    if (u >= n && u + 1 < n + k_n && --indeg[u + 1] == 0) queue[tail++] = u + 1;
    for (int d = 0; d < (u >= n ? nd : 1); d++) {
      int lo = u >= n ? (off[d + 1] > off[d] ? off[d] + (u - n) : -1) : -1;
      int id = u >= n ? (lo >= 0 ? ids[lo] : -1) : u;
      if (id < 0) continue;
      for (int c = coff[id]; c < coff[id + 1]; c++) {
        int v = unit[cons[c]];
        if (v != u && --indeg[v] == 0) queue[tail++] = v;
      }
    }
  }
  int total = k_n;
  for (int id = 0; id < n; id++)
    total += unit[id] == id;
  int rc = 0;
  if (done != total || self >= 0) {
    /* The group of a member reading its partner, else the first group not
     * done: name two of its members. */
    int k = 0;
    if (self >= 0)
      k = unit[self] - n;
    else
      while (k < k_n && indeg[n + k] == 0)
        k++;
    int a = -1, b = -1;
    for (int d = 0; d < nd && k < k_n; d++)
      if (off[d + 1] > off[d]) {
        if (a < 0)
          a = ids[off[d] + k];
        else if (b < 0)
          b = ids[off[d] + k];
      }
    char da[32] = "?", db[32] = "?";
    if (a >= 0) fg_device_str(fg_partition_device(part, node_dev[a]), da, sizeof da);
    if (b >= 0) fg_device_str(fg_partition_device(part, node_dev[b]), db, sizeof db);
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "all_reduce nodes '%s' (on '%s') and '%s' (on '%s') reduce together (each is "
                  "all_reduce %d on its device), but one of them needs, through its inputs, the "
                  "result of that reduction or of a later one: they would wait for each other "
                  "forever",
                  a >= 0 ? g->nodes[a].name : "?", da, b >= 0 ? g->nodes[b].name : "?", db, k + 1);
    rc = -1;
  }
  free(unit), free(indeg), free(queue), free(coff), free(cons);
  return rc;
oom:
  free(unit), free(indeg), free(queue), free(coff), free(cons);
  fg_status_set(st, FG_RESOURCE_EXHAUSTED, "session: out of memory");
  return -1;
}

/* In one process the devices holding all_reduce nodes reduce together, the
 * k-th of each (node id order) with the k-th of the others, as
 * fg_data_parallel builds them. A k-th without partners would wait for
 * them until the deadline, and partners of different dtypes or forms
 * would read each other's buffers as the wrong type: refused here, naming
 * the nodes. */
static int check_pairs(const fg_graph *g, const fg_partition *part, const int *node_dev,
                       fg_status *st) {
  int nd = fg_partition_num_devices(part), n = 0;
  /* ids[off[d] .. off[d + 1]): device d's all_reduce nodes in id order. */
  int *off = calloc((size_t)nd + 2, sizeof *off), *ids = NULL, *fill = NULL;
  for (int id = 0; off && id < g->n_nodes; id++)
    if (fg_node_is_collective(&g->nodes[id])) off[node_dev[id] + 2]++, n++;
  if (off) ids = malloc((size_t)n * sizeof *ids + 1);
  if (!off || !ids) {
    free(off);
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "session: out of memory");
    return -1;
  }
  for (int d = 0; d < nd; d++)
    off[d + 2] += off[d + 1];
  fill = off + 1; /* fill[d] counts up from off[d] to off[d + 1] */
  for (int id = 0; id < g->n_nodes; id++)
    if (fg_node_is_collective(&g->nodes[id])) ids[fill[node_dev[id]]++] = id;
  int first = -1, rc = 0;
  for (int d = 0; d < nd && rc == 0; d++) {
    int cnt = off[d + 1] - off[d];
    if (cnt == 0) continue;
    if (first < 0) {
      first = d;
      continue;
    }
    int cf = off[first + 1] - off[first];
    char da[32], db[32];
    fg_device_str(fg_partition_device(part, first), da, sizeof da);
    fg_device_str(fg_partition_device(part, d), db, sizeof db);
    for (int k = 0; k < cnt && k < cf && rc == 0; k++) {
      int a = ids[off[first] + k], b = ids[off[d] + k];
      fg_dtype ta = g->nodes[a].outputs[0].dtype, tb = g->nodes[b].outputs[0].dtype;
      int wa = fg_attr_int_or(&g->nodes[a], "weighted", 0) != 0,
          wb = fg_attr_int_or(&g->nodes[b], "weighted", 0) != 0;
      if (ta == tb && wa == wb) continue;
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "all_reduce nodes '%s' (%s%s, on '%s') and '%s' (%s%s, on '%s') reduce "
                    "together (each is all_reduce %d on its device) but differ in %s",
                    g->nodes[a].name, fg_dtype_name(ta), wa ? ", weighted" : "", da,
                    g->nodes[b].name, fg_dtype_name(tb), wb ? ", weighted" : "", db, k + 1,
                    ta != tb ? "dtype" : "form (weighted or not)");
      rc = -1;
    }
    if (rc == 0 && cnt != cf) {
      int more = cnt > cf ? d : first, less = cnt > cf ? first : d;
      int lone = ids[off[more] + (cnt < cf ? cnt : cf)];
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "all_reduce node '%s' is all_reduce %d on '%s', and '%s' holds only %d: the "
                    "devices holding all_reduce nodes reduce together, the k-th of each with the "
                    "k-th of the others, so each needs as many",
                    g->nodes[lone].name, (cnt < cf ? cnt : cf) + 1, more == d ? db : da,
                    less == d ? db : da, cnt < cf ? cnt : cf);
      rc = -1;
    }
  }
  if (rc == 0 && first >= 0) rc = check_pair_order(g, part, node_dev, off, ids, first, st);
  free(off);
  free(ids);
  return rc;
}

/* An NCCL communicator reduces GPU memory of one device: refused where it
 * would be handed host buffers or another GPU's (FG_INVALID_ARGUMENT,
 * naming the node and devices), and for a cross-process graph's transfers
 * (it has no point-to-point). Checked here so that the mistake shows at
 * fg_session_new / fg_session_set_comm, not as a crash inside NCCL. */
static int check_device_memory(const fg_graph *g, const fg_dist_session *nw, const int *has_ar,
                               int ranks, fg_status *st) {
  int gpu = fg_comm_gpu(nw->process);
  if (ranks > 0 && gpu >= 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "session: the process communicator attached is NCCL's (cuda:%d), which has no "
                  "point-to-point, but the graph is cross-process (it names rank:R/ devices); "
                  "attach the MPI communicator",
                  gpu);
    return -1;
  }
  const int *node_dev = nw->exec.node_dev;
  for (int id = 0; id < g->n_nodes; id++) {
    int d = node_dev[id];
    if (!fg_node_is_collective(&g->nodes[id]) || !has_ar[d]) continue;
    gpu = fg_comm_gpu(nw->exec.comm[d]);
    fg_device dv = fg_partition_device(nw->part, d);
    if (gpu < 0 || (dv.kind == FG_DEVICE_CUDA && dv.index == gpu)) continue;
    char dn[32];
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "all_reduce node '%s' runs on '%s', but its communicator is NCCL's on cuda:%d, "
                  "which reduces that GPU's memory only: run the session on cuda:%d, or attach "
                  "an MPI or in-process communicator",
                  g->nodes[id].name, fg_device_str(dv, dn, sizeof dn), gpu, gpu);
    return -1;
  }
  return 0;
}

/* The cores this process may run on (its affinity mask) and the machine's
 * online cores; each at least 1. */
static void machine_cores(int *avail, int *online) {
  long on = sysconf(_SC_NPROCESSORS_ONLN);
  *online = on > 0 && on < INT_MAX ? (int)on : 1;
  *avail = *online;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) *avail = CPU_COUNT(&set);
}

/* A GPU session whose graph places nodes on CPU devices as well (the
 * partition's other devices; a cross-process graph is refused, as build()
 * refuses one with a CUDA node that runs): those nodes run on the host
 * inside the GPU's plan (executor/cuda/backend.c stages their inputs and
 * outputs through pinned memory), every tensor stays in the GPU's memory
 * plan, and the session keeps one device's state. Two GPUs, collectives
 * and communicators are refused here (FG_UNIMPLEMENTED, naming what to
 * change): a CPU node there would need the multi-device executor, which
 * does not run GPU kernels. 0 with nw->host_node set, or -1 with status. */
static int host_steps(const fg_graph *g, fg_dist_session *nw, fg_status *st) {
  const fg_partition *part = nw->part;
  const int nd = fg_partition_num_devices(part);
  const int *node_dev = fg_partition_node_devices(part);
  if (fg_partition_num_ranks(part) > 0) {
    /* Only sources can be on a CUDA device here (build() refused the
     * rest): a default-placed source, such as an unused constant. */
    int id = 0;
    while (id < g->n_nodes - 1 && fg_partition_device(part, node_dev[id]).kind != FG_DEVICE_CUDA)
      id++;
    char dn[32];
    fg_status_set(st, FG_UNIMPLEMENTED,
                  "node '%s' of a cross-process graph (one placing nodes on rank:R/ devices) is "
                  "on '%s': model parallelism across processes supports cpu:N devices only (run "
                  "the session on cpu:0)",
                  g->nodes[id].name,
                  fg_device_str(fg_partition_device(part, node_dev[id]), dn, sizeof dn));
    return -1;
  }
  int gpu = -1;
  for (int d = 0; d < nd; d++) {
    fg_device dv = fg_partition_device(part, d);
    if (dv.kind != FG_DEVICE_CUDA) continue;
    if (gpu >= 0) {
      char a[32], b[32];
      fg_status_set(st, FG_UNIMPLEMENTED,
                    "the graph uses two CUDA devices (%s and %s); a session runs on one GPU, "
                    "with nodes placed on cpu:N running on the host",
                    fg_device_str(fg_partition_device(part, gpu), a, sizeof a),
                    fg_device_str(dv, b, sizeof b));
      return -1;
    }
    gpu = d;
  }
  /* The first node placed on a CPU device, for the messages. */
  int host = 0;
  while (host < g->n_nodes - 1 && node_dev[host] == gpu)
    host++;
  int ar = 0;
  while (ar < g->n_nodes && !fg_node_is_collective(&g->nodes[ar]))
    ar++;
  if (nw->process || nw->data || ar < g->n_nodes) {
    char dh[32], dg[32], why[200];
    if (ar < g->n_nodes)
      snprintf(why, sizeof why, "the graph holds all_reduce nodes ('%s')", g->nodes[ar].name);
    else
      snprintf(why, sizeof why, "a communicator is attached");
    fg_status_set(st, FG_UNIMPLEMENTED,
                  "node '%s' is placed on '%s' in a session on '%s', and %s: a GPU session runs "
                  "nodes on the host only without collectives (data parallelism); place every "
                  "node on the GPU",
                  g->nodes[host].name,
                  fg_device_str(fg_partition_device(part, node_dev[host]), dh, sizeof dh),
                  fg_device_str(fg_partition_device(part, gpu), dg, sizeof dg), why);
    return -1;
  }
  nw->host_node = calloc((size_t)g->n_nodes + 1, 1);
  if (!nw->host_node) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "session: out of memory");
    return -1;
  }
  for (int id = 0; id < g->n_nodes; id++)
    nw->host_node[id] = node_dev[id] != gpu;
  nw->host_gpu = gpu;
  return 0;
}

/* The rest of build, once the communicators are chosen: this process's
 * devices (all, or those of its rank in a cross-process graph), their
 * thread pools, and the runner's lanes. 0, or -1 with st set. */
static int start_devices(fg_dist_session *nw, const fg_session_options *o, int nd, int ranks,
                         int n_ar_dev, fg_status *st) {
  int threads = o->num_threads;
  /* A cross-process graph: this process runs its rank's devices and
   * exchanges tensors with the others through the process communicator. */
  nw->exec.my_rank = -1;
  nw->local_index = malloc((size_t)nd * sizeof *nw->local_index);
  if (!nw->local_index) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "session: out of memory");
    return -1;
  }
  if (ranks > 0) {
    nw->dev_rank = malloc((size_t)nd * sizeof *nw->dev_rank);
    if (!nw->dev_rank) {
      fg_status_set(st, FG_RESOURCE_EXHAUSTED, "session: out of memory");
      return -1;
    }
    for (int d = 0; d < nd; d++)
      nw->dev_rank[d] = fg_partition_device(nw->part, d).rank;
    nw->exec.dev_rank = nw->dev_rank;
    nw->exec.my_rank = nw->process ? nw->process->rank : -2;
    nw->exec.p2p = nw->process;
    if (nw->process && ranks > nw->process->size) {
      char dev[48];
      for (int d = 0; d < nd; d++)
        if (nw->dev_rank[d] >= nw->process->size) {
          fg_device_str(fg_partition_device(nw->part, d), dev, sizeof dev);
          break;
        }
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "session: the graph places nodes on device '%s' but the process "
                    "communicator has %d rank%s (0 to %d); start at least %d processes",
                    dev, nw->process->size, nw->process->size == 1 ? "" : "s",
                    nw->process->size - 1, ranks);
      return -1;
    }
    nw->use_exec = 1;
  }
  /* This process's devices: all, unless another rank runs some (without a
   * communicator yet every device counts; runs are refused until one is
   * attached, which rebuilds this state). */
  int n_local = 0;
  for (int d = 0; d < nd; d++)
    nw->local_index[d] =
        nw->exec.my_rank < 0 || nw->dev_rank[d] == nw->exec.my_rank ? n_local++ : -1;
  /* A rank that runs no device still receives the fetches: one lane set. */
  nw->exec.n_local = n_local ? n_local : 1;
  nw->exec.local_index = nw->local_index;
  if (nd > 1) {
    nw->use_exec = 1;
    nw->pools = calloc((size_t)nd, sizeof *nw->pools);
    if (!nw->pools) {
      fg_status_set(st, FG_RESOURCE_EXHAUSTED, "session: out of memory");
      return -1;
    }
    /* The session's threads are shared by the devices this process runs. */
    int per = n_local && threads / n_local > 1 ? threads / n_local : 1;
    for (int d = 0; d < nd; d++) {
      if (nw->local_index[d] < 0) continue;
      nw->pools[d] = fg_pool_new(per);
      if (!nw->pools[d]) {
        fg_status_set(st, FG_RESOURCE_EXHAUSTED, "session: cannot start %d threads for device %d",
                      per, d);
        return -1;
      }
      if (per > 1) nw->exec.par[d] = (fg_kparallel){nw->pools[d], fg_pool_parallel_for_fn};
    }
  }
  if (nw->use_exec) {
    /* Collectives (and receives from other processes, which must never
     * stall a device's compute) get lanes of their own. */
    int own = o->collective_lanes > 0;
    if (o->collective_lanes == 0) {
      int avail = 0, online = 0;
      machine_cores(&avail, &online);
      const fg_comm *pc = nw->data ? nw->data : nw->process;
      own = fg_dist_auto_own_lanes(threads > n_local ? threads : n_local,
                                   fg_comm_mpi_host_procs(pc), avail, online);
    }
    nw->exec.comm_lanes = ((nw->process || n_ar_dev > 1) && own) || nw->exec.my_rank >= 0;
    /* An all_reduce over shared memory reads the other ranks' buffers in
     * place when they are in arenas it can map. */
    int shares = 0;
    for (int d = 0; d < nd && !shares; d++)
      shares = nw->exec.comm[d] && fg_comm_mpi_shares_arenas(nw->exec.comm[d]);
    if (shares) {
      nw->exec.arena_alloc = fg_shm_arena_alloc_host;
      nw->exec.arena_free = fg_shm_arena_free;
      nw->exec.shared_arenas = 1;
    }
    nw->exec.runner = fg_dist_runner_new(fg_dist_num_lanes(&nw->exec), st);
    if (!nw->exec.runner) return -1;
  }
  return 0;
}

/* Builds a complete new state into `nw` (zeroed, process comm set). */
static int build(const fg_graph *g, fg_dist_session *nw, const fg_session_options *o,
                 fg_status *st) {
  const char *default_device = o->device;
  nw->part = fg_partition_new(g, default_device, st);
  if (!nw->part) return -1;
  int nd = fg_partition_num_devices(nw->part);
  int cuda = 0;
  for (int d = 0; d < nd; d++)
    cuda |= fg_partition_device(nw->part, d).kind == FG_DEVICE_CUDA;
  const int *node_dev = fg_partition_node_devices(nw->part);
  int ranks = fg_partition_num_ranks(nw->part);
  if (ranks > 0) {
    /* Cross-process graphs run on the dist runner with CPU kernels; the
     * CUDA executor does not fit them yet. Refused here rather than run
     * wrongly. */
    for (int id = 0; id < g->n_nodes; id++) {
      const fg_node *n = &g->nodes[id];
      fg_device dv = fg_partition_device(nw->part, node_dev[id]);
      /* A source only names where its tensor lives; name a node that runs. */
      if (dv.kind != FG_DEVICE_CUDA || (fg_op_table[n->op].flags & FG_OPF_SOURCE)) continue;
      char dn[32];
      fg_status_set(st, FG_UNIMPLEMENTED,
                    "node '%s' (%s, on '%s') of a cross-process graph (one placing nodes on "
                    "rank:R/ devices) runs on a CUDA device: model parallelism across processes "
                    "supports cpu:N devices only",
                    n->name, fg_op_table[n->op].name, fg_device_str(dv, dn, sizeof dn));
      return -1;
    }
  } else if (nw->data) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "session: a data communicator (fg_session_set_data_comm) serves graphs split "
                  "across processes (devices rank:R/...), and this graph names no rank; for "
                  "data parallelism alone attach the communicator with fg_session_set_comm");
    return -1;
  }
  if (cuda && nd > 1) return host_steps(g, nw, st);
  if (!cuda && nd > 0 && ranks == 0 && default_device && strncmp(default_device, "cuda:", 5) == 0) {
    /* A GPU session whose every node is placed on CPU devices: host steps
     * all, which only a mistake asks for (unplaced nodes would run on the
     * GPU). */
    char dn[32];
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "the session runs on '%s' but the graph places every node on CPU devices "
                  "(node '%s' on '%s'): run the session on cpu:0, or place nodes on '%s'",
                  default_device, g->n_nodes ? g->nodes[0].name : "",
                  fg_device_str(fg_partition_device(nw->part, 0), dn, sizeof dn), default_device);
    return -1;
  }
  /* Devices holding all_reduce nodes, in device order = rank order. */
  int *has_ar = calloc((size_t)nd, sizeof *has_ar);
  nw->exec.n_dev = nd;
  nw->exec.node_dev = node_dev;
  nw->exec.par = calloc((size_t)nd, sizeof *nw->exec.par);
  nw->exec.comm = calloc((size_t)nd, sizeof *nw->exec.comm);
  nw->owned = calloc((size_t)nd, sizeof *nw->owned);
  if (!has_ar || !nw->exec.par || !nw->exec.comm || !nw->owned) {
    free(has_ar);
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "session: out of memory");
    return -1;
  }
  int n_ar_dev = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (fg_node_is_collective(&g->nodes[i]) && !has_ar[node_dev[i]]) {
      has_ar[node_dev[i]] = 1;
      n_ar_dev++;
    }
  int rc = 0;
  if (ranks > 0) {
    /* Each rank's all_reduce nodes reduce with the same stage of the
     * other replicas (fg_data_parallel chains them per rank, so each
     * stage's ranks issue them in one order); without a data communicator
     * this group of processes is the only replica: the identity. */
    for (int d = 0; d < nd; d++)
      nw->exec.comm[d] = nw->data;
  } else if (nw->process) {
    if (n_ar_dev > 1) {
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "session: a process communicator is attached but all_reduce nodes are on %d "
                    "devices; with one, every all_reduce must be on one device (replicas = 1)",
                    n_ar_dev);
      rc = -1;
    }
    for (int d = 0; d < nd; d++)
      nw->exec.comm[d] = nw->process;
    nw->use_exec = 1;
  } else if (n_ar_dev > 1) {
    fg_comm *h[FG_MAX_CPU_DEVICES];
    if (check_pairs(g, nw->part, node_dev, st) != 0) {
      rc = -1;
    } else if (fg_comm_inproc_group(n_ar_dev, o->dist_timeout_s, h, st) != 0) {
      rc = -1;
    } else {
      for (int d = 0, r = 0; d < nd; d++)
        if (has_ar[d]) nw->owned[d] = nw->exec.comm[d] = h[r++];
    }
    nw->use_exec = 1;
  }
  if (rc == 0) rc = check_device_memory(g, nw, has_ar, ranks, st);
  free(has_ar);
  if (rc != 0) return -1;
  return start_devices(nw, o, nd, ranks, n_ar_dev, st);
}

int fg_dist_session_sync(const fg_graph *g, fg_dist_session **ds, const fg_session_options *o,
                         fg_status *st) {
  fg_dist_session *nw = calloc(1, sizeof *nw);
  if (!nw) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "session: out of memory");
    return -1;
  }
  nw->process = *ds ? (*ds)->process : NULL;
  nw->data = *ds ? (*ds)->data : NULL;
  if (build(g, nw, o, st) != 0) {
    fg_dist_session_free(nw);
    return -1;
  }
  fg_dist_session_free(*ds);
  *ds = nw;
  return 0;
}

int fg_dist_session_set_comm(const fg_graph *g, fg_dist_session **ds, fg_comm *comm, int data,
                             const fg_session_options *o, fg_status *st) {
  if (!*ds && comm) {
    *ds = calloc(1, sizeof **ds);
    if (!*ds) {
      fg_status_set(st, FG_RESOURCE_EXHAUSTED, "session: out of memory");
      return -1;
    }
  }
  if (!*ds) return fg_dist_session_sync(g, ds, o, st);
  fg_comm **slot = data ? &(*ds)->data : &(*ds)->process;
  fg_comm *old = *slot;
  *slot = comm;
  if (fg_dist_session_sync(g, ds, o, st) != 0) {
    /* sync kept the old state (slot still points into it), which holds
     * the new pointer: put it back. */
    *slot = old;
    return -1;
  }
  return 0;
}

const fg_dist_exec *fg_dist_session_exec(fg_dist_session *ds) {
  return ds && ds->use_exec ? &ds->exec : NULL;
}

void fg_dist_session_before_run(fg_dist_session *ds) {
  for (int d = 0; ds && ds->owned && d < ds->exec.n_dev; d++)
    fg_comm_inproc_reset(ds->owned[d]);
}

const unsigned char *fg_dist_session_host_nodes(const fg_dist_session *ds) {
  return ds ? ds->host_node : NULL;
}

int fg_dist_session_step_device(const fg_dist_session *ds, int node) {
  return ds && ds->host_node ? fg_partition_node_devices(ds->part)[node] : 0;
}

int fg_dist_session_arena_device(const fg_dist_session *ds) {
  return ds && ds->host_node ? ds->host_gpu : 0;
}

const fg_partition *fg_dist_session_partition(const fg_dist_session *ds) {
  return ds ? ds->part : NULL;
}

int fg_dist_session_num_devices(const fg_dist_session *ds) { return ds ? ds->exec.n_dev : 0; }

fg_comm *fg_dist_session_replica_comm(const fg_dist_session *ds) {
  if (!ds || !ds->part) return NULL;
  return fg_partition_num_ranks(ds->part) > 0 ? ds->data : ds->process;
}

int fg_dist_session_owns_var(const fg_dist_session *ds, int node) {
  if (!ds || !ds->part || fg_partition_num_ranks(ds->part) == 0) return 1;
  return ds->dev_rank && ds->exec.my_rank >= 0 &&
         ds->dev_rank[ds->exec.node_dev[node]] == ds->exec.my_rank;
}

int fg_dist_session_agreed(const fg_dist_session *ds) {
  return !ds || ds->agreed || (!ds->process && !ds->data);
}

uint64_t fg_dist_session_vars_hash(const fg_dist_session *ds, fg_tensor *const *vars, int n_vars,
                                   int values) {
  uint64_t h = fg_hash64(0, "variables", 9);
  for (int id = 0; id < n_vars; id++) {
    if (!vars[id] || !fg_dist_session_owns_var(ds, id)) continue;
    int64_t head[2] = {id, (int64_t)fg_tensor_num_bytes(vars[id])};
    h = fg_hash64(h, head, sizeof head);
    if (values) h = fg_hash64(h, fg_tensor_data(vars[id]), fg_tensor_num_bytes(vars[id]));
  }
  return h;
}

static int agree(fg_dist_session *ds, const fg_graph *g, fg_tensor *const *vars, int n_vars,
                 fg_status *st);

int fg_dist_session_agree(fg_dist_session *ds, const fg_graph *g, fg_tensor *const *vars,
                          int n_vars, fg_status *st) {
  if (fg_dist_session_agreed(ds)) return 0;
  int rc = agree(ds, g, vars, n_vars, st);
  if (rc != 0 && fg_status_code(st) != FG_INVALID_ARGUMENT) {
    /* A peer that never came (or died): say what was being exchanged. */
    char msg[768];
    snprintf(msg, sizeof msg, "%s", fg_status_message(st));
    fg_status_set(st, fg_status_code(st),
                  "comparing the graph across processes before the first run with the "
                  "communicator: %s",
                  msg);
  }
  if (rc == 0) ds->agreed = 1;
  return rc;
}

/* Round 1 of agree: one hash compared over c. *bad is set on the first
 * difference (its message kept in st); -1 only when the exchange itself
 * failed (a peer missing: nothing more can be compared). */
static int compare(fg_comm *c, uint64_t h, const char *what, const char *hint, int *bad,
                   fg_status *st) {
  if (!c) return 0;
  fg_status *tmp = fg_status_new();
  if (!tmp) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "session: out of memory");
    return -1;
  }
  int rc = 0;
  if (fg_comm_check_same(c, h, what, hint, tmp) != 0) {
    if (fg_status_code(tmp) != FG_INVALID_ARGUMENT || !*bad)
      fg_status_set(st, fg_status_code(tmp), "%s", fg_status_message(tmp));
    if (fg_status_code(tmp) != FG_INVALID_ARGUMENT) rc = -1;
    *bad = 1;
  }
  fg_status_free(tmp);
  return rc;
}

/* Every process takes part in every exchange, whatever it found, so that
 * none leaves one that its peers still wait in. With two groups (hybrid)
 * a second round shares the verdicts: a difference found in one group
 * reaches every process of the grid of replicas x stages, so all fail. */
static int agree(fg_dist_session *ds, const fg_graph *g, fg_tensor *const *vars, int n_vars,
                 fg_status *st) {
  static const char graph_hint[] =
      "every process must build or load the same graph: the same nodes, names, ranks of "
      "devices, attributes and constants";
  static const char vars_hint[] =
      "data-parallel replicas must start from the same values: initialise them alike, or call "
      "fg_session_broadcast_variables on every rank after attaching the communicator";
  uint64_t h = fg_graph_structure_hash(g);
  int bad = 0;
  if (compare(ds->process, h, "graph", graph_hint, &bad, st) != 0 ||
      compare(ds->data, h, "graph", graph_hint, &bad, st) != 0 ||
      compare(fg_dist_session_replica_comm(ds), fg_dist_session_vars_hash(ds, vars, n_vars, 1),
              "variables", vars_hint, &bad, st) != 0)
    return -1;
  fg_comm *groups[2] = {ds->process, ds->data};
  for (int k = 0; k < 2 && ds->process && ds->data; k++) {
    fg_comm *c = groups[k];
    uint64_t *all = calloc((size_t)c->size, sizeof *all);
    if (!all) {
      fg_status_set(st, FG_RESOURCE_EXHAUSTED, "session: out of memory");
      return -1;
    }
    if (c->ops->all_gather_u64(c, (uint64_t)bad, all, st) != 0) {
      free(all);
      return -1;
    }
    for (int r = 0; r < c->size && !bad; r++)
      if (all[r]) {
        fg_status_set(st, FG_INVALID_ARGUMENT,
                      "rank %d of this process's %s group found that the processes' graphs or "
                      "variables differ (its own error says how)",
                      r, k == 0 ? "replica" : "stage");
        bad = 1;
      }
    free(all);
  }
  return bad ? -1 : 0;
}
