/* The fused_elementwise CUDA kernel (kernels/cuda/fused.cu) on a GPU:
 * programs compiled with NVRTC at prepare time, run over every broadcast
 * kind (same shape, scalar, bias row, column, strided walk, bool
 * condition), in f32 and f64, and compared two ways:
 *   - bit for bit against the unfused CUDA kernels (fg_cuda_kernel) run
 *     one instruction at a time, which is what fusion promises;
 *   - against a reference computed here in double precision, rounded to
 *     the compute type after every instruction: exactly for programs of
 *     correctly rounded ops (add, mul, div, sqrt, select, relu...), within
 *     a few ulp where a transcendental function is involved.
 * Also: the in-process and disk caches seen from the kernel, a CUDA graph
 * capture of a prepared kernel, and bad input.
 *
 * Cases labelled "gpu" skip without a CUDA build or a device (fail with
 * FG_REQUIRE_GPU=1). The others run the host-side checks of a CUDA build
 * without touching a device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgtest.h"
#include "fused_prog.h"
#include "kernels/cuda/fused_codegen.h"
#include "kernels/cuda/nvrtc_cache.h"
#include "kernels/kernel.h"
#include "test_kernels_util.h"

#ifdef FG_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/fused.h"
#endif

#define D(...) ((const int64_t[]){__VA_ARGS__})

/* ---- host-side checks of a CUDA build (no device) --------------------------- */

/* A bad program or a wrong buffer count fails in the prepare hook and in
 * the kernel with the checker's message, before any device call. */
FG_TEST(fused_cuda_bad_input, "badinput") {
#ifndef FG_HAVE_CUDA
  FG_SKIP_NO_GPU("this build has no CUDA backend");
#else
  fg_op_params prm;
  memset(&prm, 0, sizeof prm);
  fg_fused_params *p = &prm.fused;
  fprog_init(p, 2);
  F2(p, FG_FUSED_ADD, FX(0), FX(1));
  fg_kbuf x = fshape(FG_F32, 1, D(4)), ins[3] = {x, x, x}, out = x;
  char err[512] = "";
  fg_kctx ctx = {
      .in = ins, .n_in = 3, .out = &out, .n_out = 1, .p = &prm, .err = err, .err_size = sizeof err};
  void *state = (void *)&ctx;
  FG_CHECK_INT(fgc_fused_prepare(&ctx, 1, &state), -1);
  FG_CHECK(state == NULL);
  FG_CHECK_STR_CONTAINS(err, "the program has 2 inputs, the node 3");
  ctx.n_in = 2;
  p->ins[0].op = 77;
  FG_CHECK_INT(fgc_fused_prepare(&ctx, 1, &state), -1);
  FG_CHECK_STR_CONTAINS(err, "instruction 0 has opcode 77, out of range [0, 33)");
  /* the kernel without its CUDA context */
  float h[4] = {0};
  ins[0].data = ins[1].data = out.data = h;
  FG_CHECK_INT(fgc_fused_elementwise(&ctx), -1);
  FG_CHECK_STR_CONTAINS(err, "without a CUDA context");
  FG_CHECK_INT(fgc_fused_prepare(NULL, 1, &state), -1);
  fgc_fused_release(NULL);
  /* the prepare hook is registered with the kernel */
  const fg_kprep *kp = fg_cuda_kernel_prep("fused_elementwise", FG_F32);
  FG_REQUIRE(kp);
  FG_CHECK(kp->prepare == fgc_fused_prepare && kp->release == fgc_fused_release);
  FG_CHECK(fg_cuda_kernel("fused_elementwise", FG_F64) != NULL);
  FG_CHECK(fg_cuda_kernel_prep("add", FG_F32) == NULL);
  FG_CHECK(fg_cuda_kernel_prep(NULL, FG_F32) == NULL);
#endif
}

#ifdef FG_HAVE_CUDA

/* ---- the device ---------------------------------------------------------------- */

static struct {
  int ready;
  cudaStream_t stream;
  fg_cuda_error *flag;
  int misalign;    /* dev_alloc: data one element past an aligned address */
  char cache[512]; /* FG_CACHE_DIR for this process: a scratch folder */
} G;

static void gpu_done(void) {
  if (G.cache[0]) fgt_rmtree(G.cache);
}

static const char *gpu_init(void) {
  static char why[200];
  if (G.ready) return NULL;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    snprintf(why, sizeof why, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
    return why;
  }
  if (n == 0) return "cudaGetDeviceCount found 0 devices";
  if (cudaStreamCreate(&G.stream) != cudaSuccess) return "cudaStreamCreate failed";
  if (cudaMalloc((void **)&G.flag, sizeof *G.flag) != cudaSuccess) return "cudaMalloc failed";
  cudaMemset(G.flag, 0, sizeof *G.flag);
  if (!fgt_mkdtemp(G.cache, sizeof G.cache, "fg_fused_cuda")) return "no scratch folder";
  setenv("FG_CACHE_DIR", G.cache, 1);
  atexit(gpu_done);
  G.ready = 1;
  return NULL;
}

