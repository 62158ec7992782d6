/* CUDA kernels (kernels/cuda/) against the CPU kernels on random inputs:
 * every op and every dtype the CPU registry has, odd sizes (1, 7, 33,
 * 1000, 4097 elements), broadcasting, aligned and misaligned buffers (the
 * vectorised and the scalar paths), plus the error flag that reports bad
 * indices found on the device, and the registry's coverage of the op table.
 *
 * Cases labelled "gpu" need a device: without CUDA in the build (no
 * FG_HAVE_CUDA) or without a device they print why and skip (fail with
 * FG_REQUIRE_GPU=1 in the environment). The registry case runs everywhere
 * (without CUDA it reports the count of ops lacking a CUDA kernel and
 * passes); the host-side message cases need the CUDA backend in the build
 * and skip the same way without it.
 *
 * The reference is the CPU kernel on the same inputs (itself checked
 * against NumPy in test_kernels.c); tolerances cover the different
 * libm (CUDA's expf/tanhf/erff/powf are within 2 ulp) and summation
 * orders (cuBLAS, the GPU's reduction trees). */
#include <stdlib.h>
#include <string.h>

#include "fgtest.h"
#include "graph/op_table.h"
#include "kernels/kernel.h"
#include "test_kernels_util.h"

#ifdef FG_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "kernels/cuda/cublas_lazy.h"
#include "kernels/cuda/cuda_kernels.h"
#endif

/* ---- cuBLAS loaded on first use (CUDA builds, GPU or not) ------------------- */

#ifdef FG_HAVE_CUDA
/* 1 when a libcublas is mapped into this process (/proc/self/maps). */
static int cublas_mapped(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  char line[1024];
  int found = 0;
  while (!found && fgets(line, sizeof line, f))
    found = strstr(line, "/libcublas.so") != NULL;
  fclose(f);
  return found;
}
static int cublas_at_start = -1;
/* Before any test runs: a build that linked cuBLAS would have it mapped. */
__attribute__((constructor)) static void note_cublas_at_start(void) {
  cublas_at_start = cublas_mapped();
}
#endif

/* The process starts without cuBLAS (its initialisers cost ~0.35 s), and
 * the first cuBLAS call loads it, with every function flowgraph calls. */
FG_TEST(cuda_cublas_loaded_on_first_use, "") {
#ifndef FG_HAVE_CUDA
  FG_SKIP_NO_GPU("this build has no CUDA backend");
#else
  FG_CHECK_INT(cublas_at_start, 0);
  if (!fg_cublas_available()) printf("cuBLAS: %s\n", fg_cublas_load_error());
  FG_CHECK_INT(fg_cublas_available(), 1);
  FG_CHECK_STR_CONTAINS(fg_cublas_load_error(), "");
  FG_CHECK_INT(cublas_mapped(), 1);
  /* a status string comes from the library itself now ("success") */
  const char *ok = cublasGetStatusString(CUBLAS_STATUS_SUCCESS);
  FG_CHECK(strstr(ok, "success") || strstr(ok, "SUCCESS"));
#endif
}

/* ---- registry (runs everywhere) --------------------------------------------- */

/* Executor-level ops (dist) have no kernel on any device, and the
 * collectives (FG_OPF_COLLECTIVE: all_reduce, staged through the host, and
 * the fused updates all_reduce_apply_sgd and sufficient_factor_apply_sgd,
 * whose communicators reduce host memory) none on the GPU. */
static int exempt(const char *op) {
  const int id = fg_op_lookup(op);
  return !strcmp(op, "send") || !strcmp(op, "recv") ||
         (id >= 0 && (fg_op_table[id].flags & FG_OPF_COLLECTIVE));
}

/* Every (op, dtype) of the CPU registry has a CUDA kernel, and every op in
 * the table that is not a source has at least one. */
FG_TEST(cuda_registry_covers_cpu, "") {
  int missing = 0, rows = 0;
  for (const fg_kernel_reg *r = fg_cpu_kernel_registry(); r->op; r++) {
    if (exempt(r->op)) continue;
    rows++;
    if (!fg_cuda_kernel(r->op, r->dtype)) {
      missing++;
#ifdef FG_HAVE_CUDA
      FG_FAIL_AT("no CUDA kernel for %s %s", r->op, fg_dtype_name(r->dtype));
#endif
    }
  }
  int ops_missing = 0;
  for (int i = 0; i < FG_OP_COUNT; i++) {
    const char *op = fg_op_table[i].name;
    if ((fg_op_table[i].flags & FG_OPF_SOURCE) || exempt(op)) continue;
    int any = 0;
    for (fg_dtype dt = FG_F32; dt <= FG_BOOL; dt++)
      any |= fg_cuda_kernel(op, dt) != NULL;
    if (!any) {
      ops_missing++;
      printf("  no CUDA kernel: %s\n", op);
    }
  }
  printf("CUDA kernels: %d of %d CPU (op, dtype) rows missing; %d ops without any\n", missing, rows,
         ops_missing);
#ifdef FG_HAVE_CUDA
  FG_CHECK_INT(ops_missing, 0);
#endif
  /* Every CUDA row names a real op; none is registered twice. */
  const fg_kernel_reg *cr = fg_cuda_kernel_registry();
  for (int a = 0; cr[a].op; a++) {
    if (fg_op_lookup(cr[a].op) < 0) FG_FAIL_AT("CUDA row %d names unknown op %s", a, cr[a].op);
    if (!cr[a].fn) FG_FAIL_AT("CUDA row %d (%s) has no function", a, cr[a].op);
    if (!fg_cpu_kernel(cr[a].op, cr[a].dtype))
      FG_FAIL_AT("CUDA row %s %s has no CPU twin", cr[a].op, fg_dtype_name(cr[a].dtype));
    for (int b = 0; b < a; b++)
      if (!strcmp(cr[a].op, cr[b].op) && cr[a].dtype == cr[b].dtype)
        FG_FAIL_AT("%s %s registered twice", cr[a].op, fg_dtype_name(cr[a].dtype));
  }
  FG_CHECK(fg_cuda_kernel(NULL, FG_F32) == NULL);
  FG_CHECK(fg_cuda_kernel("no_such_op", FG_F32) == NULL);
  FG_CHECK(fg_cuda_kernel("placeholder", FG_F32) == NULL);
}

/* The host side of the error report: messages as the CPU kernels word them. */
FG_TEST(cuda_error_messages, "") {
#ifndef FG_HAVE_CUDA
  FG_SKIP_NO_GPU("this build has no CUDA backend");
#else
  char msg[160];
  fg_cuda_error e;
  memset(&e, 0, sizeof e);
  FG_CHECK_INT(fg_cuda_error_message(&e, msg, sizeof msg), 0);
  FG_CHECK(msg[0] == '\0');
  e.code = FG_CUDA_ERR_INDEX;
  e.a = 3;
  e.b = 12;
  e.c = 10;
  FG_CHECK_INT(fg_cuda_error_message(&e, msg, sizeof msg), FG_CUDA_ERR_INDEX);
  FG_CHECK(strcmp(msg, "indices[3] = 12 is out of range [0, 10)") == 0);
  e.code = FG_CUDA_ERR_LABEL;
  e.b = -1;
  fg_cuda_error_message(&e, msg, sizeof msg);
  FG_CHECK(strcmp(msg, "labels[3] = -1 is out of range [0, 10)") == 0);
  e.code = FG_CUDA_ERR_DIV_ZERO;
  fg_cuda_error_message(&e, msg, sizeof msg);
  FG_CHECK(strcmp(msg, "division by zero at output element 3") == 0);
  /* The step's input: 5 of apply_adam, 4n + 1 of multi_apply_adam over n
   * variables (the CPU kernels' messages name it alike). */
  e.code = FG_CUDA_ERR_ADAM_STEP;
  e.a = 5;
  e.d = 0;
  fg_cuda_error_message(&e, msg, sizeof msg);
  FG_CHECK_STR_CONTAINS(msg, "input 5 (step) = 0 must be >= 1");
  e.a = 25;
  e.d = -2;
  fg_cuda_error_message(&e, msg, sizeof msg);
  FG_CHECK_STR_CONTAINS(msg, "input 25 (step) = -2 must be >= 1");
  char tiny[8];
  fg_cuda_error_message(&e, tiny, sizeof tiny);
  FG_CHECK(strlen(tiny) == 7);
  FG_CHECK(fg_cuda_op_may_flag("gather") && fg_cuda_op_may_flag("apply_adam"));
  FG_CHECK(!fg_cuda_op_may_flag("add") && !fg_cuda_op_may_flag(NULL));
  FG_CHECK(sizeof(fg_cuda_error) == 40);
#endif
}

