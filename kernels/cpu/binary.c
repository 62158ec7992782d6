/* Broadcasting binary kernels (arithmetic, comparisons) and select.
 *
 * Inputs broadcast NumPy-style (right-aligned) to the output shape the
 * executor computed. fgk_bcast_init coalesces the dims, so equal shapes and
 * scalar operands become one flat loop; other shapes walk rows with
 * per-operand strides (0 where an operand broadcasts). The output may alias
 * input 0 when their shapes are equal: each element is read before written.
 *
 * Integer semantics: add, sub, mul and neg wrap around (two's complement,
 * as NumPy), computed in unsigned arithmetic so that overflow is defined.
 * Integer div truncates toward zero (C semantics, unlike NumPy's floor
 * division); INT_MIN / -1 wraps to INT_MIN; division by zero fails with
 * "division by zero at output element N" (N the flat output index).
 * Float maximum/minimum propagate NaN, as np.maximum/np.minimum do.
 *
 * Large outputs are split into ranges of output elements over ctx->par;
 * every element is computed alone, so the split never changes a result. */
#include "kernels/cpu/elementwise_scalar.h"

/* ---- the element functions ---------------------------------------------- */
#define ADD_I(T, U, x, y) ((T)((U)(x) + (U)(y)))
#define SUB_I(T, U, x, y) ((T)((U)(x) - (U)(y)))
#define MUL_I(T, U, x, y) ((T)((U)(x) * (U)(y)))

static inline int32_t add_i32(int32_t x, int32_t y) { return ADD_I(int32_t, uint32_t, x, y); }
static inline int64_t add_i64(int64_t x, int64_t y) { return ADD_I(int64_t, uint64_t, x, y); }
static inline int32_t sub_i32(int32_t x, int32_t y) { return SUB_I(int32_t, uint32_t, x, y); }
static inline int64_t sub_i64(int64_t x, int64_t y) { return SUB_I(int64_t, uint64_t, x, y); }
static inline int32_t mul_i32(int32_t x, int32_t y) { return MUL_I(int32_t, uint32_t, x, y); }
static inline int64_t mul_i64(int64_t x, int64_t y) { return MUL_I(int64_t, uint64_t, x, y); }
/* Callers have rejected y == 0. */
static inline int32_t div_i32(int32_t x, int32_t y) {
  return (x == INT32_MIN && y == -1) ? INT32_MIN : x / y;
}
static inline int64_t div_i64(int64_t x, int64_t y) {
  return (x == INT64_MIN && y == -1) ? INT64_MIN : x / y;
}
static inline int32_t max_i32(int32_t x, int32_t y) { return x > y ? x : y; }
static inline int64_t max_i64(int64_t x, int64_t y) { return x > y ? x : y; }
static inline int32_t min_i32(int32_t x, int32_t y) { return x < y ? x : y; }
static inline int64_t min_i64(int64_t x, int64_t y) { return x < y ? x : y; }

/* Chunks run on several threads, so a chunk that meets a zero divisor
 * records its output index and stops; the kernel then reports the smallest
 * one, the element a sequential loop would have stopped at. */
#define NOCHECK(y, idx) ((void)0)
#define DIVCHECK(y, idx)                                                                           \
  do {                                                                                             \
    if ((y) == 0) {                                                                                \
      fgk_atomic_min(&A->bad, (idx));                                                              \
      return;                                                                                      \
    }                                                                                              \
  } while (0)

/* One row: x from ar (stride sa), y from br (stride sb), n outputs from
 * orow; idx0 is the flat output index of orow[0]. The stride pairs that
 * broadcasting produces most (1/1, 1/0, 0/1) get loops the compiler can
 * vectorise. */
