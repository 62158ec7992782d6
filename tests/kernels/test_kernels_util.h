/* Helpers shared by the kernel tests: a seeded random stream and reading an
 * element of any dtype as a double. */
#ifndef FG_TEST_KERNELS_UTIL_H
#define FG_TEST_KERNELS_UTIL_H

#include <stdint.h>

#include "flowgraph/types.h"

static inline uint64_t rng_next(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static inline double rng_unit(uint64_t *s) {
  return (double)(rng_next(s) >> 11) * 0x1.0p-53 * 2 - 1;
}

/* Element i of a buffer of dtype dt (bool as 0 or 1). */
static inline double elem_as_double(const void *data, fg_dtype dt, int64_t i) {
  switch (dt) {
  case FG_F32: return ((const float *)data)[i];
  case FG_F64: return ((const double *)data)[i];
  case FG_I32: return ((const int32_t *)data)[i];
  case FG_I64: return (double)((const int64_t *)data)[i];
  default: return ((const uint8_t *)data)[i];
  }
}

#endif
