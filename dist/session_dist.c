/* A session's dist state (dist/exec.h): the partition of its graph, a pool
 * per device when there are several, and the communicators of the
 * all_reduce nodes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm_inproc.h"
#include "dist/exec.h"
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
  fg_partition_free(ds->part);
  ds->pools = NULL;
  ds->owned = NULL;
  fg_dist_runner_free(ds->exec.runner);
  ds->exec = (fg_dist_exec){0, NULL, NULL, NULL, NULL, 0, -1, NULL, NULL, 0, NULL};
  ds->part = NULL;
  ds->use_exec = 0;
}

void fg_dist_session_free(fg_dist_session *ds) {
  if (!ds) return;
  free_parts(ds);
  free(ds);
}

static void pool_parallel_for(void *pool, int64_t n, int64_t grain, fg_krange_fn fn, void *arg) {
  fg_pool_parallel_for(pool, n, grain, fn, arg);
}

/* Builds a complete new state into `nw` (zeroed, process comm set). */
static int build(const fg_graph *g, fg_dist_session *nw, const fg_session_options *o,
                 fg_status *st) {
  const char *default_device = o->device;
  int threads = o->num_threads;
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
  if (cuda && nd > 1) {
    char a[32], b[32];
    fg_status_set(st, FG_UNIMPLEMENTED,
                  "the graph uses %d devices (%s ... %s) including a CUDA device; a session runs "
                  "either several cpu:N devices or one CUDA device",
                  nd, fg_device_str(fg_partition_device(nw->part, 0), a, sizeof a),
                  fg_device_str(fg_partition_device(nw->part, nd - 1), b, sizeof b));
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
    if (g->nodes[i].op == FG_OP_ALL_REDUCE && !has_ar[node_dev[i]]) {
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
    if (fg_comm_inproc_group(n_ar_dev, o->dist_timeout_s, h, st) != 0) {
      rc = -1;
    } else {
      for (int d = 0, r = 0; d < nd; d++)
        if (has_ar[d]) nw->owned[d] = nw->exec.comm[d] = h[r++];
    }
    nw->use_exec = 1;
  }
  free(has_ar);
  if (rc != 0) return -1;
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
      if (per > 1) nw->exec.par[d] = (fg_kparallel){nw->pools[d], pool_parallel_for};
    }
  }
  if (nw->use_exec) {
    /* Collectives (and receives from other processes, which must never
     * stall a device's compute) get lanes of their own. */
    nw->exec.comm_lanes =
        ((nw->process || n_ar_dev > 1) && o->collective_lanes >= 0) || nw->exec.my_rank >= 0;
    nw->exec.runner = fg_dist_runner_new(fg_dist_num_lanes(&nw->exec), st);
    if (!nw->exec.runner) return -1;
  }
  return 0;
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

const fg_partition *fg_dist_session_partition(const fg_dist_session *ds) {
  return ds ? ds->part : NULL;
}

int fg_dist_session_num_devices(const fg_dist_session *ds) { return ds ? ds->exec.n_dev : 0; }
