/* fused_elementwise programs: parsing, checking, printing (fused_program.h).
 * The text may come from a file, so the parser checks every token and says
 * which instruction and argument it could not take. */
#include "graph/fused_program.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/op_table.h"

typedef struct opcode_info {
  int op; /* FG_OP_* */
  int n_args;
  const char *attr[2];
} opcode_info;

static const opcode_info infos[FG_FUSED_OPCODE_COUNT] = {
    [FG_FUSED_ADD] = {FG_OP_ADD, 2, {NULL, NULL}},
    [FG_FUSED_SUB] = {FG_OP_SUB, 2, {NULL, NULL}},
    [FG_FUSED_MUL] = {FG_OP_MUL, 2, {NULL, NULL}},
    [FG_FUSED_DIV] = {FG_OP_DIV, 2, {NULL, NULL}},
    [FG_FUSED_MAXIMUM] = {FG_OP_MAXIMUM, 2, {NULL, NULL}},
    [FG_FUSED_MINIMUM] = {FG_OP_MINIMUM, 2, {NULL, NULL}},
    [FG_FUSED_POW] = {FG_OP_POW, 2, {NULL, NULL}},
    [FG_FUSED_GREATER] = {FG_OP_GREATER, 2, {NULL, NULL}},
    [FG_FUSED_LESS] = {FG_OP_LESS, 2, {NULL, NULL}},
    [FG_FUSED_EQUAL] = {FG_OP_EQUAL, 2, {NULL, NULL}},
    [FG_FUSED_SELECT] = {FG_OP_SELECT, 3, {NULL, NULL}},
    [FG_FUSED_NEG] = {FG_OP_NEG, 1, {NULL, NULL}},
    [FG_FUSED_EXP] = {FG_OP_EXP, 1, {NULL, NULL}},
    [FG_FUSED_LOG] = {FG_OP_LOG, 1, {NULL, NULL}},
    [FG_FUSED_SQRT] = {FG_OP_SQRT, 1, {NULL, NULL}},
    [FG_FUSED_RSQRT] = {FG_OP_RSQRT, 1, {NULL, NULL}},
    [FG_FUSED_ABS] = {FG_OP_ABS, 1, {NULL, NULL}},
    [FG_FUSED_TANH] = {FG_OP_TANH, 1, {NULL, NULL}},
    [FG_FUSED_SIGMOID] = {FG_OP_SIGMOID, 1, {NULL, NULL}},
    [FG_FUSED_RELU] = {FG_OP_RELU, 1, {NULL, NULL}},
    [FG_FUSED_LEAKY_RELU] = {FG_OP_LEAKY_RELU, 1, {"alpha", NULL}},
    [FG_FUSED_ELU] = {FG_OP_ELU, 1, {"alpha", NULL}},
    [FG_FUSED_SOFTPLUS] = {FG_OP_SOFTPLUS, 1, {"beta", "threshold"}},
    [FG_FUSED_CLIP] = {FG_OP_CLIP, 1, {"min", "max"}},
    [FG_FUSED_SILU] = {FG_OP_SILU, 1, {NULL, NULL}},
    [FG_FUSED_GELU] = {FG_OP_GELU, 1, {NULL, NULL}},
    [FG_FUSED_ERF] = {FG_OP_ERF, 1, {NULL, NULL}},
    [FG_FUSED_SIGN] = {FG_OP_SIGN, 1, {NULL, NULL}},
    [FG_FUSED_RECIPROCAL] = {FG_OP_RECIPROCAL, 1, {NULL, NULL}},
    [FG_FUSED_FLOOR] = {FG_OP_FLOOR, 1, {NULL, NULL}},
    [FG_FUSED_CEIL] = {FG_OP_CEIL, 1, {NULL, NULL}},
    [FG_FUSED_ROUND] = {FG_OP_ROUND, 1, {NULL, NULL}},
    [FG_FUSED_GELU_TANH] = {FG_OP_GELU_TANH, 1, {NULL, NULL}},
};

int fg_fused_opcode_of(int op) {
  for (int c = 0; c < FG_FUSED_OPCODE_COUNT; c++)
    if (infos[c].op == op && infos[c].n_args) return c;
  return -1;
}

static int valid(int opcode) { return opcode >= 0 && opcode < FG_FUSED_OPCODE_COUNT; }
int fg_fused_graph_op(int opcode) { return valid(opcode) ? infos[opcode].op : -1; }
int fg_fused_arity(int opcode) { return valid(opcode) ? infos[opcode].n_args : 0; }
const char *fg_fused_attr_name(int opcode, int k) {
  return valid(opcode) && k >= 0 && k < 2 ? infos[opcode].attr[k] : NULL;
}
int fg_fused_is_compare(int opcode) {
  return opcode == FG_FUSED_GREATER || opcode == FG_FUSED_LESS || opcode == FG_FUSED_EQUAL;
}

