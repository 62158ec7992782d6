/* The static memory planner: offsets for every intermediate tensor of a
 * plan in one aligned arena. A pure function over sizes and the steps'
 * partial order, so it is tested on its own and knows nothing of graphs.
 *
 * Rules:
 * - Lifetimes live on the partial order, not on one schedule: tensor B may
 *   reuse A's bytes only when every step that touches A (its producer and
 *   all its users) is an ancestor of B's producer. Then B's bytes are written
 *   after A is dead in every schedule a thread pool may pick (ONNX Runtime's
 *   lesson), which also covers concurrent CUDA streams.
 * - Placement is TFLite's greedy-by-size best fit: tensors sorted by size
 *   (largest first, ties by producer then id, so the plan is deterministic),
 *   each put in the smallest gap between already placed tensors it conflicts
 *   with, or at the end.
 * - In place (ggml's rule): tensor T may take over input tensor S's bytes
 *   when the caller marks it (inplace_from = S, same byte size, the op is
 *   in-place-able or a view) and every other user of S is an ancestor of T's
 *   producer. The two then form one buffer whose lifetime is the union.
 * - Pinned tensors (feeds, constants, variables, fetched outputs) are not in
 *   the arena and get no offset.
 */
#ifndef FG_MEMPLAN_H
#define FG_MEMPLAN_H

#include <stddef.h>
#include <stdint.h>

typedef struct fg_mp_tensor {
  size_t bytes;
  int producer; /* step index that writes it */
  int n_users;
  const int *users; /* step indices that read it */
  int inplace_from; /* tensor id it may share bytes with (see above), or -1 */
  int pinned;       /* 1: outside the arena */
} fg_mp_tensor;

typedef struct fg_mp_input {
  int n_steps; /* steps are numbered in a topological order */
  /* preds[pred_off[s] .. pred_off[s+1]) are the direct predecessors of s */
  const int *pred_off;
  const int *preds;
  int n_tensors;
  const fg_mp_tensor *tensors;
  size_t alignment; /* a power of two, e.g. 64 */
} fg_mp_input;

typedef struct fg_mp_result {
  size_t *offsets;          /* n_tensors entries (caller allocates); SIZE_MAX for pinned */
  int *shared_with;         /* n_tensors entries (caller allocates): the tensor whose
                               bytes it took over in place, or -1 */
  size_t arena_bytes;       /* size of the arena */
  size_t lower_bound_bytes; /* peak of live intermediate bytes over the steps
                               in index order (each tensor live from its
                               producer to its last user, aligned sizes) */
  size_t naive_bytes;       /* one aligned buffer per arena tensor */
} fg_mp_result;

/* Returns 0, or -1 with `err` filled (bad input, out of memory). */
int fg_memplan(const fg_mp_input *in, fg_mp_result *out, char *err, size_t err_size);

#endif
