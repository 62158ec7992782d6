/* Helpers for the shape-inference tests (tests/graph/test_infer*.c;
 * tests/autodiff/test_grad_ops_fwd_util.h builds on them, so they sit at the
 * tests/ root): build through the public API, then check shapes, dtypes and
 * the sticky error. Expected shapes are worked out by hand from NumPy's
 * broadcasting and TensorFlow's shape rules, and written into each case. */
#ifndef FG_TEST_INFER_UTIL_H
#define FG_TEST_INFER_UTIL_H

#include "fgtest.h"
#include "flowgraph/graph.h"
#include "flowgraph/status.h"
#include "flowgraph/tensor.h"

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define U         FG_DIM_UNKNOWN

static inline fg_output ph(fg_graph *g, fg_dtype dt, int rank, const int64_t *dims) {
  return fg_placeholder(g, NULL, dt, rank, dims);
}

/* The graph has no error; prints it when it does. */
#define EXPECT_OK(g)                                                                               \
  do {                                                                                             \
    fg_status *s_ = fg_status_new();                                                               \
    fg_code c_ = fg_graph_status(g, s_);                                                           \
    if (c_ != FG_OK) FG_FAIL_AT("unexpected graph error: %s", fg_status_message(s_));              \
    fg_status_free(s_);                                                                            \
  } while (0)

/* Output o has dtype dt and the given rank and dims. */
#define EXPECT_TINFO(g, o, dt, rank, ...)                                                          \
  do {                                                                                             \
    const int64_t e_[] = {__VA_ARGS__};                                                            \
    int64_t d_[FG_MAX_RANK];                                                                       \
    int r_ = fg_output_shape(g, o, d_);                                                            \
    FG_CHECK_INT(r_, rank);                                                                        \
    FG_CHECK_INT(fg_output_dtype(g, o), dt);                                                       \
    if (r_ == (rank))                                                                              \
      for (int i_ = 0; i_ < (rank); i_++)                                                          \
        FG_CHECK_INT(d_[i_], e_[i_]);                                                              \
  } while (0)

/* A rank-0 output of dtype dt. */
#define EXPECT_SCALAR(g, o, dt)                                                                    \
  do {                                                                                             \
    FG_CHECK_INT(fg_output_shape(g, o, NULL), 0);                                                  \
    FG_CHECK_INT(fg_output_dtype(g, o), dt);                                                       \
  } while (0)

/* The graph's sticky error has `code` and contains every given string. */
#define EXPECT_ERR(g, code, ...)                                                                   \
  do {                                                                                             \
    fg_status *s_ = fg_status_new();                                                               \
    FG_CHECK_INT(fg_graph_status(g, s_), code);                                                    \
    const char *n_[] = {__VA_ARGS__};                                                              \
    for (size_t i_ = 0; i_ < sizeof n_ / sizeof n_[0]; i_++)                                       \
      FG_CHECK_STR_CONTAINS(fg_status_message(s_), n_[i_]);                                        \
    fg_status_free(s_);                                                                            \
  } while (0)

/* The exact message (for messages whose wording is specified). */
#define EXPECT_MSG(g, code, text)                                                                  \
  do {                                                                                             \
    fg_status *s_ = fg_status_new();                                                               \
    FG_CHECK_INT(fg_graph_status(g, s_), code);                                                    \
    if (strcmp(fg_status_message(s_), text) != 0)                                                  \
      FG_FAIL_AT("message \"%s\" != \"%s\"", fg_status_message(s_), text);                         \
    fg_status_free(s_);                                                                            \
  } while (0)

/* A tensor of zeros (values do not matter for inference). */
static inline fg_tensor *zeros(fg_dtype dt, int rank, const int64_t *dims) {
  return fg_tensor_new(dt, rank, dims, NULL);
}

#endif