/* A CUDA kernel called without its CUDA context fails with a message and
 * touches nothing (no device needed: the check is on the host). */
FG_TEST(cuda_kernel_without_context, "") {
#ifndef FG_HAVE_CUDA
  FG_SKIP_NO_GPU("this build has no CUDA backend");
#else
  float x[2] = {1, 2};
  const int64_t d[1] = {2};
  fg_kbuf in = {FG_F32, 1, {0}, x, 0}, out = {FG_F32, 1, {0}, x, 0};
  in.dims[0] = out.dims[0] = d[0];
  fg_op_params p;
  memset(&p, 0, sizeof p);
  char err[160] = "";
  fg_kctx ctx = {&in,  1,    &out, 1, &p, err, sizeof err, NULL, NULL, NULL,
                 NULL, NULL, 0,    0, 0,  0,   0,          0,    NULL};
  fg_kernel_fn fn = fg_cuda_kernel("exp", FG_F32);
  FG_REQUIRE(fn != NULL);
  FG_CHECK_INT(fn(&ctx), -1);
  FG_CHECK_STR_CONTAINS(err, "without a CUDA context");
  FG_CHECK(x[0] == 1 && x[1] == 2);
  /* the multi-tensor updates too (one variable: var, its state, grad, lr
   * and Adam's step), before they read their lists */
  static const char *const multi[3] = {"multi_apply_sgd", "multi_apply_momentum",
                                       "multi_apply_adam"};
  float one[1] = {0.5f};
  fg_kbuf ins[6];
  for (int i = 0; i < 6; i++)
    ins[i] = in;
  ins[5] = (fg_kbuf){FG_F32, 0, {0}, one, 0};
  p.multi_update.n = 1;
  for (int k = 0; k < 3; k++) {
    err[0] = '\0';
    fg_kctx mc = {ins,  6,    &out, 1, &p, err, sizeof err, NULL, NULL, NULL,
                  NULL, NULL, 0,    0, 0,  0,   0,          0,    NULL};
    fn = fg_cuda_kernel(multi[k], FG_F32);
    FG_REQUIRE(fn != NULL);
    FG_CHECK_INT(fn(&mc), -1);
    FG_CHECK_STR_CONTAINS(err, "without a CUDA context");
  }
  FG_CHECK(x[0] == 1 && x[1] == 2);
#endif
}

/* ---- the GPU harness -------------------------------------------------------- */

enum { K_ANY, K_POS, K_SMALL, K_NONZERO, K_IDX, K_BOOL, K_SPECIAL, K_STEP };

/* An input spec: dtype, shape, how to fill it (K_IDX: [0, limit)). */
typedef struct tin {
  fg_dtype dt;
  int rank;
  int64_t dims[FG_MAX_RANK];
  int kind;
  int64_t limit;
} tin;

enum { F_ALIAS = 1 }; /* the output is input 0's buffer (apply_*) */

static const fg_dtype NUM4[4] = {FG_F32, FG_F64, FG_I32, FG_I64};
static const fg_dtype ALL5[5] = {FG_F32, FG_F64, FG_I32, FG_I64, FG_BOOL};
static const fg_dtype FLT2[2] = {FG_F32, FG_F64};

/* Used by the CUDA harness only; a CPU-only build keeps them unused. */
#define FGT_HARNESS __attribute__((unused))

FGT_HARNESS static size_t dsize(fg_dtype dt) { return fg_dtype_size(dt); }

static int64_t numel_of(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= dims[i];
  return n;
}

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static double urand(void) { return (double)(rng() >> 11) / 9007199254740992.0; }

FGT_HARNESS static void fill_random(void *data, const tin *t) {
  const int64_t n = numel_of(t->rank, t->dims);
  const int is_int = t->dt == FG_I32 || t->dt == FG_I64;
  static const double special[] = {NAN, INFINITY, -INFINITY, 3e9, -3e9, 1e19, -1e19, -0.0, 0.5};
  for (int64_t i = 0; i < n; i++) {
    double v;
    switch (t->kind) {
    case K_POS: v = is_int ? (double)(1 + rng() % 50) : 0.05 + 3.0 * urand(); break;
    case K_STEP: v = is_int ? (double)(1 + rng() % 50) : 1.0 + 9.0 * urand(); break;
    case K_SMALL: v = (double)((int64_t)(rng() % 7) - 3); break;
    case K_NONZERO:
      v = (double)((int64_t)(rng() % 100) - 50);
      if (v == 0) v = 7;
      break;
    case K_IDX: v = t->limit > 0 ? (double)(rng() % (uint64_t)t->limit) : 0; break;
    case K_BOOL: v = (double)(rng() & 1); break;
    case K_SPECIAL: v = (i % 3 == 0) ? special[(i / 3) % 9] : (urand() * 2 - 1) * 1e3; break;
    default: v = is_int ? (double)((int64_t)(rng() % 2001) - 1000) : urand() * 4.0 - 2.0; break;
    }
    if (t->dt == FG_I64 && t->kind == K_SPECIAL && i % 5 == 0)
      ((int64_t *)data)[i] = (int64_t)(rng() >> 1) * (i % 2 ? 1 : -1);
    else if (is_int && (v != v || v > 1e18 || v < -1e18))
      elem_store(data, t->dt, i, 0);
    else if (t->dt == FG_I32 && (v > 2e9 || v < -2e9))
      elem_store(data, t->dt, i, v > 0 ? 2147483647.0 : -2147483648.0);
    else
      elem_store(data, t->dt, i, v);
  }
}

/* Elements that differ beyond atol + rtol * |want| (NaN must match NaN,
 * inf must match exactly, integers and bools exactly). */
FGT_HARNESS static int compare(const char *what, fg_dtype dt, int64_t n, const void *got,
                               const void *want, double rtol, double atol) {
  int bad = 0;
  for (int64_t i = 0; i < n; i++) {
    int ok;
    if (dt == FG_I64)
      ok = ((const int64_t *)got)[i] == ((const int64_t *)want)[i];
    else if (dt == FG_I32 || dt == FG_BOOL)
      ok = elem_as_double(got, dt, i) == elem_as_double(want, dt, i);
    else {
      const double g = elem_as_double(got, dt, i), e = elem_as_double(want, dt, i);
      if (isnan(e))
        ok = isnan(g);
      else if (isinf(e))
        ok = g == e;
      else
        ok = fabs(g - e) <= atol + rtol * fabs(e);
    }
    if (!ok && bad++ < 5)
      fprintf(stderr, "  %s: element %lld: got %.17g, want %.17g\n", what, (long long)i,
              elem_as_double(got, dt, i), elem_as_double(want, dt, i));
  }
  return bad;
}

#ifdef FG_HAVE_CUDA

typedef struct gpu_env {
  int ready;
  cudaStream_t stream;
  cublasHandle_t blas;
  void *scratch;
  fg_cuda_error *flag;
  int misalign; /* device buffers start one element past an aligned address */
  int tf32;     /* fg_kcuda.allow_tf32 for the kernels run */
} gpu_env;
static gpu_env G;

/* NULL when a device is ready, else why not. */
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
  if (cublasCreate(&G.blas) != CUBLAS_STATUS_SUCCESS) return "cublasCreate failed";
  cublasSetStream(G.blas, G.stream);
  if (cudaMalloc(&G.scratch, FG_CUDA_SCRATCH_MIN) != cudaSuccess) return "cudaMalloc failed";
  if (cudaMalloc((void **)&G.flag, sizeof(fg_cuda_error)) != cudaSuccess)
    return "cudaMalloc failed";
  G.ready = 1;
  return NULL;
}

/* Device copy of n bytes of host data (NULL for 0 bytes); *base is what
 * to free. With G.misalign the data starts `shift` bytes in. */
static void *to_device(const void *host, size_t n, size_t shift, void **base) {
  *base = NULL;
  if (n == 0) return NULL;
  const size_t off = G.misalign ? shift : 0;
  if (cudaMalloc(base, n + 16) != cudaSuccess) return NULL;
  char *d = (char *)*base + off;
  if (host) cudaMemcpy(d, host, n, cudaMemcpyHostToDevice);
  return d;
}

/* Runs op's CPU and CUDA kernels on the same inputs and compares the
 * output (and, for F_ALIAS ops, every updated input in `inout`). Returns
 * the number of mismatches; -1 when a kernel failed. */
