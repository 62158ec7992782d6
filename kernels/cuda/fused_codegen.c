/* The source generator of the fused_elementwise CUDA kernel: see
 * fused_codegen.h.
 *
 * Each instruction becomes one straight-line expression in the compute
 * type with the arithmetic of the op's own CUDA kernel
 * (kernels/cuda/elementwise.cu): the helper bodies below are those
 * kernels' functors, so a fused group gives the bits of the nodes it
 * replaces. Two details keep that true across instructions:
 *   - add, sub and mul are written as __fadd_rn/__fmul_rn (__dadd_rn...
 *     in f64): the same rounding as `a + b`, but never contracted into an
 *     FMA with a neighbouring instruction, which the unfused kernels, one
 *     op per launch, can never do either;
 *   - constants and attributes are C99 hex literals of the value the
 *     unfused kernel would use (the f32 kernels convert their double
 *     attributes to float first), so no decimal round trip changes them. */
#include "kernels/cuda/fused_codegen.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the opcodes ------------------------------------------------------------ */

static const char *const op_names[FG_FUSED_OPCODE_COUNT] = {
    [FG_FUSED_ADD] = "add",
    [FG_FUSED_SUB] = "sub",
    [FG_FUSED_MUL] = "mul",
    [FG_FUSED_DIV] = "div",
    [FG_FUSED_MAXIMUM] = "maximum",
    [FG_FUSED_MINIMUM] = "minimum",
    [FG_FUSED_POW] = "pow",
    [FG_FUSED_GREATER] = "greater",
    [FG_FUSED_LESS] = "less",
    [FG_FUSED_EQUAL] = "equal",
    [FG_FUSED_SELECT] = "select",
    [FG_FUSED_NEG] = "neg",
    [FG_FUSED_EXP] = "exp",
    [FG_FUSED_LOG] = "log",
    [FG_FUSED_SQRT] = "sqrt",
    [FG_FUSED_RSQRT] = "rsqrt",
    [FG_FUSED_ABS] = "abs",
    [FG_FUSED_TANH] = "tanh",
    [FG_FUSED_SIGMOID] = "sigmoid",
    [FG_FUSED_RELU] = "relu",
    [FG_FUSED_LEAKY_RELU] = "leaky_relu",
    [FG_FUSED_ELU] = "elu",
    [FG_FUSED_SOFTPLUS] = "softplus",
    [FG_FUSED_CLIP] = "clip",
    [FG_FUSED_SILU] = "silu",
    [FG_FUSED_GELU] = "gelu",
    [FG_FUSED_ERF] = "erf",
    [FG_FUSED_SIGN] = "sign",
    [FG_FUSED_RECIPROCAL] = "reciprocal",
    [FG_FUSED_FLOOR] = "floor",
    [FG_FUSED_CEIL] = "ceil",
    [FG_FUSED_ROUND] = "round",
    [FG_FUSED_GELU_TANH] = "gelu_tanh",
};

const char *fgc_fused_op_name(int op) {
  return op >= 0 && op < FG_FUSED_OPCODE_COUNT ? op_names[op] : "?";
}

static int op_arity(int op) {
  if (op == FG_FUSED_SELECT) return 3;
  return op < FG_FUSED_SELECT ? 2 : 1;
}

/* ---- checks and the broadcast plan ---------------------------------------- */

