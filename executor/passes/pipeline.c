/* The pass table and the pipeline that runs it (passes.h). Order matters:
 * simplification exposes equal subexpressions (x*1 and x meet) and leaves
 * fewer nodes to fold; folding runs before inference folding, so batch
 * norm parameters computed from constants are constants by then, and both
 * before CSE, which merges the equal constants folding makes; the
 * activation and layer norm patterns after CSE (so that x is one node on
 * both sides of mul(x, sigmoid(x)), and x - mean(x) one node read by the
 * square and the division) and before the epilogues and fusion, which
 * would take their nodes apart; the
 * cross-entropy gradient and the matmul and convolution epilogues
 * (forward, then the updates', then the gradients') fuse after CSE has
 * merged equal nodes (the updates' before the gradients', which would
 * pair the weight gradient with the bias gradient),
 * and before element-wise fusion, which would otherwise take their sub,
 * mul, bias add, residual add, relu, and the relu gradient's greater and
 * select; transposes fold into the bare matmuls the epilogues left
 * (attention's, whose transposes element-wise fusion does not take);
 * element-wise fusion runs on what is left, then the optimizer
 * updates become multi-tensor ones, and dead node elimination sweeps what
 * all leave behind. */
#include <stdlib.h>
#include <string.h>

#include "executor/passes/passes.h"

const fg_pass_def fg_passes[] = {
    {"simplify",
     "algebraic identities: x*1, x/1, x+-0, x-0, neg(neg(x)), identity, stop_gradient, same-dtype "
     "cast, transpose and reshape chains, broadcasts that change nothing; a zero pad folded into "
     "the avg_pool2d that reads it",
     1, fg_pass_simplify},
    {"fold",
     "constant folding: nodes whose inputs are all constants become constants (CPU kernels; "
     "outputs up to 64 MiB and 4x their inputs' bytes)",
     1, fg_pass_fold},
    {"fold_inference",
     "inference folding: dropout with a constant false training input removed; batch_norm "
     "(constant false training, constant parameters) folded into the conv2d or matmul before it, "
     "or else made x * a + b per channel (the same bits), which fuse joins with what follows",
     1, fg_pass_fold_inference},
    {"cse", "common subexpressions: equal pure nodes on equal inputs compute once", 1, fg_pass_cse},
    {"activations",
     "activation patterns: mul(x, sigmoid(x)) becomes silu(x), the exact GELU written out "
     "(x * 0.5 * (1 + erf(x / sqrt(2)))) gelu(x), its tanh form (x * 0.5 * (1 + tanh(sqrt(2 / "
     "pi) (x + 0.044715 x^3)))) gelu_tanh(x); one op, one exp or erf per element (rounded "
     "otherwise: within a few units in the last place, not bitwise)",
     1, fg_pass_activations},
    {"layer_norm",
     "layer normalization written out, (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) * scale "
     "+ shift over the last axes (PyTorch's export below opset 17), becomes one layer_norm "
     "(statistics summed in double: within a few units in the last place, not bitwise)",
     1, fg_pass_layer_norm},
    {"xent_grad",
     "softmax cross-entropy's gradient (softmax, one_hot, sub, numel, div, mul) as one "
     "softmax_cross_entropy_grad node; with the loss in the graph and dy 1, loss and gradient "
     "as one softmax_cross_entropy_and_grad node (same bits)",
     1, fg_pass_xent_grad},
    {"epilogue",
     "matmul epilogues: relu(matmul + bias) and matmul + bias (bias [N]) become one fused_matmul "
     "that adds the bias and applies the relu on each tile of the product (same bits)",
     1, fg_pass_epilogue},
    {"conv_epilogue",
     "convolution epilogues: relu(conv2d), conv2d + z and relu(conv2d + z) (z the output's shape), "
     "and clip in relu's place, become one fused_conv2d or fused_conv2d_add that adds z and "
     "applies the relu or clip to the convolution's output as it is produced (same bits)",
     1, fg_pass_conv_epilogue},
    {"update_epilogue",
     "optimizer update epilogues: apply_sgd of a weight gradient matmul(a, dz, transpose_a) "
     "becomes "
     "one matmul_apply_sgd whose GEMM adds -lr * a^T dz into the variable (the gradient is never "
     "stored; rounded in the GEMM, not bitwise)",
     1, fg_pass_update_epilogue},
    {"grad_epilogue",
     "gradient epilogues: relu's gradient of a matmul's product, select(greater(y, 0), matmul, 0), "
     "becomes one fused_matmul_relu_grad that masks each tile of the product; a dense layer's "
     "weight and bias gradients, matmul(a, dz, transpose_a) and sum_to(dz, [N]), one "
     "matmul_bias_grad (same bits on the CPU)",
     1, fg_pass_grad_epilogue},
    {"transpose_matmul",
     "transposes around a matmul (attention's heads split and merged) folded into one "
     "permuted_matmul that reads the operands and writes the product in place as strided "
     "matrices (the same GEMM calls: same bits on the CPU)",
     1, fg_pass_transpose_matmul},
    {"fuse",
     "element-wise fusion: groups of float element-wise nodes (and fused_elementwise nodes) of one "
     "shape become one fused_elementwise node (one pass over memory, the same bits)",
     1, fg_pass_fuse},
    {"multi_update",
     "multi-tensor optimizer updates: a step's apply_sgd, apply_momentum or apply_adam nodes of "
     "one dtype and hyper-parameters become one multi_apply_* node (one parallel loop on the CPU, "
     "one launch per 32 variables on the GPU; the same bits)",
     1, fg_pass_multi_update},
    {"dce", "dead nodes: nodes no kept node needs are removed", 1, fg_pass_dce},
};
const int n_fg_passes = (int)(sizeof fg_passes / sizeof fg_passes[0]);