/* ---- parsing ---------------------------------------------------------------- */

typedef struct parser {
  const char *s;
  int n_inputs;
  fg_fused_params *p;
  char *err;
  size_t err_size;
} parser;

static int fail(parser *ps, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static int fail(parser *ps, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(ps->err, ps->err_size, "program instruction %d: %s", ps->p->n_instrs, msg);
  return -1;
}

static void skip_ws(parser *ps) {
  while (isspace((unsigned char)*ps->s))
    ps->s++;
}

/* Length of the identifier at s ([a-z_][a-z0-9_]*). */
static size_t ident_len(const char *s) {
  size_t n = 0;
  if (!(islower((unsigned char)s[0]) || s[0] == '_')) return 0;
  while (islower((unsigned char)s[n]) || isdigit((unsigned char)s[n]) || s[n] == '_')
    n++;
  return n;
}

/* "x3" or "t0": the kind and index, or -1 when s is neither. */
static int parse_ref(parser *ps, fg_fused_ref *r) {
  const char *s = ps->s;
  if ((s[0] != 'x' && s[0] != 't') || !isdigit((unsigned char)s[1])) return -1;
  char *end;
  long v = strtol(s + 1, &end, 10);
  if (isalnum((unsigned char)*end) || *end == '_') return -1;
  int k = ps->p->n_instrs;
  if (s[0] == 'x' && v >= ps->n_inputs)
    return fail(ps, "argument '%.*s': the node has %d inputs", (int)(end - s), s, ps->n_inputs), -2;
  if (s[0] == 't' && v >= k)
    return fail(ps, "argument '%.*s' refers to instruction %ld, not an earlier one", (int)(end - s),
                s, v),
           -2;
  *r = (fg_fused_ref){(uint8_t)(s[0] == 'x' ? FG_FUSED_INPUT : FG_FUSED_TEMP), (uint8_t)v};
  ps->s = end;
  return 0;
}

/* A constant argument: its index in consts (equal bits share one). */
static int parse_const(parser *ps, fg_fused_ref *r) {
  char *end;
  double v = strtod(ps->s, &end);
  if (end == ps->s) return fail(ps, "cannot read an argument at '%.20s'", ps->s);
  fg_fused_params *p = ps->p;
  int c = 0;
  while (c < p->n_consts && memcmp(&p->consts[c], &v, sizeof v) != 0)
    c++;
  if (c == p->n_consts) {
    if (c == FG_FUSED_MAX_CONSTS) return fail(ps, "more than %d constants", FG_FUSED_MAX_CONSTS);
    p->consts[p->n_consts++] = v;
  }
  *r = (fg_fused_ref){FG_FUSED_CONST, (uint8_t)c};
  ps->s = end;
  return 0;
}

/* `name=number` for the instruction's op; *seen marks the ones given. */
static int parse_attr(parser *ps, fg_fused_instr *in, size_t len, int *seen) {
  const char *name = ps->s;
  int k = 0;
  while (k < 2 && !(infos[in->op].attr[k] && strlen(infos[in->op].attr[k]) == len &&
                    strncmp(infos[in->op].attr[k], name, len) == 0))
    k++;
  if (k == 2)
    return fail(ps, "%s has no attribute '%.*s'", fg_op_table[infos[in->op].op].name, (int)len,
                name);
  if (seen[k]) return fail(ps, "attribute '%.*s' given twice", (int)len, name);
  ps->s += len;
  skip_ws(ps);
  ps->s++; /* '=' */
  skip_ws(ps);
  char *end;
  double v = strtod(ps->s, &end);
  if (end == ps->s || !isfinite(v))
    return fail(ps, "attribute '%.*s' needs a finite number", (int)len, name);
  in->attr[k] = v;
  seen[k] = 1;
  ps->s = end;
  return 0;
}

/* The arguments and attributes between '(' and ')'. */
static int parse_args(parser *ps, fg_fused_instr *in, int *seen) {
  int n = 0;
  for (;;) {
    skip_ws(ps);
    size_t len = ident_len(ps->s);
    const char *after = ps->s + len;
    while (isspace((unsigned char)*after))
      after++;
    if (len && *after == '=') {
      if (parse_attr(ps, in, len, seen) != 0) return -1;
    } else {
      fg_fused_ref r;
      if (n == 3) return fail(ps, "more than 3 arguments");
      int rc = parse_ref(ps, &r);
      if (rc == -2 || (rc == -1 && parse_const(ps, &r) != 0)) return -1;
      in->arg[n++] = r;
    }
    skip_ws(ps);
    if (*ps->s == ')') break;
    if (*ps->s != ',') return fail(ps, "expected ',' or ')' at '%.20s'", ps->s);
    ps->s++;
  }
  ps->s++;
  in->n_args = (uint8_t)n;
  return 0;
}

/* The defaults of the attributes an instruction left out, from the op's
 * row (the numbers `flowgraph ops` prints). */
static int fill_defaults(parser *ps, fg_fused_instr *in, const int *seen) {
  for (int k = 0; k < 2 && infos[in->op].attr[k]; k++) {
    if (seen[k]) continue;
    const fg_attr_def *d = fg_op_attr(infos[in->op].op, infos[in->op].attr[k]);
    if (!d || !d->dflt)
      return fail(ps, "%s needs attribute '%s'", fg_op_table[infos[in->op].op].name,
                  infos[in->op].attr[k]);
    in->attr[k] = strtod(d->dflt, NULL);
  }
  if (in->op == FG_FUSED_CLIP && !(in->attr[0] <= in->attr[1]))
    return fail(ps, "clip's min %g is above its max %g", in->attr[0], in->attr[1]);
  return 0;
}

static int parse_instr(parser *ps) {
  fg_fused_params *p = ps->p;
  size_t len = ident_len(ps->s);
  if (p->n_instrs == FG_FUSED_MAX_INSTRS)
    return fail(ps, "more than %d instructions", FG_FUSED_MAX_INSTRS);
  char name[32];
  snprintf(name, sizeof name, "%.*s", (int)(len < 31 ? len : 31), ps->s);
  int op = len && len < 31 ? fg_op_lookup(name) : -1, code = fg_fused_opcode_of(op);
  if (code < 0)
    return fail(ps, "'%.*s' is no op a fused program runs", (int)(len ? len : 12), ps->s);
  ps->s += len;
  skip_ws(ps);
  if (*ps->s != '(') return fail(ps, "expected '(' after %s", name);
  ps->s++;
  fg_fused_instr *in = &p->ins[p->n_instrs];
  int seen[2] = {0, 0};
  in->op = (uint8_t)code;
  if (parse_args(ps, in, seen) != 0) return -1;
  if (in->n_args != infos[code].n_args)
    return fail(ps, "%s takes %d arguments, got %d", name, infos[code].n_args, in->n_args);
  if (fill_defaults(ps, in, seen) != 0) return -1;
  p->n_instrs++;
  return 0;
}

/* Comparisons give 0/1 for a select's condition and nothing else. */
static int check_compares(parser *ps) {
  const fg_fused_params *p = ps->p;
  for (int k = 0; k < p->n_instrs; k++)
    for (int a = 0; a < p->ins[k].n_args; a++) {
      fg_fused_ref r = p->ins[k].arg[a];
      int sel_cond = p->ins[k].op == FG_FUSED_SELECT && a == 0;
      if (r.kind == FG_FUSED_TEMP && fg_fused_is_compare(p->ins[r.index].op) && !sel_cond) {
        ps->p->n_instrs = k;
        return fail(ps,
                    "argument %d reads comparison t%d; a comparison is read only as a "
                    "select's condition",
                    a, r.index);
      }
    }
  if (fg_fused_is_compare(p->ins[p->n_instrs - 1].op)) {
    ps->p->n_instrs--;
    return fail(ps, "the last instruction is a comparison; its 0/1 result is no output");
  }
  return 0;
}

int fg_fused_parse(const char *text, int n_inputs, fg_fused_params *p, char *err, size_t err_size) {
  memset(p, 0, sizeof *p);
  parser ps = {text ? text : "", n_inputs, p, err, err_size};
  if (n_inputs < 1 || n_inputs > FG_FUSED_MAX_INPUTS) {
    snprintf(err, err_size, "%d inputs; a fused program takes 1 to %d", n_inputs,
             FG_FUSED_MAX_INPUTS);
    return -1;
  }
  p->n_inputs = n_inputs;
  skip_ws(&ps);
  while (*ps.s) {
    if (parse_instr(&ps) != 0) return -1;
    skip_ws(&ps);
    if (*ps.s == ';') {
      ps.s++;
      skip_ws(&ps);
    } else if (*ps.s) {
      return fail(&ps, "expected ';' at '%.20s'", ps.s);
    }
  }
  if (p->n_instrs == 0) {
    snprintf(err, err_size, "the program has no instructions");
    return -1;
  }
  return check_compares(&ps);
}

int fg_fused_check_dtypes(const fg_fused_params *p, const fg_dtype *in, fg_dtype *out, char *err,
                          size_t err_size) {
  fg_dtype f = FG_DTYPE_INVALID;
  for (int i = 0; i < p->n_inputs; i++) {
    if (in[i] != FG_F32 && in[i] != FG_F64 && in[i] != FG_BOOL) {
      snprintf(err, err_size, "input %d is %s; a fused program reads f32, f64 or bool", i,
               fg_dtype_name(in[i]));
      return -1;
    }
    if (in[i] == FG_BOOL) continue;
    if (f != FG_DTYPE_INVALID && in[i] != f) {
      snprintf(err, err_size, "input %d is %s where an earlier input is %s; one float dtype only",
               i, fg_dtype_name(in[i]), fg_dtype_name(f));
      return -1;
    }
    f = in[i];
  }
  if (f == FG_DTYPE_INVALID) {
    snprintf(err, err_size, "no f32 or f64 input gives the output's dtype");
    return -1;
  }
  for (int k = 0; k < p->n_instrs; k++)
    for (int a = 0; a < p->ins[k].n_args; a++) {
      fg_fused_ref r = p->ins[k].arg[a];
      if (r.kind == FG_FUSED_INPUT && in[r.index] == FG_BOOL &&
          !(p->ins[k].op == FG_FUSED_SELECT && a == 0)) {
        snprintf(err, err_size,
                 "program instruction %d: argument %d reads bool input x%d; a bool input is "
                 "read only as a select's condition",
                 k, a, r.index);
        return -1;
      }
    }
  *out = f;
  return 0;
}

/* ---- printing ---------------------------------------------------------------- */

static int put(char *buf, size_t size, size_t *used, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static int put(char *buf, size_t size, size_t *used, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf + *used, *used < size ? size - *used : 0, fmt, ap);
  va_end(ap);
  if (w < 0) return -1;
  *used += (size_t)w;
  return *used < size ? 0 : -1;
}

int fg_fused_format(const fg_fused_params *p, char *buf, size_t size) {
  size_t used = 0;
  if (size) buf[0] = '\0';
  for (int k = 0; k < p->n_instrs; k++) {
    const fg_fused_instr *in = &p->ins[k];
    if (!valid(in->op)) return -1;
    if (put(buf, size, &used, "%s%s(", k ? "; " : "", fg_op_table[infos[in->op].op].name))
      return -1;
    for (int a = 0; a < in->n_args; a++) {
      const fg_fused_ref r = in->arg[a];
      const char *sep = a ? ", " : "";
      int rc = r.kind == FG_FUSED_CONST ? put(buf, size, &used, "%s%a", sep, p->consts[r.index])
                                        : put(buf, size, &used, "%s%c%d", sep,
                                              r.kind == FG_FUSED_INPUT ? 'x' : 't', r.index);
      if (rc) return -1;
    }
    for (int j = 0; j < 2 && infos[in->op].attr[j]; j++)
      if (put(buf, size, &used, ", %s=%a", infos[in->op].attr[j], in->attr[j])) return -1;
    if (put(buf, size, &used, ")")) return -1;
  }
  return (int)used;
}

void fg_fused_ops_list(const fg_fused_params *p, char *buf, size_t size) {
  size_t used = 0;
  if (size) buf[0] = '\0';
  for (int k = 0; k < p->n_instrs && valid(p->ins[k].op); k++)
    if (put(buf, size, &used, "%s%s", k ? "+" : "", fg_op_table[infos[p->ins[k].op].op].name))
      break;
}

/* ---- labels for run metadata ------------------------------------------------ */

typedef struct label {
  struct label *next;
  char text[];
} label;

static pthread_mutex_t labels_mu = PTHREAD_MUTEX_INITIALIZER;
static label *labels;

const char *fg_fused_label(const char *program, int n_inputs) {
  static const char plain[] = "fused_elementwise";
  fg_fused_params p;
  char err[8], text[FG_FUSED_MAX_INSTRS * 24 + 32];
  if (fg_fused_parse(program, n_inputs, &p, err, sizeof err) != 0) return plain;
  size_t n = (size_t)snprintf(text, sizeof text, "%s[", plain);
  fg_fused_ops_list(&p, text + n, sizeof text - n - 1);
  strcat(text, "]");
  pthread_mutex_lock(&labels_mu);
  label *l = labels;
  while (l && strcmp(l->text, text) != 0)
    l = l->next;
  if (!l && (l = malloc(sizeof *l + strlen(text) + 1)) != NULL) {
    strcpy(l->text, text);
    l->next = labels;
    labels = l;
  }
  pthread_mutex_unlock(&labels_mu);
  return l ? l->text : plain;
}
