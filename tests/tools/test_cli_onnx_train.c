/* Fine-tuning an ONNX model from the command line: a PyTorch MLP exported
 * with its cross-entropy loss, imported with --trainable, gets its training
 * step from --optimizer sgd --lr 0.1 and trains for 3 epochs; the epoch
 * losses and the trained last layer are PyTorch's same SGD steps
 * (tests/schema/onnx/train_cli.py). Bad combinations are refused. */
#include <math.h>

#include "flowgraph/io.h"
#include "schema/onnx_test_util.h"
#include "test_cli_train_util.h"

static char pbuf[4][1024];

static const char *dpath(const char *dir, const char *name, int slot) {
  snprintf(pbuf[slot], sizeof pbuf[slot], "%s/%s", dir, name);
  return pbuf[slot];
}

FG_TEST(cli_onnx_train_optimizer_matches_pytorch, "onnx") {
  if (!fg_onnx_available()) FG_SKIP("this flowgraph was built without ONNX");
  const char *d = onnx_cases("train_cli.py");
  FG_REQUIRE(d && make_tmpdir());
  char xi[1100], yi[1100];
  snprintf(xi, sizeof xi, "x=%s/x.npy", d);
  snprintf(yi, sizeof yi, "y=%s/y.npy", d);
  const char *model = dpath(d, "mlp_loss.onnx", 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "train", model, "--trainable", "--loss", "loss", "--optimizer", "sgd", "--lr",
                 "0.1", "-i", xi, "-i", yi, "--batch", "8", "--epochs", "3", "--save",
                 tpath("tuned.fgb"), NULL) == 0);
  CHECK_OK(r);
  double got[3];
  FG_CHECK_INT(parse_epochs(r.out, got, 3, NULL, NULL), 3);
  fg_status *st = fg_status_new();
  fg_tensor *want = fg_npy_read(dpath(d, "losses.npy", 1), st);
  fg_tensor *w_last = fg_npy_read(dpath(d, "w_last.npy", 2), st);
  FG_REQUIRE(want && w_last);
  /* The CLI prints 6 significant digits. */
  for (int e = 0; e < 3; e++) {
    const double w = ((const double *)fg_tensor_data(want))[e];
    if (!(fabs(got[e] - w) <= 1e-5 * fabs(w)))
      FG_FAIL_AT("epoch %d: loss %.8g, PyTorch %.8g", e + 1, got[e], w);
  }
  float trained[48];
  FG_CHECK_INT(saved_variable(tpath("tuned.fgb"), "net.2.weight", trained, 48), 48);
  for (int i = 0; i < 48; i++) {
    const double w = ((const float *)fg_tensor_data(w_last))[i];
    if (!(fabs(trained[i] - w) <= 1e-5 + 1e-5 * fabs(w)))
      FG_FAIL_AT("net.2.weight[%d] = %.8g, PyTorch %.8g", i, trained[i], w);
  }
  result_free(&r);
  /* The saved model has its step now: a second --optimizer is refused. */
  FG_REQUIRE(cli(&r, "train", tpath("tuned.fgb"), "--loss", "loss", "--optimizer", "sgd", "-i", xi,
                 "-i", yi, "--batch", "8", "--epochs", "1", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "already has a training step");
  result_free(&r);
  fg_tensor_free(want);
  fg_tensor_free(w_last);
  fg_status_free(st);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_onnx_train_optimizer_refusals, "onnx,badinput") {
  if (!fg_onnx_available()) FG_SKIP("this flowgraph was built without ONNX");
  const char *d = onnx_cases("train_cli.py");
  FG_REQUIRE(d && make_tmpdir());
  char xi[1100], yi[1100];
  snprintf(xi, sizeof xi, "x=%s/x.npy", d);
  snprintf(yi, sizeof yi, "y=%s/y.npy", d);
  const char *model = dpath(d, "mlp_loss.onnx", 0);
  cli_result r;
  /* Without --trainable the weights are constants: nothing to train. */
  FG_REQUIRE(cli(&r, "train", model, "--loss", "loss", "--optimizer", "sgd", "-i", xi, "-i", yi,
                 "--batch", "8", "--epochs", "1", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "", "imported with --trainable");
  result_free(&r);
  FG_REQUIRE(cli(&r, "train", model, "--trainable", "--loss", "loss", "--lr", "0.1", "-i", xi, "-i",
                 yi, "--batch", "8", "--epochs", "1", NULL) == 0);
  /* --lr alone sets a step's rate; this model has none to set. */
  CHECK_RUNTIME_ERROR(r, "", "a model without a training step needs --optimizer to build one");
  result_free(&r);
  FG_REQUIRE(cli(&r, "train", model, "--trainable", "--optimizer", "rmsprop", "--loss", "loss",
                 "-i", xi, "-i", yi, "--batch", "8", "--epochs", "1", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "--optimizer needs sgd, momentum, adam or adamw");
  result_free(&r);
  FG_REQUIRE(cli(&r, "train", model, "--trainable", "--optimizer", "sgd", "-i", xi, "-i", yi,
                 "--batch", "8", "--epochs", "1", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "--optimizer needs --loss NAME");
  result_free(&r);
  FG_REQUIRE(cli(&r, "train", model, "--trainable", "--optimizer", "sgd", "--lr", "-3", "--loss",
                 "loss", "-i", xi, "-i", yi, "--batch", "8", "--epochs", "1", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "--lr needs a learning rate");
  result_free(&r);
  fgt_rmtree(tmpdir);
}
