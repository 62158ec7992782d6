/* Helpers shared by the shape and tensor op mappers (onnx_map_tensor.c,
 * onnx_map_tensor2.c): reading known integer inputs with their
 * batch-dependent flags, binding builder results, and folding data
 * movement on values known at import.
 *
 * Folding. Reshape, Transpose, Slice, Gather, Expand, Tile, Concat and the
 * rest only move elements, so on a known value each output element is one
 * input element: fgt_fold_map copies them by an offset table, and the
 * batch-dependent flags travel with the elements. That is how the shape
 * arithmetic exporters emit (Shape -> Gather -> Unsqueeze -> Concat) stays
 * a known value up to the Reshape that reads it. Values above
 * FGT_FOLD_MAX elements become graph nodes instead (a constant node and the
 * op), so folding never copies a large initializer. */
#ifndef FG_SCHEMA_ONNX_MAP_TENSOR_FOLD_H
#define FG_SCHEMA_ONNX_MAP_TENSOR_FOLD_H

#include <stddef.h>
#include <stdint.h>

#include "onnx_import.h"

#define FGT_FOLD_MAX 65536
/* Room for a known integer vector: shapes, pads (2 per dim), repeats. */
#define FGT_MAXV (2 * FG_MAX_RANK)

/* A present input's dtype and shape (FG_DIM_UNKNOWN where unknown). */
typedef struct fgt_info {
  fg_dtype dtype;
  int rank;
  int64_t dims[FGX_MAX_DIMS];
} fgt_info;

/* A known integer vector; sym[i] 1 where v[i] stands for v[i] * batch. */
typedef struct fgt_ivec {
  int n;
  int any_sym;
  int64_t v[FGT_MAXV];
  uint8_t sym[FGT_MAXV];
} fgt_ivec;

int fgt_info_of(fgx_ctx *c, const fgx_node *n, int i, fgt_info *f);
/* Input i, which must be known at import: an int32 or int64 scalar or 1-D
 * tensor of at most FGT_MAXV entries; batch-dependent entries allowed. -1
 * after fgx_fail naming `what`. */
int fgt_read_ivec(fgx_ctx *c, const fgx_node *n, int i, const char *what, fgt_ivec *out);
/* A known scalar or one-element input of any dtype as a double. */
int fgt_read_scalar(fgx_ctx *c, const fgx_node *n, int i, const char *what, double *v);
/* Binds output i to o, or fails with the graph's error when a builder
 * failed (o.node < 0). */
int fgt_bind(fgx_ctx *c, const fgx_node *n, int i, fg_output o);
/* A constant node of int64 values. */
fg_output fgt_const_i64(fgx_ctx *c, int rank, const int64_t *dims, const int64_t *v);

/* The known value of input i when it can be folded: known, and the result
 * `out_elems` small enough (or batch-dependent, which can only fold);
 * NULL otherwise. out_elems < 0: unknown, never folds unless sym. */
const fgx_known *fgt_foldable(fgx_ctx *c, const fgx_node *n, int i, int64_t out_elems);
/* a * b for a, b >= 0, or -1 when either is negative or it passes
 * INT64_MAX (values from a file may be anything). */
int64_t fgt_mul(int64_t a, int64_t b);
/* Product of dims, or -1 when one is unknown or it passes INT64_MAX. */
int64_t fgt_elems(int rank, const int64_t *dims);

/* Output `oi` := the elements of known x in a new shape (same count). */
int fgt_fold_reshape(fgx_ctx *c, const fgx_node *n, int oi, const fgx_known *x, int rank,
                     const int64_t *dims);
/* Output `oi` := a tensor of shape out_dims (out_rank) whose elements, in
 * row-major order over the map's dims (rank, dims: same element count),
 * are x's at flat offset sum_d off[d][k_d]. */
int fgt_fold_map(fgx_ctx *c, const fgx_node *n, int oi, const fgx_known *x, int rank,
                 const int64_t *dims, int64_t *const *off, int out_rank, const int64_t *out_dims);
/* An offset table for fgt_fold_map: off[d] has dims[d] entries. */
typedef struct fgt_map {
  int rank;
  int64_t dims[FG_MAX_RANK];
  int64_t *off[FG_MAX_RANK];
  int64_t *buf;
} fgt_map;
/* Allocates the table for dims; -1 after fgx_fail when out of memory. */
int fgt_map_init(fgx_ctx *c, const fgx_node *n, fgt_map *m, int rank, const int64_t *dims);
void fgt_map_free(fgt_map *m);
/* Row-major strides of a known tensor, in elements. */
void fgt_strides(const fg_tensor *t, int64_t *strides);
/* Output `oi` := known inputs xs[0..k) joined along axis. */
int fgt_fold_concat(fgx_ctx *c, const fgx_node *n, int oi, const fgx_known *const *xs, int k,
                    int axis);

/* "[10, 4*batch, -1]" into buf (cap >= 32), for messages. */
const char *fgt_ivec_str(const fgt_ivec *s, char *buf, size_t cap);
/* "[?, 3, 4]" into buf, ? where unknown. */
const char *fgt_dims_str(int rank, const int64_t *dims, char *buf, size_t cap);
/* idx < 0 ? idx + dim : idx, for run-time indices of dtype dt (ONNX counts
 * negative indices from the end; flowgraph's gather and one_hot do not). */
fg_output fgt_wrap_negative(fgx_ctx *c, fg_output idx, fg_dtype dt, int64_t dim);

/* The mappers of onnx_map_tensor2.c, listed in onnx_map_tensor.c's table. */
int fgt_map_slice(fgx_ctx *c, const fgx_node *n);
int fgt_map_expand(fgx_ctx *c, const fgx_node *n);
int fgt_map_tile(fgx_ctx *c, const fgx_node *n);
int fgt_map_pad(fgx_ctx *c, const fgx_node *n);
int fgt_map_one_hot(fgx_ctx *c, const fgx_node *n);
/* onnx_map_blocks.c: DepthToSpace, SpaceToDepth, Trilu. */
int fgt_map_depth_to_space(fgx_ctx *c, const fgx_node *n);
int fgt_map_space_to_depth(fgx_ctx *c, const fgx_node *n);
int fgt_map_trilu(fgx_ctx *c, const fgx_node *n);
/* onnx_map_scatter.c: ScatterND, folded when its inputs are known. */
int fgt_map_scatter_nd(fgx_ctx *c, const fgx_node *n);
/* Gather along `axis` of x (rank r) with indices of rank q: flowgraph's
 * gather takes axis 0, so other axes transpose x first and the result
 * back. */
fg_output fgt_gather_axis(fgx_ctx *c, fg_output x, int r, int axis, fg_output idx, int q);

#endif
