/* fused_elementwise: a program of element-wise instructions (fg_fused_params,
 * flowgraph/op_params.h) run over blocks of output elements small enough
 * to stay in L1. Per block, each input that is neither contiguous nor a
 * single value is gathered (broadcast) into a block buffer, bool inputs as
 * 0/1 of the compute dtype; then every instruction runs as one tight loop
 * over the block, and the last writes the output. Intermediates live in a
 * few block buffers, reused once their last reader has run, so a fused
 * node reads each input once and writes its output once.
 *
 * The output may share input 0's bytes (the op is flagged in place; the
 * planner shares them only when input 0 has the output's shape, so it is
 * read in place block by block): the last instruction, the only writer,
 * runs after every read of the block's inputs but its own, which reads
 * element j before writing it.
 *
 * Bits: every instruction calls the element function of its op's own
 * kernel (elementwise_scalar.h) on values of the output's dtype, exactly
 * what the unfused nodes compute, so fused and unfused results are equal.
 * Elements are independent: neither the block size nor the split over
 * threads changes a result. */
#include <string.h>

#include "kernels/cpu/elementwise_scalar.h"

/* Elements per block: at most 512 (4 KiB of f64 per buffer), fewer when a
 * program needs many buffers, so that all of them fit FUSED_STACK bytes on
 * the stack of the thread running the block (a run allocates nothing). */
#define FUSED_BLOCK 512
#define FUSED_STACK 65536
/* Bytes past the last buffer that a gather's whole-vector fill may write. */
#define FUSED_SLACK 64

/* How an input reaches the block. */
enum { IN_DIRECT, IN_SCALAR, IN_GATHER };

typedef struct fused_plan {
  const fg_fused_params *p;
  const fg_kbuf *in, *out;
  int kind[FG_FUSED_MAX_INPUTS];
  fgk_bcast bc[FG_FUSED_MAX_INPUTS]; /* IN_GATHER: the input's walk */
  double scalar[FG_FUSED_MAX_INPUTS];
  int slot[FG_FUSED_MAX_INSTRS]; /* instruction -> its result's buffer (the last: none) */
  int n_slots, n_gather;
  int gather_buf[FG_FUSED_MAX_INPUTS]; /* IN_GATHER input -> buffer */
  int64_t block;                       /* elements per block */
} fused_plan;

/* One operand of an instruction over a block: a pointer and a stride of 1
 * (a block of values) or 0 (one value). */
typedef struct operand {
  const void *p;
  int s;
} operand;

/* Loops with the operands' strides known, so the compiler vectorises the
 * common cases (a block and a block, a block and a value). */
