/* check_numerics on the GPU (executor/cuda/run.c): NaN and Inf counts
 * of a node's floating-point output, read by the host after the node. The
 * counts are integers added with atomics, so they are exact whatever the
 * order. */
#include "kernels/cuda/common.cuh"

/* U: the float's bits; EXP: its exponent mask; MANT: its mantissa mask. An
 * all-ones exponent is Inf with a zero mantissa, else NaN. */
template <typename U, U EXP, U MANT>
__global__ void nonfinite_kernel(const U *x, int64_t n, unsigned long long *counts) {
  unsigned long long nan = 0, inf = 0;
  FGC_GRID_STRIDE(i, n) {
    const U u = x[i];
    if ((u & EXP) == EXP) {
      if (u & MANT)
        nan++;
      else
        inf++;
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    nan += __shfl_down_sync(0xffffffffu, nan, off);
    inf += __shfl_down_sync(0xffffffffu, inf, off);
  }
  if ((threadIdx.x & 31) == 0) {
    if (nan) atomicAdd(&counts[0], nan);
    if (inf) atomicAdd(&counts[1], inf);
  }
}

extern "C" int fg_cuda_count_nonfinite(const void *data, long long n, int dtype,
                                       unsigned long long *counts, void *stream) {
  if (dtype != FG_F32 && dtype != FG_F64) return -1;
  if (n <= 0) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  const unsigned blocks = fgc_blocks(n, FGC_THREADS * 4);
  if (dtype == FG_F32)
    nonfinite_kernel<uint32_t, 0x7f800000u, 0x007fffffu>
        <<<blocks, FGC_THREADS, 0, s>>>((const uint32_t *)data, n, counts);
  else
    nonfinite_kernel<uint64_t, 0x7ff0000000000000ull, 0x000fffffffffffffull>
        <<<blocks, FGC_THREADS, 0, s>>>((const uint64_t *)data, n, counts);
  return cudaPeekAtLastError() == cudaSuccess ? 0 : -1;
}