static int run_ext(const char *op, fg_dtype key, int n_in, const tin *ins, tin outspec,
                   const fg_op_params *p, double rtol, double atol, unsigned flags,
                   unsigned inout) {
  fg_op_params p0;
  memset(&p0, 0, sizeof p0);
  if (!p) p = &p0;
  fg_kernel_fn cpu = fg_cpu_kernel(op, key), gpu = fg_cuda_kernel(op, key);
  if (!cpu || !gpu) {
    FG_FAIL_AT("%s %s: kernel missing (cpu %p, cuda %p)", op, fg_dtype_name(key), (void *)cpu,
               (void *)gpu);
    return -1;
  }
  fg_kbuf hin[8], din[8];
  void *dbase[8];
  memset(hin, 0, sizeof hin);
  memset(din, 0, sizeof din);
  for (int k = 0; k < n_in; k++) {
    const size_t bytes = (size_t)numel_of(ins[k].rank, ins[k].dims) * dsize(ins[k].dt);
    hin[k].dtype = ins[k].dt;
    hin[k].rank = ins[k].rank;
    memcpy(hin[k].dims, ins[k].dims, sizeof hin[k].dims);
    hin[k].data = bytes ? malloc(bytes) : NULL;
    if (bytes) fill_random(hin[k].data, &ins[k]);
    din[k] = hin[k];
    din[k].data = to_device(hin[k].data, bytes, dsize(ins[k].dt), &dbase[k]);
  }
  const int64_t n_out = numel_of(outspec.rank, outspec.dims);
  const size_t out_bytes = (size_t)n_out * dsize(outspec.dt);
  fg_kbuf hout = {outspec.dt, outspec.rank, {0}, NULL, 0}, dout;
  memcpy(hout.dims, outspec.dims, sizeof hout.dims);
  dout = hout;
  void *dout_base = NULL;
  if (flags & F_ALIAS) {
    hout.data = hin[0].data;
    dout.data = din[0].data;
  } else {
    hout.data = out_bytes ? malloc(out_bytes) : NULL;
    if (hout.data) memset(hout.data, 0xA5, out_bytes);
    dout.data = to_device(NULL, out_bytes, dsize(outspec.dt), &dout_base);
    if (dout.data) cudaMemset(dout.data, 0xA5, out_bytes);
  }
  char cerr[256] = "", gerr[256] = "";
  fg_kctx cctx = {hin,  n_in, &hout, 1, p, cerr, sizeof cerr, NULL, NULL, NULL,
                  NULL, NULL, 0,     0, 0, 0,    0,           0,    NULL};
  const int crc = cpu(&cctx);
  fg_kcuda kc = {G.stream, G.blas, G.scratch, FG_CUDA_SCRATCH_MIN, (int *)G.flag, G.tf32};
  cudaMemset(G.flag, 0, sizeof *G.flag);
  /* The GPU kernel reads its own copies of the inputs (the CPU kernel may
   * have updated hin in place). */
  fg_kctx gctx = {din,  n_in, &dout, 1, p, gerr, sizeof gerr, NULL, &kc, NULL,
                  NULL, NULL, 0,     0, 0, 0,    0,           0,    NULL};
  const int grc = gpu(&gctx);
  const cudaError_t sync = cudaStreamSynchronize(G.stream);
  fg_cuda_error flag;
  cudaMemcpy(&flag, G.flag, sizeof flag, cudaMemcpyDeviceToHost);
  int bad = 0;
  char label[96];
  snprintf(label, sizeof label, "%s %s%s", op, fg_dtype_name(key), G.misalign ? " misaligned" : "");
  if (crc != 0 || grc != 0 || sync != cudaSuccess || flag.code != 0) {
    char fmsg[160];
    fg_cuda_error_message(&flag, fmsg, sizeof fmsg);
    FG_FAIL_AT("%s: cpu rc %d (%s), cuda rc %d (%s), sync %s, flag %d (%s)", label, crc, cerr, grc,
               gerr, cudaGetErrorString(sync), flag.code, fmsg);
    bad = -1;
  } else {
    void *got = out_bytes ? malloc(out_bytes) : NULL;
    if (out_bytes) cudaMemcpy(got, dout.data, out_bytes, cudaMemcpyDeviceToHost);
    bad += compare(label, outspec.dt, n_out, got, hout.data, rtol, atol);
    free(got);
    for (int k = 0; k < n_in; k++) {
      if (!(inout & (1u << k))) continue;
      const int64_t n = numel_of(ins[k].rank, ins[k].dims);
      const size_t bytes = (size_t)n * dsize(ins[k].dt);
      void *g = bytes ? malloc(bytes) : NULL;
      if (bytes) cudaMemcpy(g, din[k].data, bytes, cudaMemcpyDeviceToHost);
      char l2[128];
      snprintf(l2, sizeof l2, "%s input %d after", label, k);
      bad += compare(l2, ins[k].dt, n, g, hin[k].data, rtol, atol);
      free(g);
    }
    if (bad) FG_FAIL_AT("%s: %d mismatches", label, bad);
  }
  for (int k = 0; k < n_in; k++) {
    free(hin[k].data);
    cudaFree(dbase[k]);
  }
  if (!(flags & F_ALIAS)) free(hout.data);
  cudaFree(dout_base);
  return bad;
}

static int run(const char *op, fg_dtype key, int n_in, const tin *ins, tin outspec,
               const fg_op_params *p, double rtol, double atol) {
  return run_ext(op, key, n_in, ins, outspec, p, rtol, atol, 0, 0);
}

/* Both the aligned (vectorised) and the misaligned (scalar) paths. */
static void run2(const char *op, fg_dtype key, int n_in, const tin *ins, tin outspec,
                 const fg_op_params *p, double rtol, double atol) {
  G.misalign = 0;
  run(op, key, n_in, ins, outspec, p, rtol, atol);
  G.misalign = 1;
  run(op, key, n_in, ins, outspec, p, rtol, atol);
  G.misalign = 0;
}

#define GPU_OR_SKIP()                                                                              \
  do {                                                                                             \
    const char *why_ = gpu_init();                                                                 \
    if (why_) FG_SKIP_NO_GPU("no CUDA device (%s)", why_);                                         \
  } while (0)

#else /* no CUDA in this build: the gpu cases skip before reaching these */

static int run_ext(const char *op, fg_dtype key, int n_in, const tin *ins, tin outspec,
                   const fg_op_params *p, double rtol, double atol, unsigned flags,
                   unsigned inout) {
  (void)op, (void)key, (void)n_in, (void)ins, (void)outspec, (void)p, (void)rtol, (void)atol;
  (void)flags, (void)inout;
  return 0;
}
static int run(const char *op, fg_dtype key, int n_in, const tin *ins, tin outspec,
               const fg_op_params *p, double rtol, double atol) {
  return run_ext(op, key, n_in, ins, outspec, p, rtol, atol, 0, 0);
}
static void run2(const char *op, fg_dtype key, int n_in, const tin *ins, tin outspec,
                 const fg_op_params *p, double rtol, double atol) {
  run(op, key, n_in, ins, outspec, p, rtol, atol);
}
#define GPU_OR_SKIP()                                                                              \
  FG_SKIP_NO_GPU("no CUDA device (built without CUDA: FG_CUDA=OFF or no toolkit)")

#endif

static tin T1(fg_dtype dt, int64_t n, int kind) {
  tin t = {dt, 1, {n}, kind, 0};
  return t;
}
static tin TN(fg_dtype dt, int rank, const int64_t *dims, int kind) {
  tin t = {dt, rank, {0}, kind, 0};
  for (int i = 0; i < rank; i++)
    t.dims[i] = dims[i];
  return t;
}
static fg_op_params P0(void) {
  fg_op_params p;
  memset(&p, 0, sizeof p);
  return p;
}

static const int64_t SIZES[] = {1, 7, 33, 1000, 4097};
#define N_SIZES 5

static int is_float(fg_dtype dt) { return dt == FG_F32 || dt == FG_F64; }
static double rt(fg_dtype dt) { return dt == FG_F32 ? 2e-6 : 1e-13; }

/* ---- elementwise ------------------------------------------------------------ */

