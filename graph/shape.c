/* Shape arithmetic with overflow checks: every byte size in flowgraph comes
 * from here, so no allocation is ever sized by an unchecked product. */
#include <stdio.h>

#include "graph/graph_internal.h"

int fg_shape_elements(int rank, const int64_t *dims, int64_t *out) {
  if (rank < 0 || rank > FG_MAX_RANK) return -1;
  int64_t n = 1;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0) return -1;
    if (dims[i] != 0 && n > INT64_MAX / dims[i]) return -1;
    n *= dims[i];
  }
  *out = n;
  return 0;
}

int fg_tinfo_bytes(const fg_tinfo *t, size_t *out) {
  int64_t n;
  size_t es = fg_dtype_size(t->dtype);
  if (es == 0 || fg_shape_elements(t->rank, t->dims, &n) != 0) return -1;
  if ((uint64_t)n > (uint64_t)(SIZE_MAX / es) || (uint64_t)n > (uint64_t)INT64_MAX / es) return -1;
  *out = (size_t)n * es;
  return 0;
}

const char *fg_shape_str(int rank, const int64_t *dims, char *buf, size_t size) {
  size_t used = 0;
  if (size == 0) return buf;
  buf[0] = '\0';
  if (rank < 0 || rank > FG_MAX_RANK) {
    snprintf(buf, size, "<rank %d>", rank);
    return buf;
  }
  used += (size_t)snprintf(buf + used, size - used, "[");
  for (int i = 0; i < rank && used < size; i++) {
    if (dims[i] == FG_DIM_UNKNOWN)
      used += (size_t)snprintf(buf + used, size - used, "%s?", i ? "," : "");
    else
      used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? "," : "", (long long)dims[i]);
  }
  if (used < size) snprintf(buf + used, size - used, "]");
  return buf;
}
