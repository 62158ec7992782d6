/* The program of a fused_elementwise node (its "program" attribute; the
 * syntax is in flowgraph/op_params.h, beside fg_fused_params): text to
 * fg_fused_params and back, and what the fusion pass and the tools need to
 * know of each opcode. Internal to the library. */
#ifndef FG_FUSED_PROGRAM_H
#define FG_FUSED_PROGRAM_H

#include <stddef.h>

#include "flowgraph/op_params.h"

/* The opcode of graph op `op` (FG_OP_*), or -1 when the op has none. */
int fg_fused_opcode_of(int op);
/* The graph op (FG_OP_*) of an opcode, its argument count (1, 2 or 3) and
 * the name of its attribute k (0, 1), NULL past its last. */
int fg_fused_graph_op(int opcode);
int fg_fused_arity(int opcode);
const char *fg_fused_attr_name(int opcode, int k);
/* 1 for equal, greater and less (a 0/1 result, read only as a select's
 * condition). */
int fg_fused_is_compare(int opcode);

/* Parses `text` for a node with n_inputs inputs into *p (zeroed first):
 * 0, or -1 with a message in err that says which instruction and argument
 * is wrong. Attributes an instruction leaves out take the op's defaults
 * (`flowgraph ops`); an op whose attribute has no default needs it. */
int fg_fused_parse(const char *text, int n_inputs, fg_fused_params *p, char *err, size_t err_size);
/* Checks a parsed program against its inputs' dtypes: every input f32, f64
 * or bool, one float dtype among them (into *out), and a bool input read
 * only as a select's condition. 0, or -1 with a message in err. */
int fg_fused_check_dtypes(const fg_fused_params *p, const fg_dtype *in, fg_dtype *out, char *err,
                          size_t err_size);
/* The program as text, constants and attributes as C99 hex floats (exact
 * when parsed back): the length, or -1 when it does not fit in size. */
int fg_fused_format(const fg_fused_params *p, char *buf, size_t size);
/* "add+relu": the graph ops of the instructions, in order. */
void fg_fused_ops_list(const fg_fused_params *p, char *buf, size_t size);
/* "fused_elementwise[add+relu]" for a program, interned for the process's
 * life (run metadata outlives sessions), or "fused_elementwise" when the
 * program does not parse or memory runs out. Thread-safe. */
const char *fg_fused_label(const char *program, int n_inputs);

#endif
