/* fused_elementwise on the GPU: one kernel per fused group, generated from
 * the group's program (kernels/cuda/fused_codegen.h) and compiled with
 * NVRTC when the plan is built (the prepare hook), never while a run is
 * enqueued or a CUDA graph captured.
 *
 * Compiled kernels are kept at two levels: in this process, a list from
 * (source text, architecture) to the loaded kernel, so every plan of every
 * session with the same group shares one; and on disk
 * (kernels/cuda/nvrtc_cache.h), so the next process loads the CUBIN
 * instead of compiling. CUBINs are loaded with the runtime's library API
 * (cudaLibraryLoadData), which loads into every device's context and needs
 * no link to the driver library; loaded kernels stay for the process's
 * life (a handful of small modules). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fused.h"
#include "kernels/cuda/fused_codegen.h"
#include "kernels/cuda/nvrtc_cache.h"

namespace {

struct Loaded {
  char *src;
  int arch;
  cudaLibrary_t lib;
  cudaKernel_t fn;
  Loaded *next;
};
Loaded *loaded;
int n_loaded;
/* Held across a compile: two plans wanting one kernel compile it once. */
pthread_mutex_t loaded_mu = PTHREAD_MUTEX_INITIALIZER;

/* What the prepare hook hands to each call: the kernel, the launch
 * arguments but the pointers, and the shapes they were planned for. */
struct State {
  cudaKernel_t fn;
  fgc_fused_layout lay;
  fgc_fused_args args;
  int n_in;
  fg_kbuf in[FG_FUSED_MAX_INPUTS]; /* dtype, rank, dims, layout; no data */
  fg_kbuf out;
};

