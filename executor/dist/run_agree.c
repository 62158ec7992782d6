/* The ranks agree to start a run (executor/dist/exec.h fg_dist_run_agree).
 *
 * Why: a run refused on one rank before it starts (a feed of the wrong
 * dtype or shape there only) used to leave its peers waiting in that run's
 * first collective until their timeout, and a rank retrying at once could
 * pair its next run's collectives with the peers' refused one. Telling the
 * peers afterwards (a notice) cannot work: ranks' run counts drift (rank 0
 * evaluating alone), so a notice cannot name "the same run". So, as Horovod
 * negotiates before its collectives, every run that holds collectives (or
 * transfers between processes) starts with one small collective of its
 * own, in which each rank says "ready, with these collectives" or
 * "refused": it is ordered with the run's other collectives, so it pairs
 * with the peers' agreement of the same run by construction. Data-parallel
 * runs without collectives take no part, so rank 0 may evaluate alone;
 * every run of a graph split across processes takes part (its transfers
 * and fetches pair by number, so its ranks run every run together). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor/dist/exec.h"
#include "executor/plan.h"
#include "graph/op_table.h"

/* A rank's word in a round (never negative, never 0): its run's key in
 * the low 61 bits, REFUSED, and, in the first round of a split graph,
 * WANTS_STAGE when its run holds collectives over the stage group (every
 * process of the replica group then takes the second round, whichever
 * asked). */
#define KEY_BITS    (((uint64_t)1 << 61) - 1)
#define REFUSED     ((uint64_t)1 << 62)
#define WANTS_STAGE ((uint64_t)1 << 61)
/* The reason a refusing rank sends its peers: the first bytes of its
 * status message; a rank's verdict, which quotes it, has room for both. */
enum { WHY_BYTES = 512, VERDICT_BYTES = 1024 };

int fg_dist_run_key(const fg_dist_session *ds, const fg_graph *g, const fg_plan_request *req,
                    uint64_t key[2], fg_status *st) {
  key[0] = key[1] = 0;
  const fg_dist_exec *dx = fg_dist_session_exec((fg_dist_session *)ds);
  fg_comm *replica = fg_dist_session_replica_comm(ds);
  int cross = dx && dx->my_rank >= 0; /* transfers on dx->p2p */
  if (!replica && !cross) return 0;
  char *needed = calloc((size_t)g->n_nodes + 1, 1);
  if (!needed || fg_plan_mark_needed(g, req, needed) != 0) {
    free(needed);
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "session: out of memory (the run's key)");
    return -1;
  }
  int collectives = 0;
  uint64_t h = fg_hash64(0, "run", 3);
  for (int id = 0; id < g->n_nodes; id++)
    if (needed[id] && fg_node_is_collective(&g->nodes[id])) {
      h = fg_hash64(h, &id, sizeof id);
      collectives = 1;
    }
  /* Data parallelism's collectives go over the process communicator, a
   * split graph's over the data one (its stage's replicas). */
  int rounds = collectives && replica ? (cross ? 2 : 1) : 0;
  /* The collectives, in node order: what replicas must share. */
  key[0] = key[1] = (h & KEY_BITS) | 1;
  if (cross) {
    /* The stages of one replica run every run together, and number its
     * transfers and fetches alike: they share the needed nodes and the
     * fetches too (replicas may fetch differently). */
    rounds |= 1;
    h = fg_hash64(h, needed, (size_t)g->n_nodes);
    h = fg_hash64(h, req->fetches, (size_t)req->n_fetches * sizeof *req->fetches);
    key[0] = (h & KEY_BITS) | 1;
  }
  free(needed);
  return rounds;
}

/* One round over c: this rank says `word` (*refused: REFUSED instead of
 * its key, keeping WANTS_STAGE), learns whether any word carried
 * WANTS_STAGE (*wants), and the group's verdict: *refused, why and *code
 * as fg_dist_run_agree keeps them. -1 only when the exchange failed. */
