/* Shape inference, FLOPs and parameters of permuted_matmul(a, b):
 * transpose(transpose(a, perm_a) @ transpose(b, perm_b), perm_out), what
 * the transpose_matmul pass makes of a matmul between transposes
 * (executor/passes/transpose_matmul.c). a and b have one rank r >= 2 and
 * every perm has r entries. The product follows matmul's rules on the
 * permuted operands (batch dims broadcast where one is 1).
 *
 * The kernels read each operand in place as a strided matrix, so a's and
 * b's last axes must stay among their permuted matrix axes (the matrix
 * then has unit stride along one of its dims, as BLAS needs) and the
 * product's last axis must stay the output's last. */
#include "graph/infer_common.h"

/* The operand's last axis must be one of its matrix's two axes. */
static int check_operand(const fg_node *node, const char *name, const int *perm, int r, int which,
                         fg_status *st) {
  if (perm[r - 1] == r - 1 || perm[r - 2] == r - 1) return 0;
  int at = 0;
  while (perm[at] != r - 1)
    at++;
  return fgi_fail(node, st,
                  "attribute '%s' puts input %d's last axis (%d) at position %d; permuted_matmul "
                  "needs it at position %d or %d (one of the product's matrix axes)",
                  name, which, r - 1, at, r - 2, r - 1);
}

/* All three perms, checked against the inputs, into *p. 0 or -1. */
static int read_perms(const fg_node *node, const fg_tinfo *in, fg_permuted_matmul_params *p,
                      fg_status *st) {
  char s1[FGI_STR], s2[FGI_STR];
  const fg_tinfo *a = &in[0], *b = &in[1];
  if (a->rank < 2 || a->rank != b->rank)
    return fgi_fail(node, st,
                    "input 0 shape %s and input 1 shape %s: permuted_matmul needs one rank >= 2",
                    fgi_shape(a, s1), fgi_shape(b, s2));
  const int r = a->rank;
  p->rank = r;
  if (fgi_attr_perm(node, "perm_a", "attribute 'perm_a'", a, 0, p->perm_a, st) ||
      fgi_attr_perm(node, "perm_b", "attribute 'perm_b'", b, 1, p->perm_b, st))
    return -1;
  if (check_operand(node, "perm_a", p->perm_a, r, 0, st) ||
      check_operand(node, "perm_b", p->perm_b, r, 1, st))
    return -1;
  fg_tinfo out = *a; /* the perm's length is checked against the output's rank r */
  if (fgi_attr_perm(node, "perm_out", "attribute 'perm_out'", &out, 0, p->perm_out, st)) return -1;
  if (p->perm_out[r - 1] != r - 1) {
    int at = 0;
    while (p->perm_out[at] != r - 1)
      at++;
    return fgi_fail(node, st,
                    "attribute 'perm_out' puts the product's last axis (%d) at position %d; "
                    "permuted_matmul needs it last",
                    r - 1, at);
  }
  return 0;
}

int fgi_infer_permuted_matmul(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                              fg_status *st) {
  char s1[FGI_STR], s2[FGI_STR];
  if (fgi_same_dtype(node, in, 0, 1, st)) return -1;
  if (!fg_dtype_is_float(in[0].dtype))
    return fgi_fail(node, st, "input 0 dtype %s is not allowed; permuted_matmul needs f32 or f64",
                    fg_dtype_name(in[0].dtype));
  fg_permuted_matmul_params p;
  if (read_perms(node, in, &p, st)) return -1;
  const int r = p.rank;
  int64_t ad[FG_MAX_RANK], bd[FG_MAX_RANK], pd[FG_MAX_RANK];
  for (int i = 0; i < r; i++) {
    ad[i] = in[0].dims[p.perm_a[i]];
    bd[i] = in[1].dims[p.perm_b[i]];
  }
  if (ad[r - 1] >= 0 && bd[r - 2] >= 0 && ad[r - 1] != bd[r - 2])
    return fgi_fail(node, st,
                    "inner dimensions differ: input 0 shape %s permuted gives K=%lld, input 1 "
                    "shape %s permuted gives K=%lld",
                    fgi_shape(&in[0], s1), (long long)ad[r - 1], fgi_shape(&in[1], s2),
                    (long long)bd[r - 2]);
  int bad;
  int64_t va, vb;
  if (fgi_broadcast_dims(r - 2, ad, r - 2, bd, pd, &bad, &va, &vb))
    return fgi_fail(node, st,
                    "batch dimensions of input 0 shape %s and input 1 shape %s, permuted, do not "
                    "broadcast (dim %d: %lld vs %lld)",
                    fgi_shape(&in[0], s1), fgi_shape(&in[1], s2), bad, (long long)va,
                    (long long)vb);
  pd[r - 2] = ad[r - 2];
  pd[r - 1] = bd[r - 1];
  out[0].dtype = in[0].dtype;
  out[0].rank = r;
  for (int i = 0; i < r; i++)
    out[0].dims[i] = pd[p.perm_out[i]] < 0 ? FG_DIM_UNKNOWN : pd[p.perm_out[i]];
  return fgi_check_bytes(node, &out[0], st);
}

/* 2*M*N*K per batch entry, as matmul. */
int64_t fgi_flops_permuted_matmul(const fg_node *node, const fg_tinfo *in, const fg_tinfo *out) {
  const int64_t *perm;
  int n;
  if (fgi_attr_ints(node, "perm_a", 1, &perm, &n, NULL) || n != in[0].rank || n < 2) return -1;
  const int ax = (int)perm[n - 1];
  if (ax < 0 || ax >= n) return -1;
  const int64_t k = in[0].dims[ax], e = fgi_elements(&out[0]);
  if (e < 0 || k < 0) return -1;
  return fgi_mul_sat(fgi_mul_sat(e, k), 2);
}

int fgi_parse_permuted_matmul(const fg_node *node, const fg_tinfo *in, fg_op_params *p,
                              fg_status *st) {
  return read_perms(node, in, &p->permuted_matmul, st);
}