static void unary_all(const char *op, const fg_dtype *dts, int n_dt, int kind) {
  fg_op_params p = P0();
  if (strcmp(op, "elu") == 0) {
    p.elu.alpha = 0.7;
  } else if (strcmp(op, "softplus") == 0) {
    p.softplus.beta = 1.5; /* threshold 2: both sides of the switch at x = 4/3 */
    p.softplus.threshold = 2;
  } else if (strcmp(op, "clip") == 0) {
    p.clip.min = -0.5;
    p.clip.max = 0.25;
  } else
    p.leaky_relu.alpha = 0.1;
  for (int d = 0; d < n_dt; d++)
    for (int s = 0; s < N_SIZES; s++) {
      const tin in = T1(dts[d], SIZES[s], kind);
      run2(op, dts[d], 1, &in, T1(dts[d], SIZES[s], 0), &p, rt(dts[d]), rt(dts[d]));
    }
  /* rank 0 and an empty tensor */
  const tin s0 = {dts[0], 0, {0}, kind, 0}, e0 = T1(dts[0], 0, kind);
  run(op, dts[0], 1, &s0, s0, &p, rt(dts[0]), rt(dts[0]));
  run(op, dts[0], 1, &e0, e0, &p, 0, 0);
}

FG_TEST(cuda_unary_vs_cpu, "gpu") {
  GPU_OR_SKIP();
  unary_all("neg", NUM4, 4, K_ANY);
  unary_all("abs", NUM4, 4, K_ANY);
  unary_all("relu", NUM4, 4, K_ANY);
  unary_all("exp", FLT2, 2, K_ANY);
  unary_all("log", FLT2, 2, K_POS);
  unary_all("sqrt", FLT2, 2, K_POS);
  unary_all("rsqrt", FLT2, 2, K_POS);
  unary_all("tanh", FLT2, 2, K_ANY);
  unary_all("sigmoid", FLT2, 2, K_ANY);
  unary_all("leaky_relu", FLT2, 2, K_ANY);
  unary_all("elu", FLT2, 2, K_ANY);
  unary_all("gelu", FLT2, 2, K_ANY);
  unary_all("gelu_tanh", FLT2, 2, K_ANY);
  unary_all("erf", FLT2, 2, K_ANY);
  unary_all("softplus", FLT2, 2, K_ANY);
  unary_all("selu", FLT2, 2, K_ANY);
  unary_all("silu", FLT2, 2, K_ANY);
  unary_all("hard_sigmoid", FLT2, 2, K_ANY);
  unary_all("hard_swish", FLT2, 2, K_ANY);
  unary_all("mish", FLT2, 2, K_ANY);
  unary_all("sign", NUM4, 4, K_ANY);
  unary_all("reciprocal", FLT2, 2, K_POS);
  unary_all("floor", FLT2, 2, K_ANY);
  unary_all("ceil", FLT2, 2, K_ANY);
  unary_all("round", FLT2, 2, K_ANY);
  unary_all("clip", FLT2, 2, K_ANY);
  /* NaN, infinities, large magnitudes */
  static const char *const fl[] = {"neg",          "abs",        "relu",     "exp",  "tanh",
                                   "sigmoid",      "gelu",       "erf",      "selu", "silu",
                                   "mish",         "sign",       "floor",    "ceil", "round",
                                   "hard_sigmoid", "hard_swish", "gelu_tanh"};
  for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++)
    for (int d = 0; d < 2; d++) {
      const tin in = T1(FLT2[d], 99, K_SPECIAL);
      run(fl[i], FLT2[d], 1, &in, T1(FLT2[d], 99, 0), NULL, rt(FLT2[d]), rt(FLT2[d]));
    }
}

/* Shape pairs (a, b -> out): flat sizes, scalars both ways, rows, columns,
 * outer products and rank-4 broadcasts. The rows after {1000, 7} take the
 * 4-wide walk (fgc_walk4_ok: innermost dim a multiple of 4, each operand
 * running along it or broadcast along it) when the buffers are aligned: a
 * tensor with a scalar, a bias row, a middle-dim broadcast, a column. */
typedef struct bshape {
  int ra, rb, ro;
  int64_t a[4], b[4], o[4];
} bshape;
static const bshape BSHAPES[] = {
    {1, 1, 1, {1}, {1}, {1}},
    {1, 1, 1, {7}, {7}, {7}},
    {1, 1, 1, {33}, {33}, {33}},
    {1, 1, 1, {4097}, {4097}, {4097}},
    {1, 1, 1, {4097}, {1}, {4097}},
    {0, 1, 1, {0}, {1000}, {1000}},
    {2, 1, 2, {7, 33}, {33}, {7, 33}},
    {2, 2, 2, {7, 1}, {1, 33}, {7, 33}},
    {3, 2, 3, {3, 1, 5}, {4, 1}, {3, 4, 5}},
    {4, 3, 4, {2, 3, 4, 5}, {3, 1, 5}, {2, 3, 4, 5}},
    {2, 2, 2, {1000, 1}, {1000, 7}, {1000, 7}},
    {1, 1, 1, {4096}, {1}, {4096}},
    {2, 1, 2, {6, 12}, {12}, {6, 12}},
    {3, 3, 3, {2, 3, 8}, {2, 1, 8}, {2, 3, 8}},
    {2, 2, 2, {5, 4}, {5, 1}, {5, 4}},
    {1, 1, 1, {0}, {0}, {0}},
};
#define N_BSHAPES (int)(sizeof BSHAPES / sizeof BSHAPES[0])

static void binary_all(const char *op, const fg_dtype *dts, int n_dt, int ka, int kb,
                       fg_dtype out_dt_override) {
  for (int d = 0; d < n_dt; d++)
    for (int s = 0; s < N_BSHAPES; s++) {
      const bshape *b = &BSHAPES[s];
      tin in[2] = {TN(dts[d], b->ra, b->a, ka), TN(dts[d], b->rb, b->b, kb)};
      const fg_dtype odt = out_dt_override ? out_dt_override : dts[d];
      run2(op, dts[d], 2, in, TN(odt, b->ro, b->o, 0), NULL, rt(dts[d]), rt(dts[d]));
      /* operands swapped (b broadcast on the left) */
      tin sw[2] = {in[1], in[0]};
      sw[0].kind = ka;
      sw[1].kind = kb;
      run(op, dts[d], 2, sw, TN(odt, b->ro, b->o, 0), NULL, rt(dts[d]), rt(dts[d]));
    }
}

FG_TEST(cuda_binary_vs_cpu, "gpu") {
  GPU_OR_SKIP();
  binary_all("add", NUM4, 4, K_ANY, K_ANY, 0);
  binary_all("sub", NUM4, 4, K_ANY, K_ANY, 0);
  binary_all("mul", NUM4, 4, K_ANY, K_ANY, 0);
  binary_all("div", NUM4, 4, K_ANY, K_NONZERO, 0);
  binary_all("maximum", NUM4, 4, K_SMALL, K_ANY, 0);
  binary_all("minimum", NUM4, 4, K_SMALL, K_ANY, 0);
  binary_all("pow", FLT2, 2, K_POS, K_ANY, 0);
  binary_all("equal", ALL5, 5, K_SMALL, K_SMALL, FG_BOOL);
  binary_all("greater", ALL5, 5, K_SMALL, K_SMALL, FG_BOOL);
  binary_all("less", ALL5, 5, K_SMALL, K_SMALL, FG_BOOL);
  /* wrapping integer arithmetic and NaN-propagating max/min */
  for (int d = 0; d < 4; d++) {
    tin in[2] = {T1(NUM4[d], 999, K_SPECIAL), T1(NUM4[d], 999, K_SPECIAL)};
    if (!is_float(NUM4[d])) in[1].kind = K_NONZERO;
    static const char *const ops[] = {"add", "sub", "mul", "maximum", "minimum", "div"};
    for (int i = 0; i < 6; i++)
      run(ops[i], NUM4[d], 2, in, T1(NUM4[d], 999, 0), NULL, rt(NUM4[d]), rt(NUM4[d]));
  }
}

FG_TEST(cuda_select_vs_cpu, "gpu") {
  GPU_OR_SKIP();
  for (int d = 0; d < 5; d++)
    for (int s = 0; s < N_BSHAPES; s++) {
      const bshape *b = &BSHAPES[s];
      tin in[3] = {TN(FG_BOOL, b->ra, b->a, K_BOOL), TN(ALL5[d], b->rb, b->b, K_ANY),
                   TN(ALL5[d], b->ro, b->o, K_ANY)};
      run2("select", ALL5[d], 3, in, TN(ALL5[d], b->ro, b->o, 0), NULL, 0, 0);
      tin in2[3] = {TN(FG_BOOL, b->ro, b->o, K_BOOL), TN(ALL5[d], b->ra, b->a, K_ANY),
                    TN(ALL5[d], 0, b->o, K_ANY)};
      run("select", ALL5[d], 3, in2, TN(ALL5[d], b->ro, b->o, 0), NULL, 0, 0);
    }
}

