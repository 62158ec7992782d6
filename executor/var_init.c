/* Variable initialisers: element i of a drawn initialiser is element i of
 * random_uniform / random_normal with the variable's seed and stream (the
 * functions of kernels/philox.h the random ops' kernels call), so the values
 * are the same on every machine and for every thread count. Run once per
 * variable per session, single-threaded: a 25M-element weight takes about a
 * second, once. */
#include <string.h>

#include "executor/var_init.h"
#include "graph/init.h"
#include "graph/tensor_internal.h"
#include "kernels/philox.h"

static void fill(void *data, fg_dtype dt, int64_t n, double v) {
  for (int64_t i = 0; i < n; i++)
    switch (dt) {
    case FG_F32: ((float *)data)[i] = (float)v; break;
    case FG_F64: ((double *)data)[i] = v; break;
    case FG_I32: ((int32_t *)data)[i] = (int32_t)v; break;
    case FG_I64: ((int64_t *)data)[i] = (int64_t)v; break;
    case FG_BOOL: ((uint8_t *)data)[i] = v != 0.0; break;
    default: break;
    }
}

/* The draws, block by block as the random ops' kernels (4 f32 or 2 f64
 * values per Philox block). */
static void draw(void *data, const fg_init_spec *s, int64_t n) {
  const int uniform = s->kind == FG_INIT_UNIFORM || s->kind == FG_INIT_KAIMING_UNIFORM ||
                      s->kind == FG_INIT_XAVIER_UNIFORM;
  const uint64_t seed = (uint64_t)s->seed;
  const int64_t per = s->dtype == FG_F32 ? 4 : 2;
  for (int64_t b = 0; b * per < n; b++) {
    const int64_t e0 = b * per, cnt = n - e0 < per ? n - e0 : per;
    float f[4];
    double d[2];
    if (s->dtype == FG_F32) {
      if (uniform)
        fg_rand_uniform_f32(seed, s->stream, (uint64_t)b, s->lo, s->hi, f);
      else
        fg_rand_normal_f32(seed, s->stream, (uint64_t)b, s->mean, s->std, f);
      memcpy((float *)data + e0, f, (size_t)cnt * sizeof f[0]);
    } else {
      if (uniform)
        fg_rand_uniform_f64(seed, s->stream, (uint64_t)b, s->lo, s->hi, d);
      else
        fg_rand_normal_f64(seed, s->stream, (uint64_t)b, s->mean, s->std, d);
      memcpy((double *)data + e0, d, (size_t)cnt * sizeof d[0]);
    }
  }
}

fg_tensor *fg_var_init_tensor(const fg_node *node, fg_status *st) {
  fg_init_spec s;
  if (fg_init_read(node, &s, st) != 0) return NULL;
  fg_tensor *t = fg_tensor_new(s.dtype, s.rank, s.dims, st);
  if (!t) return NULL;
  const int64_t n = fg_tensor_num_elements(t);
  if (s.kind <= FG_INIT_CONSTANT)
    fill(t->data, s.dtype, n, s.fill);
  else
    draw(t->data, &s, n);
  return t;
}
