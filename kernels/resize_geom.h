/* The coordinate arithmetic of resize_nearest and resize_linear, shared by
 * the CPU kernels (kernels/cpu/resize.c) and the CUDA kernels
 * (kernels/cuda/resize.cu) so the two backends sample the same input
 * elements with the same weights. Valid C and CUDA C++. The modes are
 * ONNX Resize's (flowgraph/types.h, fg_resize_coord); coordinates are
 * computed in double, as ONNX's reference does. */
#ifndef FG_RESIZE_GEOM_H
#define FG_RESIZE_GEOM_H

#include <math.h>
#include <stdint.h>

#include "flowgraph/op_params.h"
#include "kernels/kernel.h"

#if defined(__CUDACC__)
#define FG_RESIZE_FN static inline __host__ __device__
#else
#define FG_RESIZE_FN static inline
#endif

/* One resize call: planes of [H, W] in, [OH, OW] out (planes: the product
 * of the leading dims), and the node's parameters. */
typedef struct fgk_resize_geom {
  int64_t planes, H, W, OH, OW;
  double scale_h, scale_w;
  int coord, nearest;
} fgk_resize_geom;

/* Checks one call's buffers, after the backend's count check (1 input,
 * or 2 for a gradient): forward x in[0] and y out[0]; gradient dy in[0],
 * x in[1] (its shape only) and dx out[0]. All of dtype dt, rank >= 2,
 * the same leading dims, y (dy) [..., sizes] and dx x's shape. Fills g
 * from them and ctx->p->resize. 0, or -1 with ctx->err written. Defined
 * in kernels/cpu/resize.c; the CUDA host code calls it too. */
#ifdef __cplusplus
extern "C"
#endif
    int
    fgk_resize_geom_init(const fg_kctx *ctx, fg_dtype dt, int grad, fgk_resize_geom *g);

/* The source coordinate of output o along a dim of n inputs and m outputs
 * with coordinate scale s. */
FG_RESIZE_FN double fgk_resize_src(int coord, int64_t o, int64_t n, int64_t m, double s) {
  switch (coord) {
  case FG_RESIZE_ASYMMETRIC: return (double)o / s;
  case FG_RESIZE_ALIGN_CORNERS: return m > 1 ? (double)o * (double)(n - 1) / (double)(m - 1) : 0.0;
  case FG_RESIZE_PYTORCH_HALF_PIXEL:
    if (m == 1) return 0.0;
    return ((double)o + 0.5) / s - 0.5;
  default: return ((double)o + 0.5) / s - 0.5; /* FG_RESIZE_HALF_PIXEL */
  }
}

/* resize_nearest: the input index output o reads. */
FG_RESIZE_FN int64_t fgk_resize_nearest_index(int coord, int mode, int64_t o, int64_t n, int64_t m,
                                              double s) {
  const double x = fgk_resize_src(coord, o, n, m, s);
  const double f = floor(x);
  double r;
  switch (mode) {
  case FG_NEAREST_FLOOR: r = f; break;
  case FG_NEAREST_CEIL: r = ceil(x); break;
  case FG_NEAREST_ROUND_PREFER_CEIL: r = x - f >= 0.5 ? f + 1.0 : f; break;
  default: r = x - f > 0.5 ? f + 1.0 : f; break; /* FG_NEAREST_ROUND_PREFER_FLOOR */
  }
  if (r < 0.0) return 0;
  if (r > (double)(n - 1)) return n - 1;
  return (int64_t)r;
}

/* resize_linear: output o blends inputs *i0 and *i1 as
 * (1 - *w) x[i0] + *w x[i1], the coordinate clamped to [0, n - 1]. */
FG_RESIZE_FN void fgk_resize_linear_taps(int coord, int64_t o, int64_t n, int64_t m, double s,
                                         int64_t *i0, int64_t *i1, double *w) {
  double x = fgk_resize_src(coord, o, n, m, s);
  if (x < 0.0) x = 0.0;
  if (x > (double)(n - 1)) x = (double)(n - 1);
  const double f = floor(x);
  *i0 = (int64_t)f;
  *i1 = *i0 + 1 < n ? *i0 + 1 : *i0;
  *w = x - f;
}

#endif /* FG_RESIZE_GEOM_H */
