/* Dense tensors. Buffers are 64-byte aligned (cache line, AVX-512) and never
 * sized by an unchecked product. */
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "graph/tensor_internal.h"

void *fg_aligned_alloc(size_t bytes) {
  size_t n = bytes ? bytes : 1;
  if (n > SIZE_MAX - 63) return NULL;
  n = (n + 63) & ~(size_t)63;
  return aligned_alloc(64, n);
}

/* Validates dtype and shape and computes the byte size. */
static int check_shape(fg_dtype dtype, int rank, const int64_t *dims, size_t *bytes,
                       fg_status *st) {
  if (fg_dtype_size(dtype) == 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "tensor: unknown dtype %d", (int)dtype);
    return -1;
  }
  if (rank < 0 || rank > FG_MAX_RANK) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "tensor: rank %d is outside [0, %d]", rank, FG_MAX_RANK);
    return -1;
  }
  if (rank > 0 && !dims) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "tensor: dims is NULL for rank %d", rank);
    return -1;
  }
  for (int i = 0; i < rank; i++)
    if (dims[i] < 0) {
      fg_status_set(st, FG_INVALID_ARGUMENT, "tensor: dimension %d is %lld; must be >= 0", i,
                    (long long)dims[i]);
      return -1;
    }
  fg_tinfo t = {dtype, rank, {0}};
  for (int i = 0; i < rank; i++)
    t.dims[i] = dims[i];
  if (fg_tinfo_bytes(&t, bytes) != 0) {
    char buf[FG_SHAPE_STR_MAX];
    fg_status_set(st, FG_INVALID_ARGUMENT, "tensor: shape %s of %s overflows 64-bit byte size",
                  fg_shape_str(rank, dims, buf, sizeof buf), fg_dtype_name(dtype));
    return -1;
  }
  return 0;
}

/* check_shape plus: `bytes` of `data` must be exactly what the shape needs. */
static int check_data(fg_dtype dtype, int rank, const int64_t *dims, const void *data, size_t bytes,
                      size_t *need, fg_status *st) {
  if (check_shape(dtype, rank, dims, need, st) != 0) return -1;
  if (bytes != *need || (*need && !data)) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "tensor: %zu bytes given, shape needs %zu", bytes,
                  *need);
    return -1;
  }
  return 0;
}

static fg_tensor *make(fg_dtype dtype, int rank, const int64_t *dims, size_t bytes) {
  fg_tensor *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->dtype = dtype;
  t->rank = rank;
  for (int i = 0; i < rank; i++)
    t->dims[i] = dims[i];
  t->bytes = bytes;
  return t;
}

/* A tensor owning `data` (bytes of it, from fg_aligned_alloc when owned is
 * 1, fg_pinned_alloc when 2), zero-filled when `zero` (fg_tensor_from_data
 * writes every byte itself: a run's fetched outputs are made this way, and
 * zeroing them first was a second pass over each); NULL data, or no memory
 * for the struct, is out of memory (data is then freed). */
static fg_tensor *own(fg_dtype dtype, int rank, const int64_t *dims, size_t bytes, void *data,
                      int owned, int zero, fg_status *st) {
  fg_tensor *t = data ? make(dtype, rank, dims, bytes) : NULL;
  if (!t) {
    if (owned == 2)
      fg_pinned_free(data);
    else
      free(data);
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "tensor: cannot allocate %zu bytes", bytes);
    return NULL;
  }
  if (zero) memset(data, 0, bytes);
  t->data = data;
  t->owned = owned;
  fg_status_clear(st);
  return t;
}

fg_tensor *fg_tensor_new(fg_dtype dtype, int rank, const int64_t *dims, fg_status *st) {
  size_t bytes;
  if (check_shape(dtype, rank, dims, &bytes, st) != 0) return NULL;
  return own(dtype, rank, dims, bytes, fg_aligned_alloc(bytes), 1, 1, st);
}

fg_tensor *fg_tensor_new_pinned(fg_dtype dtype, int rank, const int64_t *dims, fg_status *st) {
  size_t bytes;
  if (check_shape(dtype, rank, dims, &bytes, st) != 0) return NULL;
  void *data = fg_pinned_alloc(bytes ? bytes : 1);
  if (!data) return fg_tensor_new(dtype, rank, dims, st); /* no GPU: an ordinary tensor */
  return own(dtype, rank, dims, bytes, data, 2, 1, st);
}

int fg_tensor_is_pinned(const fg_tensor *t) { return t && t->owned == 2; }

fg_tensor *fg_tensor_from_data(fg_dtype dtype, int rank, const int64_t *dims, const void *data,
                               size_t bytes, fg_status *st) {
  size_t need;
  if (check_data(dtype, rank, dims, data, bytes, &need, st) != 0) return NULL;
  fg_tensor *t = own(dtype, rank, dims, need, fg_aligned_alloc(need), 1, 0, st);
  if (t && need) memcpy(t->data, data, need);
  return t;
}

fg_tensor *fg_tensor_wrap(fg_dtype dtype, int rank, const int64_t *dims, void *data, size_t bytes,
                          fg_status *st) {
  size_t need;
  if (check_data(dtype, rank, dims, data, bytes, &need, st) != 0) return NULL;
  fg_tensor *t = make(dtype, rank, dims, need);
  if (!t) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "tensor: out of memory");
    return NULL;
  }
  t->data = data;
  fg_status_clear(st);
  return t;
}

fg_tensor *fg_tensor_clone(const fg_tensor *t, fg_status *st) {
  if (!t) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_tensor_clone: tensor is NULL");
    return NULL;
  }
  return fg_tensor_from_data(t->dtype, t->rank, t->dims, t->data, t->bytes, st);
}

void fg_tensor_free(fg_tensor *t) {
  if (!t) return;
  if (t->owned == 2)
    fg_pinned_free(t->data);
  else if (t->owned)
    free(t->data);
  free(t);
}

fg_dtype fg_tensor_dtype(const fg_tensor *t) { return t ? t->dtype : FG_DTYPE_INVALID; }
int fg_tensor_rank(const fg_tensor *t) { return t ? t->rank : -1; }
const int64_t *fg_tensor_dims(const fg_tensor *t) { return t ? t->dims : NULL; }
int64_t fg_tensor_dim(const fg_tensor *t, int i) {
  return (t && i >= 0 && i < t->rank) ? t->dims[i] : -1;
}
int64_t fg_tensor_num_elements(const fg_tensor *t) {
  int64_t n = 0;
  if (!t || fg_shape_elements(t->rank, t->dims, &n) != 0) return 0;
  return n;
}
size_t fg_tensor_num_bytes(const fg_tensor *t) { return t ? t->bytes : 0; }
void *fg_tensor_data(const fg_tensor *t) { return t ? t->data : NULL; }
