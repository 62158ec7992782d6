/* The SGD step, var - lr * g, shared by apply_sgd (kernels/cpu/optim.c) and
 * the fused updates (kernels/cpu/collective.c, also as the block callback
 * of the communicators' all_reduce_apply), so a fused update gives the bits the
 * all_reduce and apply_sgd nodes would. The arithmetic is in the
 * variable's dtype with lr converted once, as torch.optim.SGD does with a
 * Python-float lr. */
#ifndef FG_KERNELS_SGD_H
#define FG_KERNELS_SGD_H

#include <stdint.h>

#include "flowgraph/types.h"

/* fgk_sgd_to's loops for element type T: one destination (apply_sgd),
 * two (a fused update over two ranks), or any number. */
#define FGK_SGD_TO_LOOPS(T)                                                                        \
  do {                                                                                             \
    const T a = (T)lr, *v = var, *x = g;                                                           \
    if (n_dst == 1) {                                                                              \
      T *d = dst[0];                                                                               \
      for (int64_t i = 0; i < n; i++)                                                              \
        d[i] = v[i] - a * x[i];                                                                    \
    } else if (n_dst == 2) {                                                                       \
      T *d0 = dst[0], *d1 = dst[1];                                                                \
      for (int64_t i = 0; i < n; i++)                                                              \
        d0[i] = d1[i] = v[i] - a * x[i];                                                           \
    } else {                                                                                       \
      for (int64_t i = 0; i < n; i++) {                                                            \
        const T y = v[i] - a * x[i];                                                               \
        for (int k = 0; k < n_dst; k++)                                                            \
          ((T *)dst[k])[i] = y;                                                                    \
      }                                                                                            \
    }                                                                                              \
  } while (0)

/* dst[k][i] = var[i] - lr * g[i] for every k < n_dst, over n elements of
 * f32 or f64 (other dtypes: nothing is written). Any dst may be var. */
static inline void fgk_sgd_to(fg_dtype dt, void *const *dst, int n_dst, const void *var,
                              const void *g, int64_t n, double lr) {
  if (dt == FG_F32)
    FGK_SGD_TO_LOOPS(float);
  else if (dt == FG_F64)
    FGK_SGD_TO_LOOPS(double);
}
#undef FGK_SGD_TO_LOOPS

#endif
