/* Convolution on the GPU through cuDNN: conv2d (forward), conv2d_grad_input
 * and conv_transpose2d (backward data), conv2d_grad_weight (backward
 * filter), f32 and f64, NCHW, with the roles of kernels/cpu/conv.c (one
 * forward convolution x * w -> y read in four directions).
 *
 * The algorithm is cuDNN's heuristic choice (cudnnGet*Algorithm_v7): the
 * first one it ranks that succeeds and whose workspace fits the stream's
 * scratch (fg_kcuda.scratch), so nothing is allocated per call; when none
 * fits, the kernel fails naming the bytes the best one needs. TF32 follows
 * fg_kcuda.allow_tf32.
 *
 * cuDNN pads symmetrically. Asymmetric pads (explicit, or 'same' with an
 * even kernel) run on a zero-padded copy of x in the scratch (forward,
 * weight gradient), or compute the padded x's gradient there and crop it
 * (backward data).
 *
 * cuDNN handles are per device, made on first use and kept for the
 * process; a mutex serialises binding one to the call's stream and
 * enqueueing. The descriptors are made per call (host only, no device
 * memory).
 *
 * fused_conv2d and fused_conv2d_add (the conv_epilogue pass's) run conv2d's
 * forward exactly, bias included, then one kernel for the epilogue: y + z,
 * then the relu kernel's x < 0 ? 0 : x, so the bits are those of conv2d ->
 * add -> relu here. cudnnConvolutionBiasActivationForward would fuse
 * further, but its relu is max(x, 0) (NaN becomes 0) and it restricts the
 * algorithms (identity only with IMPLICIT_PRECOMP_GEMM), so the
 * convolution's bits would depend on the activation. */
#include <cudnn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/common.cuh"

enum { M_FWD, M_BWD_DATA, M_BWD_WEIGHTS, M_TRANSPOSE };
/* The op a forward convolution computes: conv2d, fused_conv2d (x, w, [b])
 * or fused_conv2d_add (x, w, z, [b]). */
enum { E_PLAIN, E_FUSED, E_FUSED_ADD };

