/* `flowgraph export`: the digits MLP and CNN trained by `flowgraph train`, exported,
 * checked by onnx.checker and evaluated by check_export.py's reference
 * interpreter against flowgraph's run of the trained model; re-imported,
 * it predicts the same classes. Usage and runtime errors. */
#include "onnx_export_util.h"
#include "test_cli_train_util.h"

/* Trains the digits MLP for 2 epochs (the CNN, slower to start, for 8)
 * into dir/trained.fgb. */
static int train_digits(int cnn) {
  if (run_builder_at(cnn ? DIGITS_CNN_BUILDER : DIGITS_BUILDER, tpath("digits.fgb")) != 0)
    return -1;
  cli_result r;
  int rc = cli(&r, "train", tpath("digits.fgb"), "-i", "x=" DIGITS_DATA "/train_x.npy", "-i",
               "y=" DIGITS_DATA "/train_y.npy", "--batch", "64", "--epochs", cnn ? "8" : "2",
               "--shuffle", "1", "-q", "--save", tpath("trained.fgb"), NULL);
  if (rc == 0) CHECK_OK(r);
  rc = rc == 0 && r.code == 0 ? 0 : -1;
  result_free(&r);
  return rc;
}

/* round_trip: also re-import the file (fg_onnx_load and `flowgraph run`). */
static void trained_digits(int cnn, int round_trip) {
  FG_REQUIRE(make_tmpdir());
  snprintf(ox_dir, sizeof ox_dir, "%s", tmpdir);
  FG_REQUIRE(train_digits(cnn) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "export", tpath("trained.fgb"), "-o", tpath("digits.onnx"), NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "wrote ");
  FG_CHECK_STR_CONTAINS(r.out, "outputs: probs prediction");
  result_free(&r);

  /* Python evaluates the file on the test digits; flowgraph runs the
   * trained .fgb on the same rows. */
  fg_status *st = fg_status_new();
  fg_tensor *x = fg_npy_read(DIGITS_DATA "/test_x.npy", st);
  FG_REQUIRE(x);
  FG_REQUIRE(fg_npy_write(ox_in_path("digits", "x"), x, st) == 0);
  int rc = ox_python("digits", 17);
  FG_CHECK_PYTHON(rc);
  fg_graph *g = fg_graph_load(tpath("trained.fgb"), st);
  FG_REQUIRE(g);
  const char *fetches[2] = {"probs", "prediction"};
  fg_feed feed = {"x", x};
  fg_tensor *outs[2] = {0};
  FG_REQUIRE(ox_run(g, &feed, 1, fetches, 2, outs) == 0);
  for (int k = 0; rc == 0 && k < 2; k++) {
    char suffix[32];
    snprintf(suffix, sizeof suffix, ".out.%d.npy", k);
    fg_tensor *want = fg_npy_read(tpath(k ? "digits.out.1.npy" : "digits.out.0.npy"), st);
    FG_REQUIRE(want);
    ox_compare(fetches[k], outs[k], want, cnn ? 1e-4 : 1e-5, 1e-6);
    fg_tensor_free(want);
  }
  /* Trained, not chance: most test digits are right (the labels are the
   * data's own). */
  fg_tensor *y = fg_npy_read(DIGITS_DATA "/test_y.npy", st);
  FG_REQUIRE(y);
  int64_t n = fg_tensor_num_elements(y), right = 0;
  for (int64_t i = 0; i < n; i++)
    right += ox_at(outs[1], i) == ox_at(y, i);
  FG_CHECK((double)right / (double)n > 0.8);
  if (round_trip) ox_round_trip("digits", &feed, 1, fetches, 2, outs, 1e-6);

  /* `flowgraph run` on the .onnx predicts what it predicts on the .fgb. */
  if (round_trip && ox_importer_maps_ops()) {
    char in[600], o1[600], o2[600];
    snprintf(in, sizeof in, "x=%s", DIGITS_DATA "/test_x.npy");
    snprintf(o1, sizeof o1, "prediction=%s", tpath("p_onnx.npy"));
    snprintf(o2, sizeof o2, "prediction=%s", tpath("p_fgb.npy"));
    FG_REQUIRE(cli(&r, "run", tpath("digits.onnx"), "-i", in, "-o", o1, NULL) == 0);
    CHECK_OK(r);
    result_free(&r);
    FG_REQUIRE(cli(&r, "run", tpath("trained.fgb"), "-i", in, "-o", o2, NULL) == 0);
    CHECK_OK(r);
    result_free(&r);
    fg_tensor *a = fg_npy_read(tpath("p_onnx.npy"), st), *b = fg_npy_read(tpath("p_fgb.npy"), st);
    FG_REQUIRE(a && b);
    ox_compare("prediction via flowgraph run", a, b, 0, 0);
    fg_tensor_free(a), fg_tensor_free(b);
    /* The imported model exports again, to a file that predicts the same. */
    FG_REQUIRE(cli(&r, "export", tpath("digits.onnx"), "-o", tpath("again.onnx"), NULL) == 0);
    CHECK_OK(r);
    result_free(&r);
    snprintf(o1, sizeof o1, "prediction=%s", tpath("p_again.npy"));
    FG_REQUIRE(cli(&r, "run", tpath("again.onnx"), "-i", in, "-o", o1, NULL) == 0);
    CHECK_OK(r);
    result_free(&r);
    a = fg_npy_read(tpath("p_again.npy"), st), b = fg_npy_read(tpath("p_fgb.npy"), st);
    FG_REQUIRE(a && b);
    ox_compare("prediction of the re-exported model", a, b, 0, 0);
    fg_tensor_free(a), fg_tensor_free(b);
  }
  for (int k = 0; k < 2; k++)
    fg_tensor_free(outs[k]);
  fg_tensor_free(x), fg_tensor_free(y);
  fg_graph_free(g);
  fg_status_free(st);
  fgt_rmtree(tmpdir);
}

