/* Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers:
 * as easy as 1, 2, 3", SC 2011), the counter-based generator of curand and
 * JAX, and the conversions of its words to uniform and normal values that
 * the random ops' CPU (kernels/cpu/random.c) and CUDA (kernels/cuda/
 * random.cu) kernels share, so that both write the same values.
 *
 * A counter-based generator is a keyed bijection of a 128-bit counter: the
 * value at element i is a pure function of (key, counter(i)), so any
 * thread or GPU block may compute any element without a shared state, and
 * results never depend on how the work is split.
 *
 * The random ops use it as follows (their key and counter layout):
 *   key = (seed bits 0..31, seed bits 32..63)
 *   ctr = (block bits 0..31, block bits 32..63, stream, draw)
 * where `block` numbers the groups of elements that one call serves (4 f32
 * uniforms, 2 f64 uniforms, ...), `stream` tells nodes with the same seed
 * apart, and `draw` is 0 except for truncated_normal's redraws.
 *
 * Valid C and CUDA C++: static inline functions, __host__ __device__ under
 * nvcc. */
#ifndef FG_PHILOX_H
#define FG_PHILOX_H

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define FG_PHILOX_FN static inline __host__ __device__
#else
#define FG_PHILOX_FN static inline
#endif

/* The round multipliers and the key schedule's Weyl increments (the
 * golden ratio and sqrt(3) - 1 in 32-bit fixed point), as published. */
#define FG_PHILOX_M0 0xD2511F53u
#define FG_PHILOX_M1 0xCD9E8D57u
#define FG_PHILOX_W0 0x9E3779B9u
#define FG_PHILOX_W1 0xBB67AE85u

typedef struct fg_philox4 {
  uint32_t v[4];
} fg_philox4;

/* One round: two 32x32 -> 64-bit products, their halves mixed with the
 * other two words and the round key. */
FG_PHILOX_FN void fg_philox_round(uint32_t *c, uint32_t k0, uint32_t k1) {
  const uint64_t p0 = (uint64_t)FG_PHILOX_M0 * c[0];
  const uint64_t p1 = (uint64_t)FG_PHILOX_M1 * c[2];
  const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
  const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
  const uint32_t c1 = c[1], c3 = c[3];
  c[0] = hi1 ^ c1 ^ k0;
  c[1] = lo1;
  c[2] = hi0 ^ c3 ^ k1;
  c[3] = lo0;
}

/* Philox4x32 with 10 rounds; the key is bumped between rounds. */
FG_PHILOX_FN fg_philox4 fg_philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                         uint32_t k0, uint32_t k1) {
  fg_philox4 r;
  r.v[0] = c0;
  r.v[1] = c1;
  r.v[2] = c2;
  r.v[3] = c3;
  for (int i = 0; i < 10; i++) {
    if (i > 0) {
      k0 += FG_PHILOX_W0;
      k1 += FG_PHILOX_W1;
    }
    fg_philox_round(r.v, k0, k1);
  }
  return r;
}

/* The call for (seed, stream, draw) at counter block `block`. */
FG_PHILOX_FN fg_philox4 fg_philox_block(uint64_t seed, uint32_t stream, uint32_t draw,
                                        uint64_t block) {
  return fg_philox4x32_10((uint32_t)block, (uint32_t)(block >> 32), stream, draw, (uint32_t)seed,
                          (uint32_t)(seed >> 32));
}

/* ---- words to uniform values ---------------------------------------------
 * All exact: an integer times a power of two. */

/* [0, 1) with 24 bits (every value a float): the word's top 24 bits. */
FG_PHILOX_FN float fg_philox_u01_f32(uint32_t x) { return (float)(x >> 8) * 0x1.0p-24f; }

/* [0, 1) with 53 bits from two words (the top 27 of a, the top 26 of b),
 * as the Mersenne Twister's genrand_res53. */
FG_PHILOX_FN double fg_philox_u01_f64(uint32_t a, uint32_t b) {
  return (double)(((uint64_t)(a >> 5) << 26) | (b >> 6)) * 0x1.0p-53;
}