namespace {

struct geo {
  int n, c, h, w, o, kh, kw, oh, ow, g;
  int ph, pw;          /* symmetric pads given to cuDNN */
  int hp, wp;          /* x's height and width as cuDNN sees them (padded when asymmetric) */
  int top, left, asym; /* asymmetric: where x sits in its padded copy */
  const fg_conv_params *p;
};

struct bufs {
  fg_kbuf *x, *w, *y;
  const fg_kbuf *bias;
  const fg_kbuf *z; /* fused_conv2d_add's residual */
  /* The fused ops' activation: relu, or clip to [lo, hi] */
  int relu, clip;
  double lo, hi;
  const fg_conv_params *p;
};

pthread_mutex_t handle_lock = PTHREAD_MUTEX_INITIALIZER;
cudnnHandle_t handles[64];

bufs bufs_of(const fg_kctx *ctx, int m, int e = E_PLAIN) {
  fg_kbuf *in = (fg_kbuf *)ctx->in, *out = ctx->out;
  const fg_kbuf *b = ctx->n_in > 2 ? &in[2] : NULL;
  const fg_conv_params *p = &ctx->p->conv;
  if (e != E_PLAIN) {
    const int bi = e == E_FUSED_ADD ? 3 : 2;
    const fg_fused_conv_params *fp = &ctx->p->fused_conv;
    return bufs{&in[0],
                &in[1],
                out,
                ctx->n_in > bi ? &in[bi] : NULL,
                e == E_FUSED_ADD ? &in[2] : NULL,
                fp->activation == FG_ACTIVATION_RELU,
                fp->activation == FG_ACTIVATION_CLIP,
                fp->clip_min,
                fp->clip_max,
                &fp->conv};
  }
  switch (m) {
  case M_FWD: return bufs{&in[0], &in[1], out, b, NULL, 0, 0, 0, 0, p};
  case M_BWD_DATA: return bufs{out, &in[1], &in[0], NULL, NULL, 0, 0, 0, 0, p};
  case M_BWD_WEIGHTS: return bufs{&in[0], out, &in[1], NULL, NULL, 0, 0, 0, 0, p};
  default: return bufs{out, &in[1], &in[0], b, NULL, 0, 0, 0, 0, p};
  }
}

geo geo_of(const bufs &b) {
  geo G;
  G.p = b.p;
  G.n = (int)b.x->dims[0], G.c = (int)b.x->dims[1], G.h = (int)b.x->dims[2],
  G.w = (int)b.x->dims[3];
  G.o = (int)b.y->dims[1], G.oh = (int)b.y->dims[2], G.ow = (int)b.y->dims[3];
  G.kh = (int)b.w->dims[2], G.kw = (int)b.w->dims[3];
  G.g = (int)G.p->groups;
  const int64_t *pad = G.p->pad;
  G.asym = pad[0] != pad[2] || pad[1] != pad[3];
  G.top = G.asym ? (int)pad[0] : 0, G.left = G.asym ? (int)pad[1] : 0;
  G.ph = G.asym ? 0 : (int)pad[0], G.pw = G.asym ? 0 : (int)pad[1];
  G.hp = G.asym ? (int)(G.h + pad[0] + pad[2]) : G.h;
  G.wp = G.asym ? (int)(G.w + pad[1] + pad[3]) : G.w;
  return G;
}

/* dst [n, c, hp, wp] = src [n, c, h, w] placed at (top, left), zeros
 * around it; or (crop) dst [n, c, h, w] = that window of src. */
template <typename T>
__global__ void pad_kernel(T *dst, const T *src, int64_t planes, int h, int w, int hp, int wp,
                           int top, int left, int crop) {
  const int64_t total = planes * (crop ? (int64_t)h * w : (int64_t)hp * wp);
  FGC_GRID_STRIDE(i, total) {
    if (crop) {
      const int64_t pl = i / ((int64_t)h * w), r = i % ((int64_t)h * w);
      const int y = (int)(r / w), x = (int)(r % w);
      dst[i] = src[(pl * hp + y + top) * wp + x + left];
    } else {
      const int64_t pl = i / ((int64_t)hp * wp), r = i % ((int64_t)hp * wp);
      const int y = (int)(r / wp) - top, x = (int)(r % wp) - left;
      dst[i] = y >= 0 && y < h && x >= 0 && x < w ? src[(pl * h + y) * w + x] : (T)0;
    }
  }
}

struct descs {
  cudnnTensorDescriptor_t x, y, b;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
};

void descs_free(descs &d) {
  if (d.x) cudnnDestroyTensorDescriptor(d.x);
  if (d.y) cudnnDestroyTensorDescriptor(d.y);
  if (d.b) cudnnDestroyTensorDescriptor(d.b);
  if (d.w) cudnnDestroyFilterDescriptor(d.w);
  if (d.conv) cudnnDestroyConvolutionDescriptor(d.conv);
}

cudnnStatus_t descs_init(descs &d, const geo &G, cudnnDataType_t dt, int allow_tf32) {
  cudnnStatus_t s = cudnnCreateTensorDescriptor(&d.x);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateTensorDescriptor(&d.y);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateTensorDescriptor(&d.b);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateFilterDescriptor(&d.w);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateConvolutionDescriptor(&d.conv);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NCHW, dt, G.n, G.c, G.hp, G.wp);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NCHW, dt, G.n, G.o, G.oh, G.ow);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetFilter4dDescriptor(d.w, dt, CUDNN_TENSOR_NCHW, G.o, G.c / G.g, G.kh, G.kw);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetConvolution2dDescriptor(d.conv, G.ph, G.pw, (int)G.p->stride[0],
                                        (int)G.p->stride[1], (int)G.p->dilation[0],
                                        (int)G.p->dilation[1], CUDNN_CROSS_CORRELATION, dt);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetConvolutionGroupCount(d.conv, G.g);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetConvolutionMathType(
        d.conv, dt == CUDNN_DATA_FLOAT && allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
  return s;
}

int cudnn_fail(const fg_kctx *ctx, const char *what, cudnnStatus_t s) {
  return fgk_fail(ctx, "cuDNN: %s: %s", what, cudnnGetErrorString(s));
}

