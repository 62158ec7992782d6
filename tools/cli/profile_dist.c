/* `flowgraph profile --dist mpi`: moving each rank's step timings to rank
 * 0. Names and ops are not sent (every rank loaded the same graph, checked
 * by hash when it joined), only ids and numbers. */
#include "profile_dist.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Above the transfers' tags (numbered from 0 by the plan) and below
 * fg_session_gather_variables' (1 << 28). */
#define PROFILE_TAG (3 << 26)

struct prof_rec {
  int64_t start_ns, end_ns, dims[FG_MAX_RANK];
  uint64_t output_bytes;
  /* fg_node_timing's work and traffic (input shapes are not sent) */
  int64_t flops;
  uint64_t input_bytes, arena_bytes;
  int32_t node, thread, device, dtype, rank, kind;
};

int prof_step_kind(const char *op) {
  return !op                       ? PROF_COMPUTE
         : strcmp(op, "recv") == 0 ? PROF_RECV
         : strcmp(op, "send") == 0 ? PROF_SEND
                                   : PROF_COMPUTE;
}

static int oom(fg_status *st) {
  fg_status_set(st, FG_RESOURCE_EXHAUSTED, "profile: out of memory");
  return -1;
}

int prof_runs_add(prof_runs *r, const fg_run_metadata *md, fg_status *st) {
  if (r->n + md->n_nodes > r->cap) {
    int64_t cap = r->cap * 2 + md->n_nodes + 16;
    prof_rec *recs = realloc(r->recs, (size_t)cap * sizeof *recs);
    if (!recs) return oom(st);
    r->recs = recs;
    r->cap = cap;
  }
  int64_t *start = realloc(r->start, (size_t)(r->n_runs + 2) * sizeof *start);
  if (start) r->start = start;
  int64_t *ns = start ? realloc(r->run_ns, (size_t)(r->n_runs + 1) * sizeof *ns) : NULL;
  if (ns) r->run_ns = ns;
  int64_t *t0 = ns ? realloc(r->t0_ns, (size_t)(r->n_runs + 1) * sizeof *t0) : NULL;
  if (!t0) return oom(st);
  r->t0_ns = t0;
  r->start[r->n_runs] = r->n;
  r->run_ns[r->n_runs] = md->run_ns;
  r->t0_ns[r->n_runs] = md->start_ns;
  for (int i = 0; i < md->n_nodes; i++) {
    const fg_node_timing *t = &md->nodes[i];
    prof_rec *p = &r->recs[r->n++];
    memset(p, 0, sizeof *p);
    p->start_ns = t->start_ns;
    p->end_ns = t->end_ns;
    memcpy(p->dims, t->dims, sizeof p->dims);
    p->output_bytes = t->output_bytes;
    p->flops = t->flops;
    p->input_bytes = t->input_bytes;
    p->arena_bytes = t->arena_bytes;
    p->node = t->node;
    p->thread = t->thread;
    p->device = t->device;
    p->dtype = (int32_t)t->dtype;
    p->rank = t->rank;
    p->kind = prof_step_kind(t->op);
  }
  r->n_runs++;
  r->start[r->n_runs] = r->n;
  r->threads = md->threads;
  r->arena_bytes = md->arena_bytes;
  return 0;
}

/* Sends (send = 1) or receives `bytes` at p with rank `peer`, the k-th
 * message of the exchange. */
static int move(fg_comm *c, int send, void *p, int64_t bytes, int peer, int k, fg_status *st) {
  if (bytes == 0) return 0;
  return send ? fg_comm_send(c, p, bytes, peer, PROFILE_TAG + k, st)
              : fg_comm_recv(c, p, bytes, peer, PROFILE_TAG + k, st);
}