FG_TEST(onnx_export_cli_trained_digits, "") { trained_digits(0, 0); }
FG_TEST(onnx_export_cli_round_trip_trained_digits, "") { trained_digits(0, 1); }
FG_TEST(onnx_export_cli_trained_digits_cnn, "") { trained_digits(1, 0); }
FG_TEST(onnx_export_cli_round_trip_trained_digits_cnn, "") { trained_digits(1, 1); }

FG_TEST(onnx_export_cli_fetch_and_opset, "") {
  FG_REQUIRE(make_tmpdir());
  snprintf(ox_dir, sizeof ox_dir, "%s", tmpdir);
  FG_REQUIRE(run_builder(tpath("digits.fgb")) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "export", tpath("digits.fgb"), "--output", tpath("logits.onnx"), "--fetch",
                 "logits", "--fetch=hidden2", "--opset", "13", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "opset 13, outputs: logits hidden2");
  result_free(&r);
  int64_t xd[2] = {5, 64};
  fg_tensor *x = ox_random(2, xd, 0, 16, 77);
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_npy_write(ox_in_path("logits", "x"), x, st) == 0);
  int rc = ox_python("logits", 13);
  FG_CHECK_PYTHON(rc);
  fg_graph *g = fg_graph_load(tpath("digits.fgb"), st);
  FG_REQUIRE(g);
  const char *fetches[2] = {"logits", "hidden2"};
  fg_feed feed = {"x", x};
  fg_tensor *outs[2] = {0};
  FG_REQUIRE(ox_run(g, &feed, 1, fetches, 2, outs) == 0);
  for (int k = 0; rc == 0 && k < 2; k++) {
    fg_tensor *want = fg_npy_read(tpath(k ? "logits.out.1.npy" : "logits.out.0.npy"), st);
    FG_REQUIRE(want);
    ox_compare(fetches[k], outs[k], want, 1e-5, 1e-5);
    fg_tensor_free(want);
    fg_tensor_free(outs[k]);
  }
  fg_tensor_free(x);
  fg_graph_free(g);
  fg_status_free(st);
  fgt_rmtree(tmpdir);
}