/* (0, 1], never 0, for logarithms (Box-Muller): x * 2^-32 + 2^-33, as
 * curand's _curand_uniform, here evaluated in double where it is exact
 * (it lies in (0, 1) strictly). */
FG_PHILOX_FN double fg_philox_u01_open(uint32_t x) { return (double)x * 0x1.0p-32 + 0x1.0p-33; }

/* (0, 1) with 53 bits from two words, never 0: the genrand_res53 value
 * plus half its step, exact. */
FG_PHILOX_FN double fg_philox_u01_open64(uint32_t a, uint32_t b) {
  return fg_philox_u01_f64(a, b) + 0x1.0p-54;
}

/* ---- affine maps and Box-Muller ------------------------------------------
 * nvcc contracts a * b + c into one fma by default, which rounds once where
 * the CPU rounds twice; the device path spells each operation out so both
 * sides round alike. */
FG_PHILOX_FN double fg_philox_axpb(double a, double x, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(__dmul_rn(a, x), b);
#else
  return a * x + b;
#endif
}

/* Two independent standard normals from u1 in (0, 1] and u2 in [0, 1]:
 * r = sqrt(-2 ln u1), z0 = r cos(2 pi u2), z1 = r sin(2 pi u2) (Box and
 * Muller 1958). The device's log, sin and cos are within 1-2 ulp of the
 * host's, so f64 normals may differ from the CPU's in the last bits; f32
 * normals, rounded from these doubles, almost never do. */
FG_PHILOX_FN void fg_philox_box_muller(double u1, double u2, double *z0, double *z1) {
  const double r = sqrt(-2.0 * log(u1));
#if defined(__CUDA_ARCH__)
  const double t = __dmul_rn(6.283185307179586476925, u2);
#else
  const double t = 6.283185307179586476925 * u2;
#endif
  *z0 = r * cos(t);
  *z1 = r * sin(t);
}

/* ---- the random ops' values, per counter block -----------------------------
 * Element i of random_uniform and random_normal comes from block i / 4 (f32:
 * one word each) or i / 2 (f64: two words each) with draw 0; element i of
 * truncated_normal from blocks i with draws 0, 1, 2, ... The functions
 * write a whole block; the kernels keep the elements that exist. */

/* random_uniform: low + (high - low) * u, u in [0, 1), in double, then
 * rounded to the output type; that rounding may give `high` itself when
 * the range is not exactly representable (as with TF's and torch's). */
FG_PHILOX_FN void fg_rand_uniform_f32(uint64_t seed, uint32_t stream, uint64_t block, double low,
                                      double high, float out[4]) {
  const fg_philox4 w = fg_philox_block(seed, stream, 0, block);
  for (int k = 0; k < 4; k++)
    out[k] = (float)fg_philox_axpb(high - low, (double)fg_philox_u01_f32(w.v[k]), low);
}
FG_PHILOX_FN void fg_rand_uniform_f64(uint64_t seed, uint32_t stream, uint64_t block, double low,
                                      double high, double out[2]) {
  const fg_philox4 w = fg_philox_block(seed, stream, 0, block);
  out[0] = fg_philox_axpb(high - low, fg_philox_u01_f64(w.v[0], w.v[1]), low);
  out[1] = fg_philox_axpb(high - low, fg_philox_u01_f64(w.v[2], w.v[3]), low);
}

/* random_normal: mean + stddev * z; f32 pairs (w0, w1) and (w2, w3), each
 * word a 32-bit uniform; f64 one pair from 53-bit uniforms (w0 w1, w2 w3). */
FG_PHILOX_FN void fg_rand_normal_f32(uint64_t seed, uint32_t stream, uint64_t block, double mean,
                                     double stddev, float out[4]) {
  const fg_philox4 w = fg_philox_block(seed, stream, 0, block);
  double z[4];
  fg_philox_box_muller(fg_philox_u01_open(w.v[0]), fg_philox_u01_open(w.v[1]), &z[0], &z[1]);
  fg_philox_box_muller(fg_philox_u01_open(w.v[2]), fg_philox_u01_open(w.v[3]), &z[2], &z[3]);
  for (int k = 0; k < 4; k++)
    out[k] = (float)fg_philox_axpb(stddev, z[k], mean);
}
FG_PHILOX_FN void fg_rand_normal_f64(uint64_t seed, uint32_t stream, uint64_t block, double mean,
                                     double stddev, double out[2]) {
  const fg_philox4 w = fg_philox_block(seed, stream, 0, block);
  double z0, z1;
  fg_philox_box_muller(fg_philox_u01_open64(w.v[0], w.v[1]), fg_philox_u01_open64(w.v[2], w.v[3]),
                       &z0, &z1);
  out[0] = fg_philox_axpb(stddev, z0, mean);
  out[1] = fg_philox_axpb(stddev, z1, mean);
}

