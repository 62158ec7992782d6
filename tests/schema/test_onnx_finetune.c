/* Fine-tuning an imported model: resnet18 (batch norm folded, as PyTorch
 * exports an eval-mode model) imported with trainable initializers, a
 * cross-entropy loss and SGD added with fg_minimize, three steps. The
 * losses must match the same three steps in PyTorch (finetune.py computes
 * them) within 1e-4 relative. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fgtest.h"
#include "flowgraph/flowgraph.h"
#include "onnx_test_util.h"

static fg_tensor *npy(const char *dir, const char *name, fg_status *st) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return fg_npy_read(path, st);
}

FG_TEST(onnx_resnet18_finetune_matches_pytorch, "") {
  const char *dir = onnx_cases("finetune.py");
  if (!dir) return;
  char path[1024];
  snprintf(path, sizeof path, "%s/resnet18_fused.onnx", dir);
  fg_status *st = fg_status_new();
  fg_onnx_options opts;
  fg_onnx_options_init(&opts);
  opts.trainable = 1;
  fg_graph *g = fg_onnx_load(path, &opts, st);
  if (!g) FG_FAIL_AT("import: %s", fg_status_message(st));
  fg_tensor *x = npy(dir, "input.npy", st), *y = npy(dir, "labels.npy", st);
  fg_tensor *want = npy(dir, "losses.npy", st);
  FG_REQUIRE(g && x && y && want && fg_tensor_num_elements(want) == 3);
  int64_t n = 2;
  fg_output labels = fg_placeholder(g, "labels", FG_I64, 1, &n);
  fg_output logits = fg_graph_find_output(g, "output");
  fg_output loss = fg_set_name(g, fg_softmax_cross_entropy(g, logits, labels), "loss");
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  cfg.learning_rate = 0.01;
  fg_output train = fg_minimize(g, loss, NULL, 0, &cfg, st);
  if (train.node < 0) FG_FAIL_AT("fg_minimize: %s", fg_status_message(st));
  fg_session *s = fg_session_new(g, NULL, st);
  if (!s) FG_FAIL_AT("session: %s", fg_status_message(st));
  fg_feed feeds[2] = {{"input", x}, {"labels", y}};
  const char *fetch = "loss", *target = fg_node_name(g, train.node);
  const double *w = fg_tensor_data(want);
  for (int step = 0; step < 3 && s; step++) {
    fg_tensor *got = NULL;
    if (fg_session_run(s, feeds, 2, &fetch, 1, &got, &target, 1, st) != 0)
      FG_FAIL_AT("step %d: %s", step, fg_status_message(st));
    double v = got ? *(const float *)fg_tensor_data(got) : NAN;
    if (!(fabs(v - w[step]) <= 1e-4 * fabs(w[step])))
      FG_FAIL_AT("step %d: loss %.8g, PyTorch %.8g (relative difference %.3g, tolerance 1e-4)",
                 step, v, w[step], fabs(v - w[step]) / fabs(w[step]));
    fg_tensor_free(got);
  }
  fg_session_free(s);
  fg_tensor_free(x);
  fg_tensor_free(y);
  fg_tensor_free(want);
  fg_graph_free(g);
  fg_status_free(st);
}