int prof_runs_exchange(fg_comm *c, const prof_runs *mine, prof_runs *all, fg_status *st) {
  if (fg_comm_rank(c) != 0) {
    int64_t hdr[4] = {mine->n_runs, mine->n, mine->threads, (int64_t)mine->arena_bytes};
    if (move(c, 1, hdr, sizeof hdr, 0, 0, st) != 0 ||
        move(c, 1, mine->start, (mine->n_runs + 1) * 8, 0, 1, st) != 0 ||
        move(c, 1, mine->run_ns, mine->n_runs * 8, 0, 2, st) != 0 ||
        move(c, 1, mine->t0_ns, mine->n_runs * 8, 0, 4, st) != 0 ||
        move(c, 1, mine->recs, mine->n * (int64_t)sizeof(prof_rec), 0, 3, st) != 0)
      return -1;
    return 0;
  }
  for (int r = 1; r < fg_comm_size(c); r++) {
    prof_runs *o = &all[r];
    int64_t hdr[4];
    if (move(c, 0, hdr, sizeof hdr, r, 0, st) != 0) return -1;
    if (hdr[0] != mine->n_runs || hdr[1] < 0) {
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "profile: rank %d timed %lld runs, rank 0 timed %lld (every rank must run "
                    "the same command)",
                    r, (long long)hdr[0], (long long)mine->n_runs);
      return -1;
    }
    o->n_runs = hdr[0];
    o->n = o->cap = hdr[1];
    o->threads = (int)hdr[2];
    o->arena_bytes = (uint64_t)hdr[3];
    o->start = malloc((size_t)(o->n_runs + 1) * sizeof *o->start);
    o->run_ns = malloc((size_t)o->n_runs * sizeof *o->run_ns + 1);
    o->t0_ns = malloc((size_t)o->n_runs * sizeof *o->t0_ns + 1);
    o->recs = malloc((size_t)o->n * sizeof *o->recs + 1);
    if (!o->start || !o->run_ns || !o->t0_ns || !o->recs) return oom(st);
    if (move(c, 0, o->start, (o->n_runs + 1) * 8, r, 1, st) != 0 ||
        move(c, 0, o->run_ns, o->n_runs * 8, r, 2, st) != 0 ||
        move(c, 0, o->t0_ns, o->n_runs * 8, r, 4, st) != 0 ||
        move(c, 0, o->recs, o->n * (int64_t)sizeof(prof_rec), r, 3, st) != 0)
      return -1;
    for (int64_t j = 0; j < o->n_runs; j++)
      if (o->start[j] < 0 || o->start[j] > o->start[j + 1] || o->start[j + 1] > o->n) {
        fg_status_set(st, FG_INTERNAL, "profile: rank %d sent a malformed run table", r);
        return -1;
      }
  }
  return 0;
}

int prof_runs_md(prof_runs *r, const fg_graph *g, int64_t j, fg_run_metadata *md, fg_status *st) {
  int64_t lo = r->start[j], n = r->start[j + 1] - lo;
  free(r->md_nodes);
  r->md_nodes = calloc((size_t)n + 1, sizeof *r->md_nodes);
  if (!r->md_nodes) return oom(st);
  for (int64_t i = 0; i < n; i++) {
    const prof_rec *p = &r->recs[lo + i];
    fg_node_timing *t = &r->md_nodes[i];
    if (p->node < 0 || p->node >= fg_graph_num_nodes(g)) {
      fg_status_set(st, FG_INTERNAL, "profile: a rank timed node %d of a %d-node graph", p->node,
                    fg_graph_num_nodes(g));
      return -1;
    }
    t->node = p->node;
    t->name = fg_node_name(g, p->node);
    t->op = p->kind == PROF_RECV ? "recv" : p->kind == PROF_SEND ? "send" : fg_node_op(g, p->node);
    t->thread = p->thread;
    t->start_ns = p->start_ns;
    t->end_ns = p->end_ns;
    t->dtype = (fg_dtype)p->dtype;
    t->rank = p->rank;
    memcpy(t->dims, p->dims, sizeof t->dims);
    t->output_bytes = (size_t)p->output_bytes;
    t->flops = p->flops;
    t->input_bytes = (size_t)p->input_bytes;
    t->arena_bytes = (size_t)p->arena_bytes;
    t->device = p->device;
  }
  memset(md, 0, sizeof *md);
  md->n_nodes = (int)n;
  md->nodes = r->md_nodes;
  md->run_ns = r->run_ns[j];
  md->start_ns = r->t0_ns[j];
  md->threads = r->threads;
  md->arena_bytes = (size_t)r->arena_bytes;
  return 0;
}

void prof_runs_free(prof_runs *r) {
  free(r->start);
  free(r->run_ns);
  free(r->t0_ns);
  free(r->recs);
  free(r->md_nodes);
  memset(r, 0, sizeof *r);
}

int prof_clock_offsets(fg_comm *c, int rounds, int64_t *off, int64_t *rtt, fg_status *st) {
  /* Tags after the exchange's (0 to 4); every round reuses one tag, as
   * point-to-point messages between two ranks arrive in order. */
  enum { TAG = 8 };
  if (fg_comm_rank(c) != 0) {
    for (int k = 0; k < rounds; k++) {
      int64_t v = 0;
      if (move(c, 0, &v, 8, 0, TAG, st) != 0) return -1;
      v = cli_now_ns();
      if (move(c, 1, &v, 8, 0, TAG, st) != 0) return -1;
    }
    return 0;
  }
  off[0] = rtt[0] = 0;
  for (int r = 1; r < fg_comm_size(c); r++) {
    rtt[r] = -1;
    for (int k = 0; k < rounds; k++) {
      int64_t v = 0, a = cli_now_ns();
      if (move(c, 1, &v, 8, r, TAG, st) != 0 || move(c, 0, &v, 8, r, TAG, st) != 0) return -1;
      int64_t b = cli_now_ns();
      if (rtt[r] < 0 || b - a < rtt[r]) {
        rtt[r] = b - a;
        off[r] = v - (a + (b - a) / 2);
      }
    }
  }
  return 0;
}