#define GPU_OR_SKIP()                                                                              \
  do {                                                                                             \
    const char *why_ = gpu_init();                                                                 \
    if (why_) FG_SKIP_NO_GPU("no CUDA device (%s)", why_);                                         \
  } while (0)

static size_t bytes_of(const fg_kbuf *b) {
  int64_t n = 1;
  for (int i = 0; i < b->rank; i++)
    n *= b->dims[i];
  return (size_t)n * fg_dtype_size(b->dtype);
}

static int64_t numel_of(const fg_kbuf *b) {
  int64_t n = 1;
  for (int i = 0; i < b->rank; i++)
    n *= b->dims[i];
  return n;
}

/* Where G.misalign puts a buffer's data: one element past the aligned
 * start, so the fused kernel takes its one-at-a-time loop. */
static size_t shift_of(const fg_kbuf *b) { return G.misalign ? fg_dtype_size(b->dtype) : 0; }

/* A device buffer of b's shape (+16 bytes: room for the shift, and
 * 0-element ones are real). */
static fg_kbuf dev_alloc(fg_kbuf b) {
  void *base = NULL;
  b.data = cudaMalloc(&base, bytes_of(&b) + 16) == cudaSuccess ? (char *)base + shift_of(&b) : NULL;
  return b;
}

static void dev_free(const fg_kbuf *b) {
  if (b->data) cudaFree((char *)b->data - shift_of(b));
}

static fg_kbuf to_dev(const fg_kbuf *h) {
  fg_kbuf d = dev_alloc(*h);
  if (d.data && bytes_of(h)) cudaMemcpy(d.data, h->data, bytes_of(h), cudaMemcpyHostToDevice);
  return d;
}

static void *to_host(const fg_kbuf *d) {
  void *h = malloc(bytes_of(d) + 1);
  if (h && bytes_of(d)) cudaMemcpy(h, d->data, bytes_of(d), cudaMemcpyDeviceToHost);
  return h;
}

static fg_kcuda kcuda(void) {
  fg_kcuda kc;
  memset(&kc, 0, sizeof kc);
  kc.stream = G.stream;
  kc.error_flag = (int *)G.flag;
  return kc;
}

/* ---- the reference ----------------------------------------------------------- */

static double rnd(double v, int f32) { return f32 ? (double)(float)v : v; }

/* One instruction in double, on values already of the compute type; the
 * caller rounds the result. The f32 kernels see float attributes. */
static double ref_op(const fg_fused_instr *in, const double *a, int f32) {
  const double x = a[0], y = a[1], z = a[2];
  const double p0 = rnd(in->attr[0], f32), p1 = rnd(in->attr[1], f32);
  switch (in->op) {
  case FG_FUSED_ADD: return x + y;
  case FG_FUSED_SUB: return x - y;
  case FG_FUSED_MUL: return x * y;
  case FG_FUSED_DIV: return x / y;
  case FG_FUSED_MAXIMUM: return (x > y || x != x) ? x : y;
  case FG_FUSED_MINIMUM: return (x < y || x != x) ? x : y;
  case FG_FUSED_POW: return pow(x, y);
  case FG_FUSED_GREATER: return x > y;
  case FG_FUSED_LESS: return x < y;
  case FG_FUSED_EQUAL: return x == y;
  case FG_FUSED_SELECT: return x != 0 ? y : z;
  case FG_FUSED_NEG: return -x;
  case FG_FUSED_EXP: return exp(x);
  case FG_FUSED_LOG: return log(x);
  case FG_FUSED_SQRT: return sqrt(x);
  case FG_FUSED_RSQRT: return 1 / rnd(sqrt(x), f32); /* 1 / sqrt(x): two roundings */
  case FG_FUSED_ABS: return fabs(x);
  case FG_FUSED_TANH: return tanh(x);
  case FG_FUSED_SIGMOID: return 1 / (1 + exp(-x));
  case FG_FUSED_RELU: return x < 0 ? 0 : x;
  case FG_FUSED_LEAKY_RELU: return x > 0 ? x : p0 * x;
  case FG_FUSED_ELU: return x > 0 ? x : p0 * expm1(x);
  case FG_FUSED_SOFTPLUS: { /* x * beta is rounded in the kernel */
    const double xb = rnd(x * p0, f32);
    return xb > p1 ? x : log1p(exp(xb)) / p0;
  }
  case FG_FUSED_CLIP: return x != x ? x : (x < p0 ? p0 : (x > p1 ? p1 : x));
  case FG_FUSED_SILU: return x / (1 + exp(-x));
  case FG_FUSED_GELU: return 0.5 * x * (1 + erf(rnd(x * rnd(0.70710678118654752440, f32), f32)));
  case FG_FUSED_ERF: return erf(x);
  case FG_FUSED_SIGN: return (double)((0 < x) - (x < 0));
  case FG_FUSED_RECIPROCAL: return 1 / x;
  case FG_FUSED_FLOOR: return floor(x);
  case FG_FUSED_CEIL: return ceil(x);
  case FG_FUSED_ROUND: return rint(x);
  default: return NAN;
  }
}

