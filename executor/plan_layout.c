/* The layout stage of plan building (plan_stages.h): which intermediate
 * tensors stay in NC16, oneDNN's channel-blocked layout (kernel.h), on a
 * CPU plan.
 *
 * oneDNN's convolutions run on NC16 activations. With every tensor in C
 * order, each convolution converts its input to NC16 and its output back
 * (and the gradients do the same), about a sixth of a CNN training step's
 * time. batch_norm, its gradient and the element-wise kernels (ReLU, its
 * mask, the residual add, gradient sums) do not care where a channel's
 * values are as long as all their same-shaped operands agree, so a chain
 * from one convolution to the next can stay in NC16 and the conversions
 * disappear, converting only at the edges (a pool, a reshape, a fetch).
 *
 * Tensors that one element-wise or batch-norm step touches with the same
 * shape must share a layout: they are joined into groups (union-find over
 * slots). A group goes NC16 when every member is an [N, C, H, W]
 * intermediate (not fed, constant, a variable or fetched) with C a multiple
 * of 16 (so NC16 has C order's bytes; a ReLU's mask is bool), every step
 * touching it accepts NC16 there, and some (f32) convolution
 * reads or writes it (else nothing is saved). A convolution converts any
 * port by itself, so it does not join its ports into one group. */
#include <stdlib.h>
#include <string.h>

#include "executor/plan_stages.h"
#include "kernels/kernel_shape.h"

typedef struct layout_sets {
  int *parent;
  unsigned char *bad, *conv; /* per root, after the walk */
} layout_sets;

static int find(int *parent, int s) {
  while (parent[s] != s)
    s = parent[s] = parent[parent[s]];
  return s;
}

static void join(layout_sets *L, int a, int b) {
  a = find(L->parent, a), b = find(L->parent, b);
  if (a != b) L->parent[a] = b;
}

/* The slot of step input i (i >= 0) or output -1 - i. */
static int port(const fg_step *step, int i) {
  return i >= 0 ? step->in_slots[i] : step->out_slots[-1 - i];
}

/* A convolution's activation ports (inputs as i >= 0, outputs as -1 - o),
 * or 0 for another op. Input 2 of the gradients only gives x's shape: the
 * kernel does not read it. */
static int conv_ports(int op, int ports[2]) {
  switch (op) {
  case FG_OP_CONV2D:
  case FG_OP_FUSED_CONV2D:
  case FG_OP_FUSED_CONV2D_ADD: ports[0] = 0, ports[1] = -1; return 2;
  case FG_OP_CONV2D_GRAD_INPUT: ports[0] = 0, ports[1] = -1; return 2;
  case FG_OP_CONV2D_GRAD_WEIGHT: ports[0] = 0, ports[1] = 1; return 2;
  default: return 0;
  }
}

static int same_dims(const fg_kbuf *a, const fg_kbuf *b) {
  return a->rank == b->rank && !memcmp(a->dims, b->dims, (size_t)a->rank * sizeof a->dims[0]);
}

/* An element-wise (or batch-norm) step: joins every operand shaped like
 * `main`; a differently shaped operand that is not a single value makes
 * the step refuse NC16 (broadcasting follows C order), unless `per_channel`
 * (batch norm's parameters and statistics). */
static void join_same_shape(layout_sets *L, const fg_plan *plan, const fg_step *step,
                            const fg_kbuf *main, int main_slot, int per_channel) {
  int refuse = 0;
  for (int i = -step->n_out; i < step->n_in; i++) {
    const fg_kbuf *b = &plan->slots[port(step, i)];
    if (same_dims(b, main))
      join(L, port(step, i), main_slot);
    else if (!per_channel && fgk_numel(b) != 1)
      refuse = 1;
  }
  if (refuse) L->bad[find(L->parent, main_slot)] = 1;
}

/* Marks every operand of a step that does not accept NC16. */
static void refuse_all(layout_sets *L, const fg_step *step) {
  for (int i = -step->n_out; i < step->n_in; i++)
    L->bad[port(step, i)] = 1;
}

