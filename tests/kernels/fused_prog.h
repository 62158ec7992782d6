/* Building fused_elementwise programs (fg_fused_params) in the tests of its
 * CUDA kernel, without the text parser: an instruction at a time. */
#ifndef FG_TEST_FUSED_PROG_H
#define FG_TEST_FUSED_PROG_H

#include <string.h>

#include "flowgraph/op_params.h"
#include "kernels/kernel.h"

static inline fg_fused_ref FX(int i) { return (fg_fused_ref){FG_FUSED_INPUT, (uint8_t)i}; }
static inline fg_fused_ref FT(int j) { return (fg_fused_ref){FG_FUSED_TEMP, (uint8_t)j}; }
/* A constant: appended to p's table. */
static inline fg_fused_ref FC(fg_fused_params *p, double v) {
  p->consts[p->n_consts] = v;
  return (fg_fused_ref){FG_FUSED_CONST, (uint8_t)p->n_consts++};
}

static inline void fprog_init(fg_fused_params *p, int n_inputs) {
  memset(p, 0, sizeof *p);
  p->n_inputs = n_inputs;
}

/* Appends op(args) with attributes a0, a1; returns its temporary. */
static inline fg_fused_ref fprog_op(fg_fused_params *p, int op, int n_args, fg_fused_ref r0,
                                    fg_fused_ref r1, fg_fused_ref r2, double a0, double a1) {
  fg_fused_instr *in = &p->ins[p->n_instrs];
  in->op = (uint8_t)op;
  in->n_args = (uint8_t)n_args;
  in->arg[0] = r0;
  in->arg[1] = r1;
  in->arg[2] = r2;
  in->attr[0] = a0;
  in->attr[1] = a1;
  return FT(p->n_instrs++);
}
static inline fg_fused_ref F1(fg_fused_params *p, int op, fg_fused_ref a) {
  return fprog_op(p, op, 1, a, a, a, 0, 0);
}
static inline fg_fused_ref F1A(fg_fused_params *p, int op, fg_fused_ref a, double a0, double a1) {
  return fprog_op(p, op, 1, a, a, a, a0, a1);
}
static inline fg_fused_ref F2(fg_fused_params *p, int op, fg_fused_ref a, fg_fused_ref b) {
  return fprog_op(p, op, 2, a, b, b, 0, 0);
}
static inline fg_fused_ref F3(fg_fused_params *p, int op, fg_fused_ref c, fg_fused_ref a,
                              fg_fused_ref b) {
  return fprog_op(p, op, 3, c, a, b, 0, 0);
}

/* A shape-only buffer (no data): what a prepare hook sees. */
static inline fg_kbuf fshape(fg_dtype dt, int rank, const int64_t *dims) {
  fg_kbuf b;
  memset(&b, 0, sizeof b);
  b.dtype = dt;
  b.rank = rank;
  for (int i = 0; i < rank; i++)
    b.dims[i] = dims[i];
  return b;
}

#endif
