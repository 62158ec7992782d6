/* ONNX DepthToSpace, SpaceToDepth and Trilu, composed from flowgraph ops:
 * the first two move channel blocks to and from space as a reshape to six
 * dims, a transpose and a reshape back (the operator documentation's own
 * definition, so the element order is the documented one); Trilu keeps a
 * triangle through a select against a bool mask made at import. (The
 * table is in onnx_map_tensor.c.) */
#include <stdlib.h>
#include <string.h>

#include "onnx_map_tensor_fold.h"

#define STR 160
/* Larger blocks are refused before b * b can overflow. */
#define BLOCK_MAX (1 << 20)
/* The largest Trilu mask (rows x columns of bool) made at import. */
#define MASK_MAX (INT64_C(1) << 26)

/* reshape, transpose, reshape. An open batch is FG_DIM_UNKNOWN (-1) in
 * both shapes, which fg_reshape infers. */
static fg_output regroup(fg_graph *g, fg_output x, const int64_t *in6, const int64_t *perm,
                         const int64_t *out4) {
  return fg_reshape(g, fg_transpose(g, fg_reshape(g, x, 6, in6), 6, perm), 4, out4);
}

/* Input 0 as [N, C, H, W] with C, H and W known, and the blocksize
 * attribute: -1 after fgx_fail otherwise. */
static int block_args(fgx_ctx *c, const fgx_node *n, fgt_info *x, int64_t *b) {
  char s[STR];
  if (fgt_info_of(c, n, 0, x)) return -1;
  if (x->rank != 4)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "input 0 shape %s has rank %d; it must be [N, C, H, W]",
                    fgt_dims_str(x->rank, x->dims, s, STR), x->rank);
  for (int d = 1; d < 4; d++)
    if (x->dims[d] < 0)
      return fgx_fail(c, n, FG_UNIMPLEMENTED,
                      "input 0 shape %s: dim %d is unknown at import; flowgraph needs C, H and W "
                      "known (only the batch may vary)",
                      fgt_dims_str(x->rank, x->dims, s, STR), d);
  /* An open batch travels through the reshapes as -1, which a zero dim
   * beside it leaves undetermined. */
  if (x->dims[0] < 0 && fgt_elems(3, x->dims + 1) == 0)
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "input 0 shape %s has a zero dim beside the open batch, which flowgraph's "
                    "reshapes cannot carry; export with a fixed batch",
                    fgt_dims_str(x->rank, x->dims, s, STR));
  int has = fgx_attr_int(c, n, "blocksize", 0, b);
  if (has < 0) return -1;
  if (!has) return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute blocksize is required");
  if (*b < 1 || *b > BLOCK_MAX)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute blocksize = %lld is outside [1, %d]",
                    (long long)*b, BLOCK_MAX);
  return 0;
}

/* DepthToSpace: [N, C, H, W] -> [N, C / b^2, H b, W b]. DCR (the default)
 * reads the block offset from the channel's high part, CRD from its low
 * part (opset 11's mode). */
int fgt_map_depth_to_space(fgx_ctx *c, const fgx_node *n) {
  fgt_info x;
  int64_t b;
  const char *mode;
  char s[STR];
  if (block_args(c, n, &x, &b)) return -1;
  if (fgx_attr_string(c, n, "mode", "DCR", &mode) < 0) return -1;
  int dcr = strcmp(mode, "DCR") == 0;
  if (!dcr && strcmp(mode, "CRD") != 0)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute mode = '%s' must be 'DCR' or 'CRD'", mode);
  const int64_t N = x.dims[0], C = x.dims[1], H = x.dims[2], W = x.dims[3];
  if (C % (b * b) != 0)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "input 0 shape %s: channels %lld are not a multiple of blocksize^2 = %lld",
                    fgt_dims_str(4, x.dims, s, STR), (long long)C, (long long)(b * b));
  const int64_t c2 = C / (b * b);
  if (fgt_mul(H, b) < 0 || fgt_mul(W, b) < 0)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "output size %lld x %lld or %lld x %lld overflows",
                    (long long)H, (long long)b, (long long)W, (long long)b);
  const int64_t dcr6[6] = {N, b, b, c2, H, W}, crd6[6] = {N, c2, b, b, H, W};
  static const int64_t dcr_perm[6] = {0, 3, 4, 1, 5, 2}, crd_perm[6] = {0, 1, 4, 2, 5, 3};
  const int64_t out[4] = {N, c2, H * b, W * b};
  fg_output xo = fgx_input(c, n, 0);
  if (xo.node < 0) return -1;
  return fgt_bind(c, n, 0,
                  regroup(fgx_graph(c), xo, dcr ? dcr6 : crd6, dcr ? dcr_perm : crd_perm, out));
}