/* The device's handle, made once; the caller holds handle_lock. */
cudnnHandle_t handle_for_device(const fg_kctx *ctx) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
    fgk_fail(ctx, "cuDNN: no current CUDA device");
    return NULL;
  }
  if (!handles[dev]) {
    cudnnStatus_t s = cudnnCreate(&handles[dev]);
    if (s != CUDNN_STATUS_SUCCESS) {
      handles[dev] = NULL;
      cudnn_fail(ctx, "creating a handle", s);
      return NULL;
    }
  }
  return handles[dev];
}

size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

/* cuDNN's heuristics for each direction, told apart by the Perf type. */
cudnnStatus_t heuristics(cudnnHandle_t h, const descs &d, cudnnConvolutionFwdAlgoPerf_t *perf,
                         int cap, int *n) {
  return cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, cap, n, perf);
}
cudnnStatus_t heuristics(cudnnHandle_t h, const descs &d, cudnnConvolutionBwdFilterAlgoPerf_t *perf,
                         int cap, int *n) {
  return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, cap, n, perf);
}
cudnnStatus_t heuristics(cudnnHandle_t h, const descs &d, cudnnConvolutionBwdDataAlgoPerf_t *perf,
                         int cap, int *n) {
  return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, cap, n, perf);
}

/* Fills perf with the heuristics' algorithms (`what` names them in a
 * failure) and returns the first that succeeds within `room` bytes of
 * workspace; -1 (after failing ctx) when none fits. */
template <typename Perf, int N>
int pick(const fg_kctx *ctx, cudnnHandle_t h, const descs &d, Perf (&perf)[N], const char *what,
         size_t room, size_t *ws) {
  int n = 0;
  cudnnStatus_t s = heuristics(h, d, perf, N, &n);
  if (s != CUDNN_STATUS_SUCCESS) return cudnn_fail(ctx, what, s);
  size_t need = 0;
  for (int i = 0; i < n; i++) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (perf[i].memory <= room) {
      *ws = perf[i].memory;
      return i;
    }
    if (!need) need = perf[i].memory;
  }
  if (!need) return fgk_fail(ctx, "cuDNN: no algorithm for this convolution");
  return fgk_fail(ctx, "cuDNN: the convolution needs %zu bytes of CUDA scratch, the stream has %zu",
                  need, room);
}

/* The algorithms found so far, per direction, shape, type, math and
 * workspace room (the caller holds handle_lock). A miss outside stream
 * capture times cuDNN's candidates once on the call's own buffers
 * (cudnnFind*AlgorithmEx: its outputs are this call's outputs, written
 * again below) and keeps the fastest that fits; cuDNN's legacy heuristics
 * ranked algorithms for these shapes on an H200 that ran ResNet-18's
 * convolutions about ten times slower than the fastest. Under capture
 * (a CUDA Graph) the heuristics' choice is used and not kept. */
struct algo_key {
  /* dev: the choice and its workspace are the device's (two GPU models in
   * one process rank algorithms differently). */
  int dev, m, dt, math, n, c, hp, wp, o, kh, kw, oh, ow, g, ph, pw, sh, sw, dh, dw;
  size_t room;
};
struct algo_entry {
  algo_key key;
  int algo;
  size_t ws;
};
algo_entry algo_cache[512];
int n_algo_cache;

algo_key key_of(int m, const geo &G, cudnnDataType_t dt, int math, size_t room) {
  algo_key k;
  memset(&k, 0, sizeof k);
  if (cudaGetDevice(&k.dev) != cudaSuccess) {
    (void)cudaGetLastError();
    k.dev = -1;
  }
  k.m = m, k.dt = (int)dt, k.math = math, k.n = G.n, k.c = G.c, k.hp = G.hp, k.wp = G.wp;
  k.o = G.o, k.kh = G.kh, k.kw = G.kw, k.oh = G.oh, k.ow = G.ow, k.g = G.g, k.ph = G.ph,
  k.pw = G.pw;
  k.sh = (int)G.p->stride[0], k.sw = (int)G.p->stride[1];
  k.dh = (int)G.p->dilation[0], k.dw = (int)G.p->dilation[1], k.room = room;
  return k;
}