FG_TEST(onnx_export_cli_errors, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(run_builder(tpath("digits.fgb")) == 0);
  const char *m = tpath("digits.fgb");
  cli_result r;
  FG_REQUIRE(cli(&r, "export", m, NULL) == 0);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "missing -o OUT.onnx");
  result_free(&r);
  FG_REQUIRE(cli(&r, "export", m, "-o", tpath("m.fgb"), NULL) == 0);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "does not end in .onnx");
  result_free(&r);
  FG_REQUIRE(cli(&r, "export", m, "-o", tpath("m.onnx"), "--opset", "10", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "--opset");
  result_free(&r);
  FG_REQUIRE(cli(&r, "export", "-o", tpath("m.onnx"), NULL) == 0);
  CHECK_USAGE_ERROR(r);
  result_free(&r);
  FG_REQUIRE(cli(&r, "export", m, "-o", tpath("m.onnx"), "--fetch", "nope", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "fetch 'nope' names no output");
  result_free(&r);
  FG_REQUIRE(cli(&r, "export", m, "-o", tpath("m.onnx"), "--fetch", "train", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "fetch 'train' needs");
  result_free(&r);
  FG_REQUIRE(cli(&r, "export", tpath("absent.fgb"), "-o", tpath("m.onnx"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "absent.fgb");
  result_free(&r);
  FG_CHECK(!exists(tpath("m.onnx"))); /* no failure left a file */
  FG_REQUIRE(cli(&r, "help", "export", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "--opset N");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* Models made elsewhere go back out: torchvision's resnet18 and
 * squeezenet1_1 as PyTorch exports them, imported by `flowgraph export`
 * itself, written again, checked and evaluated by check_export.py against
 * PyTorch's own outputs (rtol 1e-4). Needs the importer's op mappers. */
FG_TEST(onnx_export_cli_reexport_torchvision, "slow") {
  if (!ox_importer_maps_ops()) FG_SKIP("the importer's op mappers are not in this build");
  FG_REQUIRE(make_tmpdir());
  snprintf(ox_dir, sizeof ox_dir, "%s", tmpdir);
  int rc =
      fgt_python_cached(tmpdir, FG_SOURCE_DIR "/tests/schema/onnx/export_torchvision.py", NULL);
  FG_CHECK_PYTHON(rc);
  static const char *const names[] = {"resnet18", "squeezenet1_1"};
  for (int i = 0; rc == 0 && i < 2; i++) {
    char model[600], back[600], in_from[600], in_to[600], want[600];
    snprintf(model, sizeof model, "%s/%s.onnx", tmpdir, names[i]);
    snprintf(back, sizeof back, "%s/%s_back.onnx", tmpdir, names[i]);
    cli_result r;
    FG_REQUIRE(cli(&r, "export", model, "-o", back, NULL) == 0);
    CHECK_OK(r);
    FG_CHECK_STR_CONTAINS(r.out, "outputs: logits");
    result_free(&r);
    /* check_export.py reads NAME_back.in.input.npy. */
    snprintf(in_from, sizeof in_from, "%s/%s.in.input.npy", tmpdir, names[i]);
    snprintf(in_to, sizeof in_to, "%s/%s_back.in.input.npy", tmpdir, names[i]);
    FG_REQUIRE(rename(in_from, in_to) == 0);
    char back_name[64];
    snprintf(back_name, sizeof back_name, "%s_back", names[i]);
    int prc = ox_python(back_name, 17);
    FG_CHECK_PYTHON(prc);
    if (prc != 0) continue;
    fg_status *st = fg_status_new();
    snprintf(want, sizeof want, "%s/%s.want.npy", tmpdir, names[i]);
    fg_tensor *w = fg_npy_read(want, st), *got = fg_npy_read(ox_path(back_name, ".out.0.npy"), st);
    FG_REQUIRE(w && got);
    ox_compare(names[i], got, w, 1e-4, 1e-5);
    fg_tensor_free(w), fg_tensor_free(got);
    fg_status_free(st);
  }
  fgt_rmtree(tmpdir);
}
