/* Index maps of pad, tile and their gradients, shared by the CPU kernels
 * (kernels/cpu/shape_copy.c, which defines the functions) and the CUDA
 * kernels (kernels/cuda/shape_copy.cu, which also runs fgk_map_index on
 * the device). Valid C and C++. Not part of the kernel ABI.
 *
 * Each op relates a "small" tensor (pad's and tile's x, the gradients'
 * output) and a "big" one (their output, the gradients' dy) dim by dim:
 * big index o of dim d reads small index fgk_map_index(m[d], o), or nothing
 * (-1: pad's constant fill). */
#ifndef FG_KERNELS_SHAPE_COPY_H
#define FG_KERNELS_SHAPE_COPY_H

#include <stdint.h>

#include "kernels/kernel.h"

#ifdef __CUDACC__
#define FGK_HD __host__ __device__
#else
#define FGK_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* kind: FG_PAD_CONSTANT, FG_PAD_REFLECT, FG_PAD_EDGE, or FGK_MAP_TILE. */
enum { FGK_MAP_TILE = 16 };
typedef struct fgk_dim_map {
  int kind;
  int64_t begin; /* pad's begin; 0 for tile */
  int64_t n;     /* the small tensor's dim */
} fgk_dim_map;

static inline FGK_HD int64_t fgk_map_index(fgk_dim_map m, int64_t o) {
  int64_t i = o - m.begin;
  switch (m.kind) {
  case FGK_MAP_TILE: return i % m.n;
  case FG_PAD_EDGE: return i < 0 ? 0 : (i >= m.n ? m.n - 1 : i);
  /* The checks keep both pads below n, so one mirror lands inside. */
  case FG_PAD_REFLECT: return i < 0 ? -i : (i >= m.n ? 2 * (m.n - 1) - i : i);
  default: return (i < 0 || i >= m.n) ? -1 : i;
  }
}

/* Fill m[0..rank) for pad (or pad_grad) from ctx->p->pad, checking that big's
 * dims are small's plus the pads and the modes' limits. 0 or -1 (ctx->err). */
int fgk_pad_maps(const fg_kctx *ctx, const fg_kbuf *small, const fg_kbuf *big, fgk_dim_map *m);
/* The same for tile (or tile_grad) from ctx->p->tile. */
int fgk_tile_maps(const fg_kctx *ctx, const fg_kbuf *small, const fg_kbuf *big, fgk_dim_map *m);
typedef int (*fgk_maps_fn)(const fg_kctx *ctx, const fg_kbuf *small, const fg_kbuf *big,
                           fgk_dim_map *m);
/* pad and tile (grad 0: in[0] is small, out[0] big) and their gradients
 * (grad 1: in[0] is the big dy, in[1] only gives the shape, out[0] is
 * small): the outputs' dtype check, then `maps` (fgk_pad_maps or
 * fgk_tile_maps). After the backend's count check. 0 or -1 (ctx->err). */
int fgk_map_op_maps(const fg_kctx *ctx, fgk_maps_fn maps, int grad, fgk_dim_map *m);
/* pad's value in dtype dt, as the bits of one element (low bytes). */
uint64_t fgk_pad_value_bits(fg_dtype dt, double value);
/* split: every output has input 0's dtype and dims except along
 * p->split.axis, where they add up to input 0's. stack: every input has
 * the output's dtype and dims without p->stack.axis, which counts them. */
int fgk_split_check(const fg_kctx *ctx);
int fgk_stack_check(const fg_kctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
