/* The geometry of one pooling call, shared by the CPU kernels
 * (kernels/cpu/pool.c) and the CUDA kernels (kernels/cuda/pool.cu) so the
 * two backends cut the same windows. Valid C and CUDA C++.
 *
 * Windows follow torch.nn.functional on NCHW planes:
 * - max/avg: output o along a dim starts at o * s - pad_begin and takes k
 *   elements d apart, those inside [0, size) only. avg_pool2d's divisor is
 *   the window clipped to the padded input [-pad_begin, size + pad_end)
 *   (count_include_pad 1) or to the input (0).
 * - adaptive: output o takes [floor(o * size / out), ceil((o + 1) * size /
 *   out)); the global pools are the 1x1 case (max: one window, the plane). */
#ifndef FG_POOL_GEOM_H
#define FG_POOL_GEOM_H

#include <stdint.h>

#include "kernels/kernel.h"

#if defined(__CUDACC__)
#define FG_POOL_FN static inline __host__ __device__
#else
#define FG_POOL_FN static inline
#endif

typedef struct fgk_pool_geom {
  int64_t planes; /* N * C */
  int64_t H, W;   /* input plane */
  int64_t OH, OW; /* output plane */
  int64_t kh, kw, sh, sw, dh, dw;
  int64_t pt, pl, pb, pr; /* pads: top, left, bottom, right */
  int count_include_pad;
} fgk_pool_geom;

/* Checks x [N, C, H, W] and y [N, C, OH, OW] (y: the forward output, or
 * dy) and fills g; p NULL: a global window (the whole plane, stride 1).
 * 0, or -1 with ctx->err written. The executor has inferred the shapes;
 * these checks keep a direct, mis-wired call from reading out of bounds. */
#ifdef __cplusplus
extern "C"
#endif
    int
    fgk_pool_geom_init(const fg_kctx *ctx, const fg_kbuf *x, const fg_kbuf *y,
                       const fg_pool2d_params *p, fgk_pool_geom *g);

/* A pooling call's buffers, after the backend's count check: the dtypes
 * agree (fgk_same_dtypes over its 1 or 2 inputs) and out[0] is dt; x is
 * in[0] and y out[0], or for a gradient (grad != 0) x is in[1] and y is
 * dy, in[0]. 0, or -1 (ctx->err). */
#ifdef __cplusplus
extern "C"
#endif
    int
    fgk_pool_bufs(const fg_kctx *ctx, fg_dtype dt, int grad, const fg_kbuf **x, const fg_kbuf **y);

/* For one tap of the window (offset off = k * d - pad_begin along a dim):
 * the outputs o in [*o0, *o1) are those whose tap o * s + off lies in
 * [0, size). */
FG_POOL_FN void fgk_pool_tap_range(int64_t off, int64_t s, int64_t size, int64_t n_out, int64_t *o0,
                                   int64_t *o1) {
  int64_t lo = off >= 0 ? 0 : (-off + s - 1) / s;
  int64_t hi = size - 1 - off < 0 ? 0 : (size - 1 - off) / s + 1;
  if (hi > n_out) hi = n_out;
  if (lo > hi) lo = hi;
  *o0 = lo;
  *o1 = hi;
}

/* avg_pool2d along one dim for output o: the clipped range [*b, *e) and
 * the length the divisor counts with padding. */
FG_POOL_FN void fgk_avg_window(int64_t o, int64_t k, int64_t s, int64_t pad_b, int64_t pad_e,
                               int64_t size, int64_t *b, int64_t *e, int64_t *padded_len) {
  int64_t start = o * s - pad_b, end = start + k;
  if (end > size + pad_e) end = size + pad_e;
  *padded_len = end - start;
  *b = start < 0 ? 0 : start;
  *e = end > size ? size : end;
}

/* adaptive_avg_pool2d's window of output o along a dim. */
FG_POOL_FN void fgk_adaptive_window(int64_t o, int64_t size, int64_t n_out, int64_t *b,
                                    int64_t *e) {
  *b = (o * size) / n_out;
  *e = ((o + 1) * size + n_out - 1) / n_out;
}

/* avg_pool2d's divisor for the window of output (oh, ow). */
FG_POOL_FN int64_t fgk_avg_divisor(const fgk_pool_geom *g, int64_t oh, int64_t ow, int64_t *h0,
                                   int64_t *h1, int64_t *w0, int64_t *w1) {
  int64_t ph, pw;
  fgk_avg_window(oh, g->kh, g->sh, g->pt, g->pb, g->H, h0, h1, &ph);
  fgk_avg_window(ow, g->kw, g->sw, g->pl, g->pr, g->W, w0, w1, &pw);
  return g->count_include_pad ? ph * pw : (*h1 - *h0) * (*w1 - *w0);
}

#endif
