/* Kernels that write constants or forward a value: fill, zeros_like,
 * ones_like and assign (identity and stop_gradient share fgk_copy in
 * shape_ops.c). */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"

/* Writes `v` (converted to dt) to every element of out[0]. Float to integer
 * saturates and maps NaN to 0, as cast does; to bool is v != 0. */
static int write_all(const fg_kctx *ctx, fg_dtype dt, double v) {
  fg_kbuf *out = &ctx->out[0];
  if (out->dtype != dt)
    return fgk_fail(ctx, "output is %s, expected %s", fg_dtype_name(out->dtype), fg_dtype_name(dt));
  const int64_t n = fgk_numel(out);
  if (n == 0) return 0;
  if (v == 0 && !signbit(v)) { /* +0 is all-zero bits in every dtype */
    memset(out->data, 0, (size_t)n * fg_dtype_size(dt));
    return 0;
  }
  switch (dt) {
  case FG_F32: {
    float *o = (float *)out->data;
    for (int64_t i = 0; i < n; i++)
      o[i] = (float)v;
    break;
  }
  case FG_F64: {
    double *o = (double *)out->data;
    for (int64_t i = 0; i < n; i++)
      o[i] = v;
    break;
  }
  case FG_I32: {
    int32_t *o = (int32_t *)out->data;
    const int32_t x = fgk_f2i32(v);
    for (int64_t i = 0; i < n; i++)
      o[i] = x;
    break;
  }
  case FG_I64: {
    int64_t *o = (int64_t *)out->data;
    const int64_t x = fgk_f2i64(v);
    for (int64_t i = 0; i < n; i++)
      o[i] = x;
    break;
  }
  case FG_BOOL: memset(out->data, v != 0, (size_t)n); break;
  default: return fgk_fail(ctx, "unsupported dtype %s", fg_dtype_name(dt));
  }
  return 0;
}

static int fill(const fg_kctx *ctx, fg_dtype dt) {
  if (fgk_check(ctx, 0, 1) != 0) return -1;
  return write_all(ctx, dt, ctx->p->fill.value);
}

/* zeros_like/ones_like look only at the output's shape; an input, if the
 * executor passes one, is ignored. */
static int zeros_like(const fg_kctx *ctx, fg_dtype dt) {
  if (fgk_check(ctx, 0, 1) != 0) return -1;
  return write_all(ctx, dt, 0.0);
}

static int ones_like(const fg_kctx *ctx, fg_dtype dt) {
  if (fgk_check(ctx, 0, 1) != 0) return -1;
  return write_all(ctx, dt, 1.0);
}

FGK_PER_DTYPE(fgk_fill, fill)
FGK_PER_DTYPE(fgk_zeros_like, zeros_like)
FGK_PER_DTYPE(fgk_ones_like, ones_like)

/* assign(variable, value): out[0] is the variable's storage (the executor
 * points it there); the value is copied in unless it already lives there. */
int fgk_assign(const fg_kctx *ctx) {
  if (fgk_check(ctx, 2, 1) != 0) return -1;
  const fg_kbuf *val = &ctx->in[1];
  fg_kbuf *out = &ctx->out[0];
  if (val->dtype != out->dtype)
    return fgk_fail(ctx, "value is %s, the variable %s", fg_dtype_name(val->dtype),
                    fg_dtype_name(out->dtype));
  const int64_t n = fgk_numel(out);
  if (fgk_numel(val) != n)
    return fgk_fail(ctx, "value has %lld elements, the variable %lld", (long long)fgk_numel(val),
                    (long long)n);
  if (n > 0 && val->data != out->data)
    memmove(out->data, val->data, (size_t)n * fg_dtype_size(out->dtype));
  return 0;
}
