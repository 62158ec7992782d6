/* The graph-hash check over any communicator (ranks that disagree on the
 * graph are refused before the first collective): the ranks compare one hash (see
 * kernels/collective.h).
 * Kept apart from the communicators so that a session checking its peers
 * does not pull MPI or NCCL into binaries that use neither. */
#include <stdlib.h>

#include "dist/comm/comm.h"

int fg_comm_check_same_u64(fg_comm *c, uint64_t value, const char *what, fg_status *st) {
  return fg_comm_check_same(c, value, what,
                            "every rank must load the same file with the same options", st);
}

int fg_comm_check_same(fg_comm *c, uint64_t value, const char *what, const char *hint,
                       fg_status *st) {
  if (!c || !c->ops || c->size < 1) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s check: no communicator", what);
    return -1;
  }
  uint64_t *all = calloc((size_t)c->size, sizeof *all);
  if (!all) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "%s check: out of memory", what);
    return -1;
  }
  if (c->ops->all_gather_u64(c, value, all, st) != 0) {
    free(all);
    return -1;
  }
  int rc = 0;
  for (int r = 1; r < c->size; r++) {
    if (all[r] != all[0]) {
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "ranks disagree on the %s: rank 0 has %s hash 0x%016llx, rank %d has "
                    "0x%016llx (%s)",
                    what, what, (unsigned long long)all[0], r, (unsigned long long)all[r], hint);
      rc = -1;
      break;
    }
  }
  free(all);
  if (rc == 0) fg_status_clear(st);
  return rc;
}
