/* What the epilogue pass tests (test_passes_epilogue.c,
 * test_passes_conv_epilogue.c) share: deterministic f32 data and the
 * check of one fusion's report entry. */
#ifndef TEST_PASSES_EPI_UTIL_H
#define TEST_PASSES_EPI_UTIL_H

#include <math.h>
#include <stdio.h>

#include "test_passes_mlp.h"

static inline fg_output const_f32(fg_graph *g, const char *name, int rank, const int64_t *dims,
                                  float scale, int salt) {
  fg_tensor *t = f32_tensor(rank, dims, scale, salt);
  fg_output o = fg_constant(g, name, t);
  fg_tensor_free(t);
  return o;
}

/* `pass` fused `node` into `into` under `rule`. */
static inline void check_change(const fg_pass_report *r, const char *pass, const char *node,
                                const char *into, const char *rule) {
  const fg_pass_change *c = find_change(r, pass, node);
  if (!c) {
    FG_FAIL_AT("no %s change for %s", pass, node);
    return;
  }
  FG_CHECK_STR(c->action, "fused");
  FG_CHECK_STR(c->into, into);
  FG_CHECK_STR(c->rule, rule);
}

#endif
