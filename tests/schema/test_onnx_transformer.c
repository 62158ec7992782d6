/* The transformer encoder of issue 34 imported from ONNX and compared with
 * PyTorch: tests/schema/onnx/transformer.py exports
 * torch.nn.TransformerEncoder (2 layers, d_model 64, 4 heads, GELU, layer
 * norm, batch_first) from PyTorch 1.13 at opsets 13 and 17, with a fixed
 * and with a dynamic batch, and saves PyTorch's outputs.
 *
 * Tolerance (f32): |got - want| <= 1e-5 + 1e-4 |want|. The relative part
 * is the 1e-4; the absolute part is needed because the outputs
 * come out of a layer norm, so they cross zero, where any relative bound
 * fails on rounding alone: 1e-5 is about 80 f32 ulps at the outputs'
 * magnitude (around 1), well above the rounding of 64-term dot products
 * summed in another order, well below any real error. Measured: at most
 * 9.5e-7 absolute over the four models and both batch sizes.
 *
 * The export holds the ops of every mapper table (Shape/Gather/Unsqueeze/
 * Concat/Reshape/Slice/Transpose here; MatMul, Gemm, Softmax,
 * LayerNormalization from onnx_map_nn.c; Add, Mul, Div, Sub, Pow, Sqrt,
 * Erf, ReduceMean from onnx_map_math.c; Constant, Identity, Shape, Cast
 * from onnx_map_core.c). */
#include <stdio.h>
#include <string.h>

#include "fgtest.h"
#include "flowgraph/graph.h"
#include "flowgraph/onnx.h"
#include "flowgraph/session.h"
#include "flowgraph/tensor.h"
#include "onnx_test_util.h"

#define RTOL 1e-4
#define ATOL 1e-5

/* Feeds dir/name.in.x.npy to the session, compares output 0 with
 * name.out.0.npy and prints the largest errors. */
static void run_compare(fg_session *s, fg_graph *g, const char *dir, const char *name) {
  char path[1024], fetch[512];
  fg_status *st = fg_status_new();
  snprintf(path, sizeof path, "%s/%s.in.x.npy", dir, name);
  fg_tensor *x = fg_npy_read(path, st);
  snprintf(path, sizeof path, "%s/%s.out.0.npy", dir, name);
  fg_tensor *want = x ? fg_npy_read(path, st) : NULL;
  fg_tensor *got = NULL;
  fg_output o = fg_graph_output(g, 0);
  snprintf(fetch, sizeof fetch, "%s:%d", fg_node_name(g, o.node), o.index);
  const char *fetches[1] = {fetch};
  fg_feed feed = {"x", x};
  if (want) fg_session_run(s, &feed, 1, fetches, 1, &got, NULL, 0, st);
  if (!got) {
    FG_FAIL_AT("%s: %s", name, fg_status_message(st));
  } else if (fg_tensor_num_elements(got) != fg_tensor_num_elements(want) ||
             fg_tensor_rank(got) != 3 || fg_tensor_dim(got, 0) != fg_tensor_dim(want, 0)) {
    FG_FAIL_AT("%s: got %lld elements, want %lld", name, (long long)fg_tensor_num_elements(got),
               (long long)fg_tensor_num_elements(want));
  } else {
    const float *a = fg_tensor_data(got), *b = fg_tensor_data(want);
    double max_abs = 0, max_rel = 0;
    int bad = 0;
    for (int64_t i = 0; i < fg_tensor_num_elements(want); i++) {
      double e = fabs((double)a[i] - b[i]);
      if (e > max_abs) max_abs = e;
      if (fabs(b[i]) > 1e-3 && e / fabs(b[i]) > max_rel) max_rel = e / fabs(b[i]);
      if (!(e <= ATOL + RTOL * fabs(b[i])) && bad++ < 5)
        FG_FAIL_AT("%s: element %lld: got %.9g, want %.9g", name, (long long)i, a[i], b[i]);
    }
    printf("%s: max abs error %.3g, max rel error %.3g (where |want| > 1e-3)\n", name, max_abs,
           max_rel);
  }
  fg_tensor_free(got);
  fg_tensor_free(x);
  fg_tensor_free(want);
  fg_status_free(st);
}

/* Imports dir/model.onnx and runs it on each case of `names` in one
 * session (a dynamic model at two batch sizes: two plans). */
static void check_transformer(const char *model, const char *const *names, int n) {
  if (!fg_onnx_available()) FG_SKIP("built without ONNX");
  const char *dir = onnx_cases("transformer.py");
  FG_REQUIRE(dir != NULL);
  char path[1024];
  fg_status *st = fg_status_new();
  snprintf(path, sizeof path, "%s/%s.onnx", dir, model);
  fg_graph *g = fg_onnx_load(path, NULL, st);
  fg_session *s = g ? fg_session_new(g, NULL, st) : NULL;
  if (!s) FG_FAIL_AT("%s: %s: %s", model, fg_code_name(fg_status_code(st)), fg_status_message(st));
  for (int i = 0; s && i < n; i++)
    run_compare(s, g, dir, names[i]);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

#define ONE(model) check_transformer(model, (const char *const[]){model}, 1)
#define TWO(model) check_transformer(model, (const char *const[]){model, model "_b5"}, 2)

FG_TEST(onnx_transformer_op13_fixed, "onnx") { ONE("tfm_op13_fixed"); }
FG_TEST(onnx_transformer_op17_fixed, "onnx") { ONE("tfm_op17_fixed"); }
/* A dynamic batch axis: one session run at batch 2, then at batch 5. */
FG_TEST(onnx_transformer_op13_dyn, "onnx") { TWO("tfm_op13_dyn"); }
FG_TEST(onnx_transformer_op17_dyn, "onnx") { TWO("tfm_op17_dyn"); }
