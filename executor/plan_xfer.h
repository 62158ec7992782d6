/* Transfer steps of a plan across devices and processes (internal to
 * executor/plan_resolve.c).
 *
 * Every data edge between devices becomes a send/recv pair, as the
 * partition lists them (one per tensor and consuming device):
 * - between devices of this process: one FG_XFER_COPY step on the
 *   consumer's device copying into that device's arena;
 * - between processes (a cross-process graph, flowgraph/dist.h "Ranks"):
 *   an FG_XFER_SEND step on the producer's rank and an FG_XFER_RECV step on
 *   the consumer's. Every rank numbers these transfers the same way (node
 *   order, then input order, then the fetches), and that number is the
 *   message tag. A rank only runs its own nodes; the others are
 *   FG_XFER_REMOTE steps that do nothing. A fetched tensor of another rank
 *   is sent by its owner to every other rank, so every rank returns the same
 *   fetches.
 *
 * No deadlock: a rank's sends run in tag order on a send lane, its receives
 * in tag order on another lane, and tag order follows the graph's
 * topological node order; so a send only waits for its own producer and for
 * the peer to reach that tag, which depends only on smaller tags.
 *
 * The resolve stage (plan_stages.h) makes the transfer steps and slots,
 * before any shape is known; the infer stage gives each transfer's slot the
 * shape of the tensor it carries, and the memory stage places the fetch
 * buffers. */
#ifndef FG_PLAN_XFER_H
#define FG_PLAN_XFER_H

#include "executor/dist/exec.h"
#include "executor/plan.h"

typedef struct fg_xfer_state {
  const fg_graph *g;
  fg_plan *plan;
  const fg_dist_exec *dx;
  int xp;          /* cross-process */
  int *local_slot; /* [slot * n_dev + dev]: the slot a consumer on dev reads, or -1 */
  int *tagged;     /* [slot * n_dev + dev]: 1 once a cross-process transfer was numbered */
  int next_slot, next_tag;
  int *sends, n_sends; /* FG_XFER_SEND steps, in tag order */
  int *recvs, n_recvs; /* FG_XFER_RECV steps, in tag order */
  int *fetch_slot;     /* per fetch: the slot it reads, when not the producer's (-1) */
  int my_dev;          /* this process's first device */
  int empty_slot;      /* cross-process: an empty tensor (see fg_xfer_input_slot) */
} fg_xfer_state;

/* Steps and slots a plan may need beyond its nodes' (upper bounds). */
int64_t fg_xfer_max_steps(const fg_graph *g, const char *needed, const fg_plan_request *req);

/* n_node_slots: the slots of the nodes; transfer slots follow them. cap:
 * fg_xfer_max_steps. */
int fg_xfer_init(fg_xfer_state *x, const fg_graph *g, fg_plan *plan, const fg_plan_request *req,
                 int n_node_slots, int64_t cap, fg_status *st);
void fg_xfer_free(fg_xfer_state *x);

/* Whether node `id` runs in this process. */
int fg_xfer_local(const fg_xfer_state *x, int id);

/* Before node id's own step: numbers its cross-process inputs and emits the
 * transfer steps this process takes part in. */
int fg_xfer_before_node(fg_xfer_state *x, int id, fg_status *st);

/* The slot node id (local) reads for input k, whose producer's slot is s. */
int fg_xfer_input_slot(const fg_xfer_state *x, int id, int k, int s);

/* After every node: the fetched tensors of other ranks (sent by their
 * owner to every rank), received into new FG_SLOT_PINNED slots. */
int fg_xfer_fetches(fg_xfer_state *x, const fg_plan_request *req, fg_status *st);

#endif