int fail_cuda(const fg_kctx *ctx, const char *what, cudaError_t e) {
  return fgk_fail(ctx, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

/* Loads a CUBIN and finds the entry point. */
cudaError_t load(const void *cubin, cudaLibrary_t *lib, cudaKernel_t *fn) {
  cudaError_t e = cudaLibraryLoadData(lib, cubin, NULL, NULL, 0, NULL, NULL, 0);
  if (e != cudaSuccess) return e;
  e = cudaLibraryGetKernel(fn, *lib, FGC_FUSED_ENTRY);
  if (e != cudaSuccess) (void)cudaLibraryUnload(*lib);
  return e;
}

/* The kernel of src for sm_<arch>: loaded already, or from the disk cache,
 * or compiled now. */
int get_kernel(const fg_kctx *ctx, const char *src, int arch, cudaKernel_t *fn) {
  pthread_mutex_lock(&loaded_mu);
  for (Loaded *l = loaded; l; l = l->next)
    if (l->arch == arch && strcmp(l->src, src) == 0) {
      *fn = l->fn;
      pthread_mutex_unlock(&loaded_mu);
      return 0;
    }
  int rc = -1;
  void *cubin = NULL;
  size_t size = 0;
  int origin = 0;
  cudaLibrary_t lib = NULL;
  Loaded *l = (Loaded *)calloc(1, sizeof *l);
  char *copy = strdup(src);
  if (!l || !copy) {
    fgk_fail(ctx, "out of memory for a compiled kernel");
  } else if (fgc_nvrtc_cubin(src, arch, &cubin, &size, &origin, ctx->err, ctx->err_size) == 0) {
    cudaError_t e = load(cubin, &lib, fn);
    if (e != cudaSuccess && origin == FGC_NVRTC_FROM_DISK) {
      /* A cached file the driver refuses (its checksum held, so it was
       * written so): replace it with a fresh compile rather than fail. */
      (void)cudaGetLastError();
      free(cubin);
      cubin = NULL;
      fgc_nvrtc_cache_drop(src, arch);
      if (fgc_nvrtc_cubin(src, arch, &cubin, &size, &origin, ctx->err, ctx->err_size) == 0)
        e = load(cubin, &lib, fn);
    }
    if (cubin && e != cudaSuccess) {
      (void)cudaGetLastError();
      fail_cuda(ctx, "loading the compiled fused kernel", e);
    } else if (cubin) {
      l->src = copy;
      l->arch = arch;
      l->lib = lib;
      l->fn = *fn;
      l->next = loaded;
      loaded = l;
      n_loaded++;
      copy = NULL;
      l = NULL;
      rc = 0;
    }
  }
  free(cubin);
  free(copy);
  free(l);
  pthread_mutex_unlock(&loaded_mu);
  return rc;
}

/* sm_<major><minor> of the current device. */
int device_arch(const fg_kctx *ctx, int *arch) {
  int dev = 0, major = 0, minor = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return fail_cuda(ctx, "reading the device's compute capability", e);
  }
  *arch = major * 10 + minor;
  return 0;
}

int same_shape(const fg_kbuf *a, const fg_kbuf *b) {
  if (a->dtype != b->dtype || a->rank != b->rank || a->layout != b->layout) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

/* The state still describes the call (a plan's shapes are fixed; a
 * caller that passes another's state gets a kernel of its own). */
int state_fits(const State *s, const fg_kctx *ctx) {
  if (s->n_in != ctx->n_in || ctx->n_out < 1 || !same_shape(&s->out, &ctx->out[0])) return 0;
  for (int k = 0; k < s->n_in; k++)
    if (!same_shape(&s->in[k], &ctx->in[k])) return 0;
  return 1;
}

} // namespace

extern "C" int fgc_fused_prepare(const fg_kctx *ctx, int threads, void **state) {
  (void)threads;
  *state = NULL;
  if (!ctx || !ctx->p || !ctx->out || ctx->n_out < 1 || (ctx->n_in > 0 && !ctx->in))
    return fgk_fail(ctx, "kernel called without its context");
  State *s = (State *)calloc(1, sizeof *s);
  if (!s) return fgk_fail(ctx, "out of memory for the fused kernel's state");
  fgc_fused_layout lay;
  char *src = NULL;
  int arch = 0;
  int rc = fgc_fused_plan(&ctx->p->fused, ctx->in, ctx->n_in, ctx->out, ctx->n_out, &lay, &s->args,
                          ctx->err, ctx->err_size);
  if (rc == 0) rc = device_arch(ctx, &arch);
  if (rc == 0 && !(src = fgc_fused_source(&ctx->p->fused, &lay)))
    rc = fgk_fail(ctx, "out of memory for the fused kernel's source");
  if (rc == 0) rc = get_kernel(ctx, src, arch, &s->fn);
  free(src);
  if (rc != 0) {
    free(s);
    return -1;
  }
  s->lay = lay;
  s->n_in = ctx->n_in;
  for (int k = 0; k < ctx->n_in; k++) {
    s->in[k] = ctx->in[k];
    s->in[k].data = NULL;
  }
  s->out = ctx->out[0];
  s->out.data = NULL;
  *state = s;
  return 0;
}

extern "C" void fgc_fused_release(void *state) { free(state); }

extern "C" int fgc_fused_loaded(void) {
  pthread_mutex_lock(&loaded_mu);
  const int n = n_loaded;
  pthread_mutex_unlock(&loaded_mu);
  return n;
}

extern "C" int fgc_fused_elementwise(const fg_kctx *ctx) {
  if (fgc_check(ctx, 0, 1) != 0) return -1;
  const State *s = (const State *)ctx->state;
  void *own = NULL;
  if (!s || !state_fits(s, ctx)) {
    if (fgc_fused_prepare(ctx, 1, &own) != 0) return -1;
    s = (const State *)own;
  }
  fgc_fused_args a = s->args;
  a.out = ctx->out[0].data;
  for (int k = 0; k < s->n_in; k++)
    a.in[k] = ctx->in[k].data;
  a.vec = fgc_fused_vec_ok(&s->lay, &a);
  int rc = 0;
  if (a.n > 0) {
    void *params[1] = {&a};
    const cudaError_t e =
        cudaLaunchKernel((const void *)s->fn, dim3(fgc_blocks(a.n, FGC_THREADS * 4)),
                         dim3(FGC_THREADS), params, 0, fgc_stream(ctx));
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      rc = fail_cuda(ctx, "launching the fused kernel", e);
    }
  }
  fgc_fused_release(own);
  return rc;
}

/* The registry's rows (common.cuh): one kernel for both dtypes. */
int fgc_fused_f32(const fg_kctx *ctx) { return fgc_fused_elementwise(ctx); }
int fgc_fused_f64(const fg_kctx *ctx) { return fgc_fused_elementwise(ctx); }