/* Input b's element for flat output index i (NumPy broadcasting). */
static int64_t bcast_offset(const fg_kbuf *b, const fg_kbuf *out, int64_t i) {
  int64_t off = 0, stride = 1;
  for (int d = out->rank - 1; d >= 0; d--) {
    const int64_t c = i % out->dims[d];
    i /= out->dims[d];
    const int j = d - (out->rank - b->rank);
    if (j < 0) break;
    if (b->dims[j] != 1) off += c * stride;
    stride *= b->dims[j];
  }
  return off;
}

/* Output element i of program p over host inputs. */
static double ref_elem(const fg_fused_params *p, const fg_kbuf *in, const fg_kbuf *out, int64_t i) {
  const int f32 = out->dtype == FG_F32;
  double t[FG_FUSED_MAX_INSTRS];
  for (int j = 0; j < p->n_instrs; j++) {
    const fg_fused_instr *ins = &p->ins[j];
    double a[3] = {0, 0, 0};
    for (int k = 0; k < ins->n_args; k++) {
      const fg_fused_ref r = ins->arg[k];
      if (r.kind == FG_FUSED_TEMP)
        a[k] = t[r.index];
      else if (r.kind == FG_FUSED_CONST)
        a[k] = rnd(p->consts[r.index], f32);
      else
        a[k] = rnd(
            elem_as_double(in[r.index].data, in[r.index].dtype, bcast_offset(&in[r.index], out, i)),
            f32);
    }
    t[j] = rnd(ref_op(ins, a, f32), f32);
  }
  return t[p->n_instrs - 1];
}

/* ---- the unfused kernels ------------------------------------------------------- */

static const char *unfused_name(int op) {
  static const char *const names[FG_FUSED_OPCODE_COUNT] = {
      "add",  "sub",   "mul",     "div",  "maximum",    "minimum", "pow",      "greater",
      "less", "equal", "select",  "neg",  "exp",        "log",     "sqrt",     "rsqrt",
      "abs",  "tanh",  "sigmoid", "relu", "leaky_relu", "elu",     "softplus", "clip",
      "silu", "gelu",  "erf",     "sign", "reciprocal", "floor",   "ceil",     "round"};
  return names[op];
}

static int is_compare(int op) {
  return op == FG_FUSED_GREATER || op == FG_FUSED_LESS || op == FG_FUSED_EQUAL;
}

/* NumPy's broadcast of a and b (both valid against the output). */
static fg_kbuf bcast_shape(fg_kbuf a, const fg_kbuf *b) {
  fg_kbuf r = a.rank >= b->rank ? a : *b;
  const fg_kbuf *o = a.rank >= b->rank ? b : &a;
  for (int i = 0; i < o->rank; i++) {
    const int d = r.rank - o->rank + i;
    if (r.dims[d] == 1) r.dims[d] = o->dims[i];
  }
  r.data = NULL;
  return r;
}

/* Runs p one CUDA kernel per instruction, as the graph before fusion
 * would: comparisons write bool, every value has its own buffer. Returns
 * the device buffer of the result (its shape is the output's), or one
 * with data NULL on failure. */