FG_TEST(cuda_cast_vs_cpu, "gpu") {
  GPU_OR_SKIP();
  for (int from = 0; from < 5; from++)
    for (int to = 0; to < 5; to++)
      for (int s = 0; s < N_SIZES; s++) {
        const tin in = T1(ALL5[from], SIZES[s], ALL5[from] == FG_BOOL ? K_BOOL : K_SPECIAL);
        run2("cast", ALL5[to], 1, &in, T1(ALL5[to], SIZES[s], 0), NULL, 0, 0);
      }
}

FG_TEST(cuda_constants_vs_cpu, "gpu") {
  GPU_OR_SKIP();
  static const double values[] = {0.0, -0.0, 2.5, -3.75, 1e10, NAN};
  for (int d = 0; d < 5; d++)
    for (int s = 0; s < N_SIZES; s++) {
      fg_op_params p = P0();
      for (int v = 0; v < 6; v++) {
        p.fill.value = values[v];
        run("fill", ALL5[d], 0, NULL, T1(ALL5[d], SIZES[s], 0), &p, 0, 0);
      }
      const tin like = T1(ALL5[d], SIZES[s], K_ANY);
      run("zeros_like", ALL5[d], 1, &like, T1(ALL5[d], SIZES[s], 0), &p, 0, 0);
      run("ones_like", ALL5[d], 1, &like, T1(ALL5[d], SIZES[s], 0), &p, 0, 0);
      run("group", ALL5[d], 1, &like, (tin){FG_I32, 0, {0}, 0, 0}, &p, 0, 0);
      if (d < 4) {
        const tin x = TN(ALL5[(d + 1) % 5], 2, (int64_t[]){SIZES[s], 3}, K_ANY);
        run("numel", ALL5[d], 1, &x, (tin){ALL5[d], 0, {0}, 0, 0}, &p, 0, 0);
      }
    }
}

FG_TEST(cuda_copies_vs_cpu, "gpu") {
  GPU_OR_SKIP();
  static const char *const ops[] = {"reshape", "identity", "stop_gradient", "expand_dims",
                                    "reshape_like"};
  fg_op_params p = P0();
  for (int d = 0; d < 5; d++)
    for (int s = 0; s < N_SIZES; s++) {
      const tin in[2] = {T1(ALL5[d], SIZES[s], K_ANY), T1(ALL5[d], SIZES[s], K_ANY)};
      for (int i = 0; i < 5; i++)
        run(ops[i], ALL5[d], strcmp(ops[i], "reshape_like") == 0 ? 2 : 1, in,
            T1(ALL5[d], SIZES[s], 0), &p, 0, 0);
      /* assign: the output is the variable (input 0) */
      run_ext("assign", ALL5[d], 2, in, T1(ALL5[d], SIZES[s], 0), &p, 0, 0, F_ALIAS, 1u);
    }
}

/* ---- data movement ---------------------------------------------------------- */

FG_TEST(cuda_transpose_vs_cpu, "gpu") {
  GPU_OR_SKIP();
  typedef struct {
    int r;
    int64_t d[4];
    int perm[4];
  } tcase;
  static const tcase cases[] = {
      {2, {33, 65}, {1, 0}},           {2, {1000, 7}, {1, 0}},          {2, {1, 4097}, {1, 0}},
      {3, {2, 33, 31}, {0, 2, 1}},     {3, {2, 3, 4}, {2, 0, 1}},       {3, {5, 6, 7}, {1, 0, 2}},
      {4, {2, 3, 4, 5}, {3, 1, 0, 2}}, {4, {2, 1, 3, 1}, {3, 2, 1, 0}}, {3, {0, 3, 4}, {2, 1, 0}},
  };
  for (int d = 0; d < 5; d++)
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      const tcase *t = &cases[c];
      fg_op_params p = P0();
      int64_t od[4];
      for (int i = 0; i < t->r; i++) {
        p.transpose.perm[i] = t->perm[i];
        od[i] = t->d[t->perm[i]];
      }
      const tin in = TN(ALL5[d], t->r, t->d, K_ANY);
      run("transpose", ALL5[d], 1, &in, TN(ALL5[d], t->r, od, 0), &p, 0, 0);
    }
}

FG_TEST(cuda_slice_vs_cpu, "gpu") {
  GPU_OR_SKIP();
  for (int d = 0; d < 5; d++) {
    fg_op_params p = P0();
    /* [7, 33, 5] -> begin (2, 10, 0), size (3, 20, 5) */
    p.slice.begin[0] = 2;
    p.slice.begin[1] = 10;
    const tin x = TN(ALL5[d], 3, (int64_t[]){7, 33, 5}, K_ANY);
    const tin y = TN(ALL5[d], 3, (int64_t[]){3, 20, 5}, K_ANY);
    run("slice", ALL5[d], 1, &x, TN(ALL5[d], 3, y.dims, 0), &p, 0, 0);
    run("slice_grad", ALL5[d], 1, &y, TN(ALL5[d], 3, x.dims, 0), &p, 0, 0);
    fg_op_params q = P0();
    q.slice.begin[0] = 4000;
    const tin f = T1(ALL5[d], 4097, K_ANY), g = T1(ALL5[d], 97, K_ANY);
    run("slice", ALL5[d], 1, &f, T1(ALL5[d], 97, 0), &q, 0, 0);
    run("slice_grad", ALL5[d], 1, &g, T1(ALL5[d], 4097, 0), &q, 0, 0);
    const tin e = T1(ALL5[d], 0, K_ANY);
    run("slice_grad", ALL5[d], 1, &e, T1(ALL5[d], 4097, 0), &q, 0, 0);
  }
}

FG_TEST(cuda_broadcast_like_vs_cpu, "gpu") {
  GPU_OR_SKIP();
  for (int d = 0; d < 5; d++)
    for (int s = 0; s < N_BSHAPES; s++) {
      const bshape *b = &BSHAPES[s];
      const tin in[2] = {TN(ALL5[d], b->rb, b->b, K_ANY), TN(ALL5[d], b->ro, b->o, K_ANY)};
      run("broadcast_like", ALL5[d], 2, in, TN(ALL5[d], b->ro, b->o, 0), NULL, 0, 0);
    }
}

FG_TEST(cuda_shard_vs_cpu, "gpu") {
  GPU_OR_SKIP();
  for (int d = 0; d < 5; d++)
    for (int index = 0; index < 3; index++) {
      fg_op_params p = P0();
      p.shard.count = 3;
      p.shard.index = index;
      const tin in = TN(ALL5[d], 3, (int64_t[]){33, 4, 5}, K_ANY);
      run("shard", ALL5[d], 1, &in, TN(ALL5[d], 3, (int64_t[]){11, 4, 5}, 0), &p, 0, 0);
    }
}

FG_TEST(cuda_concat_vs_cpu, "gpu") {
  GPU_OR_SKIP();
  for (int d = 0; d < 5; d++)
    for (int axis = 0; axis < 3; axis++) {
      int64_t a[3] = {3, 4, 5}, b[3] = {3, 4, 5}, c[3] = {3, 4, 5}, o[3] = {3, 4, 5};
      a[axis] = 2;
      b[axis] = 0;
      c[axis] = 33;
      o[axis] = 35;
      const tin in[3] = {TN(ALL5[d], 3, a, K_ANY), TN(ALL5[d], 3, b, K_ANY),
                         TN(ALL5[d], 3, c, K_ANY)};
      fg_op_params p = P0();
      p.concat.axis = axis;
      run("concat", ALL5[d], 3, in, TN(ALL5[d], 3, o, 0), &p, 0, 0);
    }
}

