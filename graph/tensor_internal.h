/* The fg_tensor struct, shared by graph/ and executor/ so the executor can
 * hand out tensors without copying their description. */
#ifndef FG_TENSOR_INTERNAL_H
#define FG_TENSOR_INTERNAL_H

#include "flowgraph/tensor.h"

struct fg_tensor {
  fg_dtype dtype;
  int rank;
  int64_t dims[FG_MAX_RANK];
  void *data;
  size_t bytes;
  int owned; /* 1: data is ours (64-byte aligned, freed with the tensor) */
};

/* 64-byte aligned allocation of at least one cache line; NULL on failure. */
void *fg_aligned_alloc(size_t bytes);

#endif