/* Whether slot s may hold NC16 at all. */
static int eligible(const fg_plan_builder *b, int s) {
  const fg_kbuf *k = &b->plan->slots[s];
  return b->plan->slot_kind[s] == FG_SLOT_ARENA && !b->fetched[s] && k->rank == 4 &&
         k->dims[1] > 0 && k->dims[1] % 16 == 0 && fgk_numel(k) > 0;
}

/* Walks the steps: joins, refusals and the convolutions' ports. Marks are
 * on slots first and moved to their roots after the walk (the roots change
 * while joining). */
static void walk(fg_plan_builder *b, layout_sets *L) {
  fg_plan *plan = b->plan;
  for (int si = 0; si < plan->n_steps; si++) {
    const fg_step *step = &plan->steps[si];
    const int op = b->g->nodes[step->node].op;
    const unsigned flags = fg_op_table[op].flags;
    int ports[2], np = conv_ports(op, ports);
    if (op == FG_OP_GROUP) {
      /* Its inputs only order it after them: it reads no bytes. */
    } else if (fg_op_table[op].mutable_inputs || step->xfer) {
      refuse_all(L, step); /* an update's output is its variable; a transfer copies bytes */
    } else if (np && plan->slots[step->out_slots[0]].dtype == FG_F32) {
      for (int i = 0; i < np; i++)
        L->conv[port(step, ports[i])] = 1;
      /* The weight (input 1, or the weight gradient's output) and the
       * bias stay in C order. */
      if (op == FG_OP_CONV2D_GRAD_WEIGHT)
        L->bad[step->out_slots[0]] = 1;
      else
        L->bad[step->in_slots[1]] = 1;
      /* fused_conv2d_add's residual is added element by element: it
       * shares y's layout; its bias is input 3. */
      const int bias = op == FG_OP_FUSED_CONV2D_ADD ? 3 : 2;
      if (op == FG_OP_FUSED_CONV2D_ADD) join(L, step->in_slots[2], step->out_slots[0]);
      const int fwd =
          op == FG_OP_CONV2D || op == FG_OP_FUSED_CONV2D || op == FG_OP_FUSED_CONV2D_ADD;
      if (fwd && step->n_in > bias) L->bad[step->in_slots[bias]] = 1;
    } else if (op == FG_OP_BATCH_NORM || op == FG_OP_BATCH_NORM_GRAD) {
      const int x = step->in_slots[op == FG_OP_BATCH_NORM_GRAD];
      join_same_shape(L, plan, step, &plan->slots[x], x, 1);
    } else if ((flags & FG_OPF_ELEMENTWISE) && !(flags & FG_OPF_RANDOM) && step->n_out > 0) {
      join_same_shape(L, plan, step, &plan->slots[step->out_slots[0]], step->out_slots[0], 0);
    } else {
      refuse_all(L, step);
    }
  }
}

int fg_plan_layout(fg_plan_builder *b, fg_status *st) {
  fg_plan *plan = b->plan;
  const char *env = getenv("FG_NC16");
  if (plan->cuda || plan->multi_device || !fgk_nc16_available() || (env && !strcmp(env, "off")))
    return 0;
  const int n = plan->n_slots;
  layout_sets L = {malloc((size_t)n * sizeof(int) + 1), calloc((size_t)n + 1, 1),
                   calloc((size_t)n + 1, 1)};
  if (!L.parent || !L.bad || !L.conv) {
    free(L.parent), free(L.bad), free(L.conv);
    return fg_plan_oom(st, "layouts");
  }
  for (int s = 0; s < n; s++)
    L.parent[s] = s;
  walk(b, &L);
  for (int s = 0; s < n; s++) {
    const int r = find(L.parent, s);
    L.bad[r] |= L.bad[s] || !eligible(b, s);
    L.conv[r] |= L.conv[s];
  }
  for (int s = 0; s < n; s++) {
    const int r = find(L.parent, s);
    plan->slots[s].layout = !L.bad[r] && L.conv[r] ? FGK_LAYOUT_NC16 : FGK_LAYOUT_PLAIN;
  }
  free(L.parent), free(L.bad), free(L.conv);
  return 0;
}