static fg_kbuf run_unfused(const fg_fused_params *p, const fg_kbuf *din, fg_dtype dt,
                           fg_kbuf *temps) {
  fg_kbuf fail = {0};
  fg_kbuf consts[FG_FUSED_MAX_CONSTS];
  for (int c = 0; c < p->n_consts; c++) {
    fg_kbuf h = fshape(dt, 0, NULL);
    double v = p->consts[c];
    float f = (float)v;
    h.data = dt == FG_F32 ? (void *)&f : (void *)&v;
    consts[c] = to_dev(&h);
  }
  int rc = 0;
  for (int j = 0; j < p->n_instrs && rc == 0; j++) {
    const fg_fused_instr *ins = &p->ins[j];
    fg_kbuf args[3];
    for (int k = 0; k < ins->n_args; k++) {
      const fg_fused_ref r = ins->arg[k];
      args[k] = r.kind == FG_FUSED_TEMP    ? temps[r.index]
                : r.kind == FG_FUSED_CONST ? consts[r.index]
                                           : din[r.index];
    }
    fg_kbuf shape = args[0];
    for (int k = 1; k < ins->n_args; k++)
      shape = bcast_shape(shape, &args[k]);
    shape.dtype = is_compare(ins->op) ? FG_BOOL : dt;
    temps[j] = dev_alloc(shape);
    fg_op_params prm;
    memset(&prm, 0, sizeof prm);
    if (ins->op == FG_FUSED_LEAKY_RELU) prm.leaky_relu.alpha = ins->attr[0];
    if (ins->op == FG_FUSED_ELU) prm.elu.alpha = ins->attr[0];
    if (ins->op == FG_FUSED_SOFTPLUS) {
      prm.softplus.beta = ins->attr[0];
      prm.softplus.threshold = ins->attr[1];
    }
    if (ins->op == FG_FUSED_CLIP) {
      prm.clip.min = ins->attr[0];
      prm.clip.max = ins->attr[1];
    }
    const fg_dtype key = ins->op == FG_FUSED_SELECT ? dt : args[0].dtype;
    fg_kernel_fn fn = fg_cuda_kernel(unfused_name(ins->op), key);
    char err[256] = "";
    fg_kcuda kc = kcuda();
    fg_kctx ctx = {.in = args,
                   .n_in = ins->n_args,
                   .out = &temps[j],
                   .n_out = 1,
                   .p = &prm,
                   .err = err,
                   .err_size = sizeof err,
                   .cuda = &kc};
    rc = fn && temps[j].data ? fn(&ctx) : -1;
    if (rc != 0)
      FG_FAIL_AT("unfused %s %s: %s", unfused_name(ins->op), fg_dtype_name(key),
                 fn ? err : "no kernel");
  }
  for (int c = 0; c < p->n_consts; c++)
    dev_free(&consts[c]);
  return rc == 0 ? temps[p->n_instrs - 1] : fail;
}

/* ---- one case ---------------------------------------------------------------------- */

typedef struct fcase {
  const char *name;
  fg_fused_params p;
  int n_in;
  fg_kbuf in[6];
  fg_kbuf out;
  double lo[6], hi[6];  /* input k uniform in [lo, hi) */
  int specials;         /* NaN, -0, +-Inf sprinkled into input 0 */
  double ulps, abs_tol; /* 0, 0: bit-exact against the reference */
} fcase;

static void fill_input(fg_kbuf *h, double lo, double hi, int specials, uint64_t *seed) {
  const int64_t n = numel_of(h);
  for (int64_t i = 0; i < n; i++) {
    double v = lo + (hi - lo) * (rng_unit(seed) + 1) / 2;
    if (h->dtype == FG_BOOL) v = rng_next(seed) & 1;
    elem_store(h->data, h->dtype, i, v);
  }
  if (specials && h->dtype != FG_BOOL) {
    const double sp[4] = {NAN, -0.0, INFINITY, -INFINITY};
    for (int k = 0; k < 4 && k * 5 + 3 < n; k++)
      elem_store(h->data, h->dtype, k * 5 + 3, sp[k]);
  }
}

static double ulp_of(double v, int f32) {
  v = fabs(v);
  if (f32) return (double)(nextafterf((float)v, INFINITY) - (float)v);
  return nextafter(v, INFINITY) - v;
}

static int same_bits(double a, double b) {
  return (a != a && b != b) || (a == b && signbit(a) == signbit(b));
}

/* Runs c in dtype dt (inputs of f32/f64 take dt; bool stays): the fused
 * kernel through its prepare hook and without a state, the unfused
 * kernels, and the reference. Returns the mismatches. */
