/* Helpers shared by the kernel tests: a seeded random stream, reading and
 * writing an element of any dtype as a double, and tensors from doubles. */
#ifndef FG_TEST_KERNELS_UTIL_H
#define FG_TEST_KERNELS_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "flowgraph/graph.h"
#include "flowgraph/tensor.h"
#include "flowgraph/types.h"

static inline uint64_t rng_next(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* The element count of a shape of `rank` dims. */
static inline int64_t dims_count(int rank, const int64_t *d) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= d[i];
  return n;
}

/* Bytes of one f32 or f64 element. */
static inline size_t float_size(fg_dtype dt) { return dt == FG_F64 ? 8 : 4; }

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

/* Stores v as element i of a buffer of dtype dt (converted; bool: v != 0). */
static inline void elem_store(void *data, fg_dtype dt, int64_t i, double v) {
  switch (dt) {
  case FG_F32: ((float *)data)[i] = (float)v; break;
  case FG_F64: ((double *)data)[i] = v; break;
  case FG_I32: ((int32_t *)data)[i] = (int32_t)v; break;
  case FG_I64: ((int64_t *)data)[i] = (int64_t)v; break;
  default: ((uint8_t *)data)[i] = v != 0; break;
  }
}

/* A new tensor of dtype dt holding v's values, converted; NULL when out of
 * memory. */
static inline fg_tensor *tensor_of_doubles(fg_dtype dt, int rank, const int64_t *dims,
                                           const double *v) {
  fg_tensor *t = fg_tensor_new(dt, rank, dims, NULL);
  if (!t) return NULL;
  const int64_t n = fg_tensor_num_elements(t);
  for (int64_t i = 0; i < n; i++)
    elem_store(fg_tensor_data(t), dt, i, v[i]);
  return t;
}

/* Element i of t as a double. */
/* A tensor of dt (f32 or f64) of uniform values in [-1, 1) from `seed`. */
static inline fg_tensor *rand_tensor(fg_dtype dt, int rank, const int64_t *dims, uint64_t seed) {
  fg_tensor *t = fg_tensor_new(dt, rank, dims, NULL);
  uint64_t s = seed;
  for (int64_t i = 0; i < fg_tensor_num_elements(t); i++)
    elem_store(fg_tensor_data(t), dt, i, rng_unit(&s));
  return t;
}

/* A constant node `name` of rand_tensor's values. */
static inline fg_output rand_constant(fg_graph *g, const char *name, fg_dtype dt, int rank,
                                      const int64_t *dims, uint64_t seed) {
  fg_tensor *t = rand_tensor(dt, rank, dims, seed);
  fg_output o = fg_constant(g, name, t);
  fg_tensor_free(t);
  return o;
}

static inline double tensor_elem(const fg_tensor *t, int64_t i) {
  return elem_as_double(fg_tensor_data(t), fg_tensor_dtype(t), i);
}

/* The matrix indices in a ([ar] dims ad) and b ([br] dims bd) of output
 * batch bi of a matmul whose output has rank R and dims od: the batch dims
 * right-aligned, a size-1 dim broadcast. */
static inline void mm_batch_of(int R, const int64_t *od, int ar, const int64_t *ad, int br,
                               const int64_t *bd, int64_t bi, int64_t *ab, int64_t *bb) {
  int64_t as = 1, bs = 1;
  *ab = *bb = 0;
  for (int d = R - 3; d >= 0; d--) {
    const int64_t c = bi % od[d];
    bi /= od[d];
    const int da = d - (R - ar), db = d - (R - br);
    const int64_t na = da >= 0 ? ad[da] : 1, nb = db >= 0 ? bd[db] : 1;
    *ab += (na == 1 ? 0 : c) * as;
    *bb += (nb == 1 ? 0 : c) * bs;
    as *= na;
    bs *= nb;
  }
}

#endif
