/* Helpers for the forward tests of the ops gradients and optimizers are
 * built from (tests/autodiff/test_grad_ops_fwd*.c): tensors from double arrays in
 * any dtype, one-shot session runs, and value checks with a dtype's
 * tolerance. */
#ifndef FG_TEST_GRAD_OPS_FWD_UTIL_H
#define FG_TEST_GRAD_OPS_FWD_UTIL_H

#include <flowgraph/flowgraph.h>
#include <math.h>

#include "graph/builders_internal.h"
#include "graph/op_table.h"
#include "test_infer_util.h"

static const fg_dtype floats[2] = {FG_F32, FG_F64};

/* Relative tolerance for a dtype's rounding. */
static inline double tol_of(fg_dtype dt) { return dt == FG_F32 ? 2e-7 : 1e-15; }

static inline int64_t count_of(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= dims[i];
  return n;
}

/* A tensor of dtype dt holding the values v (converted). */
static inline fg_tensor *tens(fg_dtype dt, int rank, const int64_t *dims, const double *v) {
  fg_tensor *t = fg_tensor_new(dt, rank, dims, NULL);
  if (!t) return NULL;
  void *p = fg_tensor_data(t);
  int64_t n = count_of(rank, dims);
  for (int64_t i = 0; i < n; i++) {
    switch (dt) {
    case FG_F32: ((float *)p)[i] = (float)v[i]; break;
    case FG_F64: ((double *)p)[i] = v[i]; break;
    case FG_I32: ((int32_t *)p)[i] = (int32_t)v[i]; break;
    case FG_I64: ((int64_t *)p)[i] = (int64_t)v[i]; break;
    default: ((uint8_t *)p)[i] = v[i] != 0; break;
    }
  }
  return t;
}

static inline double at(const fg_tensor *t, int64_t i) {
  const void *p = fg_tensor_data(t);
  switch (fg_tensor_dtype(t)) {
  case FG_F32: return ((const float *)p)[i];
  case FG_F64: return ((const double *)p)[i];
  case FG_I32: return ((const int32_t *)p)[i];
  case FG_I64: return (double)((const int64_t *)p)[i];
  default: return ((const uint8_t *)p)[i];
  }
}

static inline fg_output cst(fg_graph *g, fg_dtype dt, int rank, const int64_t *dims,
                            const double *v) {
  fg_tensor *t = tens(dt, rank, dims, v);
  fg_output o = fg_constant(g, NULL, t);
  fg_tensor_free(t);
  return o;
}

static inline fg_output var(fg_graph *g, const char *name, fg_dtype dt, int rank,
                            const int64_t *dims, const double *v) {
  fg_tensor *t = tens(dt, rank, dims, v);
  fg_output o = fg_variable(g, name, t);
  fg_tensor_free(t);
  return o;
}

/* Runs the graph once, fetching o, with up to a few feeds. NULL (status
 * set) on failure. */
static inline fg_tensor *run(fg_graph *g, fg_output o, const fg_feed *feeds, int nf,
                             fg_status *st) {
  fg_session *s = fg_session_new(g, NULL, st);
  if (!s) return NULL;
  const char *name = fg_node_name(g, o.node);
  fg_tensor *out = NULL;
  if (fg_session_run(s, feeds, nf, &name, 1, &out, NULL, 0, st) != 0) out = NULL;
  fg_session_free(s);
  return out;
}

/* t has dtype dt, the given shape and values (relative tolerance tol).
 * Returns the number of failed checks, so callers can report the line. */
static inline int expect(const fg_tensor *t, fg_dtype dt, int rank, const int64_t *dims,
                         const double *want, double tol) {
  int before = fgt_failures;
  FG_CHECK(t != NULL);
  if (!t) return fgt_failures - before;
  FG_CHECK_INT(fg_tensor_dtype(t), dt);
  FG_CHECK_INT(fg_tensor_rank(t), rank);
  if (fg_tensor_rank(t) != rank) return fgt_failures - before;
  for (int i = 0; i < rank; i++)
    FG_CHECK_INT(fg_tensor_dim(t, i), dims[i]);
  if (fgt_failures != before) return fgt_failures - before;
  int64_t n = count_of(rank, dims);
  for (int64_t i = 0; i < n; i++)
    if (!(fabs(at(t, i) - want[i]) <= tol * (1.0 + fabs(want[i]))))
      FG_FAIL_AT("element %lld: %.17g vs %.17g", (long long)i, at(t, i), want[i]);
  return fgt_failures - before;
}

#define EXPECT_VALUES(t, dt, rank, dims, want, tol)                                                \
  do {                                                                                             \
    if (expect(t, dt, rank, dims, want, tol))                                                      \
      FG_FAIL_AT("(the failed checks above are for this line)");                                   \
  } while (0)

/* Runs o in a fresh session and checks dtype, shape and values; a failure
 * also names the calling line. */
#define RUN_EXPECT(g, o, feeds, nf, dt, rank, dims, want)                                          \
  do {                                                                                             \
    fg_status *st_ = fg_status_new();                                                              \
    EXPECT_OK(g);                                                                                  \
    fg_tensor *t_ = run(g, o, feeds, nf, st_);                                                     \
    if (!t_) FG_FAIL_AT("run failed: %s", fg_status_message(st_));                                 \
    EXPECT_VALUES(t_, dt, rank, dims, want, tol_of(dt));                                           \
    fg_tensor_free(t_);                                                                            \
    fg_status_free(st_);                                                                           \
  } while (0)

#endif