const algo_entry *cached_algo(const algo_key &k) {
  for (int i = 0; i < n_algo_cache; i++)
    if (!memcmp(&algo_cache[i].key, &k, sizeof k)) return &algo_cache[i];
  return NULL;
}

/* Times the candidates of direction m and returns the fastest that fits
 * `room` (its index in perf), or -1 when the search fails or none fits. */
template <typename Perf, int N>
int search(cudnnHandle_t h, const descs &d, const bufs &b, int m, void *xp, void *ws_base,
           size_t room, Perf (&perf)[N]) {
  int n = 0;
  cudnnStatus_t s;
  if (m == M_FWD)
    s = cudnnFindConvolutionForwardAlgorithmEx(h, d.x, xp, d.w, b.w->data, d.conv, d.y, b.y->data,
                                               N, &n, (cudnnConvolutionFwdAlgoPerf_t *)perf,
                                               ws_base, room);
  else if (m == M_BWD_WEIGHTS)
    s = cudnnFindConvolutionBackwardFilterAlgorithmEx(
        h, d.x, xp, d.y, b.y->data, d.conv, d.w, b.w->data, N, &n,
        (cudnnConvolutionBwdFilterAlgoPerf_t *)perf, ws_base, room);
  else
    s = cudnnFindConvolutionBackwardDataAlgorithmEx(
        h, d.w, b.w->data, d.y, b.y->data, d.conv, d.x, xp, N, &n,
        (cudnnConvolutionBwdDataAlgoPerf_t *)perf, ws_base, room);
  if (s != CUDNN_STATUS_SUCCESS) return -1;
  for (int i = 0; i < n; i++)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= room) return i;
  return -1;
}

/* The algorithm and workspace for this call: cached, searched, or the
 * heuristics' (pick). 0, or -1 after failing ctx. */
template <typename Perf, int N>
int choose(const fg_kctx *ctx, cudnnHandle_t h, const descs &d, const geo &G, int m,
           cudnnDataType_t dt, void *xp, void *ws_base, size_t room, const char *what, int *algo,
           size_t *ws) {
  Perf perf[N];
  const int math = dt == CUDNN_DATA_FLOAT && ctx->cuda->allow_tf32;
  const algo_key key = key_of(m, G, dt, math, room);
  const algo_entry *e = cached_algo(key);
  if (e) {
    *algo = e->algo, *ws = e->ws;
    return 0;
  }
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(fgc_stream(ctx), &cap) != cudaSuccess) {
    /* Unknown: no timed search (it must not run inside a capture), and
     * the error is cleared so that no later kernel reports it. */
    (void)cudaGetLastError();
    cap = cudaStreamCaptureStatusActive;
  }
  const bufs b = bufs_of(ctx, m);
  int k = cap == cudaStreamCaptureStatusNone ? search(h, d, b, m, xp, ws_base, room, perf) : -1;
  if (k < 0 && (k = pick(ctx, h, d, perf, what, room, ws)) < 0) return -1;
  *algo = (int)perf[k].algo, *ws = perf[k].memory;
  if (cap == cudaStreamCaptureStatusNone &&
      n_algo_cache < (int)(sizeof algo_cache / sizeof *algo_cache))
    algo_cache[n_algo_cache++] = algo_entry{key, *algo, *ws};
  return 0;
}

