/* A GPU session's passes on a machine where NVRTC does not load: the
 * fused_elementwise nodes they would make get their CUDA kernels from
 * NVRTC when the plan is built, so there they make none (element-wise
 * fusion, and fold_inference's batch norm as x * a + b), and the nodes run
 * unfused instead of every plan failing. The CPU passes fuse as before.
 * fgc_nvrtc_available is wrapped at link time (tests/CMakeLists.txt) to
 * say NVRTC is missing, whatever this machine has. */
#include <stdio.h>

#include "executor/passes/passes.h"
#include "graph/op_table.h"
#include "test_passes_util.h"

int __wrap_fgc_nvrtc_available(char *why, size_t why_size);
int __wrap_fgc_nvrtc_available(char *why, size_t why_size) {
  if (why && why_size > 0) snprintf(why, why_size, "NVRTC could not be loaded (test)");
  return 0;
}

/* The nodes of the session's working copy running `op`. */
static int ops_in_copy(const fg_graph *g, int gpu, int op) {
  fg_status *st = fg_status_new();
  fg_pass_graph *w = fg_passes_for_session(g, NULL, NULL, NULL, gpu, st);
  FG_CHECK(w != NULL);
  int n = 0;
  for (int id = 0; w && id < w->g.n_nodes; id++)
    n += w->g.nodes[id].op == op;
  fg_pass_graph_free(w);
  fg_status_free(st);
  return n;
}

static fg_output constant_of(fg_graph *g, const char *name, int rank, const int64_t *dims,
                             double v) {
  fg_tensor *t = fg_tensor_new(FG_F32, rank, dims, NULL);
  for (int64_t i = 0; i < fg_tensor_num_elements(t); i++)
    ((float *)fg_tensor_data(t))[i] = (float)(v + 0.25 * (double)i);
  fg_output o = fg_constant(g, name, t);
  fg_tensor_free(t);
  return o;
}

/* relu(x + b) * 2: one fused node on the CPU, none on the GPU. */
FG_TEST(passes_gpu_without_nvrtc_does_not_fuse, "") {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {4, 1024}, bd[1] = {1024};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output h = fg_relu(g, fg_add(g, x, constant_of(g, "b", 1, bd, -1)));
  fg_set_name(g, fg_mul(g, h, constant_of(g, "two", 0, NULL, 2)), "out");
  FG_CHECK_INT(ops_in_copy(g, 0, FG_OP_FUSED_ELEMENTWISE), 1);
  FG_CHECK_INT(ops_in_copy(g, 1, FG_OP_FUSED_ELEMENTWISE), 0);
  fg_graph_free(g);
}

/* A batch norm in inference over [2, 3, 16, 32] (planes of 512) folds into
 * fused_elementwise mul+add on the CPU; on the GPU without NVRTC it stays
 * a batch_norm. */
FG_TEST(passes_gpu_without_nvrtc_keeps_batch_norm, "") {
  fg_graph *g = fg_graph_new();
  int64_t xd[4] = {2, 3, 16, 32}, cd[1] = {3};
  fg_output in[6];
  in[0] = fg_placeholder(g, "x", FG_F32, 4, xd);
  const char *names[4] = {"bn_g", "bn_b", "bn_m", "bn_v"};
  for (int i = 0; i < 4; i++)
    in[1 + i] = constant_of(g, names[i], 1, cd, 0.5 + i);
  unsigned char f = 0;
  fg_tensor *mode = fg_tensor_from_data(FG_BOOL, 0, NULL, &f, 1, NULL);
  in[5] = fg_constant(g, "mode", mode);
  fg_tensor_free(mode);
  fg_set_name(g, fg_op(g, "batch_norm", "bn", in, 6, NULL), "out");
  FG_REQUIRE(fg_graph_num_nodes(g) == 7);
  FG_CHECK_INT(ops_in_copy(g, 0, FG_OP_BATCH_NORM), 0);
  FG_CHECK_INT(ops_in_copy(g, 0, FG_OP_FUSED_ELEMENTWISE), 1);
  FG_CHECK_INT(ops_in_copy(g, 1, FG_OP_BATCH_NORM), 1);
  FG_CHECK_INT(ops_in_copy(g, 1, FG_OP_FUSED_ELEMENTWISE), 0);
  fg_graph_free(g);
}