static int run_case(const fcase *c, fg_dtype dt) {
  const int f32 = dt == FG_F32;
  fg_kbuf hin[6], din[6];
  uint64_t seed = 0x5eed + (uint64_t)dt;
  for (int k = 0; k < c->n_in; k++) {
    hin[k] = c->in[k];
    if (hin[k].dtype != FG_BOOL) hin[k].dtype = dt;
    hin[k].data = malloc(bytes_of(&hin[k]) + 1);
    fill_input(&hin[k], c->lo[k], c->hi[k], c->specials && k == 0, &seed);
    din[k] = to_dev(&hin[k]);
  }
  fg_kbuf out = c->out;
  out.dtype = dt;
  fg_kbuf dout = dev_alloc(out), dout2 = dev_alloc(out);
  fg_op_params prm;
  memset(&prm, 0, sizeof prm);
  prm.fused = c->p;
  char err[1024] = "";
  fg_kcuda kc = kcuda();
  fg_kctx ctx = {.in = din,
                 .n_in = c->n_in,
                 .out = &dout,
                 .n_out = 1,
                 .p = &prm,
                 .err = err,
                 .err_size = sizeof err,
                 .cuda = &kc};
  int bad = 0;
  /* the prepare hook sees shapes only */
  fg_kbuf sin[6], sout = out;
  for (int k = 0; k < c->n_in; k++) {
    sin[k] = din[k];
    sin[k].data = NULL;
  }
  fg_kctx pctx = ctx;
  pctx.in = sin;
  pctx.out = &sout;
  pctx.cuda = NULL;
  void *state = NULL;
  if (fgc_fused_prepare(&pctx, 1, &state) != 0) {
    FG_FAIL_AT("%s %s: prepare: %s", c->name, fg_dtype_name(dt), err);
    bad = -1;
  }
  ctx.state = state;
  if (bad == 0 && fgc_fused_elementwise(&ctx) != 0) bad = -1;
  ctx.state = NULL;
  ctx.out = &dout2;
  if (bad == 0 && fgc_fused_elementwise(&ctx) != 0) bad = -1;
  fg_kbuf temps[FG_FUSED_MAX_INSTRS];
  memset(temps, 0, sizeof temps);
  const fg_kbuf dun = bad == 0 ? run_unfused(&c->p, din, dt, temps) : (fg_kbuf){0};
  const cudaError_t sync = cudaStreamSynchronize(G.stream);
  if (bad != 0 || sync != cudaSuccess || !dun.data) {
    FG_FAIL_AT("%s %s: %s (sync %s)", c->name, fg_dtype_name(dt), err, cudaGetErrorString(sync));
    bad = -1;
  } else {
    void *got = to_host(&dout), *got2 = to_host(&dout2), *un = to_host(&dun);
    const int64_t n = numel_of(&out);
    FG_CHECK_INT(numel_of(&dun), n);
    int shown = 0;
    for (int64_t i = 0; i < n; i++) {
      const double g = elem_as_double(got, dt, i), g2 = elem_as_double(got2, dt, i);
      const double u = elem_as_double(un, dt, i), r = ref_elem(&c->p, hin, &out, i);
      const int exact = c->ulps == 0 && c->abs_tol == 0;
      const int ok_ref = exact ? same_bits(g, r)
                               : (g != g && r != r) || g == r ||
                                     fabs(g - r) <= c->ulps * ulp_of(r, f32) + c->abs_tol;
      if (same_bits(g, u) && same_bits(g, g2) && ok_ref) continue;
      if (shown++ < 5)
        FG_FAIL_AT("%s %s%s [%lld]: fused %.17g (no state %.17g), unfused %.17g, reference %.17g",
                   c->name, fg_dtype_name(dt), G.misalign ? " misaligned" : "", (long long)i, g, g2,
                   u, r);
      bad++;
    }
    free(got);
    free(got2);
    free(un);
  }
  fgc_fused_release(state);
  for (int j = 0; j < FG_FUSED_MAX_INSTRS; j++)
    dev_free(&temps[j]);
  for (int k = 0; k < c->n_in; k++) {
    free(hin[k].data);
    dev_free(&din[k]);
  }
  dev_free(&dout);
  dev_free(&dout2);
  return bad;
}

/* f32 and f64, each with aligned buffers (the 4-wide loop where the
 * shapes allow it) and misaligned ones (one element at a time). */
static void run_both(const fcase *c) {
  for (int m = 0; m < 2; m++) {
    G.misalign = m;
    run_case(c, FG_F32);
    run_case(c, FG_F64);
  }
  G.misalign = 0;
}

static void case_init(fcase *c, const char *name, int n_in, fg_kbuf out) {
  memset(c, 0, sizeof *c);
  c->name = name;
  c->n_in = n_in;
  c->out = out;
  fprog_init(&c->p, n_in);
  for (int k = 0; k < 6; k++) {
    c->lo[k] = -3;
    c->hi[k] = 3;
  }
}

#endif /* FG_HAVE_CUDA */

#ifndef FG_HAVE_CUDA
#define GPU_OR_SKIP()                                                                              \
  FG_SKIP_NO_GPU("no CUDA device (built without CUDA: FG_CUDA=OFF or no toolkit)")
#endif

/* ---- the cases ---------------------------------------------------------------------- */

/* Exact programs: every op correctly rounded, so fused, unfused and the
 * reference agree to the bit, NaN, -0 and Inf included. */
