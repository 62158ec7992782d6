/* The `flowgraph` binary end to end: help, usage errors (exit 2), inspect
 * and convert. `run` cases are in test_cli_run.c; the harness (spawning,
 * capture, models, reference forward pass) in test_cli_harness.h. */
#include "test_cli_harness.h"

/* ---- help and usage ------------------------------------------------------------- */

FG_TEST(cli_help, "") {
  FG_REQUIRE(make_tmpdir());
  cli_result r;
  const char *forms[2] = {"--help", "help"};
  for (int i = 0; i < 2; i++) {
    FG_REQUIRE(cli(&r, forms[i], NULL) == 0);
    CHECK_OK(r);
    FG_CHECK_STR_CONTAINS(r.out, "usage: flowgraph COMMAND");
    FG_CHECK_STR_CONTAINS(r.out, "inspect");
    FG_CHECK_STR_CONTAINS(r.out, "run");
    FG_CHECK_STR_CONTAINS(r.out, "convert");
    result_free(&r);
  }
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_help_subcommands, "") {
  FG_REQUIRE(make_tmpdir());
  cli_result r;
  FG_REQUIRE(cli(&r, "help", "run", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "--random-inputs");
  FG_CHECK_STR_CONTAINS(r.out, "[-1, 1)");
  result_free(&r);
  FG_REQUIRE(cli(&r, "run", "--help", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "--repeat");
  result_free(&r);
  FG_REQUIRE(cli(&r, "inspect", "--help", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "flowgraph inspect MODEL.fgb");
  result_free(&r);
  FG_REQUIRE(cli(&r, "convert", "-h", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "flowgraph convert IN OUT");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_version, "") {
  FG_REQUIRE(make_tmpdir());
  cli_result r;
  FG_REQUIRE(cli(&r, "--version", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "flowgraph 0.1.0");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_usage_no_command, "") {
  FG_REQUIRE(make_tmpdir());
  cli_result r;
  FG_REQUIRE(cli(&r, NULL) == 0);
  CHECK_USAGE_ERROR(r);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_usage_unknown_command, "") {
  FG_REQUIRE(make_tmpdir());
  cli_result r;
  FG_REQUIRE(cli(&r, "frobnicate", "x.fgb", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "frobnicate");
  result_free(&r);
  FG_REQUIRE(cli(&r, "help", "frobnicate", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  result_free(&r);
  FG_REQUIRE(cli(&r, "--frobnicate", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_usage_unknown_flag, "") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "--bogus", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "--bogus");
  result_free(&r);
  FG_REQUIRE(cli(&r, "inspect", tpath("mlp.fgb"), "-x", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_usage_missing_values, "") {
  FG_REQUIRE(setup_mlp() == 0);
  const char *flags[6] = {"-i", "-o", "--fetch", "--repeat", "--seed", "--threads"};
  for (int i = 0; i < 6; i++) {
    cli_result r;
    FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), flags[i], NULL) == 0);
    CHECK_USAGE_ERROR(r);
    FG_CHECK_STR_CONTAINS(r.err, flags[i]);
    result_free(&r);
  }
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_usage_bad_pairs, "") {
  FG_REQUIRE(setup_mlp() == 0);
  const char *pairs[5] = {"x", "=x.npy", "x=", "", "noequals.npy"};
  for (int i = 0; i < 5; i++) {
    cli_result r;
    FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", pairs[i], NULL) == 0);
    CHECK_USAGE_ERROR(r);
    result_free(&r);
    FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-o", pairs[i], NULL) == 0);
    CHECK_USAGE_ERROR(r);
    result_free(&r);
  }
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_usage_bad_numbers, "") {
  FG_REQUIRE(setup_mlp() == 0);
  const char *cases[][2] = {
      {"--repeat", "0"},    {"--repeat", "100000000"}, {"--repeat", "abc"},
      {"--repeat", "-1"},   {"--repeat", "5x"},        {"--repeat", "99999999999999999999999"},
      {"--seed", "-1"},     {"--batch", "0"},          {"--batch", "10000000"},
      {"--threads", "two"}, {"--threads", ""},         {"--seed", " 1"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cli_result r;
    FG_REQUIRE(
        cli(&r, "run", tpath("mlp.fgb"), "--random-inputs", cases[i][0], cases[i][1], NULL) == 0);
    CHECK_USAGE_ERROR(r);
    result_free(&r);
  }
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_usage_positional_counts, "") {
  FG_REQUIRE(make_tmpdir());
  cli_result r;
  FG_REQUIRE(cli(&r, "run", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  result_free(&r);
  FG_REQUIRE(cli(&r, "run", "a.fgb", "b.fgb", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  result_free(&r);
  FG_REQUIRE(cli(&r, "inspect", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  result_free(&r);
  FG_REQUIRE(cli(&r, "convert", "a.fgb", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  result_free(&r);
  FG_REQUIRE(cli(&r, "convert", "a.fgb", "b.json", "c.json", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_usage_convert_extensions, "") {
  FG_REQUIRE(make_tmpdir());
  const char *cases[][2] = {{"a.fgb", "b.fgb"},  {"a.json", "b.JSON"}, {"a.txt", "b.fgb"},
                            {"a.fgb", "b.onnx"}, {"a", "b.json"},      {"a.fgb", ".json"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cli_result r;
    FG_REQUIRE(cli(&r, "convert", tpath(cases[i][0]), tpath(cases[i][1]), NULL) == 0);
    CHECK_USAGE_ERROR(r);
    result_free(&r);
  }
  FG_CHECK_INT(fgt_count_entries(tmpdir), 0);
  fgt_rmtree(tmpdir);
}

/* ---- inspect -------------------------------------------------------------------- */

FG_TEST(cli_inspect_mlp, "") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "inspect", tpath("mlp.fgb"), NULL) == 0);
  CHECK_OK(r);
  const char *want[] = {"x: f32 [?,4]", "probs: f32 [?,2]",
                        "placeholder",  "variable",
                        "constant",     "matmul",
                        "relu",         "softmax",
                        "x:0, W1:0",    "mm1:0, b1:0",
                        "f32 [4,3]",    "f32 [?,3]",
                        "cpu:0",        "producer: test_cli",
                        "logits"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    FG_CHECK_STR_CONTAINS(r.out, want[i]);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_inspect_parameter_counts, "") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "inspect", tpath("mlp.fgb"), NULL) == 0);
  CHECK_OK(r);
  /* W1 4x3 + W2 3x2 = 18 trainable (72 bytes); b1 3 + b2 2 = 5 (20 bytes). */
  FG_CHECK_STR_CONTAINS(r.out, "parameters: 23 (92 bytes) in 4 tensors");
  FG_CHECK_STR_CONTAINS(r.out, "trainable (variables): 18 (72 bytes) in 2 tensors");
  FG_CHECK_STR_CONTAINS(r.out, "constants: 5 (20 bytes) in 2 tensors");
  /* The batch is unknown, so the FLOPs of most nodes are too. */
  FG_CHECK_STR_CONTAINS(r.out, "over known shapes");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_inspect_flops_known_shapes, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_fixed(tpath("fixed.fgb")) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "inspect", tpath("fixed.fgb"), NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "total flops: 54\n");
  FG_CHECK_STR_CONTAINS(r.out, "  48\n"); /* the matmul row ends in its FLOPs */
  FG_CHECK_STR_CONTAINS(r.out, "a: f32 [2,4]");
  FG_CHECK_STR_CONTAINS(r.out, "out: f32 [2,3]");
  FG_CHECK_STR_CONTAINS(r.out, "parameters: 15 (60 bytes) in 2 tensors");
  FG_CHECK_STR_CONTAINS(r.out, "trainable (variables): 0 (0 bytes)");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_inspect_missing_file, "badinput") {
  FG_REQUIRE(make_tmpdir());
  cli_result r;
  FG_REQUIRE(cli(&r, "inspect", tpath("nope.fgb"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "nope.fgb");
  FG_CHECK_INT(strlen(r.out), 0);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* ---- convert ---------------------------------------------------------------------- */

FG_TEST(cli_convert_round_trip_runs_identically, "") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "convert", tpath("mlp.fgb"), tpath("mlp.json"), NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  char *json = slurp(tpath("mlp.json"));
  FG_CHECK(json && strlen(json) > 10);
  FG_CHECK_STR_CONTAINS(json, "probs");
  free(json);
  FG_REQUIRE(cli(&r, "convert", tpath("mlp.json"), tpath("back.fgb"), NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  char in[600], o1[600], o2[600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  snprintf(o1, sizeof o1, "probs=%s", tpath("p1.npy"));
  snprintf(o2, sizeof o2, "probs=%s", tpath("p2.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "-o", o1, NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  FG_REQUIRE(cli(&r, "run", tpath("back.fgb"), "-i", in, "-o", o2, NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  char *a = slurp(tpath("p1.npy")), *b = slurp(tpath("p2.npy"));
  FG_REQUIRE(a && b);
  FG_CHECK(memcmp(a, b, 128 + 16) == 0);
  free(a);
  free(b);
  /* The JSON form inspects the same. */
  FG_REQUIRE(cli(&r, "inspect", tpath("mlp.json"), NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "parameters: 23 (92 bytes)");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_convert_missing_input, "badinput") {
  FG_REQUIRE(make_tmpdir());
  cli_result r;
  FG_REQUIRE(cli(&r, "convert", tpath("nope.fgb"), tpath("out.json"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "nope.fgb");
  FG_CHECK(!exists(tpath("out.json")));
  result_free(&r);
  FG_REQUIRE(cli(&r, "convert", tpath("nope.json"), tpath("out.fgb"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "nope.json");
  result_free(&r);
  FG_CHECK_INT(fgt_count_entries(tmpdir), 0);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_convert_bad_json, "badinput") {
  FG_REQUIRE(make_tmpdir());
  FILE *f = fopen(tpath("bad.json"), "w");
  FG_REQUIRE(f);
  fputs("{ \"nodes\": [ {\"name\": 12, ", f);
  fclose(f);
  cli_result r;
  FG_REQUIRE(cli(&r, "convert", tpath("bad.json"), tpath("out.fgb"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "", "");
  FG_CHECK(!exists(tpath("out.fgb")));
  FG_CHECK_INT(fgt_count_entries(tmpdir), 1);
  result_free(&r);
  fgt_rmtree(tmpdir);
}