template <typename T>
int run_conv(const fg_kctx *ctx, int m, const bufs &b, cudnnHandle_t h, const descs &d,
             const geo &G, void *xp, void *ws_base, size_t room) {
  const T one = 1, zero = 0;
  cudnnStatus_t s;
  size_t ws = 0;
  const cudnnDataType_t dt = sizeof(T) == 8 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  int algo = 0;
  if (m == M_FWD) {
    if (choose<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT>(
            ctx, h, d, G, m, dt, xp, ws_base, room, "forward heuristics", &algo, &ws) != 0)
      return -1;
    s = cudnnConvolutionForward(h, &one, d.x, xp, d.w, b.w->data, d.conv,
                                (cudnnConvolutionFwdAlgo_t)algo, ws_base, ws, &zero, d.y,
                                b.y->data);
    if (s == CUDNN_STATUS_SUCCESS && b.bias)
      s = cudnnAddTensor(h, &one, d.b, b.bias->data, &one, d.y, b.y->data);
    return s == CUDNN_STATUS_SUCCESS ? 0 : cudnn_fail(ctx, "forward", s);
  }
  if (m == M_BWD_WEIGHTS) {
    if (choose<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
            ctx, h, d, G, m, dt, xp, ws_base, room, "backward filter heuristics", &algo, &ws) != 0)
      return -1;
    s = cudnnConvolutionBackwardFilter(h, &one, d.x, xp, d.y, b.y->data, d.conv,
                                       (cudnnConvolutionBwdFilterAlgo_t)algo, ws_base, ws, &zero,
                                       d.w, b.w->data);
    return s == CUDNN_STATUS_SUCCESS ? 0 : cudnn_fail(ctx, "backward filter", s);
  }
  if (choose<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT>(
          ctx, h, d, G, m, dt, xp, ws_base, room, "backward data heuristics", &algo, &ws) != 0)
    return -1;
  s = cudnnConvolutionBackwardData(h, &one, d.w, b.w->data, d.y, b.y->data, d.conv,
                                   (cudnnConvolutionBwdDataAlgo_t)algo, ws_base, ws, &zero, d.x,
                                   xp);
  return s == CUDNN_STATUS_SUCCESS ? 0 : cudnn_fail(ctx, "backward data", s);
}

/* The fused ops' epilogue over y's n elements: y + z (z may be NULL),
 * then x < 0 ? 0 : x when relu is set, or clip's NaN-keeping
 * min(max(x, lo), hi) when clip is, as the add, relu and clip kernels. */
template <typename T>
__global__ void epilogue_kernel(T *y, const T *z, int64_t n, int relu, int clip, T lo, T hi) {
  FGC_GRID_STRIDE(i, n) {
    T v = y[i];
    if (z) v = v + z[i];
    if (clip && v == v) v = v < lo ? lo : (v > hi ? hi : v);
    y[i] = relu && v < (T)0 ? (T)0 : v;
  }
}

template <typename T> int epilogue(const fg_kctx *ctx, const bufs &b) {
  const int64_t n = fgk_numel(b.y);
  if (n == 0 || (!b.z && !b.relu && !b.clip)) return 0;
  epilogue_kernel<T><<<fgc_blocks(n, FGC_THREADS), FGC_THREADS, 0, fgc_stream(ctx)>>>(
      (T *)b.y->data, b.z ? (const T *)b.z->data : NULL, n, b.relu, b.clip, (T)b.lo, (T)b.hi);
  return fgc_launched(ctx, "the fused convolution's epilogue");
}