FG_TEST(fused_cuda_exact_programs, "gpu") {
  GPU_OR_SKIP();
#ifdef FG_HAVE_CUDA
  fcase c;
  /* bias add and relu: [33, 40] + [40] */
  case_init(&c, "bias_relu", 2, fshape(FG_F32, 2, D(33, 40)));
  c.in[0] = fshape(FG_F32, 2, D(33, 40));
  c.in[1] = fshape(FG_F32, 1, D(40));
  c.specials = 1;
  F1(&c.p, FG_FUSED_RELU, F2(&c.p, FG_FUSED_ADD, FX(0), FX(1)));
  run_both(&c);
  /* scale, shift by a scalar, clip, minus a column, max with a row */
  case_init(&c, "affine_clip", 4, fshape(FG_F32, 2, D(7, 9)));
  c.in[0] = fshape(FG_F32, 2, D(7, 9));
  c.in[1] = fshape(FG_F32, 0, NULL);
  c.in[2] = fshape(FG_F32, 2, D(7, 1));
  c.in[3] = fshape(FG_F32, 1, D(9));
  c.specials = 1;
  fg_fused_ref t = F2(&c.p, FG_FUSED_MUL, FX(0), FC(&c.p, 0.1));
  t = F2(&c.p, FG_FUSED_ADD, t, FX(1));
  t = F1A(&c.p, FG_FUSED_CLIP, t, -0.5, 6);
  t = F2(&c.p, FG_FUSED_SUB, t, FX(2));
  t = F2(&c.p, FG_FUSED_MAXIMUM, t, FX(3));
  F2(&c.p, FG_FUSED_MINIMUM, t, FC(&c.p, 2.5));
  run_both(&c);
  /* comparisons into selects, a bool condition on a strided walk */
  case_init(&c, "select_walk", 4, fshape(FG_F32, 3, D(4, 3, 5)));
  c.in[0] = fshape(FG_F32, 3, D(4, 3, 5));
  c.in[1] = fshape(FG_F32, 3, D(4, 1, 5));
  c.in[2] = fshape(FG_BOOL, 2, D(3, 1));
  c.in[3] = fshape(FG_F32, 1, D(5));
  fg_fused_ref g = F2(&c.p, FG_FUSED_GREATER, FX(0), FX(1));
  fg_fused_ref s = F3(&c.p, FG_FUSED_SELECT, g, FX(0), FX(1));
  fg_fused_ref ng = F1(&c.p, FG_FUSED_NEG, s);
  s = F3(&c.p, FG_FUSED_SELECT, FX(2), s, ng);
  t = F1A(&c.p, FG_FUSED_LEAKY_RELU, F2(&c.p, FG_FUSED_SUB, F1(&c.p, FG_FUSED_ABS, s), FX(3)), 0.01,
          0);
  fg_fused_ref lt = F2(&c.p, FG_FUSED_LESS, t, FC(&c.p, 0));
  fg_fused_ref eq = F2(&c.p, FG_FUSED_EQUAL, FX(1), FX(3));
  t = F3(&c.p, FG_FUSED_SELECT, lt, F1(&c.p, FG_FUSED_SIGN, t), t);
  F3(&c.p, FG_FUSED_SELECT, eq, FC(&c.p, 9), t);
  run_both(&c);
  /* division, roots and rounding: x1 > 0 */
  case_init(&c, "div_sqrt_round", 2, fshape(FG_F32, 2, D(17, 23)));
  c.in[0] = fshape(FG_F32, 2, D(17, 23));
  c.in[1] = fshape(FG_F32, 2, D(17, 1));
  c.lo[1] = 0.25;
  c.hi[1] = 4;
  t = F2(&c.p, FG_FUSED_DIV, FX(0), FX(1));
  t = F1(&c.p, FG_FUSED_SQRT, F1(&c.p, FG_FUSED_ABS, t));
  t = F2(&c.p, FG_FUSED_MUL, t, F1(&c.p, FG_FUSED_RSQRT, FX(1)));
  t = F2(&c.p, FG_FUSED_MUL, F1(&c.p, FG_FUSED_RECIPROCAL, t), FC(&c.p, 7.3));
  fg_fused_ref r = F1(&c.p, FG_FUSED_ROUND, t);
  fg_fused_ref f = F1(&c.p, FG_FUSED_FLOOR, F2(&c.p, FG_FUSED_MUL, t, FC(&c.p, 0.5)));
  fg_fused_ref ce = F1(&c.p, FG_FUSED_CEIL, F2(&c.p, FG_FUSED_MUL, FX(0), FC(&c.p, 3.7)));
  t = F2(&c.p, FG_FUSED_ADD, F2(&c.p, FG_FUSED_ADD, r, f), ce);
  F2(&c.p, FG_FUSED_MUL, t, F1(&c.p, FG_FUSED_SIGN, FX(0)));
  run_both(&c);
  /* rank 0, and a large output (many grid-stride rounds per thread) */
  case_init(&c, "rank0", 1, fshape(FG_F32, 0, NULL));
  c.in[0] = fshape(FG_F32, 0, NULL);
  F2(&c.p, FG_FUSED_ADD, FX(0), FC(&c.p, 1));
  run_both(&c);
  /* the 4-wide loop with 1001 = 4 * 250 + 1 outputs: one left over */
  case_init(&c, "tail", 2, fshape(FG_F32, 2, D(7, 143)));
  c.in[0] = fshape(FG_F32, 2, D(7, 143));
  c.in[1] = fshape(FG_F32, 0, NULL);
  c.specials = 1;
  F2(&c.p, FG_FUSED_MINIMUM, F2(&c.p, FG_FUSED_DIV, FX(0), FX(1)), FC(&c.p, 1.5));
  run_both(&c);
  case_init(&c, "large", 2, fshape(FG_F32, 2, D(3001, 1024)));
  c.in[0] = fshape(FG_F32, 2, D(3001, 1024));
  c.in[1] = fshape(FG_F32, 2, D(3001, 1));
  F2(&c.p, FG_FUSED_MUL, F2(&c.p, FG_FUSED_SUB, FX(0), FX(1)), FX(1));
  run_both(&c);
#endif
}