#define BIN_ROW(TI, OPF, CHECK, ar, sa, br, sb, orow, idx0, n)                                     \
  do {                                                                                             \
    if ((sa) == 1 && (sb) == 1) {                                                                  \
      for (int64_t j = 0; j < (n); j++) {                                                          \
        const TI x = (ar)[j], y = (br)[j];                                                         \
        CHECK(y, (idx0) + j);                                                                      \
        (orow)[j] = OPF(x, y);                                                                     \
      }                                                                                            \
    } else if ((sa) == 1 && (sb) == 0) {                                                           \
      const TI y = (br)[0];                                                                        \
      for (int64_t j = 0; j < (n); j++) {                                                          \
        const TI x = (ar)[j];                                                                      \
        CHECK(y, (idx0) + j);                                                                      \
        (orow)[j] = OPF(x, y);                                                                     \
      }                                                                                            \
    } else if ((sa) == 0 && (sb) == 1) {                                                           \
      const TI x = (ar)[0];                                                                        \
      for (int64_t j = 0; j < (n); j++) {                                                          \
        const TI y = (br)[j];                                                                      \
        CHECK(y, (idx0) + j);                                                                      \
        (orow)[j] = OPF(x, y);                                                                     \
      }                                                                                            \
    } else {                                                                                       \
      for (int64_t j = 0; j < (n); j++) {                                                          \
        const TI x = (ar)[j * (sa)], y = (br)[j * (sb)];                                           \
        CHECK(y, (idx0) + j);                                                                      \
        (orow)[j] = OPF(x, y);                                                                     \
      }                                                                                            \
    }                                                                                              \
  } while (0)

/* One call's operands and broadcast walk, shared by its chunks. */
typedef struct bin_arg {
  fgk_bcast bc;
  const void *a, *b, *c;
  void *o;
  _Atomic int64_t bad; /* first output index with a zero integer divisor */
} bin_arg;

/* Parallel over disjoint output ranges: each element is computed the same
 * way whatever the split. */