static int fail(char *err, size_t n, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int fail(char *err, size_t n, const char *fmt, ...) {
  if (err && n > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static const char *ref_kind_name(int k) {
  return k == FG_FUSED_INPUT ? "input" : k == FG_FUSED_TEMP ? "temporary" : "constant";
}

/* The program's own consistency, and which inputs it reads. */
static int check_program(const fg_fused_params *p, int n_in, int *used, char *err, size_t n) {
  if (p->n_inputs != n_in)
    return fail(err, n, "the program has %d inputs, the node %d", p->n_inputs, n_in);
  if (p->n_instrs < 1 || p->n_instrs > FG_FUSED_MAX_INSTRS)
    return fail(err, n, "the program has %d instructions, expected 1 to %d", p->n_instrs,
                FG_FUSED_MAX_INSTRS);
  if (p->n_consts < 0 || p->n_consts > FG_FUSED_MAX_CONSTS)
    return fail(err, n, "the program has %d constants, expected 0 to %d", p->n_consts,
                FG_FUSED_MAX_CONSTS);
  for (int j = 0; j < p->n_instrs; j++) {
    const fg_fused_instr *in = &p->ins[j];
    if (in->op >= FG_FUSED_OPCODE_COUNT)
      return fail(err, n, "instruction %d has opcode %d, out of range [0, %d)", j, in->op,
                  FG_FUSED_OPCODE_COUNT);
    if (in->n_args != op_arity(in->op))
      return fail(err, n, "instruction %d (%s) has %d arguments, expected %d", j, op_names[in->op],
                  in->n_args, op_arity(in->op));
    for (int a = 0; a < in->n_args; a++) {
      const fg_fused_ref r = in->arg[a];
      const int limit = r.kind == FG_FUSED_INPUT   ? n_in
                        : r.kind == FG_FUSED_TEMP  ? j
                        : r.kind == FG_FUSED_CONST ? p->n_consts
                                                   : -1;
      if (limit < 0)
        return fail(err, n, "instruction %d (%s) argument %d has kind %d, out of range [0, 3)", j,
                    op_names[in->op], a, r.kind);
      if (r.index >= limit)
        return fail(err, n, "instruction %d (%s) argument %d refers to %s %d, out of range [0, %d)",
                    j, op_names[in->op], a, ref_kind_name(r.kind), r.index, limit);
      if (r.kind == FG_FUSED_INPUT) used[r.index] = 1;
    }
  }
  return 0;
}

static int64_t numel(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= dims[i];
  return n;
}

static void dims_text(const fg_kbuf *b, char *buf, size_t n) {
  size_t at = 0;
  at += (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < b->rank && at < n; i++)
    at += (size_t)snprintf(buf + at, n - at, "%s%lld", i ? ", " : "", (long long)b->dims[i]);
  if (at < n) snprintf(buf + at, n - at, "]");
}

/* Input k's element strides in the output's dims (0 where it broadcasts). */
static int bcast_strides(const fg_kbuf *in, int k, const fg_kbuf *out, int64_t *st, char *err,
                         size_t n) {
  const int R = out->rank, r = in->rank;
  char a[160], b[160];
  if (r < 0 || r > R) {
    dims_text(out, b, sizeof b);
    return fail(err, n, "input %d has rank %d, above the output's %s", k, r, b);
  }
  int64_t s = 1;
  for (int i = R - 1; i >= 0; i--) {
    const int j = i - (R - r);
    const int64_t d = j >= 0 ? in->dims[j] : 1;
    if (d != out->dims[i] && d != 1) {
      dims_text(in, a, sizeof a);
      dims_text(out, b, sizeof b);
      return fail(err, n, "input %d of dims %s does not broadcast to the output's %s", k, a, b);
    }
    st[i] = d == 1 ? 0 : s;
    s *= d;
  }
  return 0;
}

/* SUFFIX when the dims input k broadcasts along (of those above 1) all
 * come before those it runs along, PREFIX when all after, else WALK. */
static int classify(const fg_kbuf *out, const int64_t *st) {
  int seen_run = 0, seen_bcast = 0, suffix = 1, prefix = 1;
  for (int i = 0; i < out->rank; i++) {
    if (out->dims[i] == 1) continue;
    if (st[i] == 0) {
      if (seen_run) suffix = 0;
      seen_bcast = 1;
    } else {
      if (seen_bcast) prefix = 0;
      seen_run = 1;
    }
  }
  return suffix ? FGC_FUSED_SUFFIX : prefix ? FGC_FUSED_PREFIX : FGC_FUSED_WALK;
}

/* The walk the WALK inputs share: the output's dims without the 1s, with
 * neighbours merged where every WALK input steps through them as one. */
static void plan_walk(const fg_kbuf *out, int64_t (*st)[FG_MAX_RANK], fgc_fused_layout *lay,
                      fgc_fused_args *args) {
  int r = 0;
  for (int i = 0; i < out->rank; i++) {
    if (out->dims[i] == 1) continue;
    int merge = r > 0;
    for (int k = 0; merge && k < lay->n_inputs; k++)
      if (lay->kind[k] == FGC_FUSED_WALK && args->strides[k][r - 1] != st[k][i] * out->dims[i])
        merge = 0;
    if (merge) {
      args->dims[r - 1] *= out->dims[i];
      for (int k = 0; k < lay->n_inputs; k++)
        if (lay->kind[k] == FGC_FUSED_WALK) args->strides[k][r - 1] = st[k][i];
    } else {
      args->dims[r] = out->dims[i];
      for (int k = 0; k < lay->n_inputs; k++)
        if (lay->kind[k] == FGC_FUSED_WALK) args->strides[k][r] = st[k][i];
      r++;
    }
  }
  lay->walk_rank = r;
}

int fgc_fused_plan(const fg_fused_params *p, const fg_kbuf *in, int n_in, const fg_kbuf *out,
                   int n_out, fgc_fused_layout *lay, fgc_fused_args *args, char *err,
                   size_t err_size) {
  if (!p || !lay || !args || (n_in > 0 && !in) || !out)
    return fail(err, err_size, "fused_elementwise called without its program or buffers");
  memset(lay, 0, sizeof *lay);
  memset(args, 0, sizeof *args);
  if (n_in < 0 || n_in > FG_FUSED_MAX_INPUTS)
    return fail(err, err_size, "%d inputs, expected 0 to %d", n_in, FG_FUSED_MAX_INPUTS);
  if (n_out != 1) return fail(err, err_size, "%d outputs, expected 1", n_out);
  int used[FG_FUSED_MAX_INPUTS] = {0};
  if (check_program(p, n_in, used, err, err_size) != 0) return -1;
  if (out->dtype != FG_F32 && out->dtype != FG_F64)
    return fail(err, err_size, "the output is %s, expected f32 or f64", fg_dtype_name(out->dtype));
  if (out->rank < 0 || out->rank > FG_MAX_RANK)
    return fail(err, err_size, "the output has rank %d, out of range [0, %d]", out->rank,
                FG_MAX_RANK);
  for (int i = 0; i < out->rank; i++)
    if (out->dims[i] < 0)
      return fail(err, err_size, "the output's dim %d is %lld", i, (long long)out->dims[i]);
  lay->out_dtype = out->dtype;
  lay->n_inputs = n_in;
  args->n = numel(out->rank, out->dims);
  int64_t st[FG_FUSED_MAX_INPUTS][FG_MAX_RANK];
  for (int k = 0; k < n_in; k++) {
    const fg_dtype dt = in[k].dtype;
    if (dt != FG_F32 && dt != FG_F64 && dt != FG_BOOL)
      return fail(err, err_size, "input %d is %s, expected f32, f64 or bool", k, fg_dtype_name(dt));
    if (in[k].layout != FGK_LAYOUT_PLAIN || out->layout != FGK_LAYOUT_PLAIN)
      return fail(err, err_size, "input %d or the output is not in C order", k);
    lay->in_dtype[k] = dt;
    if (bcast_strides(&in[k], k, out, st[k], err, err_size) != 0) return -1;
    const int64_t ne = numel(in[k].rank, in[k].dims);
    if (!used[k])
      lay->kind[k] = FGC_FUSED_UNUSED;
    else if (ne == args->n)
      lay->kind[k] = FGC_FUSED_FULL; /* also every input of an empty output */
    else if (ne == 1)
      lay->kind[k] = FGC_FUSED_SCALAR;
    else
      lay->kind[k] = classify(out, st[k]);
    if (lay->kind[k] == FGC_FUSED_SUFFIX) args->m[k] = ne;
    if (lay->kind[k] == FGC_FUSED_PREFIX) args->m[k] = args->n / ne;
  }
  plan_walk(out, st, lay, args);
  int any_walk = 0;
  for (int k = 0; k < n_in; k++)
    any_walk |= lay->kind[k] == FGC_FUSED_WALK;
  if (!any_walk) {
    /* The walk's dims are then not part of the kernel: keep them out of
     * the structure (and the arguments) altogether. */
    lay->walk_rank = 0;
    memset(args->dims, 0, sizeof args->dims);
  }
  return 0;
}

/* ---- the source text -------------------------------------------------------- */

typedef struct sbuf {
  char *s;
  size_t len, cap;
  int oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void put(sbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    const int w = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (w < 0) {
      b->oom = 1;
      return;
    }
    if ((size_t)w < b->cap - b->len) {
      b->len += (size_t)w;
      return;
    }
    size_t cap = b->cap * 2;
    while (cap - b->len <= (size_t)w)
      cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
      b->oom = 1;
      return;
    }
    b->s = s;
    b->cap = cap;
  }
}

/* v as an exact literal of the compute type: a hex float (the f32 kernels
 * round their double attributes to float first, and so does this), or,
 * for Inf and NaN, the bit pattern. */
static void literal(char *buf, size_t n, double v, int f32) {
  if (f32) {
    const float f = (float)v;
    if (isfinite(f)) {
      snprintf(buf, n, f < 0 || signbit(f) ? "(%af)" : "%af", (double)f);
    } else {
      uint32_t u;
      memcpy(&u, &f, sizeof u);
      snprintf(buf, n, "__int_as_float(0x%08xu)", (unsigned)u);
    }
  } else if (isfinite(v)) {
    snprintf(buf, n, v < 0 || signbit(v) ? "(%a)" : "%a", v);
  } else {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    snprintf(buf, n, "__longlong_as_double(0x%016llxll)", (unsigned long long)u);
  }
}

/* The helpers: elementwise.cu's functor bodies, for the compute type T.
 * The math overloads are its FGC_MATH1 set, so the same calls resolve to
 * the same functions (expf in f32, exp in f64...). */
static const char prelude[] =
    "__device__ __forceinline__ float m_exp(float x) { return expf(x); }\n"
    "__device__ __forceinline__ double m_exp(double x) { return exp(x); }\n"
    "__device__ __forceinline__ float m_log(float x) { return logf(x); }\n"
    "__device__ __forceinline__ double m_log(double x) { return log(x); }\n"
    "__device__ __forceinline__ float m_sqrt(float x) { return sqrtf(x); }\n"
    "__device__ __forceinline__ double m_sqrt(double x) { return sqrt(x); }\n"
    "__device__ __forceinline__ float m_tanh(float x) { return tanhf(x); }\n"
    "__device__ __forceinline__ double m_tanh(double x) { return tanh(x); }\n"
    "__device__ __forceinline__ float m_erf(float x) { return erff(x); }\n"
    "__device__ __forceinline__ double m_erf(double x) { return erf(x); }\n"
    "__device__ __forceinline__ float m_fabs(float x) { return fabsf(x); }\n"
    "__device__ __forceinline__ double m_fabs(double x) { return fabs(x); }\n"
    "__device__ __forceinline__ float m_pow(float x, float y) { return powf(x, y); }\n"
    "__device__ __forceinline__ double m_pow(double x, double y) { return pow(x, y); }\n"
    "__device__ __forceinline__ float fg_add(float x, float y) { return __fadd_rn(x, y); }\n"
    "__device__ __forceinline__ double fg_add(double x, double y) { return __dadd_rn(x, y); }\n"
    "__device__ __forceinline__ float fg_sub(float x, float y) { return __fsub_rn(x, y); }\n"
    "__device__ __forceinline__ double fg_sub(double x, double y) { return __dsub_rn(x, y); }\n"
    "__device__ __forceinline__ float fg_mul(float x, float y) { return __fmul_rn(x, y); }\n"
    "__device__ __forceinline__ double fg_mul(double x, double y) { return __dmul_rn(x, y); }\n"
    "/* NaN wins (x != x) */\n"
    "__device__ __forceinline__ T fg_maximum(T x, T y) { return (x > y || x != x) ? x : y; }\n"
    "__device__ __forceinline__ T fg_minimum(T x, T y) { return (x < y || x != x) ? x : y; }\n"
    "/* split at 0 so exp never overflows */\n"
    "__device__ __forceinline__ T fg_sigmoid(T x) {\n"
    "  if (x >= 0) return (T)1 / ((T)1 + m_exp(-x));\n"
    "  const T e = m_exp(x);\n"
    "  return e / ((T)1 + e);\n"
    "}\n"
    "/* keeps NaN */\n"
    "__device__ __forceinline__ T fg_relu(T x) { return x < 0 ? (T)0 : x; }\n"
    "__device__ __forceinline__ T fg_leaky_relu(T x, T alpha) { return x > 0 ? x : alpha * x; }\n"
    "__device__ __forceinline__ T fg_elu(T x, T alpha) { return x > 0 ? x : alpha * expm1(x); }\n"
    "__device__ __forceinline__ T fg_softplus(T x, T beta, T threshold) {\n"
    "  return x * beta > threshold ? x : log1p(m_exp(x * beta)) / beta;\n"
    "}\n"
    "__device__ __forceinline__ T fg_clip(T x, T lo, T hi) {\n"
    "  return x != x ? x : (x < lo ? lo : (x > hi ? hi : x));\n"
    "}\n"
    "__device__ __forceinline__ T fg_silu(T x) { return x / ((T)1 + m_exp(-x)); }\n"
    "__device__ __forceinline__ T fg_gelu(T x) {\n"
    "  return (T)0.5 * x * ((T)1 + m_erf(x * (T)0.70710678118654752440));\n"
    "}\n"
    "/* x sigmoid(2 u), u = sqrt(2 / pi) (x + 0.044715 x^3), as the CPU */\n"
    "__device__ __forceinline__ T fg_gelu_tanh(T x) {\n"
    "  const T u2 = fg_mul((T)1.5957691216057307117, fg_add(x, fg_mul((T)0.044715, "
    "fg_mul(fg_mul(x, x), x))));\n"
    "  return x / ((T)1 + m_exp(-u2));\n"
    "}\n"
    "__device__ __forceinline__ T fg_sign(T x) { return (T)((0 < x) - (x < 0)); }\n"
    "/* rint rounds halves to even (torch.round) */\n"
    "__device__ __forceinline__ T fg_round(T x) { return rint(x); }\n"
    "/* 4 elements as one aligned vector access */\n"
    "template <typename U> struct __align__(4 * sizeof(U)) fg_v4 { U v[4]; };\n"
    "/* 32-bit division where it fits: several times cheaper than 64-bit */\n"
    "__device__ __forceinline__ long long fg_div(long long i, long long n) {\n"
    "  return (((unsigned long long)i | (unsigned long long)n) >> 32) == 0\n"
    "             ? (long long)((unsigned)i / (unsigned)n)\n"
    "             : i / n;\n"
    "}\n";

static void arg_text(const fg_fused_ref r, char *buf, size_t n) {
  snprintf(buf, n, "%c%d",
           r.kind == FG_FUSED_INPUT  ? 'x'
           : r.kind == FG_FUSED_TEMP ? 't'
                                     : 'c',
           r.index);
}

/* `const T tJ = <expression>;` for instruction j. */
static void emit_instr(sbuf *b, int j, const fg_fused_instr *in, int f32) {
  char a[3][16], l0[64], l1[64];
  for (int k = 0; k < in->n_args; k++)
    arg_text(in->arg[k], a[k], sizeof a[k]);
  literal(l0, sizeof l0, in->attr[0], f32);
  literal(l1, sizeof l1, in->attr[1], f32);
  put(b, "  const T t%d = ", j);
  switch (in->op) {
  case FG_FUSED_ADD: put(b, "fg_add(%s, %s)", a[0], a[1]); break;
  case FG_FUSED_SUB: put(b, "fg_sub(%s, %s)", a[0], a[1]); break;
  case FG_FUSED_MUL: put(b, "fg_mul(%s, %s)", a[0], a[1]); break;
  case FG_FUSED_DIV: put(b, "%s / %s", a[0], a[1]); break;
  case FG_FUSED_MAXIMUM: put(b, "fg_maximum(%s, %s)", a[0], a[1]); break;
  case FG_FUSED_MINIMUM: put(b, "fg_minimum(%s, %s)", a[0], a[1]); break;
  case FG_FUSED_POW: put(b, "m_pow(%s, %s)", a[0], a[1]); break;
  case FG_FUSED_GREATER: put(b, "(T)(%s > %s)", a[0], a[1]); break;
  case FG_FUSED_LESS: put(b, "(T)(%s < %s)", a[0], a[1]); break;
  case FG_FUSED_EQUAL: put(b, "(T)(%s == %s)", a[0], a[1]); break;
  case FG_FUSED_SELECT: put(b, "%s != (T)0 ? %s : %s", a[0], a[1], a[2]); break;
  case FG_FUSED_NEG: put(b, "-%s", a[0]); break;
  case FG_FUSED_EXP: put(b, "m_exp(%s)", a[0]); break;
  case FG_FUSED_LOG: put(b, "m_log(%s)", a[0]); break;
  case FG_FUSED_SQRT: put(b, "m_sqrt(%s)", a[0]); break;
  case FG_FUSED_RSQRT: put(b, "(T)1 / m_sqrt(%s)", a[0]); break;
  case FG_FUSED_ABS: put(b, "m_fabs(%s)", a[0]); break;
  case FG_FUSED_TANH: put(b, "m_tanh(%s)", a[0]); break;
  case FG_FUSED_SIGMOID: put(b, "fg_sigmoid(%s)", a[0]); break;
  case FG_FUSED_RELU: put(b, "fg_relu(%s)", a[0]); break;
  case FG_FUSED_LEAKY_RELU: put(b, "fg_leaky_relu(%s, %s)", a[0], l0); break;
  case FG_FUSED_ELU: put(b, "fg_elu(%s, %s)", a[0], l0); break;
  case FG_FUSED_SOFTPLUS: put(b, "fg_softplus(%s, %s, %s)", a[0], l0, l1); break;
  case FG_FUSED_CLIP: put(b, "fg_clip(%s, %s, %s)", a[0], l0, l1); break;
  case FG_FUSED_SILU: put(b, "fg_silu(%s)", a[0]); break;
  case FG_FUSED_GELU: put(b, "fg_gelu(%s)", a[0]); break;
  case FG_FUSED_ERF: put(b, "m_erf(%s)", a[0]); break;
  case FG_FUSED_SIGN: put(b, "fg_sign(%s)", a[0]); break;
  case FG_FUSED_RECIPROCAL: put(b, "(T)1 / %s", a[0]); break;
  case FG_FUSED_FLOOR: put(b, "floor(%s)", a[0]); break;
  case FG_FUSED_CEIL: put(b, "ceil(%s)", a[0]); break;
  case FG_FUSED_ROUND: put(b, "fg_round(%s)", a[0]); break;
  case FG_FUSED_GELU_TANH: put(b, "fg_gelu_tanh(%s)", a[0]); break;
  default: put(b, "/* opcode %d */ (T)0", in->op); break; /* fgc_fused_plan refused it */
  }
  put(b, ";\n");
}

static const char *ctype(fg_dtype dt) {
  return dt == FG_F64 ? "double" : dt == FG_BOOL ? "unsigned char" : "float";
}

/* The index expression of input k (an element offset of its buffer). */
static void index_text(const fgc_fused_layout *lay, int k, char *buf, size_t n) {
  switch (lay->kind[k]) {
  case FGC_FUSED_SUFFIX: snprintf(buf, n, "i - fg_div(i, m%d) * m%d", k, k); break;
  case FGC_FUSED_PREFIX: snprintf(buf, n, "fg_div(i, m%d)", k); break;
  case FGC_FUSED_WALK: snprintf(buf, n, "w%d", k); break;
  default: snprintf(buf, n, "i"); break;
  }
}

/* Value of input k at offset `idx`, converted to T (bool: 0 or 1). */
static void load_text(const fgc_fused_layout *lay, int k, const char *idx, char *buf, size_t n) {
  if (lay->in_dtype[k] == FG_BOOL)
    snprintf(buf, n, "(T)(p%d[%s] != 0)", k, idx);
  else if (lay->in_dtype[k] != lay->out_dtype)
    snprintf(buf, n, "(T)p%d[%s]", k, idx);
  else
    snprintf(buf, n, "p%d[%s]", k, idx);
}

/* The walk: offsets w<k> of the WALK inputs for output index i, dims
 * innermost first, as fgc_walk_offsets. */
static void emit_walk(sbuf *b, const fgc_fused_layout *lay) {
  if (lay->walk_rank == 0) return;
  for (int k = 0; k < lay->n_inputs; k++)
    if (lay->kind[k] == FGC_FUSED_WALK) put(b, "    long long w%d = 0;\n", k);
  put(b, "    {\n      long long r = i;\n");
  for (int d = lay->walk_rank - 1; d > 0; d--) {
    put(b, "      {\n        const long long q = fg_div(r, a.dims[%d]), c = r - q * a.dims[%d];\n",
        d, d);
    for (int k = 0; k < lay->n_inputs; k++)
      if (lay->kind[k] == FGC_FUSED_WALK)
        put(b, "        w%d += c * a.strides[%d][%d];\n", k, k, d);
    put(b, "        r = q;\n      }\n");
  }
  for (int k = 0; k < lay->n_inputs; k++)
    if (lay->kind[k] == FGC_FUSED_WALK) put(b, "      w%d += r * a.strides[%d][0];\n", k, k);
  put(b, "    }\n");
}

/* The instructions as one function of the inputs the program reads (in
 * input order), so the scalar and the 4-wide loops share them. */
static void emit_body(sbuf *b, const fg_fused_params *p, const fgc_fused_layout *lay, int f32) {
  put(b, "__device__ __forceinline__ T fg_body(");
  int first = 1;
  for (int k = 0; k < lay->n_inputs; k++)
    if (lay->kind[k] != FGC_FUSED_UNUSED) {
      put(b, "%sconst T x%d", first ? "" : ", ", k);
      first = 0;
    }
  put(b, ") {\n");
  char lit[64];
  for (int c = 0; c < p->n_consts; c++) {
    literal(lit, sizeof lit, p->consts[c], f32);
    put(b, "  const T c%d = %s;\n", c, lit);
  }
  for (int j = 0; j < p->n_instrs; j++)
    emit_instr(b, j, &p->ins[j], f32);
  put(b, "  return t%d;\n}\n", p->n_instrs - 1);
}

/* fg_body's arguments; `vec`: element k of each 4-wide value v<k>. */
static void emit_call(sbuf *b, const fgc_fused_layout *lay, int vec) {
  put(b, "fg_body(");
  int first = 1;
  for (int k = 0; k < lay->n_inputs; k++) {
    const int kind = lay->kind[k];
    if (kind == FGC_FUSED_UNUSED) continue;
    put(b, "%s", first ? "" : ", ");
    first = 0;
    if (!vec || kind == FGC_FUSED_SCALAR || kind == FGC_FUSED_PREFIX)
      put(b, "x%d", k);
    else if (lay->in_dtype[k] == FG_BOOL)
      put(b, "(T)(v%d.v[k] != 0)", k);
    else if (lay->in_dtype[k] != lay->out_dtype)
      put(b, "(T)v%d.v[k]", k);
    else
      put(b, "v%d.v[k]", k);
  }
  put(b, ")");
}

/* The 4-wide loop (fgc_fused_vec_ok decides, per call, whether it runs):
 * 4 consecutive outputs per step, each full or bias-row input one aligned
 * vector load, a column input one load for all 4 (its rows are multiples
 * of 4 long). Then the < 4 leftover outputs go to the scalar loop. */
static void emit_vec_loop(sbuf *b, const fgc_fused_layout *lay) {
  put(b, "  if (a.vec) {\n    for (long long j = start; j < a.n / 4; j += step) {\n"
         "      const long long i = j * 4;\n");
  for (int k = 0; k < lay->n_inputs; k++) {
    const char *ct = ctype(lay->in_dtype[k]);
    char idx[64], ld[128];
    switch (lay->kind[k]) {
    case FGC_FUSED_FULL:
      put(b, "      const fg_v4<%s> v%d = *(const fg_v4<%s> *)(p%d + i);\n", ct, k, ct, k);
      break;
    case FGC_FUSED_SUFFIX:
      put(b,
          "      const fg_v4<%s> v%d = *(const fg_v4<%s> *)(p%d + (i - fg_div(i, m%d) * m%d));\n",
          ct, k, ct, k, k, k);
      break;
    case FGC_FUSED_PREFIX:
      snprintf(idx, sizeof idx, "fg_div(i, m%d)", k);
      load_text(lay, k, idx, ld, sizeof ld);
      put(b, "      const T x%d = %s;\n", k, ld);
      break;
    default: break;
    }
  }
  put(b, "      fg_v4<T> r;\n#pragma unroll\n      for (int k = 0; k < 4; k++)\n        r.v[k] = ");
  emit_call(b, lay, 1);
  put(b, ";\n      *(fg_v4<T> *)(out + i) = r;\n    }\n    from = a.n / 4 * 4 + start;\n  }\n");
}

char *fgc_fused_source(const fg_fused_params *p, const fgc_fused_layout *lay) {
  sbuf b = {malloc(8192), 0, 8192, 0};
  if (!b.s) return NULL;
  b.s[0] = '\0';
  const int f32 = lay->out_dtype != FG_F64;
  put(&b, "/* flowgraph fused_elementwise (generated): ");
  for (int j = 0; j < p->n_instrs; j++)
    put(&b, "%s%s", j ? " " : "", fgc_fused_op_name(p->ins[j].op));
  put(&b, " */\ntypedef %s T;\n", f32 ? "float" : "double");
  put(&b,
      "struct fg_fused_args {\n  void *out;\n  const void *in[%d];\n  long long n;\n"
      "  long long m[%d];\n  long long dims[%d];\n  long long strides[%d][%d];\n"
      "  long long vec;\n};\n",
      FG_FUSED_MAX_INPUTS, FG_FUSED_MAX_INPUTS, FG_MAX_RANK, FG_FUSED_MAX_INPUTS, FG_MAX_RANK);
  put(&b, "%s", prelude);
  emit_body(&b, p, lay, f32);
  put(&b, "extern \"C\" __global__ void __launch_bounds__(256) %s(const fg_fused_args a) {\n",
      FGC_FUSED_ENTRY);
  put(&b, "  T *const out = (T *)a.out;\n");
  char idx[64], ld[128];
  for (int k = 0; k < lay->n_inputs; k++) {
    if (lay->kind[k] == FGC_FUSED_UNUSED) continue;
    const char *ct = ctype(lay->in_dtype[k]);
    put(&b, "  const %s *const p%d = (const %s *)a.in[%d];\n", ct, k, ct, k);
    if (lay->kind[k] == FGC_FUSED_SUFFIX || lay->kind[k] == FGC_FUSED_PREFIX)
      put(&b, "  const long long m%d = a.m[%d];\n", k, k);
  }
  /* Scalars: one load per thread, before the loops. */
  for (int k = 0; k < lay->n_inputs; k++)
    if (lay->kind[k] == FGC_FUSED_SCALAR) {
      load_text(lay, k, "0", ld, sizeof ld);
      put(&b, "  const T x%d = %s;\n", k, ld);
    }
  put(&b, "  const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
          "  const long long step = (long long)gridDim.x * blockDim.x;\n"
          "  long long from = start;\n");
  if (lay->walk_rank == 0) emit_vec_loop(&b, lay);
  put(&b, "  for (long long i = from; i < a.n; i += step) {\n");
  emit_walk(&b, lay);
  for (int k = 0; k < lay->n_inputs; k++) {
    if (lay->kind[k] == FGC_FUSED_UNUSED || lay->kind[k] == FGC_FUSED_SCALAR) continue;
    index_text(lay, k, idx, sizeof idx);
    load_text(lay, k, idx, ld, sizeof ld);
    put(&b, "    const T x%d = %s;\n", k, ld);
  }
  put(&b, "    out[i] = ");
  emit_call(&b, lay, 0);
  put(&b, ";\n  }\n}\n");
  if (b.oom) {
    free(b.s);
    return NULL;
  }
  return b.s;
}

int fgc_fused_vec_ok(const fgc_fused_layout *lay, const fgc_fused_args *args) {
  const size_t out_es = fg_dtype_size(lay->out_dtype);
  if (lay->walk_rank != 0 || args->n < 4 || (uintptr_t)args->out % (4 * out_es) != 0) return 0;
  for (int k = 0; k < lay->n_inputs; k++) {
    const int kind = lay->kind[k];
    const size_t es = fg_dtype_size(lay->in_dtype[k]);
    if ((kind == FGC_FUSED_SUFFIX || kind == FGC_FUSED_PREFIX) && args->m[k] % 4 != 0) return 0;
    if ((kind == FGC_FUSED_FULL || kind == FGC_FUSED_SUFFIX) &&
        (uintptr_t)args->in[k] % (4 * es) != 0)
      return 0;
  }
  return 1;
}