template <typename T> int conv(const fg_kctx *ctx, int m, int e = E_PLAIN) {
  if (!ctx->cuda) return fgk_fail(ctx, "called without a CUDA context");
  const bufs b = bufs_of(ctx, m, e);
  const geo G = geo_of(b);
  int64_t ex = fgk_numel(b.x), ey = fgk_numel(b.y);
  if (ex == 0 || ey == 0) {
    /* Nothing to convolve: zeros (plus the bias, which cuDNN adds below
     * only when there is a convolution; empty tensors are rare enough to
     * refuse the bias case). */
    if (b.bias && fgk_numel(ctx->out) > 0)
      return fgk_fail(ctx, "an empty input with a bias is not supported on the GPU");
    if (fgc_fill_bits(ctx, ctx->out->data, fgk_numel(ctx->out), sizeof(T), 0) != 0) return -1;
    return epilogue<T>(ctx, b);
  }
  const cudnnDataType_t dt = sizeof(T) == 8 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  /* The scratch: x's padded copy first (asymmetric pads), then the
   * workspace. */
  const size_t pad_bytes = G.asym ? align256((size_t)G.n * G.c * G.hp * G.wp * sizeof(T)) : 0;
  const size_t have = ctx->cuda->scratch ? ctx->cuda->scratch_bytes : 0;
  if (pad_bytes > have)
    return fgk_fail(ctx,
                    "asymmetric pads need %zu bytes of CUDA scratch for a padded copy of x, the "
                    "stream has %zu",
                    pad_bytes, have);
  char *scratch = (char *)ctx->cuda->scratch;
  void *xp = G.asym ? (void *)scratch : b.x->data;
  const int64_t planes = (int64_t)G.n * G.c;
  cudaStream_t st = fgc_stream(ctx);
  if (G.asym && m != M_BWD_DATA && m != M_TRANSPOSE) {
    const int64_t total = planes * G.hp * G.wp;
    pad_kernel<T><<<fgc_blocks(total, FGC_THREADS), FGC_THREADS, 0, st>>>(
        (T *)xp, (const T *)b.x->data, planes, G.h, G.w, G.hp, G.wp, G.top, G.left, 0);
    if (fgc_launched(ctx, "padding x") != 0) return -1;
  }
  descs d = {};
  cudnnStatus_t s = descs_init(d, G, dt, ctx->cuda->allow_tf32);
  if (s == CUDNN_STATUS_SUCCESS && (b.bias))
    s = cudnnSetTensor4dDescriptor(d.b, CUDNN_TENSOR_NCHW, dt, 1, (int)b.bias->dims[0], 1, 1);
  if (s != CUDNN_STATUS_SUCCESS) {
    descs_free(d);
    return cudnn_fail(ctx, "descriptors", s);
  }
  pthread_mutex_lock(&handle_lock);
  cudnnHandle_t h = handle_for_device(ctx);
  int rc = -1;
  if (h) {
    s = cudnnSetStream(h, st);
    if (s != CUDNN_STATUS_SUCCESS)
      rc = cudnn_fail(ctx, "binding the stream", s);
    else
      rc = run_conv<T>(ctx, m, b, h, d, G, xp, scratch + pad_bytes, have - pad_bytes);
    if (rc == 0 && m == M_TRANSPOSE && b.bias) {
      /* conv_transpose2d's bias, on its output (x's role). */
      cudnnTensorDescriptor_t xd = NULL;
      const T one = 1;
      s = cudnnCreateTensorDescriptor(&xd);
      if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, dt, G.n, G.c, G.hp, G.wp);
      if (s == CUDNN_STATUS_SUCCESS) s = cudnnAddTensor(h, &one, d.b, b.bias->data, &one, xd, xp);
      if (xd) cudnnDestroyTensorDescriptor(xd);
      if (s != CUDNN_STATUS_SUCCESS) rc = cudnn_fail(ctx, "adding the bias", s);
    }
  }
  pthread_mutex_unlock(&handle_lock);
  descs_free(d);
  if (rc != 0) return -1;
  if (G.asym && (m == M_BWD_DATA || m == M_TRANSPOSE)) {
    const int64_t total = planes * G.h * G.w;
    pad_kernel<T><<<fgc_blocks(total, FGC_THREADS), FGC_THREADS, 0, st>>>(
        (T *)b.x->data, (const T *)xp, planes, G.h, G.w, G.hp, G.wp, G.top, G.left, 1);
    return fgc_launched(ctx, "cropping dx");
  }
  return epilogue<T>(ctx, b);
}

} // namespace

#define FGC_CONV(name, mode)                                                                       \
  int name##_f32(const fg_kctx *ctx) { return conv<float>(ctx, mode); }                            \
  int name##_f64(const fg_kctx *ctx) { return conv<double>(ctx, mode); }

FGC_CONV(fgc_conv2d, M_FWD)
FGC_CONV(fgc_conv2d_grad_input, M_BWD_DATA)
FGC_CONV(fgc_conv2d_grad_weight, M_BWD_WEIGHTS)
FGC_CONV(fgc_conv_transpose2d, M_TRANSPOSE)

int fgc_fused_conv2d_f32(const fg_kctx *ctx) { return conv<float>(ctx, M_FWD, E_FUSED); }
int fgc_fused_conv2d_f64(const fg_kctx *ctx) { return conv<double>(ctx, M_FWD, E_FUSED); }
int fgc_fused_conv2d_add_f32(const fg_kctx *ctx) { return conv<float>(ctx, M_FWD, E_FUSED_ADD); }
int fgc_fused_conv2d_add_f64(const fg_kctx *ctx) { return conv<double>(ctx, M_FWD, E_FUSED_ADD); }