/* Each transcendental op after an exact one: bit for bit against the
 * unfused kernels, within a few ulp of the double reference: 4 for one
 * library call (CUDA's expf, logf, tanhf, erff are within 2), 6 where the
 * op chains a call with an add and a division (sigmoid, silu, softplus),
 * 8 for powf; gelu's 1 + erf cancels for negative x, so an absolute bound
 * there. */
FG_TEST(fused_cuda_transcendental_programs, "gpu") {
  GPU_OR_SKIP();
#ifdef FG_HAVE_CUDA
  static const struct {
    int op;
    double lo, hi, a0, a1, ulps, abs32;
  } ops[] = {
      {FG_FUSED_EXP, -3, 3, 0, 0, 4, 0},        {FG_FUSED_LOG, 0.05, 3, 0, 0, 4, 0},
      {FG_FUSED_TANH, -3, 3, 0, 0, 4, 0},       {FG_FUSED_SIGMOID, -6, 6, 0, 0, 6, 0},
      {FG_FUSED_SILU, -6, 6, 0, 0, 6, 0},       {FG_FUSED_GELU, -3, 3, 0, 0, 4, 4e-7},
      {FG_FUSED_ERF, -2, 2, 0, 0, 4, 0},        {FG_FUSED_ELU, -3, 3, 0.7, 0, 4, 0},
      {FG_FUSED_SOFTPLUS, -3, 3, 1.5, 2, 6, 0}, {FG_FUSED_POW, 0.1, 2, 0, 0, 8, 0},
  };
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
    fcase c;
    case_init(&c, fgc_fused_op_name(ops[o].op), 3, fshape(FG_F32, 2, D(16, 32)));
    c.in[0] = fshape(FG_F32, 2, D(16, 32));
    c.in[1] = fshape(FG_F32, 1, D(32));
    c.in[2] = fshape(FG_F32, 0, NULL);
    c.lo[0] = ops[o].lo;
    c.hi[0] = ops[o].hi;
    c.lo[1] = 0.5; /* x0 * x1 stays in the op's range */
    c.hi[1] = 1;
    c.lo[2] = 0.5;
    c.hi[2] = 2.5;
    fg_fused_ref t = F2(&c.p, FG_FUSED_MUL, FX(0), FX(1));
    if (ops[o].op == FG_FUSED_POW)
      t = F2(&c.p, FG_FUSED_POW, t, FX(2));
    else
      t = F1A(&c.p, ops[o].op, t, ops[o].a0, ops[o].a1);
    F2(&c.p, FG_FUSED_MUL, t, FC(&c.p, 0.5));
    c.ulps = ops[o].ulps;
    for (int m = 0; m < 2; m++) {
      G.misalign = m;
      c.abs_tol = ops[o].abs32;
      run_case(&c, FG_F32);
      c.abs_tol = ops[o].abs32 > 0 ? 2e-15 : 0;
      run_case(&c, FG_F64);
    }
    G.misalign = 0;
  }
#endif
}

/* The caches seen from the kernel: a second prepare of the same structure
 * (another batch size too) compiles nothing and loads nothing new; a
 * CUBIN already on disk is loaded without compiling; an empty output
 * launches nothing. */
