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
  int owned; /* 1: data is ours (64-byte aligned, freed with the tensor);
              * 2: ours and page-locked (fg_pinned_alloc, fg_pinned_free) */
};

/* Page-locked host memory from the CUDA backend (executor/cuda/backend.c:
 * cudaHostAlloc), for fg_tensor_new_pinned. NULL where there is none: a
 * build without the backend (executor/cuda/stub.c), no GPU, or a refusal. */
void *fg_pinned_alloc(size_t bytes);
void fg_pinned_free(void *p);

/* 64-byte aligned allocation of at least one cache line; NULL on failure. */
void *fg_aligned_alloc(size_t bytes);

#endif