FG_TEST(cuda_gather_vs_cpu, "gpu") {
  GPU_OR_SKIP();
  static const fg_dtype idt[2] = {FG_I32, FG_I64};
  for (int d = 0; d < 5; d++)
    for (int k = 0; k < 2; k++) {
      tin in[2] = {TN(ALL5[d], 2, (int64_t[]){10, 7}, K_ANY),
                   TN(idt[k], 2, (int64_t[]){3, 4}, K_IDX)};
      in[1].limit = 10;
      run("gather", ALL5[d], 2, in, TN(ALL5[d], 3, (int64_t[]){3, 4, 7}, 0), NULL, 0, 0);
      tin flat[2] = {T1(ALL5[d], 1000, K_ANY), T1(idt[k], 4097, K_IDX)};
      flat[1].limit = 1000;
      run("gather", ALL5[d], 2, flat, T1(ALL5[d], 4097, 0), NULL, 0, 0);
      if (d == 4) continue;
      /* gather_grad: dy [n, 7] rows summed into [10, 7] at repeated indices */
      tin gg[2] = {TN(ALL5[d], 2, (int64_t[]){1000, 7}, K_ANY), T1(idt[k], 1000, K_IDX)};
      gg[1].limit = 10;
      run("gather_grad", ALL5[d], 2, gg, TN(ALL5[d], 2, (int64_t[]){10, 7}, 0), NULL, 0, 0);
      tin g2[2] = {TN(ALL5[d], 2, (int64_t[]){33, 300}, K_ANY), T1(idt[k], 33, K_IDX)};
      g2[1].limit = 1000;
      run("gather_grad", ALL5[d], 2, g2, TN(ALL5[d], 2, (int64_t[]){1000, 300}, 0), NULL, 0, 0);
    }
}

FG_TEST(cuda_one_hot_vs_cpu, "gpu") {
  GPU_OR_SKIP();
  for (int d = 0; d < 5; d++)
    for (int s = 0; s < N_SIZES; s++) {
      fg_op_params p = P0();
      p.one_hot.depth = 10;
      tin in = T1(s % 2 ? FG_I64 : FG_I32, SIZES[s], K_IDX);
      in.limit = 10;
      run("one_hot", ALL5[d], 1, &in, TN(ALL5[d], 2, (int64_t[]){SIZES[s], 10}, 0), &p, 0, 0);
    }
}

/* ---- reductions ------------------------------------------------------------- */

typedef struct rcase {
  int r;
  int64_t d[4];
  int n_axes;
  int axes[4];
} rcase;
static const rcase RCASES[] = {
    {1, {4097}, 1, {0}},
    {1, {1}, 1, {0}},
    {2, {7, 33}, 1, {1}},
    {2, {7, 33}, 1, {0}},
    {2, {7, 33}, 2, {0, 1}},
    {3, {7, 33, 5}, 1, {1}},
    {3, {7, 33, 5}, 2, {0, 2}},
    {3, {7, 1, 5}, 1, {1}},
    {2, {3, 100000}, 1, {1}},
    {2, {100000, 3}, 1, {0}},
    {1, {300000}, 1, {0}},
    {3, {0, 4, 5}, 1, {1}},
    {3, {4, 0, 5}, 1, {1}},
    {4, {2, 3, 4, 5}, 2, {1, 3}},
    {2, {7, 33}, 0, {0}},
    /* columns in row groups: a bias gradient's shape, a tail of rows, a
     * batch of them; then chunks with tails (too few columns for groups) */
    {2, {256, 2048}, 1, {0}},
    {2, {600, 1028}, 1, {0}},
    {3, {3, 201, 200}, 1, {1}},
    {2, {300, 20}, 1, {0}},
};

static void reduce_out(const rcase *c, int keepdims, int *rank, int64_t *dims) {
  *rank = 0;
  for (int i = 0; i < c->r; i++) {
    int red = 0;
    for (int k = 0; k < c->n_axes; k++)
      red |= c->axes[k] == i;
    if (!red)
      dims[(*rank)++] = c->d[i];
    else if (keepdims)
      dims[(*rank)++] = 1;
  }
}

FG_TEST(cuda_reduce_vs_cpu, "gpu") {
  GPU_OR_SKIP();
  static const char *const ops[] = {"reduce_sum", "reduce_mean", "reduce_max"};
  for (int o = 0; o < 3; o++)
    for (int d = 0; d < 4; d++)
      for (size_t c = 0; c < sizeof RCASES / sizeof RCASES[0]; c++) {
        const rcase *rc = &RCASES[c];
        fg_op_params p = P0();
        p.reduce.n_axes = rc->n_axes;
        for (int k = 0; k < rc->n_axes; k++)
          p.reduce.axes[k] = rc->axes[k];
        p.reduce.keepdims = (int)(c % 2);
        int orank;
        int64_t od[4];
        reduce_out(rc, p.reduce.keepdims, &orank, od);
        const tin in = TN(NUM4[d], rc->r, rc->d, K_ANY);
        const double tol = NUM4[d] == FG_F32 ? 1e-6 : 1e-12;
        run(ops[o], NUM4[d], 1, &in, TN(NUM4[d], orank, od, 0), &p, tol, tol);
      }
  /* NaN wins in reduce_max */
  fg_op_params p = P0();
  p.reduce.n_axes = 1;
  p.reduce.axes[0] = 1;
  for (int d = 0; d < 2; d++) {
    const tin in = TN(FLT2[d], 2, (int64_t[]){7, 999}, K_SPECIAL);
    run("reduce_max", FLT2[d], 1, &in, T1(FLT2[d], 7, 0), &p, 0, 0);
  }
}

/* Same input, same bits, run after run (no atomics, fixed chunks). */
FG_TEST(cuda_reduce_deterministic, "gpu") {
  GPU_OR_SKIP();
#ifdef FG_HAVE_CUDA
  const int64_t n = 1 << 22;
  float *x = malloc(sizeof(float) * (size_t)n);
  FG_REQUIRE(x != NULL);
  for (int64_t i = 0; i < n; i++)
    x[i] = (float)(urand() * 2e3 - 1e3);
  void *dx, *dy;
  FG_REQUIRE(cudaMalloc(&dx, sizeof(float) * (size_t)n) == cudaSuccess);
  FG_REQUIRE(cudaMalloc(&dy, sizeof(float)) == cudaSuccess);
  cudaMemcpy(dx, x, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice);
  fg_kbuf in = {FG_F32, 1, {n}, dx, 0}, out = {FG_F32, 0, {0}, dy, 0};
  fg_op_params p = P0();
  p.reduce.n_axes = 1;
  fg_kcuda kc = {G.stream, G.blas, G.scratch, FG_CUDA_SCRATCH_MIN, (int *)G.flag, 0};
  char err[200] = "";
  fg_kctx ctx = {&in,  1,    &out, 1, &p, err, sizeof err, NULL, &kc, NULL,
                 NULL, NULL, 0,    0, 0,  0,   0,          0,    NULL};
  float first = 0;
  for (int r = 0; r < 5; r++) {
    FG_REQUIRE(fg_cuda_kernel("reduce_sum", FG_F32)(&ctx) == 0);
    float v;
    cudaMemcpy(&v, dy, sizeof v, cudaMemcpyDeviceToHost);
    if (r == 0) first = v;
    FG_CHECK(memcmp(&v, &first, sizeof v) == 0);
  }
  double want = 0;
  for (int64_t i = 0; i < n; i++)
    want += x[i];
  FG_CHECK_NEAR(first, (float)want, 1e-6);
  cudaFree(dx);
  cudaFree(dy);
  free(x);
#endif
}

FG_TEST(cuda_argmax_vs_cpu, "gpu") {
  GPU_OR_SKIP();
  typedef struct {
    int r;
    int64_t d[3];
    int axis;
  } acase;
  static const acase cases[] = {{1, {4097}, 0},     {2, {7, 33}, 1},   {2, {7, 33}, 0},
                                {3, {7, 33, 5}, 1}, {2, {3, 1000}, 1}, {2, {1000, 3}, 1},
                                {1, {1}, 0}};
  for (int d = 0; d < 4; d++)
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
      for (int kind = 0; kind < 2; kind++) {
        const acase *a = &cases[c];
        fg_op_params p = P0();
        p.argmax.axis = a->axis;
        int64_t od[3];
        int orank = 0;
        for (int i = 0; i < a->r; i++)
          if (i != a->axis) od[orank++] = a->d[i];
        /* K_SMALL: many ties (the first maximum wins); K_SPECIAL: NaN */
        const tin in = TN(NUM4[d], a->r, a->d, kind ? K_SPECIAL : K_SMALL);
        run("argmax", NUM4[d], 1, &in, TN(FG_I64, orank, od, 0), &p, 0, 0);
      }
}