FG_TEST(fused_cuda_caches, "gpu") {
  GPU_OR_SKIP();
#ifdef FG_HAVE_CUDA
  fg_op_params prm;
  memset(&prm, 0, sizeof prm);
  fprog_init(&prm.fused, 2);
  F1(&prm.fused, FG_FUSED_TANH, F2(&prm.fused, FG_FUSED_SUB, FX(0), FX(1)));
  fg_kbuf in[2] = {fshape(FG_F64, 2, D(5, 6)), fshape(FG_F64, 1, D(6))},
          out = fshape(FG_F64, 2, D(5, 6));
  char err[1024] = "";
  fg_kctx ctx = {
      .in = in, .n_in = 2, .out = &out, .n_out = 1, .p = &prm, .err = err, .err_size = sizeof err};
  /* this source was never compiled here: put its CUBIN on disk first */
  int dev = 0, major = 0, minor = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  fgc_fused_layout lay;
  fgc_fused_args args;
  FG_REQUIRE(fgc_fused_plan(&prm.fused, in, 2, &out, 1, &lay, &args, err, sizeof err) == 0);
  char *src = fgc_fused_source(&prm.fused, &lay);
  FG_REQUIRE(src);
  void *img = NULL;
  size_t n = 0;
  int origin = -1;
  FG_CHECK_INT(fgc_nvrtc_cubin(src, major * 10 + minor, &img, &n, &origin, err, sizeof err), 0);
  FG_CHECK_INT(origin, FGC_NVRTC_COMPILED);
  free(img);
  free(src);
  const long compiles = fgc_nvrtc_compiles();
  const int loaded = fgc_fused_loaded();
  void *s1 = NULL, *s2 = NULL;
  FG_CHECK_INT(fgc_fused_prepare(&ctx, 1, &s1), 0);
  FG_CHECK_INT(fgc_nvrtc_compiles(), compiles); /* from disk */
  FG_CHECK_INT(fgc_fused_loaded(), loaded + 1);
  in[0].dims[0] = 500;
  out.dims[0] = 500;
  FG_CHECK_INT(fgc_fused_prepare(&ctx, 1, &s2), 0);
  FG_CHECK_INT(fgc_nvrtc_compiles(), compiles);
  FG_CHECK_INT(fgc_fused_loaded(), loaded + 1); /* the same kernel */
  fgc_fused_release(s1);
  fgc_fused_release(s2);
  /* an empty output: 0, nothing launched, nothing written */
  fg_kbuf e_in[2] = {fshape(FG_F64, 2, D(0, 6)), fshape(FG_F64, 1, D(6))},
          e_out = fshape(FG_F64, 2, D(0, 6));
  e_in[0].data = e_in[1].data = e_out.data = (void *)G.flag; /* never dereferenced */
  fg_kcuda kc = kcuda();
  fg_kctx ectx = {.in = e_in,
                  .n_in = 2,
                  .out = &e_out,
                  .n_out = 1,
                  .p = &prm,
                  .err = err,
                  .err_size = sizeof err,
                  .cuda = &kc};
  FG_CHECK_INT(fgc_fused_elementwise(&ectx), 0);
  FG_CHECK_INT(cudaStreamSynchronize(G.stream), cudaSuccess);
#endif
}

/* A prepared kernel launches inside a CUDA graph capture (the compile
 * happened before it), and the replayed graph computes the program. */
FG_TEST(fused_cuda_graph_capture, "gpu") {
  GPU_OR_SKIP();
#ifdef FG_HAVE_CUDA
  fg_op_params prm;
  memset(&prm, 0, sizeof prm);
  fprog_init(&prm.fused, 2);
  F1(&prm.fused, FG_FUSED_RELU, F2(&prm.fused, FG_FUSED_ADD, FX(0), FX(1)));
  const int64_t N = 1000;
  float h0[1000], h1[10], got[1000];
  for (int i = 0; i < N; i++)
    h0[i] = (float)(i % 37) - 18.5f;
  for (int i = 0; i < 10; i++)
    h1[i] = (float)i - 4.0f;
  fg_kbuf hin[2] = {fshape(FG_F32, 2, D(100, 10)), fshape(FG_F32, 1, D(10))};
  hin[0].data = h0;
  hin[1].data = h1;
  fg_kbuf din[2] = {to_dev(&hin[0]), to_dev(&hin[1])}, dout = dev_alloc(hin[0]);
  fg_kbuf sin[2] = {hin[0], hin[1]}, sout = hin[0];
  sin[0].data = sin[1].data = sout.data = NULL;
  char err[1024] = "";
  fg_kctx pctx = {.in = sin,
                  .n_in = 2,
                  .out = &sout,
                  .n_out = 1,
                  .p = &prm,
                  .err = err,
                  .err_size = sizeof err};
  void *state = NULL;
  FG_REQUIRE(fgc_fused_prepare(&pctx, 1, &state) == 0);
  fg_kcuda kc = kcuda();
  fg_kctx ctx = {.in = din,
                 .n_in = 2,
                 .out = &dout,
                 .n_out = 1,
                 .p = &prm,
                 .err = err,
                 .err_size = sizeof err,
                 .cuda = &kc,
                 .state = state};
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  FG_CHECK_INT(cudaStreamBeginCapture(G.stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const int rc = fgc_fused_elementwise(&ctx);
  FG_CHECK_INT(cudaStreamEndCapture(G.stream, &graph), cudaSuccess);
  FG_CHECK_INT(rc, 0);
  FG_REQUIRE(graph);
  FG_CHECK_INT(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  cudaMemset(dout.data, 0, (size_t)N * sizeof(float));
  FG_CHECK_INT(cudaGraphLaunch(exec, G.stream), cudaSuccess);
  FG_CHECK_INT(cudaStreamSynchronize(G.stream), cudaSuccess);
  cudaMemcpy(got, dout.data, sizeof got, cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int i = 0; i < N; i++) {
    const float want = h0[i] + h1[i % 10] < 0 ? 0.0f : h0[i] + h1[i % 10];
    if (got[i] != want && bad++ < 3) FG_FAIL_AT("[%d] = %g, expected %g", i, got[i], want);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  fgc_fused_release(state);
  dev_free(&din[0]);
  dev_free(&din[1]);
  dev_free(&dout);
#endif
}