#define FGK_BINARY(fn, TI, DTI, TO, DTO, OPF, CHECK)                                               \
  static void fn##_range(void *arg, int64_t e0, int64_t e1) {                                      \
    bin_arg *A = (bin_arg *)arg;                                                                   \
    const TI *a = (const TI *)A->a;                                                                \
    const TI *b = (const TI *)A->b;                                                                \
    TO *o = (TO *)A->o;                                                                            \
    const int last = A->bc.rank - 1;                                                               \
    const int64_t sa = A->bc.strides[0][last], sb = A->bc.strides[1][last];                        \
    FGK_BCAST_RANGE(A->bc, e0, e1,                                                                 \
                    BIN_ROW(TI, OPF, CHECK, a + fgk_off[0], sa, b + fgk_off[1], sb, o + fgk_oo,    \
                            fgk_oo, fgk_len));                                                     \
  }                                                                                                \
  int fn(const fg_kctx *ctx) {                                                                     \
    if (fgk_check(ctx, 2, 1) != 0) return -1;                                                      \
    if (ctx->in[0].dtype != DTI || ctx->in[1].dtype != DTI || ctx->out[0].dtype != DTO)            \
      return fgk_fail(ctx, "expected %s inputs and a %s output, got %s, %s and %s",                \
                      fg_dtype_name(DTI), fg_dtype_name(DTO), fg_dtype_name(ctx->in[0].dtype),     \
                      fg_dtype_name(ctx->in[1].dtype), fg_dtype_name(ctx->out[0].dtype));          \
    const int64_t n = fgk_numel(&ctx->out[0]);                                                     \
    if (n == 0) return 0;                                                                          \
    bin_arg A = {.a = ctx->in[0].data, .b = ctx->in[1].data, .o = ctx->out[0].data};               \
    if (fgk_bcast_init(ctx, 2, &A.bc) != 0) return -1;                                             \
    atomic_init(&A.bad, INT64_MAX);                                                                \
    fgk_parallel_for(ctx, n, FGK_GRAIN_CHEAP, fn##_range, &A);                                     \
    const int64_t bad = atomic_load(&A.bad);                                                       \
    if (bad != INT64_MAX)                                                                          \
      return fgk_fail(ctx, "division by zero at output element %lld", (long long)bad);             \
    return 0;                                                                                      \
  }

FGK_BINARY(fgk_add_f32, float, FG_F32, float, FG_F32, add_f32, NOCHECK)
FGK_BINARY(fgk_add_f64, double, FG_F64, double, FG_F64, add_f64, NOCHECK)
FGK_BINARY(fgk_add_i32, int32_t, FG_I32, int32_t, FG_I32, add_i32, NOCHECK)
FGK_BINARY(fgk_add_i64, int64_t, FG_I64, int64_t, FG_I64, add_i64, NOCHECK)
FGK_BINARY(fgk_sub_f32, float, FG_F32, float, FG_F32, sub_f32, NOCHECK)
FGK_BINARY(fgk_sub_f64, double, FG_F64, double, FG_F64, sub_f64, NOCHECK)
FGK_BINARY(fgk_sub_i32, int32_t, FG_I32, int32_t, FG_I32, sub_i32, NOCHECK)
FGK_BINARY(fgk_sub_i64, int64_t, FG_I64, int64_t, FG_I64, sub_i64, NOCHECK)
FGK_BINARY(fgk_mul_f32, float, FG_F32, float, FG_F32, mul_f32, NOCHECK)
FGK_BINARY(fgk_mul_f64, double, FG_F64, double, FG_F64, mul_f64, NOCHECK)
FGK_BINARY(fgk_mul_i32, int32_t, FG_I32, int32_t, FG_I32, mul_i32, NOCHECK)
FGK_BINARY(fgk_mul_i64, int64_t, FG_I64, int64_t, FG_I64, mul_i64, NOCHECK)
FGK_BINARY(fgk_div_f32, float, FG_F32, float, FG_F32, div_f32, NOCHECK)
FGK_BINARY(fgk_div_f64, double, FG_F64, double, FG_F64, div_f64, NOCHECK)
FGK_BINARY(fgk_div_i32, int32_t, FG_I32, int32_t, FG_I32, div_i32, DIVCHECK)
FGK_BINARY(fgk_div_i64, int64_t, FG_I64, int64_t, FG_I64, div_i64, DIVCHECK)
FGK_BINARY(fgk_pow_f32, float, FG_F32, float, FG_F32, pow_f32, NOCHECK)
FGK_BINARY(fgk_pow_f64, double, FG_F64, double, FG_F64, pow_f64, NOCHECK)
FGK_BINARY(fgk_maximum_f32, float, FG_F32, float, FG_F32, max_f32, NOCHECK)
FGK_BINARY(fgk_maximum_f64, double, FG_F64, double, FG_F64, max_f64, NOCHECK)
FGK_BINARY(fgk_maximum_i32, int32_t, FG_I32, int32_t, FG_I32, max_i32, NOCHECK)
FGK_BINARY(fgk_maximum_i64, int64_t, FG_I64, int64_t, FG_I64, max_i64, NOCHECK)
FGK_BINARY(fgk_minimum_f32, float, FG_F32, float, FG_F32, min_f32, NOCHECK)
FGK_BINARY(fgk_minimum_f64, double, FG_F64, double, FG_F64, min_f64, NOCHECK)
FGK_BINARY(fgk_minimum_i32, int32_t, FG_I32, int32_t, FG_I32, min_i32, NOCHECK)
FGK_BINARY(fgk_minimum_i64, int64_t, FG_I64, int64_t, FG_I64, min_i64, NOCHECK)

/* Comparisons write bool (one byte, 0/1) and are keyed by the input dtype. */
#define EQ(x, y) ((uint8_t)((x) == (y)))
#define GT(x, y) ((uint8_t)((x) > (y)))
#define LT(x, y) ((uint8_t)((x) < (y)))
#define FGK_COMPARE(name, OPF)                                                                     \
  FGK_BINARY(fgk_##name##_f32, float, FG_F32, uint8_t, FG_BOOL, OPF, NOCHECK)                      \
  FGK_BINARY(fgk_##name##_f64, double, FG_F64, uint8_t, FG_BOOL, OPF, NOCHECK)                     \
  FGK_BINARY(fgk_##name##_i32, int32_t, FG_I32, uint8_t, FG_BOOL, OPF, NOCHECK)                    \
  FGK_BINARY(fgk_##name##_i64, int64_t, FG_I64, uint8_t, FG_BOOL, OPF, NOCHECK)                    \
  FGK_BINARY(fgk_##name##_bool, uint8_t, FG_BOOL, uint8_t, FG_BOOL, OPF, NOCHECK)
FGK_COMPARE(equal, EQ)
FGK_COMPARE(greater, GT)
FGK_COMPARE(less, LT)

/* select(cond, x, y): cond ? x : y, all three broadcast to the output.
 * Only the element size matters, so one body serves every dtype. A row
 * whose operands are each contiguous or one broadcast value (relu's
 * gradient: select(x > 0, dy, 0)) gets a loop the compiler vectorises. */
/* Both values are loaded and blended through a mask (T is unsigned), with
 * no branch, so the compiler can if-convert and vectorise the loop. */
#define SEL(T, c, a, b)                                                                            \
  ((T)(((a) & (T)(0u - (T)((c) != 0))) | ((b) & (T) ~(T)(0u - (T)((c) != 0)))))
#define SELECT_ROW(T, cr, sc, xr, sx, yr, sy, orow, n)                                             \
  do {                                                                                             \
    if ((sc) == 1 && (sx) == 1 && (sy) == 1) {                                                     \
      for (int64_t j = 0; j < (n); j++)                                                            \
        (orow)[j] = SEL(T, (cr)[j], (xr)[j], (yr)[j]);                                             \
    } else if ((sc) == 1 && (sx) == 1 && (sy) == 0) {                                              \
      const T yv = (yr)[0];                                                                        \
      for (int64_t j = 0; j < (n); j++)                                                            \
        (orow)[j] = SEL(T, (cr)[j], (xr)[j], yv);                                                  \
    } else if ((sc) == 1 && (sx) == 0 && (sy) == 1) {                                              \
      const T xv = (xr)[0];                                                                        \
      for (int64_t j = 0; j < (n); j++)                                                            \
        (orow)[j] = SEL(T, (cr)[j], xv, (yr)[j]);                                                  \
    } else if ((sc) == 1 && (sx) == 0 && (sy) == 0) {                                              \
      const T xv = (xr)[0], yv = (yr)[0];                                                          \
      for (int64_t j = 0; j < (n); j++)                                                            \
        (orow)[j] = SEL(T, (cr)[j], xv, yv);                                                       \
    } else {                                                                                       \
      for (int64_t j = 0; j < (n); j++)                                                            \
        (orow)[j] = (cr)[j * (sc)] ? (xr)[j * (sx)] : (yr)[j * (sy)];                              \
    }                                                                                              \
  } while (0)

#define SELECT_RANGE(name, T)                                                                      \
  static void name(void *arg, int64_t e0, int64_t e1) {                                            \
    const bin_arg *A = (const bin_arg *)arg;                                                       \
    const uint8_t *c = (const uint8_t *)A->a;                                                      \
    const T *x = (const T *)A->b;                                                                  \
    const T *y = (const T *)A->c;                                                                  \
    T *o = (T *)A->o;                                                                              \
    const int last = A->bc.rank - 1;                                                               \
    const int64_t sc = A->bc.strides[0][last], sx = A->bc.strides[1][last],                        \
                  sy = A->bc.strides[2][last];                                                     \
    if (A->bc.rank == 1) { /* one flat run: offsets are the output index times the strides */      \
      SELECT_ROW(T, c + e0 * sc, sc, x + e0 * sx, sx, y + e0 * sy, sy, o + e0, e1 - e0);           \
      return;                                                                                      \
    }                                                                                              \
    FGK_BCAST_RANGE(A->bc, e0, e1,                                                                 \
                    SELECT_ROW(T, c + fgk_off[0], sc, x + fgk_off[1], sx, y + fgk_off[2], sy,      \
                               o + fgk_oo, fgk_len));                                              \
  }
SELECT_RANGE(select_range_1, uint8_t)
SELECT_RANGE(select_range_4, uint32_t)
SELECT_RANGE(select_range_8, uint64_t)

/* Shared with kernels/cuda/elementwise.cu. */
int fgk_select_check(const fg_kctx *ctx) {
  const fg_dtype dt = ctx->out[0].dtype;
  if (ctx->in[0].dtype != FG_BOOL)
    return fgk_fail(ctx, "condition (input 0) must be bool, got %s",
                    fg_dtype_name(ctx->in[0].dtype));
  if (ctx->in[1].dtype != dt || ctx->in[2].dtype != dt)
    return fgk_fail(ctx, "inputs 1 and 2 must be %s like the output, got %s and %s",
                    fg_dtype_name(dt), fg_dtype_name(ctx->in[1].dtype),
                    fg_dtype_name(ctx->in[2].dtype));
  return 0;
}

int fgk_select(const fg_kctx *ctx) {
  if (fgk_check(ctx, 3, 1) != 0 || fgk_select_check(ctx) != 0) return -1;
  const fg_dtype dt = ctx->out[0].dtype;
  const int64_t n = fgk_numel(&ctx->out[0]);
  if (n == 0) return 0;
  bin_arg A = {
      .a = ctx->in[0].data, .b = ctx->in[1].data, .c = ctx->in[2].data, .o = ctx->out[0].data};
  if (fgk_bcast_init(ctx, 3, &A.bc) != 0) return -1;
  fg_krange_fn range;
  switch (fg_dtype_size(dt)) {
  case 1: range = select_range_1; break;
  case 4: range = select_range_4; break;
  case 8: range = select_range_8; break;
  default: return fgk_fail(ctx, "unsupported dtype %s", fg_dtype_name(dt));
  }
  fgk_parallel_for(ctx, n, FGK_GRAIN_CHEAP, range, &A);
  return 0;
}