FG_TEST(cuda_sum_to_vs_cpu, "gpu") {
  GPU_OR_SKIP();
  const int64_t xd[3] = {7, 33, 5};
  const tin outs[] = {TN(FG_F32, 2, (int64_t[]){33, 1}, 0), TN(FG_F32, 2, (int64_t[]){1, 5}, 0),
                      TN(FG_F32, 0, (int64_t[]){0}, 0), TN(FG_F32, 3, (int64_t[]){7, 33, 5}, 0),
                      TN(FG_F32, 3, (int64_t[]){7, 1, 1}, 0)};
  for (int d = 0; d < 4; d++)
    for (size_t o = 0; o < sizeof outs / sizeof outs[0]; o++) {
      const tin in = TN(NUM4[d], 3, xd, K_ANY);
      tin out = outs[o];
      out.dt = NUM4[d];
      const double tol = NUM4[d] == FG_F32 ? 1e-6 : 1e-12;
      run("sum_to", NUM4[d], 1, &in, out, NULL, tol, tol);
    }
}

/* ---- softmax family ------------------------------------------------------------ */

FG_TEST(cuda_softmax_vs_cpu, "gpu") {
  GPU_OR_SKIP();
  typedef struct {
    int r;
    int64_t d[3];
    int axis;
  } scase;
  static const scase cases[] = {{2, {7, 33}, 1},   {2, {7, 33}, 0},   {2, {3, 4097}, 1},
                                {1, {1}, 0},       {3, {2, 5, 3}, 1}, {2, {1000, 10}, 1},
                                {2, {2, 1025}, 1}, {2, {0, 5}, 1},    {2, {40, 300}, 1}};
  static const char *const ops[] = {"softmax", "log_softmax"};
  for (int o = 0; o < 2; o++)
    for (int d = 0; d < 2; d++)
      for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const scase *s = &cases[c];
        fg_op_params p = P0();
        p.softmax.axis = s->axis;
        tin in = TN(FLT2[d], s->r, s->d, K_ANY);
        const double tol = FLT2[d] == FG_F32 ? 2e-6 : 1e-13;
        run2(ops[o], FLT2[d], 1, &in, TN(FLT2[d], s->r, s->d, 0), &p, tol, tol);
        in.kind = K_SPECIAL; /* NaN rows, infinities, large logits */
        run(ops[o], FLT2[d], 1, &in, TN(FLT2[d], s->r, s->d, 0), &p, tol, tol);
      }
}

FG_TEST(cuda_softmax_xent_vs_cpu, "gpu") {
  GPU_OR_SKIP();
  /* {33, 4097} and {40, 300} take a block per row, the others a warp */
  static const int64_t NC[][2] = {{1, 10},   {7, 33},   {1000, 10},  {33, 4097},
                                  {40, 300}, {5000, 3}, {2100, 300}, {0, 4}};
  static const fg_dtype ldt[2] = {FG_I32, FG_I64};
  for (int d = 0; d < 2; d++)
    for (size_t c = 0; c < sizeof NC / sizeof NC[0]; c++)
      for (int l = 0; l < 2; l++) {
        tin in[2] = {TN(FLT2[d], 2, NC[c], K_ANY), T1(ldt[l], NC[c][0], K_IDX)};
        in[1].limit = NC[c][1];
        const double tol = FLT2[d] == FG_F32 ? 1e-6 : 1e-12;
        run("softmax_cross_entropy", FLT2[d], 2, in, (tin){FLT2[d], 0, {0}, 0, 0}, NULL, tol, tol);
      }
}

/* ---- matmul ------------------------------------------------------------------ */

FG_TEST(cuda_matmul_vs_cpu, "gpu") {
  GPU_OR_SKIP();
  typedef struct {
    int ra, rb, ro;
    int64_t a[4], b[4], o[4];
    int ta, tb;
  } mcase;
  static const mcase cases[] = {
      {2, 2, 2, {7, 33}, {33, 5}, {7, 5}, 0, 0},
      {2, 2, 2, {33, 7}, {33, 5}, {7, 5}, 1, 0},
      {2, 2, 2, {7, 33}, {5, 33}, {7, 5}, 0, 1},
      {2, 2, 2, {33, 7}, {5, 33}, {7, 5}, 1, 1},
      {2, 2, 2, {1, 1}, {1, 1}, {1, 1}, 0, 0},
      {2, 2, 2, {128, 300}, {300, 65}, {128, 65}, 0, 0},
      {4, 2, 4, {2, 3, 4, 5}, {5, 6}, {2, 3, 4, 6}, 0, 0},    /* stacked */
      {3, 3, 3, {3, 5, 4}, {3, 5, 6}, {3, 4, 6}, 1, 0},       /* strided batched */
      {3, 2, 3, {3, 4, 5}, {6, 5}, {3, 4, 6}, 0, 1},          /* b shared, tb */
      {2, 3, 3, {4, 5}, {3, 5, 6}, {3, 4, 6}, 0, 0},          /* a shared */
      {4, 3, 4, {2, 1, 4, 5}, {3, 5, 6}, {2, 3, 4, 6}, 0, 0}, /* broadcast both: per batch */
      {2, 2, 2, {7, 0}, {0, 5}, {7, 5}, 0, 0},                /* K = 0 */
      {3, 3, 3, {0, 4, 5}, {0, 5, 6}, {0, 4, 6}, 0, 0},       /* empty batch */
  };
  for (int d = 0; d < 4; d++)
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      const mcase *m = &cases[c];
      fg_op_params p = P0();
      p.matmul.transpose_a = m->ta;
      p.matmul.transpose_b = m->tb;
      const int kind = is_float(NUM4[d]) ? K_ANY : K_SMALL;
      const tin in[2] = {TN(NUM4[d], m->ra, m->a, kind), TN(NUM4[d], m->rb, m->b, kind)};
      const double tol = NUM4[d] == FG_F32 ? 2e-5 : 1e-12;
      run("matmul", NUM4[d], 2, in, TN(NUM4[d], m->ro, m->o, 0), &p, tol, tol);
    }
#ifdef FG_HAVE_CUDA
  /* TF32 on request: inputs rounded to 10 mantissa bits, so a loose bound
   * (products of values in [-2, 2], K = 300: about 0.03 absolute). */
  G.tf32 = 1;
  fg_op_params p = P0();
  const tin in[2] = {TN(FG_F32, 2, (int64_t[]){128, 300}, K_ANY),
                     TN(FG_F32, 2, (int64_t[]){300, 65}, K_ANY)};
  run("matmul", FG_F32, 2, in, TN(FG_F32, 2, (int64_t[]){128, 65}, 0), &p, 1e-2, 0.2);
  G.tf32 = 0;
#endif
}

/* ---- optimizers ---------------------------------------------------------------- */

FG_TEST(cuda_optimizers_vs_cpu, "gpu") {
  GPU_OR_SKIP();
  for (int d = 0; d < 2; d++)
    for (int s = 0; s < N_SIZES; s++) {
      const fg_dtype dt = FLT2[d];
      const int64_t n = SIZES[s];
      const double tol = dt == FG_F32 ? 2e-6 : 1e-13;
      tin lr = {s % 2 ? FG_F64 : FG_F32, 0, {0}, K_POS, 0};
      tin step = {s % 2 ? FG_I64 : FG_F32, 0, {0}, K_STEP, 0};
      fg_op_params p = P0();
      const tin sgd[3] = {T1(dt, n, K_ANY), T1(dt, n, K_ANY), lr};
      run_ext("apply_sgd", dt, 3, sgd, T1(dt, n, 0), &p, tol, tol, F_ALIAS, 1u);
      for (int nest = 0; nest < 2; nest++) {
        p.momentum.momentum = 0.9;
        p.momentum.nesterov = nest;
        const tin mom[4] = {T1(dt, n, K_ANY), T1(dt, n, K_ANY), T1(dt, n, K_ANY), lr};
        run_ext("apply_momentum", dt, 4, mom, T1(dt, n, 0), &p, tol, tol, F_ALIAS, 3u);
      }
      /* wd: none, decoupled (AdamW), coupled L2 (torch's Adam). */
      for (int wd = 0; wd < 3; wd++) {
        p.adam.beta1 = 0.9;
        p.adam.beta2 = 0.999;
        p.adam.epsilon = 1e-8;
        p.adam.weight_decay = wd == 1 ? 0.01 : 0;
        p.adam.l2 = wd == 2 ? 0.01 : 0;
        const tin adam[6] = {
            T1(dt, n, K_ANY), T1(dt, n, K_ANY), T1(dt, n, K_POS), T1(dt, n, K_ANY), lr, step};
        run_ext("apply_adam", dt, 6, adam, T1(dt, n, 0), &p, tol * 10, tol * 10, F_ALIAS, 7u);
      }
    }
}

