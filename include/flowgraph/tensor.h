/* flowgraph: dense tensors and .npy files.
 *
 * An fg_tensor is a dtype, a shape (rank <= FG_MAX_RANK, every dimension
 * known) and a C-order buffer. A tensor either owns its buffer (fg_tensor_new,
 * fg_tensor_from_data, fg_npy_read, session fetches) or borrows one
 * (fg_tensor_wrap): a borrowed buffer must outlive the tensor and is never
 * freed by flowgraph. fg_tensor_free releases the tensor, and the buffer when
 * owned.
 */
#ifndef FLOWGRAPH_TENSOR_H
#define FLOWGRAPH_TENSOR_H

#include "flowgraph/status.h"
#include "flowgraph/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_tensor fg_tensor;

/* Owning, zero-filled. Dimensions must be >= 0; the byte size is checked for
 * overflow before anything is allocated. */
FG_API fg_tensor *fg_tensor_new(fg_dtype dtype, int rank, const int64_t *dims, fg_status *status);
/* As fg_tensor_new, in page-locked host memory (PyTorch's pin_memory())
 * where the build has the CUDA backend and the machine a GPU: a session on
 * "cuda:N" copies such a feed to the device directly, without the host copy
 * into its staging buffer. Elsewhere (a CPU-only
 * build, no GPU, the driver refusing) it returns an ordinary tensor, which
 * works the same, only slower to feed; fg_tensor_is_pinned tells which.
 * In a CUDA build the call starts the CUDA driver (its threads, and a
 * context on the calling thread's current GPU, cuda:0 unless the thread
 * chose another), as PyTorch's pin_memory() does; a CPU-only program that
 * wants no driver should use fg_tensor_new. Page-locked memory is scarce:
 * use it for the batches fed every step. fg_tensor_clone of such a tensor
 * is an ordinary one. */
FG_API fg_tensor *fg_tensor_new_pinned(fg_dtype dtype, int rank, const int64_t *dims,
                                       fg_status *status);
/* 1 when t's data is page-locked memory from fg_tensor_new_pinned, else 0
 * (NULL too). A borrowed tensor (fg_tensor_wrap) over memory the caller
 * page-locked is fed directly all the same, but reads 0 here. */
FG_API int fg_tensor_is_pinned(const fg_tensor *t);
/* Owning copy of `bytes` bytes of `data`, which must equal the shape's size. */
FG_API fg_tensor *fg_tensor_from_data(fg_dtype dtype, int rank, const int64_t *dims,
                                      const void *data, size_t bytes, fg_status *status);
/* Borrowed: the tensor points at `data` (of `bytes` bytes) without copying. */
FG_API fg_tensor *fg_tensor_wrap(fg_dtype dtype, int rank, const int64_t *dims, void *data,
                                 size_t bytes, fg_status *status);
/* Owning deep copy. */
FG_API fg_tensor *fg_tensor_clone(const fg_tensor *t, fg_status *status);
/* Accepts NULL. */
FG_API void fg_tensor_free(fg_tensor *t);

FG_API fg_dtype fg_tensor_dtype(const fg_tensor *t);
FG_API int fg_tensor_rank(const fg_tensor *t);
/* Pointer to rank dimensions, owned by the tensor. */
FG_API const int64_t *fg_tensor_dims(const fg_tensor *t);
/* Dimension i, or -1 when i is out of range. */
FG_API int64_t fg_tensor_dim(const fg_tensor *t, int i);
FG_API int64_t fg_tensor_num_elements(const fg_tensor *t);
FG_API size_t fg_tensor_num_bytes(const fg_tensor *t);
/* The buffer (owned or borrowed, see above). */
FG_API void *fg_tensor_data(const fg_tensor *t);

/* .npy files: format versions 1.0, 2.0 and 3.0 are read, 1.0 is written
 * (2.0 when the header needs it). Little-endian, C order; dtypes <f4 <f8 <i4
 * <i8 |b1. Anything else is FG_FORMAT_ERROR naming the file and the field. */
FG_API fg_tensor *fg_npy_read(const char *path, fg_status *status);
FG_API fg_tensor *fg_npy_read_memory(const void *data, size_t size, fg_status *status);
/* Writes to a temporary file and renames it, so no partial file is left. A
 * symbolic link keeps leading to the new file (written beside its
 * target); a device or FIFO (/dev/stdout) is written in place. */
FG_API int fg_npy_write(const char *path, const fg_tensor *t, fg_status *status);

#ifdef __cplusplus
}
#endif
#endif