/* SpaceToDepth: [N, C, H, W] -> [N, C b^2, H / b, W / b], the inverse of
 * DepthToSpace's DCR. */
int fgt_map_space_to_depth(fgx_ctx *c, const fgx_node *n) {
  fgt_info x;
  int64_t b;
  char s[STR];
  if (block_args(c, n, &x, &b)) return -1;
  const int64_t N = x.dims[0], C = x.dims[1], H = x.dims[2], W = x.dims[3];
  if (H % b != 0 || W % b != 0)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "input 0 shape %s: H = %lld and W = %lld must be multiples of blocksize = %lld",
                    fgt_dims_str(4, x.dims, s, STR), (long long)H, (long long)W, (long long)b);
  if (fgt_mul(C, b * b) < 0)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "output channels %lld x %lld^2 overflow", (long long)C,
                    (long long)b);
  const int64_t in6[6] = {N, C, H / b, b, W / b, b};
  static const int64_t perm[6] = {0, 3, 5, 1, 2, 4};
  const int64_t out[4] = {N, C * b * b, H / b, W / b};
  fg_output xo = fgx_input(c, n, 0);
  if (xo.node < 0) return -1;
  return fgt_bind(c, n, 0, regroup(fgx_graph(c), xo, in6, perm, out));
}

/* Trilu (opset 14): the upper (upper = 1, the default) or lower triangle
 * of the last two dims, from diagonal k (input 1, default 0: column - row
 * >= k, or <= k for the lower), zeros elsewhere. A select keeps NaN and
 * infinities in the triangle and writes true zeros outside it, as the
 * documentation's definition does (a product by a 0/1 mask would not). */
int fgt_map_trilu(fgx_ctx *c, const fgx_node *n) {
  fgt_info x;
  int64_t upper = 1, k = 0;
  char s[STR];
  if (fgt_info_of(c, n, 0, &x)) return -1;
  if (fgx_attr_int(c, n, "upper", 1, &upper) < 0) return -1;
  if (upper != 0 && upper != 1)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute upper = %lld must be 0 or 1",
                    (long long)upper);
  if (x.rank < 2)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "input 0 shape %s has rank %d; Trilu needs rank >= 2",
                    fgt_dims_str(x.rank, x.dims, s, STR), x.rank);
  if (fgx_has_input(n, 1) && fgx_input_int(c, n, 1, "k", &k)) return -1;
  const int64_t rows = x.dims[x.rank - 2], cols = x.dims[x.rank - 1];
  int64_t cells = fgt_mul(rows, cols);
  if (rows < 0 || cols < 0)
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "input 0 shape %s: the last two dims must be known at import (the mask is "
                    "made then)",
                    fgt_dims_str(x.rank, x.dims, s, STR));
  if (cells < 0 || cells > MASK_MAX)
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "input 0 shape %s: a %lld x %lld mask is above flowgraph's %lld elements",
                    fgt_dims_str(x.rank, x.dims, s, STR), (long long)rows, (long long)cols,
                    (long long)MASK_MAX);
  unsigned char *m = malloc(cells ? (size_t)cells : 1);
  if (!m) return fgx_fail(c, n, FG_RESOURCE_EXHAUSTED, "out of memory for the mask");
  /* No loop over an empty mask: a file may pair a zero dim with a huge one. */
  for (int64_t i = 0; cells > 0 && i < rows; i++)
    for (int64_t j = 0; j < cols; j++) /* |j - i| < 2^26: no overflow */
      m[i * cols + j] = upper ? j - i >= k : j - i <= k;
  int64_t md[2] = {rows, cols};
  fg_tensor *mt = fg_tensor_from_data(FG_BOOL, 2, md, m, (size_t)cells, NULL);
  free(m);
  if (!mt) return fgx_fail(c, n, FG_RESOURCE_EXHAUSTED, "out of memory for the mask");
  fg_graph *g = fgx_graph(c);
  fg_output mask = fg_constant(g, NULL, mt);
  fg_tensor_free(mt);
  fg_output xo = fgx_input(c, n, 0);
  if (xo.node < 0) return -1;
  return fgt_bind(c, n, 0, fg_select(g, mask, xo, fg_zeros_like(g, xo)));
}