int fg_pass_count(void) { return n_fg_passes; }
const char *fg_pass_name(int i) { return i >= 0 && i < n_fg_passes ? fg_passes[i].name : NULL; }
const char *fg_pass_description(int i) {
  return i >= 0 && i < n_fg_passes ? fg_passes[i].doc : NULL;
}
int fg_pass_default_on(int i) { return i >= 0 && i < n_fg_passes && fg_passes[i].default_on; }

static int pass_lookup(const char *name, size_t len) {
  for (int i = 0; i < n_fg_passes; i++)
    if (strlen(fg_passes[i].name) == len && strncmp(fg_passes[i].name, name, len) == 0) return i;
  return -1;
}

static void unknown_pass(const char *name, size_t len, fg_status *st) {
  char known[256] = "";
  for (int i = 0; i < n_fg_passes; i++) {
    if (i) strncat(known, ", ", sizeof known - strlen(known) - 1);
    strncat(known, fg_passes[i].name, sizeof known - strlen(known) - 1);
  }
  fg_status_set(st, FG_INVALID_ARGUMENT, "unknown pass '%.*s' (known: %s)", (int)len, name, known);
}

/* The pass ids a list names, in its order, into *out (malloc'ed; the
 * default pipeline for NULL). Returns the count, or -1 with the status. */
static int select_passes(const char *list, int **out, fg_status *st) {
  size_t cap = (list ? strlen(list) : 0) + (size_t)n_fg_passes + 1;
  int *ids = malloc(cap * sizeof *ids), n = 0;
  if (!ids) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "passes: out of memory");
    return -1;
  }
  for (int i = 0; !list && i < n_fg_passes; i++)
    if (fg_passes[i].default_on) ids[n++] = i;
  for (const char *p = list; p && *p;) {
    p += strspn(p, " ,");
    size_t len = strcspn(p, " ,");
    if (len == 0) break;
    int id = pass_lookup(p, len);
    if (id < 0) {
      unknown_pass(p, len, st);
      free(ids);
      return -1;
    }
    ids[n++] = id;
    p += len;
  }
  *out = ids;
  return n;
}

int fg_pass_list_check(const char *list, fg_status *st) {
  int *ids = NULL;
  int n = select_passes(list, &ids, st);
  free(ids);
  if (n < 0) return -1;
  fg_status_clear(st);
  return 0;
}

int fg_pass_pipeline_run(fg_pass_graph *w, const fg_pass_options *opts, unsigned char *keep,
                         const int *group, unsigned char *dead, fg_pass_report *report,
                         fg_status *st) {
  int *ids = NULL;
  int n = opts && opts->disable ? 0 : select_passes(opts ? opts->passes : NULL, &ids, st);
  if (n < 0) return -1;
  /* Its own keep and dead: a pass may append nodes (fg_pass_add_constant),
   * and they grow with the graph; dead goes back for the source's nodes. */
  const int n0 = w->g.n_nodes;
  size_t n1 = (size_t)n0 + 1;
  fg_pass_ctx ctx = {.w = w,
                     .fwd = malloc(n1 * sizeof(fg_output)),
                     .dead = malloc(n1),
                     .keep = malloc(n1),
                     .cap = n0,
                     .group = group ? malloc(n1 * sizeof(int)) : NULL,
                     .report = report,
                     .all_kept = 1};
  int rc = ctx.fwd && ctx.dead && ctx.keep && (!group || ctx.group) ? 0 : -1;
  if (rc == 0 && group) memcpy(ctx.group, group, (size_t)n0 * sizeof *group);
  if (rc) fg_status_set(st, FG_RESOURCE_EXHAUSTED, "passes: out of memory");
  for (int id = 0; rc == 0 && id < n0; id++) {
    ctx.fwd[id] = (fg_output){-1, -1};
    ctx.keep[id] = keep[id], ctx.dead[id] = dead[id];
    ctx.all_kept &= keep[id] != 0;
  }
  for (int k = 0; rc == 0 && k < n; k++) {
    ctx.pass = fg_passes[ids[k]].name;
    rc = fg_passes[ids[k]].run(&ctx, st);
    /* Every consumer reads the replacements before the next pass looks. */
    for (int id = 0; rc == 0 && id < w->g.n_nodes; id++)
      fg_pass_resolve_inputs(&ctx, id);
  }
  /* A kept node stays, even retired (fg_pass_retire): dead to the passes
   * only. */
  for (int id = 0; rc == 0 && id < n0; id++)
    dead[id] = ctx.dead[id] && !keep[id];
  free(ids);
  free(ctx.fwd);
  free(ctx.dead);
  free(ctx.keep);
  free(ctx.group);
  return rc;
}