#define LOOP1(F, ...)                                                                              \
  do {                                                                                             \
    if (A.s)                                                                                       \
      for (int64_t j = 0; j < n; j++)                                                              \
        d[j] = F(a[j], ##__VA_ARGS__);                                                             \
    else                                                                                           \
      for (int64_t j = 0; j < n; j++)                                                              \
        d[j] = F(a[0], ##__VA_ARGS__);                                                             \
  } while (0)
#define LOOP2(F)                                                                                   \
  do {                                                                                             \
    if (A.s && B.s)                                                                                \
      for (int64_t j = 0; j < n; j++)                                                              \
        d[j] = F(a[j], b[j]);                                                                      \
    else if (A.s)                                                                                  \
      for (int64_t j = 0; j < n; j++)                                                              \
        d[j] = F(a[j], b[0]);                                                                      \
    else if (B.s)                                                                                  \
      for (int64_t j = 0; j < n; j++)                                                              \
        d[j] = F(a[0], b[j]);                                                                      \
    else                                                                                           \
      for (int64_t j = 0; j < n; j++)                                                              \
        d[j] = F(a[0], b[0]);                                                                      \
  } while (0)
/* select blends the bits of its two values through a mask, with both
 * loaded, as binary.c's select does: no branch, so the loop vectorises,
 * and the result holds exactly the chosen value's bits. The buffers are
 * read as unsigned integers of the element's size (may_alias). */
#if defined(__GNUC__)
typedef uint32_t fused_u32 __attribute__((may_alias));
typedef uint64_t fused_u64 __attribute__((may_alias));
#else
typedef uint32_t fused_u32;
typedef uint64_t fused_u64;
#endif
#define SEL_LOOP(U, sa, sb, sc)                                                                    \
  do {                                                                                             \
    const U *bu = (const U *)(const void *)b, *cu = (const U *)(const void *)c;                    \
    U *du = (U *)(void *)d;                                                                        \
    for (int64_t j = 0; j < n; j++) {                                                              \
      const U m = (U)0 - (U)(a[j * (sa)] != 0);                                                    \
      du[j] = (bu[j * (sb)] & m) | (cu[j * (sc)] & (U)~m);                                         \
    }                                                                                              \
  } while (0)
#define GT(x, y) ((x) > (y))
#define LT(x, y) ((x) < (y))
#define EQ(x, y) ((x) == (y))

/* One instruction over n elements of the block: d = op(args). The binary
 * and ternary ones compute as binary.c's loops, the unary ones as
 * elementwise_unary.c's, so each computes as the op's own kernel does.
 * Both are built per instruction set (FGK_CLONES): a block is in L1, so
 * these loops are bound by arithmetic (a GELU's divide, at four lanes,
 * took as long as its erf at sixteen), and an IEEE add, multiply or
 * divide gives the same bits at any vector width, as binary.c built for
 * the baseline does. One thing C leaves open: where both operands
 * of an addition or multiplication are NaN, the hardware keeps the one the
 * compiler made the first operand, so that NaN's sign and payload may
 * differ from the unfused kernel's (flowgraph/passes.h). */
#define FUSED_BINARY(sfx, T, U)                                                                    \
  FGK_CLONES static void binary_##sfx(const fg_fused_instr *in, const operand *ops, T *d,          \
                                      int64_t n) {                                                 \
    const operand A = ops[0], B = ops[1], C = ops[in->n_args > 2 ? 2 : 1];                         \
    const T *a = (const T *)A.p, *b = (const T *)B.p, *c = (const T *)C.p;                         \
    switch (in->op) {                                                                              \
    case FG_FUSED_ADD: LOOP2(add_##sfx); break;                                                    \
    case FG_FUSED_SUB: LOOP2(sub_##sfx); break;                                                    \
    case FG_FUSED_MUL: LOOP2(mul_##sfx); break;                                                    \
    case FG_FUSED_DIV: LOOP2(div_##sfx); break;                                                    \
    case FG_FUSED_MAXIMUM: LOOP2(max_##sfx); break;                                                \
    case FG_FUSED_MINIMUM: LOOP2(min_##sfx); break;                                                \
    case FG_FUSED_POW: LOOP2(pow_##sfx); break;                                                    \
    case FG_FUSED_GREATER: LOOP2((T)GT); break;                                                    \
    case FG_FUSED_LESS: LOOP2((T)LT); break;                                                       \
    case FG_FUSED_EQUAL: LOOP2((T)EQ); break;                                                      \
    case FG_FUSED_SELECT:                                                                          \
      /* a (the condition) is 0/1 or any value: != 0 picks b, as select's                          \
       * bool condition does. */                                                                   \
      if (A.s && B.s && C.s)                                                                       \
        SEL_LOOP(U, 1, 1, 1);                                                                      \
      else if (A.s && B.s)                                                                         \
        SEL_LOOP(U, 1, 1, 0);                                                                      \
      else if (A.s && C.s)                                                                         \
        SEL_LOOP(U, 1, 0, 1);                                                                      \
      else                                                                                         \
        SEL_LOOP(U, A.s, B.s, C.s);                                                                \
      break;                                                                                       \
    default: break;                                                                                \
    }                                                                                              \
  }
#define FUSED_UNARY(sfx, T)                                                                        \
  FGK_CLONES static void unary_##sfx(const fg_fused_instr *in, const operand *ops, T *d,           \
                                     int64_t n) {                                                  \
    const operand A = ops[0];                                                                      \
    const T *a = (const T *)A.p;                                                                   \
    const double p0 = in->attr[0], p1 = in->attr[1];                                               \
    switch (in->op) {                                                                              \
    case FG_FUSED_NEG: LOOP1(neg_##sfx); break;                                                    \
    case FG_FUSED_EXP: LOOP1(exp_##sfx); break;                                                    \
    case FG_FUSED_LOG: LOOP1(log_##sfx); break;                                                    \
    case FG_FUSED_SQRT: LOOP1(sqrt_##sfx); break;                                                  \
    case FG_FUSED_RSQRT: LOOP1(rsqrt_##sfx); break;                                                \
    case FG_FUSED_ABS: LOOP1(abs_##sfx); break;                                                    \
    case FG_FUSED_TANH: LOOP1(tanh_##sfx); break;                                                  \
    case FG_FUSED_SIGMOID: LOOP1(sigmoid_##sfx); break;                                            \
    case FG_FUSED_RELU: LOOP1(relu_##sfx); break;                                                  \
    case FG_FUSED_LEAKY_RELU: LOOP1(leaky_relu_##sfx, p0); break;                                  \
    case FG_FUSED_ELU: LOOP1(elu_##sfx, p0); break;                                                \
    case FG_FUSED_SOFTPLUS: LOOP1(softplus_##sfx, p0, p1); break;                                  \
    case FG_FUSED_CLIP: LOOP1(clip_##sfx, (T)p0, (T)p1); break;                                    \
    case FG_FUSED_SILU: LOOP1(silu_##sfx); break;                                                  \
    case FG_FUSED_GELU: LOOP1(gelu_##sfx); break;                                                  \
    case FG_FUSED_GELU_TANH: LOOP1(gelu_tanh_##sfx); break;                                        \
    case FG_FUSED_ERF: LOOP1(erf_##sfx); break;                                                    \
    case FG_FUSED_SIGN: LOOP1(sign_##sfx); break;                                                  \
    case FG_FUSED_RECIPROCAL: LOOP1(reciprocal_##sfx); break;                                      \
    case FG_FUSED_FLOOR: LOOP1(floor_##sfx); break;                                                \
    case FG_FUSED_CEIL: LOOP1(ceil_##sfx); break;                                                  \
    case FG_FUSED_ROUND: LOOP1(round_##sfx); break;                                                \
    default: break;                                                                                \
    }                                                                                              \
  }

/* Input k's elements [e0, e0 + n) of the output, broadcast, as an
 * operand: the input's one value where the block lies in one run of it
 * (a per-channel [C, 1, 1] over a plane of at least a block), else
 * gathered into buf. Runs of one value are filled and contiguous runs
 * copied as plain loops, which vectorise: a per-channel scale and shift
 * over DenseNet's 7x7 planes, gathered element by element, took three
 * times the arithmetic's time. */
#define FUSED_GATHER(sfx, T)                                                                       \
  FGK_CLONES static operand gather_##sfx(const fused_plan *P, int k, int64_t e0, int64_t n,        \
                                         T *buf) {                                                 \
    const fgk_bcast *bc = &P->bc[k];                                                               \
    const int64_t s = bc->strides[0][bc->rank - 1];                                                \
    const void *data = P->in[k].data;                                                              \
    operand one = {NULL, 0};                                                                       \
    if (P->in[k].dtype == FG_BOOL) {                                                               \
      FGK_BCAST_RANGE(*bc, e0, e0 + n, {                                                           \
        const uint8_t *src = (const uint8_t *)data + fgk_off[0];                                   \
        for (int64_t j = 0; j < fgk_len; j++)                                                      \
          buf[fgk_oo - e0 + j] = (T)(src[j * s] != 0);                                             \
      });                                                                                          \
      return (operand){buf, 1};                                                                    \
    }                                                                                              \
    FGK_BCAST_RANGE(*bc, e0, e0 + n, {                                                             \
      const T *src = (const T *)data + fgk_off[0];                                                 \
      T *d = buf + (fgk_oo - e0);                                                                  \
      if (s == 0 && fgk_len == n) {                                                                \
        one.p = src;                                                                               \
      } else if (s == 0) {                                                                         \
        /* Whole vectors, past the run's end by up to FILL - 1: into the                           \
         * next run's place (filled after), the next buffer (filled or                             \
         * written after) or the stack's slack (FUSED_SLACK). */                                   \
        const T v = src[0];                                                                        \
        enum { FILL = 64 / sizeof(T) };                                                            \
        for (int64_t j = 0; j < fgk_len; j += FILL)                                                \
          for (int l = 0; l < FILL; l++)                                                           \
            d[j + l] = v;                                                                          \
      } else if (s == 1) {                                                                         \
        for (int64_t j = 0; j < fgk_len; j++)                                                      \
          d[j] = src[j];                                                                           \
      } else {                                                                                     \
        for (int64_t j = 0; j < fgk_len; j++)                                                      \
          d[j] = src[j * s];                                                                       \
      }                                                                                            \
    });                                                                                            \
    return one.p ? one : (operand){buf, 1};                                                        \
  }

/* One block: the inputs' operands, then the instructions in order. */
#define FUSED_BLOCK_FN(sfx, T)                                                                     \
  static void block_##sfx(const fused_plan *P, int64_t e0, int64_t n, T *bufs, const T *consts,    \
                          const T *scalars) {                                                      \
    const fg_fused_params *p = P->p;                                                               \
    operand in_ops[FG_FUSED_MAX_INPUTS];                                                           \
    T *slots = bufs + (size_t)P->n_gather * P->block;                                              \
    for (int k = 0; k < p->n_inputs; k++) {                                                        \
      if (P->kind[k] == IN_DIRECT) {                                                               \
        in_ops[k] = (operand){(const T *)P->in[k].data + e0, 1};                                   \
      } else if (P->kind[k] == IN_SCALAR) {                                                        \
        in_ops[k] = (operand){&scalars[k], 0};                                                     \
      } else {                                                                                     \
        in_ops[k] = gather_##sfx(P, k, e0, n, bufs + (size_t)P->gather_buf[k] * P->block);         \
      }                                                                                            \
    }                                                                                              \
    for (int i = 0; i < p->n_instrs; i++) {                                                        \
      const fg_fused_instr *ins = &p->ins[i];                                                      \
      operand ops[3];                                                                              \
      for (int a = 0; a < ins->n_args; a++) {                                                      \
        const fg_fused_ref r = ins->arg[a];                                                        \
        ops[a] = r.kind == FG_FUSED_INPUT ? in_ops[r.index]                                        \
                 : r.kind == FG_FUSED_CONST                                                        \
                     ? (operand){&consts[r.index], 0}                                              \
                     : (operand){slots + (size_t)P->slot[r.index] * P->block, 1};                  \
      }                                                                                            \
      T *d =                                                                                       \
          i == p->n_instrs - 1 ? (T *)P->out->data + e0 : slots + (size_t)P->slot[i] * P->block;   \
      if (ins->n_args == 1)                                                                        \
        unary_##sfx(ins, ops, d, n);                                                               \
      else                                                                                         \
        binary_##sfx(ins, ops, d, n);                                                              \
    }                                                                                              \
  }

/* A thread's range of output elements, block by block, with its own
 * buffers (gathered inputs, then intermediates). */
#define FUSED_RANGE(sfx, T)                                                                        \
  FGK_HOT_ALIGN static void range_##sfx(void *arg, int64_t e0, int64_t e1) {                       \
    const fused_plan *P = (const fused_plan *)arg;                                                 \
    T consts[FG_FUSED_MAX_CONSTS], scalars[FG_FUSED_MAX_INPUTS];                                   \
    for (int c = 0; c < P->p->n_consts; c++)                                                       \
      consts[c] = (T)P->p->consts[c];                                                              \
    for (int k = 0; k < P->p->n_inputs; k++)                                                       \
      scalars[k] = (T)P->scalar[k];                                                                \
    _Alignas(64) unsigned char stack[FUSED_STACK];                                                 \
    T *bufs = (T *)(void *)stack;                                                                  \
    const int64_t B = P->block;                                                                    \
    for (int64_t e = e0; e < e1; e += B)                                                           \
      block_##sfx(P, e, e1 - e < B ? e1 - e : B, bufs, consts, scalars);                           \
  }

FUSED_BINARY(f32, float, fused_u32)
FUSED_BINARY(f64, double, fused_u64)
FUSED_UNARY(f32, float)
FUSED_UNARY(f64, double)
FUSED_GATHER(f32, float)
FUSED_GATHER(f64, double)
FUSED_BLOCK_FN(f32, float)
FUSED_BLOCK_FN(f64, double)
FUSED_RANGE(f32, float)
FUSED_RANGE(f64, double)

/* Buffers for the intermediates: instruction i's result keeps its buffer
 * until its last reader has run, then the buffer is free for later ones. */
static void assign_slots(fused_plan *P) {
  const fg_fused_params *p = P->p;
  int last_use[FG_FUSED_MAX_INSTRS], owner[FG_FUSED_MAX_INSTRS];
  for (int i = 0; i < p->n_instrs; i++)
    last_use[i] = i;
  for (int i = 0; i < p->n_instrs; i++)
    for (int a = 0; a < p->ins[i].n_args; a++)
      if (p->ins[i].arg[a].kind == FG_FUSED_TEMP) last_use[p->ins[i].arg[a].index] = i;
  P->n_slots = 0;
  for (int i = 0; i + 1 < p->n_instrs; i++) {
    int s = 0;
    /* A buffer is free when its owner's last reader is before i (a reader
     * of the owner may also be instruction i itself: reads come first in
     * every loop, element by element, so d may alias an argument). */
    while (s < P->n_slots && last_use[owner[s]] > i)
      s++;
    if (s == P->n_slots) P->n_slots++;
    owner[s] = i;
    P->slot[i] = s;
  }
}

/* How each input reaches the blocks; fails on a dtype the program cannot
 * read or a shape that does not broadcast. */
static int plan_inputs(const fg_kctx *ctx, fused_plan *P, fg_dtype dt) {
  P->n_gather = 0;
  for (int k = 0; k < ctx->n_in; k++) {
    const fg_kbuf *b = &ctx->in[k];
    if (b->dtype != dt && b->dtype != FG_BOOL)
      return fgk_fail(ctx, "input %d is %s; expected %s or bool", k, fg_dtype_name(b->dtype),
                      fg_dtype_name(dt));
    fg_kctx one = *ctx;
    one.in = b;
    one.n_in = 1;
    if (fgk_bcast_init(&one, 1, &P->bc[k]) != 0) return -1;
    const fgk_bcast *bc = &P->bc[k];
    if (fgk_numel(b) == 1) {
      P->kind[k] = IN_SCALAR;
      P->scalar[k] = b->dtype == FG_BOOL  ? (double)(((const uint8_t *)b->data)[0] != 0)
                     : b->dtype == FG_F32 ? (double)((const float *)b->data)[0]
                                          : ((const double *)b->data)[0];
    } else if (b->dtype == dt && bc->rank == 1 && bc->strides[0][0] == 1) {
      P->kind[k] = IN_DIRECT;
    } else {
      P->kind[k] = IN_GATHER;
      P->gather_buf[k] = P->n_gather++;
    }
  }
  return 0;
}

static int fused_impl(const fg_kctx *ctx, fg_dtype dt) {
  if (fgk_check(ctx, 1, 1) != 0) return -1;
  const fg_fused_params *p = &ctx->p->fused;
  if (p->n_inputs != ctx->n_in || p->n_instrs < 1 || p->n_instrs > FG_FUSED_MAX_INSTRS)
    return fgk_fail(ctx, "the program reads %d inputs in %d instructions; the node has %d inputs",
                    p->n_inputs, p->n_instrs, ctx->n_in);
  if (ctx->out[0].dtype != dt)
    return fgk_fail(ctx, "output is %s, expected %s", fg_dtype_name(ctx->out[0].dtype),
                    fg_dtype_name(dt));
  const int64_t n = fgk_numel(&ctx->out[0]);
  if (n == 0) return 0;
  fused_plan P = {.p = p, .in = ctx->in, .out = &ctx->out[0]};
  if (plan_inputs(ctx, &P, dt) != 0) return -1;
  assign_slots(&P);
  const int n_bufs = P.n_gather + P.n_slots;
  P.block = n_bufs ? (FUSED_STACK - FUSED_SLACK) / (int64_t)fg_dtype_size(dt) / n_bufs / 16 * 16
                   : FUSED_BLOCK;
  if (P.block > FUSED_BLOCK) P.block = FUSED_BLOCK;
  /* A transcendental instruction costs as much as a memory pass. */
  int64_t grain = p->n_instrs > 2 ? FGK_GRAIN_MATH : FGK_GRAIN_CHEAP;
  fgk_parallel_for(ctx, n, grain, dt == FG_F32 ? range_f32 : range_f64, &P);
  return 0;
}

int fgk_fused_elementwise_f32(const fg_kctx *ctx) { return fused_impl(ctx, FG_F32); }
int fgk_fused_elementwise_f64(const fg_kctx *ctx) { return fused_impl(ctx, FG_F64); }
