/* logical_not, logical_and and logical_or on bool (one byte per element).
 *
 * Any nonzero byte reads as true and the output is always 0 or 1, so a
 * bool buffer that some other path filled with other nonzero bytes still
 * gives a proper bool. The kernels are registered for every dtype key (the
 * registry wants f32 and f64 rows for every op) but accept only bool
 * operands. The binary ones broadcast NumPy-style through the same walk as
 * the arithmetic kernels (binary.c); the output may alias input 0 when the
 * shapes are equal, each element being read before it is written. */
#include "kernels/cpu/cpu_kernels.h"

/* Shared with kernels/cuda/logical.cu: every operand and the output bool. */
int fgk_logical_check(const fg_kctx *ctx, int n_in) {
  if (fgk_check(ctx, n_in, 1) != 0) return -1;
  for (int i = 0; i < n_in; i++)
    if (ctx->in[i].dtype != FG_BOOL)
      return fgk_fail(ctx, "input %d is %s; logical ops need bool", i,
                      fg_dtype_name(ctx->in[i].dtype));
  if (ctx->out[0].dtype != FG_BOOL)
    return fgk_fail(ctx, "output is %s; logical ops write bool", fg_dtype_name(ctx->out[0].dtype));
  return 0;
}

typedef struct not_arg {
  const uint8_t *x;
  uint8_t *y;
} not_arg;

static void not_range(void *arg, int64_t e0, int64_t e1) {
  const not_arg *A = (const not_arg *)arg;
  for (int64_t i = e0; i < e1; i++)
    A->y[i] = (uint8_t)(A->x[i] == 0);
}

int fgk_logical_not(const fg_kctx *ctx) {
  if (fgk_logical_check(ctx, 1) != 0) return -1;
  const int64_t n = fgk_numel(&ctx->out[0]);
  if (fgk_numel(&ctx->in[0]) != n)
    return fgk_fail(ctx, "input has %lld elements, output %lld", (long long)fgk_numel(&ctx->in[0]),
                    (long long)n);
  not_arg A = {(const uint8_t *)ctx->in[0].data, (uint8_t *)ctx->out[0].data};
  if (n > 0) fgk_parallel_for(ctx, n, FGK_GRAIN_CHEAP, not_range, &A);
  return 0;
}

typedef struct logic_arg {
  fgk_bcast bc;
  const uint8_t *a, *b;
  uint8_t *o;
} logic_arg;

#define AND_OF(x, y) (uint8_t)(((x) != 0) & ((y) != 0))
#define OR_OF(x, y)  (uint8_t)(((x) != 0) | ((y) != 0))

/* One row of n outputs at o, operands at a and b with strides sa and sb
 * (0 where broadcast). */
#define LOGIC_ROW(F, a, sa, b, sb, o, n)                                                           \
  do {                                                                                             \
    for (int64_t j = 0; j < (n); j++)                                                              \
      (o)[j] = F((a)[j * (sa)], (b)[j * (sb)]);                                                    \
  } while (0)

#define LOGIC_KERNEL(fn, F)                                                                        \
  static void fn##_range(void *arg, int64_t e0, int64_t e1) {                                      \
    const logic_arg *A = (const logic_arg *)arg;                                                   \
    const int last = A->bc.rank - 1;                                                               \
    const int64_t sa = A->bc.strides[0][last], sb = A->bc.strides[1][last];                        \
    FGK_BCAST_RANGE(                                                                               \
        A->bc, e0, e1,                                                                             \
        LOGIC_ROW(F, A->a + fgk_off[0], sa, A->b + fgk_off[1], sb, A->o + fgk_oo, fgk_len));       \
  }                                                                                                \
  int fn(const fg_kctx *ctx) {                                                                     \
    if (fgk_logical_check(ctx, 2) != 0) return -1;                                                 \
    const int64_t n = fgk_numel(&ctx->out[0]);                                                     \
    if (n == 0) return 0;                                                                          \
    logic_arg A = {.a = (const uint8_t *)ctx->in[0].data,                                          \
                   .b = (const uint8_t *)ctx->in[1].data,                                          \
                   .o = (uint8_t *)ctx->out[0].data};                                              \
    if (fgk_bcast_init(ctx, 2, &A.bc) != 0) return -1;                                             \
    fgk_parallel_for(ctx, n, FGK_GRAIN_CHEAP, fn##_range, &A);                                     \
    return 0;                                                                                      \
  }

LOGIC_KERNEL(fgk_logical_and, AND_OF)
LOGIC_KERNEL(fgk_logical_or, OR_OF)