/* ---- bad input: the error flag ---------------------------------------------------- */

#ifdef FG_HAVE_CUDA
/* Runs a CUDA kernel on host-provided inputs and returns the error flag's
 * message (rc of the call in *rc). */
static int flagged(const char *op, fg_dtype key, int n_in, fg_kbuf *hin, fg_kbuf hout,
                   const fg_op_params *p, char *msg, size_t msg_size, int *rc) {
  fg_op_params p0;
  memset(&p0, 0, sizeof p0);
  if (!p) p = &p0;
  fg_kbuf din[6];
  void *base[6];
  for (int k = 0; k < n_in; k++) {
    din[k] = hin[k];
    const size_t bytes = (size_t)numel_of(hin[k].rank, hin[k].dims) * dsize(hin[k].dtype);
    din[k].data = to_device(hin[k].data, bytes, 0, &base[k]);
  }
  fg_kbuf dout = hout;
  void *obase;
  dout.data =
      to_device(NULL, (size_t)numel_of(hout.rank, hout.dims) * dsize(hout.dtype), 0, &obase);
  fg_kcuda kc = {G.stream, G.blas, G.scratch, FG_CUDA_SCRATCH_MIN, (int *)G.flag, 0};
  cudaMemset(G.flag, 0, sizeof *G.flag);
  char err[200] = "";
  fg_kctx ctx = {din,  n_in, &dout, 1, p, err, sizeof err, NULL, &kc, NULL,
                 NULL, NULL, 0,     0, 0, 0,   0,          0,    NULL};
  *rc = fg_cuda_kernel(op, key)(&ctx);
  cudaStreamSynchronize(G.stream);
  fg_cuda_error e;
  cudaMemcpy(&e, G.flag, sizeof e, cudaMemcpyDeviceToHost);
  const int code = fg_cuda_error_message(&e, msg, msg_size);
  for (int k = 0; k < n_in; k++)
    cudaFree(base[k]);
  cudaFree(obase);
  return code;
}
#endif

FG_TEST(cuda_gather_bad_index_flags, "gpu,badinput") {
  GPU_OR_SKIP();
#ifdef FG_HAVE_CUDA
  float params[20] = {0};
  int32_t idx[5] = {0, 9, 2, 12, 1};
  int64_t idx64[5] = {0, 9, 2, -4, 1};
  fg_kbuf in[2] = {{FG_F32, 2, {10, 2}, params, 0}, {FG_I32, 1, {5}, idx, 0}};
  fg_kbuf out = {FG_F32, 2, {5, 2}, NULL, 0};
  char msg[160];
  int rc;
  FG_CHECK_INT(flagged("gather", FG_F32, 2, in, out, NULL, msg, sizeof msg, &rc),
               FG_CUDA_ERR_INDEX);
  FG_CHECK_INT(rc, 0);
  FG_CHECK(strcmp(msg, "indices[3] = 12 is out of range [0, 10)") == 0);
  in[1] = (fg_kbuf){FG_I64, 1, {5}, idx64, 0};
  flagged("gather", FG_F32, 2, in, out, NULL, msg, sizeof msg, &rc);
  FG_CHECK(strcmp(msg, "indices[3] = -4 is out of range [0, 10)") == 0);
  /* rows of zero elements: the indices are still checked */
  fg_kbuf in0[2] = {{FG_F32, 2, {10, 0}, NULL, 0}, {FG_I32, 1, {5}, idx, 0}};
  flagged("gather", FG_F32, 2, in0, (fg_kbuf){FG_F32, 2, {5, 0}, NULL, 0}, NULL, msg, sizeof msg,
          &rc);
  FG_CHECK(strcmp(msg, "indices[3] = 12 is out of range [0, 10)") == 0);
  /* gather_grad and one_hot report the same way */
  float dy[10] = {0};
  fg_kbuf gg[2] = {{FG_F32, 2, {5, 2}, dy, 0}, {FG_I32, 1, {5}, idx, 0}};
  flagged("gather_grad", FG_F32, 2, gg, (fg_kbuf){FG_F32, 2, {10, 2}, NULL, 0}, NULL, msg,
          sizeof msg, &rc);
  FG_CHECK(strcmp(msg, "indices[3] = 12 is out of range [0, 10)") == 0);
  fg_op_params p = P0();
  p.one_hot.depth = 10;
  fg_kbuf oh = {FG_I32, 1, {5}, idx, 0};
  flagged("one_hot", FG_F32, 1, &oh, (fg_kbuf){FG_F32, 2, {5, 10}, NULL, 0}, &p, msg, sizeof msg,
          &rc);
  FG_CHECK(strcmp(msg, "indices[3] = 12 is out of range [0, 10)") == 0);
  /* no flag to report into: a synchronous error, nothing launched (so
   * host buffers do) */
  fg_kcuda kc = {G.stream, G.blas, G.scratch, FG_CUDA_SCRATCH_MIN, NULL, 0};
  char err[200] = "";
  float host_out[10];
  out.data = host_out;
  fg_kctx ctx = {in,   2,    &out, 1, &p, err, sizeof err, NULL, &kc, NULL,
                 NULL, NULL, 0,    0, 0,  0,   0,          0,    NULL};
  FG_CHECK_INT(fg_cuda_kernel("gather", FG_F32)(&ctx), -1);
  FG_CHECK_STR_CONTAINS(err, "error flag");
#endif
}

FG_TEST(cuda_other_bad_values_flag, "gpu,badinput") {
  GPU_OR_SKIP();
#ifdef FG_HAVE_CUDA
  char msg[160];
  int rc;
  /* a label outside [0, C) */
  float logits[12] = {0};
  int64_t labels[3] = {0, 4, 1};
  fg_kbuf x[2] = {{FG_F32, 2, {3, 4}, logits, 0}, {FG_I64, 1, {3}, labels, 0}};
  FG_CHECK_INT(flagged("softmax_cross_entropy", FG_F32, 2, x, (fg_kbuf){FG_F32, 0, {0}, NULL, 0},
                       NULL, msg, sizeof msg, &rc),
               FG_CUDA_ERR_LABEL);
  FG_CHECK(strcmp(msg, "labels[1] = 4 is out of range [0, 4)") == 0);
  /* the same with a block per row (256 classes or more) */
  static float wide[3 * 300];
  int64_t wlabels[3] = {0, 299, -1};
  fg_kbuf wx[2] = {{FG_F32, 2, {3, 300}, wide, 0}, {FG_I64, 1, {3}, wlabels, 0}};
  FG_CHECK_INT(flagged("softmax_cross_entropy", FG_F32, 2, wx, (fg_kbuf){FG_F32, 0, {0}, NULL, 0},
                       NULL, msg, sizeof msg, &rc),
               FG_CUDA_ERR_LABEL);
  FG_CHECK(strcmp(msg, "labels[2] = -1 is out of range [0, 300)") == 0);
  /* integer division by zero */
  int32_t a[4] = {1, 2, 3, 4}, b[4] = {1, 1, 0, 1};
  fg_kbuf dv[2] = {{FG_I32, 1, {4}, a, 0}, {FG_I32, 1, {4}, b, 0}};
  FG_CHECK_INT(
      flagged("div", FG_I32, 2, dv, (fg_kbuf){FG_I32, 1, {4}, NULL, 0}, NULL, msg, sizeof msg, &rc),
      FG_CUDA_ERR_DIV_ZERO);
  FG_CHECK(strcmp(msg, "division by zero at output element 2") == 0);
  /* Adam's step below 1 */
  float var[3] = {1, 2, 3}, m[3] = {0}, v[3] = {0}, g[3] = {1, 1, 1}, lr = 0.1f, step = 0;
  fg_kbuf ad[6] = {{FG_F32, 1, {3}, var, 0}, {FG_F32, 1, {3}, m, 0},   {FG_F32, 1, {3}, v, 0},
                   {FG_F32, 1, {3}, g, 0},   {FG_F32, 0, {0}, &lr, 0}, {FG_F32, 0, {0}, &step, 0}};
  fg_op_params p = P0();
  p.adam.beta1 = 0.9;
  p.adam.beta2 = 0.999;
  FG_CHECK_INT(flagged("apply_adam", FG_F32, 6, ad, (fg_kbuf){FG_F32, 1, {3}, NULL, 0}, &p, msg,
                       sizeof msg, &rc),
               FG_CUDA_ERR_ADAM_STEP);
  FG_CHECK_STR_CONTAINS(msg, "input 5 (step) = 0 must be >= 1");
#endif
}