/* truncated_normal: normals beyond 2 standard deviations are redrawn, as
 * TensorFlow's truncated_normal does (torch's trunc_normal_ inverts the CDF
 * instead). Element i takes the first candidate with |z| < 2 from draws
 * 0, 1, ... of block i, in order: 4 per draw in f32 (two Box-Muller pairs
 * of 32-bit uniforms), 2 in f64 (one pair of 53-bit uniforms). Each
 * candidate is rejected with probability 0.0455; after FG_TRUNC_DRAWS
 * draws (all rejected with probability below 1e-40) the value is the mean. */
#define FG_TRUNC_DRAWS 16
FG_PHILOX_FN double fg_rand_trunc_z(uint64_t seed, uint32_t stream, uint64_t i, int f64) {
  for (uint32_t d = 0; d < FG_TRUNC_DRAWS; d++) {
    const fg_philox4 w = fg_philox_block(seed, stream, d, i);
    double z[4];
    int n = 4;
    if (f64) {
      fg_philox_box_muller(fg_philox_u01_open64(w.v[0], w.v[1]),
                           fg_philox_u01_open64(w.v[2], w.v[3]), &z[0], &z[1]);
      n = 2;
    } else {
      fg_philox_box_muller(fg_philox_u01_open(w.v[0]), fg_philox_u01_open(w.v[1]), &z[0], &z[1]);
      fg_philox_box_muller(fg_philox_u01_open(w.v[2]), fg_philox_u01_open(w.v[3]), &z[2], &z[3]);
    }
    for (int k = 0; k < n; k++)
      if (fabs(z[k]) < 2.0) return z[k];
  }
  return 0.0;
}

/* ---- dropout's mask -------------------------------------------------------
 * Element i keeps (mask 1) when word i % 4 of the block for
 *   key = seed, ctr = (i / 4, step, stream, FG_DROPOUT_TAG | replica)
 * is at least `thr` = ceil(p 2^32) (fg_dropout_threshold): probability
 * 1 - p within 2^-32. The top bit of the last word keeps these counters
 * apart from the random ops' (whose last word, the draw, is below 16);
 * replica packs the process's replica rank (bits 16..30) over the node's
 * own (bits 0..15). The step's low 32 bits are used: masks repeat after
 * 2^32 training steps. A block serves 4 elements whatever the dtype, so
 * f32 and f64 draw the same mask. */
#define FG_DROPOUT_TAG 0x80000000u
FG_PHILOX_FN uint64_t fg_dropout_threshold(double p) {
  return (uint64_t)ceil(p * 4294967296.0); /* exact: p times a power of two */
}
FG_PHILOX_FN uint32_t fg_dropout_replica(uint32_t process_replica, uint32_t node_replica) {
  return ((process_replica & 0x7FFFu) << 16) | (node_replica & 0xFFFFu);
}
/* The 4 keep bits (bit k: element 4 block + k) of one block. */
FG_PHILOX_FN unsigned fg_dropout_keep4(uint64_t seed, uint32_t stream, uint64_t step,
                                       uint32_t replica, uint64_t block, uint64_t thr) {
  const fg_philox4 w =
      fg_philox4x32_10((uint32_t)block, (uint32_t)step, stream, FG_DROPOUT_TAG | replica,
                       (uint32_t)seed, (uint32_t)(seed >> 32));
  unsigned bits = 0;
  for (int k = 0; k < 4; k++)
    bits |= (unsigned)((uint64_t)w.v[k] >= thr) << k;
  return bits;
}

#endif