static int round_over(fg_comm *c, const char *group, uint64_t word, int *refused, int *wants,
                      char *why, fg_code *code, fg_status *st) {
  /* Above 64 ranks the communicator's buffer (this is the collective that
   * runs on c now), so a cached run still allocates nothing. */
  uint64_t small[64], *all = c->size <= 64 ? small : fg_comm_update_buffer(c, (size_t)c->size * 8);
  if (!all) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "agreeing to start the run: out of memory");
    return -1;
  }
  if (*refused) word = REFUSED | (word & WANTS_STAGE);
  /* Host memory: a sum where rank r fills slot r is an all-gather through
   * the communicator's all_reduce, its fastest path (shared memory on one
   * host), whose deadline names the missing rank; MPI's own all-gather
   * cannot. A GPU's collectives take device memory: there the
   * communicator's all-gather of words. */
  int rc;
  const int gpu = fg_comm_gpu(c) >= 0;
  if (!gpu) {
    memset(all, 0, (size_t)c->size * sizeof *all);
    all[c->rank] = word;
    rc = c->ops->all_reduce(c, all, c->size, FG_I64, 0, st);
  } else {
    rc = c->ops->all_gather_u64(c, word, all, st);
  }
  int first = -1, differ = -1;
  for (int r = 0; rc == 0 && r < c->size; r++) {
    if ((all[r] & REFUSED) && first < 0) first = r;
    if (differ < 0 && all[r] != all[0]) differ = r;
    if (all[r] & WANTS_STAGE) *wants = 1;
  }
  if (rc != 0) {
    char msg[768];
    snprintf(msg, sizeof msg, "%s", fg_status_message(st));
    fg_status_set(st, fg_status_code(st),
                  "agreeing with the %s group to start a run that holds collectives: %s", group,
                  msg);
  } else if (first >= 0) {
    /* The lowest refusing rank tells everyone why: from host memory,
     * which NCCL's broadcast cannot take. */
    char buf[WHY_BYTES] = {0};
    if (c->rank == first) memcpy(buf, why, strnlen(why, sizeof buf - 1)); /* cut, 0-ended */
    int sent = !gpu && c->ops->broadcast && c->ops->broadcast(c, buf, sizeof buf, first, st) == 0;
    buf[sizeof buf - 1] = 0;
    if (!*refused) {
      *refused = 1;
      *code = FG_ABORTED;
      snprintf(why, VERDICT_BYTES,
               "rank %d of %d in this process's %s group refused the run %s: %s", first, c->size,
               group, "before it started, so no rank ran it",
               sent ? buf : "(its reason could not be sent; its own error says why)");
    }
  } else if (differ >= 0) {
    *refused = 1;
    *code = FG_INVALID_ARGUMENT;
    snprintf(why, VERDICT_BYTES,
             "ranks asked for different runs: in this process's %s group rank 0's run has key "
             "0x%016llx and rank %d's 0x%016llx; %s",
             group, (unsigned long long)all[0], differ, (unsigned long long)all[differ],
             strcmp(group, "replica") == 0
                 ? "the processes of one replica of a graph split across them must make the "
                   "same calls (the same fetches and targets)"
                 : "every rank must run the same collectives in the same order (the same "
                   "targets and fetches that reach all_reduce nodes), and only runs without "
                   "collectives may differ");
  }
  return rc;
}

int fg_dist_run_agree(fg_dist_session *ds, int rounds, const uint64_t key[2], int refused,
                      fg_status *st) {
  if (!rounds) return refused ? -1 : 0;
  const fg_dist_exec *dx = fg_dist_session_exec(ds);
  int cross = dx && dx->my_rank >= 0;
  fg_comm *groups[2] = {cross ? dx->p2p : fg_dist_session_replica_comm(ds),
                        cross ? fg_dist_session_replica_comm(ds) : NULL};
  const char *names[2] = {cross ? "replica" : "data-parallel", "stage"};
  /* This rank's refusal (kept as it was: a round only writes the verdict
   * of a rank not yet refused), or the group's. */
  char why[VERDICT_BYTES];
  fg_code code = refused ? fg_status_code(st) : FG_OK;
  if (refused) snprintf(why, sizeof why, "%s", fg_status_message(st));
  const int was_refused = refused;
  /* The second round runs whatever the first found, so a refusal in one
   * replica reaches every process of the grid of replicas x stages; and
   * it runs when any process of the replica group asked for it, so the
   * stage groups' members all take part. */
  int wants = (rounds & 2) != 0;
  for (int k = 0; k < 2; k++) {
    /* A group of one has nobody to wait for it. */
    if ((k == 0 ? !(rounds & 1) : !wants) || !groups[k] || groups[k]->size < 2) continue;
    uint64_t word = key[k] | (k == 0 && (rounds & 2) ? WANTS_STAGE : 0);
    if (round_over(groups[k], names[k], word, &refused, &wants, why, &code, st) != 0) {
      /* The exchange failed (a peer missing): this rank's own refusal is
       * still the better answer where it has one. */
      if (was_refused) fg_status_set(st, code, "%s", why);
      return -1;
    }
  }
  if (!refused) return 0;
  fg_status_set(st, code, "%s", why);
  return -1;
}
