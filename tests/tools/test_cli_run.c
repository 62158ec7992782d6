/* `flowgraph run` end to end: .npy inputs and outputs checked against a
 * plain-C forward pass, printing, default fetches, --repeat, --threads,
 * --random-inputs, --target, and every runtime error (exit 1, exactly one
 * stderr line, no output file left). Harness: test_cli_harness.h. */
#include "test_cli_harness.h"

/* ---- run -------------------------------------------------------------------------- */

FG_TEST(cli_run_with_npy_io, "") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  char in[600], out[600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  snprintf(out, sizeof out, "probs=%s", tpath("probs.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "-o", out, NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "probs.npy");
  double h[2][3], logits[2][2], probs[2][2];
  mlp_forward(X, 2, h, logits, probs);
  fg_tensor *t = read_npy(tpath("probs.npy"));
  check_f32_tensor(t, 2, 2, &probs[0][0], 1e-5);
  fg_tensor_free(t);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_run_several_outputs, "") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  char in[600], o1[600], o2[600], o3[600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  snprintf(o1, sizeof o1, "h=%s", tpath("h.npy"));
  snprintf(o2, sizeof o2, "logits:0=%s", tpath("logits.npy"));
  snprintf(o3, sizeof o3, "probs=%s", tpath("probs.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "--input", in, "-o", o1, "--output", o2, "-o", o3,
                 NULL) == 0);
  CHECK_OK(r);
  double h[2][3], logits[2][2], probs[2][2];
  mlp_forward(X, 2, h, logits, probs);
  fg_tensor *t = read_npy(tpath("h.npy"));
  check_f32_tensor(t, 2, 3, &h[0][0], 1e-5);
  fg_tensor_free(t);
  t = read_npy(tpath("logits.npy"));
  check_f32_tensor(t, 2, 2, &logits[0][0], 1e-5);
  fg_tensor_free(t);
  t = read_npy(tpath("probs.npy"));
  check_f32_tensor(t, 2, 2, &probs[0][0], 1e-5);
  fg_tensor_free(t);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_run_prints_fetches, "") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  char in[600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  FG_REQUIRE(
      cli(&r, "run", tpath("mlp.fgb"), "-i", in, "--fetch", "logits", "--fetch", "h", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "logits: f32 [2,2]\n");
  FG_CHECK_STR_CONTAINS(r.out, "h: f32 [2,3]\n");
  double h[2][3], logits[2][2], probs[2][2], got[16];
  mlp_forward(X, 2, h, logits, probs);
  FG_CHECK_INT(parse_printed(r.out, "logits", got, 16), 4);
  for (int i = 0; i < 4; i++)
    FG_CHECK_NEAR(got[i], (&logits[0][0])[i], 1e-5);
  FG_CHECK_INT(parse_printed(r.out, "h", got, 16), 6);
  for (int i = 0; i < 6; i++)
    FG_CHECK_NEAR(got[i], (&h[0][0])[i], 1e-5);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_run_default_fetch_is_graph_outputs, "") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  char in[600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "probs: f32 [2,2]\n");
  double h[2][3], logits[2][2], probs[2][2], got[16];
  mlp_forward(X, 2, h, logits, probs);
  FG_CHECK_INT(parse_printed(r.out, "probs", got, 16), 4);
  for (int i = 0; i < 4; i++)
    FG_CHECK_NEAR(got[i], (&probs[0][0])[i], 1e-5);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_run_default_fetch_is_last_node, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_mlp(tpath("noout.fgb"), 1, 1) == 0);
  int64_t xd[2] = {2, 4};
  FG_REQUIRE(write_npy_f32(tpath("x.npy"), 2, xd, &X[0][0]) == 0);
  cli_result r;
  char in[600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("noout.fgb"), "-i", in, NULL) == 0);
  CHECK_OK(r);
  /* probs is the last node added. */
  FG_CHECK_STR_CONTAINS(r.out, "probs: f32 [2,2]\n");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_run_repeat_prints_timing, "") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  char in[600], out[600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  snprintf(out, sizeof out, "probs=%s", tpath("probs.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "-o", out, "--repeat", "5", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "ran 5 times: total ");
  FG_CHECK_STR_CONTAINS(r.out, "avg ");
  double h[2][3], logits[2][2], probs[2][2];
  mlp_forward(X, 2, h, logits, probs);
  fg_tensor *t = read_npy(tpath("probs.npy"));
  check_f32_tensor(t, 2, 2, &probs[0][0], 1e-5);
  fg_tensor_free(t);
  result_free(&r);
  /* One run prints no timing line. */
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "--repeat=1", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK(strstr(r.out, "ran ") == NULL);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_run_threads, "") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  char in[600], out[600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  snprintf(out, sizeof out, "probs=%s", tpath("probs.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "-o", out, "--threads", "3", NULL) == 0);
  CHECK_OK(r);
  double h[2][3], logits[2][2], probs[2][2];
  mlp_forward(X, 2, h, logits, probs);
  fg_tensor *t = read_npy(tpath("probs.npy"));
  check_f32_tensor(t, 2, 2, &probs[0][0], 1e-5);
  fg_tensor_free(t);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_run_threads_out_of_range, "badinput") {
  FG_REQUIRE(setup_mlp() == 0);
  const char *bad[2] = {"-1", "1000000"};
  for (int i = 0; i < 2; i++) {
    cli_result r;
    FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "--random-inputs", "--threads", bad[i], NULL) == 0);
    /* A usage error, before any session (which refuses them too). */
    CHECK_USAGE_ERROR(r);
    FG_CHECK_STR_CONTAINS(r.err, "--threads needs an integer from 0 (all cores) to 1024\n");
    result_free(&r);
  }
  fgt_rmtree(tmpdir);
}

/* Random feeds: shapes use --batch, ranges as documented, seeded. */
FG_TEST(cli_run_random_inputs, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_random_model(tpath("rnd.fgb")) == 0);
  char oi[600], of[600], od[600], ob[600];
  snprintf(oi, sizeof oi, "fi=%s", tpath("i.npy"));
  snprintf(of, sizeof of, "ff=%s", tpath("f.npy"));
  snprintf(od, sizeof od, "fd=%s", tpath("d.npy"));
  snprintf(ob, sizeof ob, "fb=%s", tpath("b.npy"));
  cli_result r;
  FG_REQUIRE(cli(&r, "run", tpath("rnd.fgb"), "--random-inputs", "--batch", "7", "--seed", "11",
                 "-o", oi, "-o", of, "-o", od, "-o", ob, NULL) == 0);
  CHECK_OK(r);
  fg_tensor *ti = read_npy(tpath("i.npy")), *tf = read_npy(tpath("f.npy"));
  fg_tensor *td = read_npy(tpath("d.npy")), *tb = read_npy(tpath("b.npy"));
  FG_REQUIRE(ti && tf && td && tb);
  FG_CHECK_INT(fg_tensor_dtype(ti), FG_I32);
  FG_CHECK_INT(fg_tensor_dim(ti, 0), 7);
  FG_CHECK_INT(fg_tensor_dim(ti, 1), 5);
  FG_CHECK_INT(fg_tensor_dim(tf, 0), 7);
  FG_CHECK_INT(fg_tensor_dim(tf, 1), 3);
  FG_CHECK_INT(fg_tensor_dim(td, 0), 2);
  FG_CHECK_INT(fg_tensor_dim(tb, 0), 7);
  int distinct_i = 0, distinct_f = 0;
  const int32_t *vi = fg_tensor_data(ti);
  for (int k = 0; k < 35; k++) {
    FG_CHECK(vi[k] >= 0 && vi[k] < 10);
    distinct_i += vi[k] != vi[0];
  }
  const float *vf = fg_tensor_data(tf);
  for (int k = 0; k < 21; k++) {
    FG_CHECK(vf[k] >= -1.0f && vf[k] < 1.0f);
    distinct_f += vf[k] != vf[0];
  }
  const double *vd = fg_tensor_data(td);
  for (int k = 0; k < 2; k++)
    FG_CHECK(vd[k] >= -1.0 && vd[k] < 1.0);
  const unsigned char *vb = fg_tensor_data(tb);
  for (int k = 0; k < 7; k++)
    FG_CHECK(vb[k] <= 1);
  FG_CHECK(distinct_i > 0);
  FG_CHECK(distinct_f > 0);
  fg_tensor_free(ti);
  fg_tensor_free(tf);
  fg_tensor_free(td);
  fg_tensor_free(tb);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

static char *run_random_f32(const char *seed) {
  char of[600];
  snprintf(of, sizeof of, "ff=%s", tpath("f.npy"));
  cli_result r;
  if (cli(&r, "run", tpath("rnd.fgb"), "--random-inputs", "--seed", seed, "-o", of, NULL) != 0)
    return NULL;
  int ok = r.exited && r.code == 0;
  result_free(&r);
  char *bytes = ok ? slurp(tpath("f.npy")) : NULL;
  unlink(tpath("f.npy"));
  return bytes;
}

FG_TEST(cli_run_random_inputs_seeded, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_random_model(tpath("rnd.fgb")) == 0);
  char *a = run_random_f32("5"), *b = run_random_f32("5"), *c = run_random_f32("6");
  FG_REQUIRE(a && b && c);
  /* The header is text up to '\n'; the data (12 bytes) follows at 128. */
  FG_CHECK(memcmp(a + 128, b + 128, 12) == 0);
  FG_CHECK(memcmp(a + 128, c + 128, 12) != 0);
  free(a);
  free(b);
  free(c);
  fgt_rmtree(tmpdir);
}

/* -i for one placeholder, random data for the rest. */
FG_TEST(cli_run_random_inputs_with_given_feed, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_random_model(tpath("rnd.fgb")) == 0);
  int64_t d[2] = {2, 3};
  float v[6] = {9, 8, 7, 6, 5, 4};
  FG_REQUIRE(write_npy_f32(tpath("xf.npy"), 2, d, v) == 0);
  char in[600], of[600];
  snprintf(in, sizeof in, "xf=%s", tpath("xf.npy"));
  snprintf(of, sizeof of, "ff=%s", tpath("f.npy"));
  cli_result r;
  FG_REQUIRE(cli(&r, "run", tpath("rnd.fgb"), "--random-inputs", "-i", in, "-o", of, "--fetch",
                 "fi", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "fi: i32 [1,5]\n"); /* default batch 1 */
  fg_tensor *t = read_npy(tpath("f.npy"));
  FG_REQUIRE(t);
  FG_CHECK_INT(fg_tensor_dim(t, 0), 2);
  if (fg_tensor_num_elements(t) == 6)
    for (int k = 0; k < 6; k++)
      FG_CHECK(((const float *)fg_tensor_data(t))[k] == v[k]);
  fg_tensor_free(t);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_run_target, "") {
  FG_REQUIRE(make_tmpdir());
  fg_graph *g = fg_graph_new();
  float one = 1.0f;
  int64_t d[1] = {1};
  fg_tensor *t = tensor_f32(1, d, &one);
  fg_output v = fg_variable(g, "v", t);
  fg_output inc = fg_set_name(g, fg_assign(g, v, fg_add(g, v, fg_constant(g, "one", t))), "inc");
  (void)inc;
  fg_output c = fg_set_name(g, fg_identity(g, fg_constant(g, "k", t)), "kid");
  fg_graph_add_output(g, c);
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_graph_save(g, tpath("tgt.fgb"), st) == 0);
  fg_status_free(st);
  fg_tensor_free(t);
  fg_graph_free(g);
  cli_result r;
  FG_REQUIRE(cli(&r, "run", tpath("tgt.fgb"), "--target", "inc", "--repeat", "3", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "kid: f32 [1]\n  [1]\n");
  result_free(&r);
  /* The assign's own output is the new value: 1 + 1 on a fresh session. */
  FG_REQUIRE(cli(&r, "run", tpath("tgt.fgb"), "--fetch", "inc", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "inc: f32 [1]\n  [2]\n");
  result_free(&r);
  FG_REQUIRE(cli(&r, "run", tpath("tgt.fgb"), "--target", "nope", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "nope");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* ---- runtime errors (bad inputs) --------------------------------------------------- */

FG_TEST(cli_run_missing_model, "badinput") {
  FG_REQUIRE(make_tmpdir());
  cli_result r;
  FG_REQUIRE(cli(&r, "run", tpath("missing.fgb"), "--random-inputs", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "missing.fgb");
  FG_CHECK_INT(strlen(r.out), 0);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_run_directory_as_model, "badinput") {
  FG_REQUIRE(make_tmpdir());
  cli_result r;
  FG_REQUIRE(cli(&r, "run", tmpdir, "--random-inputs", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "", tmpdir);
  result_free(&r);
  FG_REQUIRE(cli(&r, "inspect", tmpdir, NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "", tmpdir);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_run_garbage_model, "badinput") {
  FG_REQUIRE(make_tmpdir());
  unsigned char junk[256];
  uint32_t s = 12345;
  for (int i = 0; i < 256; i++) {
    s = s * 1103515245u + 12345u;
    junk[i] = (unsigned char)(s >> 16);
  }
  FILE *f = fopen(tpath("junk.fgb"), "wb");
  FG_REQUIRE(f);
  fwrite(junk, 1, sizeof junk, f);
  fclose(f);
  f = fopen(tpath("empty.fgb"), "wb");
  FG_REQUIRE(f);
  fclose(f);
  const char *files[2] = {"junk.fgb", "empty.fgb"};
  for (int i = 0; i < 2; i++) {
    cli_result r;
    char out[600];
    snprintf(out, sizeof out, "y=%s", tpath("y.npy"));
    FG_REQUIRE(cli(&r, "run", tpath(files[i]), "--random-inputs", "-o", out, NULL) == 0);
    CHECK_RUNTIME_ERROR(r, "FORMAT_ERROR", files[i]);
    FG_CHECK(!exists(tpath("y.npy")));
    result_free(&r);
  }
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_run_feed_wrong_dtype, "badinput") {
  FG_REQUIRE(setup_mlp() == 0);
  fg_status *st = fg_status_new();
  int64_t d[2] = {2, 4};
  fg_tensor *t = fg_tensor_new(FG_F64, 2, d, st);
  FG_REQUIRE(t && fg_npy_write(tpath("x64.npy"), t, st) == 0);
  fg_tensor_free(t);
  fg_status_free(st);
  cli_result r;
  char in[600], out[600];
  snprintf(in, sizeof in, "x=%s", tpath("x64.npy"));
  snprintf(out, sizeof out, "probs=%s", tpath("probs.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "-o", out, NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "feed 'x'");
  FG_CHECK_STR_CONTAINS(r.err, "f64");
  FG_CHECK_STR_CONTAINS(r.err, "f32 [?,4]");
  FG_CHECK(!exists(tpath("probs.npy")));
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_run_feed_wrong_shape, "badinput") {
  FG_REQUIRE(setup_mlp() == 0);
  float v[10] = {0};
  int64_t d25[2] = {2, 5}, d4[1] = {4};
  FG_REQUIRE(write_npy_f32(tpath("x25.npy"), 2, d25, v) == 0);
  FG_REQUIRE(write_npy_f32(tpath("x4.npy"), 1, d4, v) == 0);
  const char *files[2] = {"x25.npy", "x4.npy"}, *given[2] = {"[2,5]", "[4]"};
  for (int i = 0; i < 2; i++) {
    cli_result r;
    char in[600];
    snprintf(in, sizeof in, "x=%s", tpath(files[i]));
    FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, NULL) == 0);
    CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "feed 'x'");
    FG_CHECK_STR_CONTAINS(r.err, given[i]);
    FG_CHECK_STR_CONTAINS(r.err, "[?,4]");
    FG_CHECK_STR_CONTAINS(r.err, files[i]);
    result_free(&r);
  }
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_run_feed_not_a_placeholder, "badinput") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  char in[600], in2[600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  snprintf(in2, sizeof in2, "h=%s", tpath("x.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "-i", in2, NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "'h'");
  FG_CHECK_STR_CONTAINS(r.err, "not a placeholder");
  result_free(&r);
  snprintf(in2, sizeof in2, "nosuch=%s", tpath("x.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "-i", in2, NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "nosuch");
  result_free(&r);
  /* The same placeholder twice. */
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "-i", in, NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "twice");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_run_fetch_missing, "badinput") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  char in[600], out[600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "--fetch", "ghost", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "ghost");
  result_free(&r);
  snprintf(out, sizeof out, "probs:7=%s", tpath("o.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "-o", out, NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "probs:7");
  FG_CHECK(!exists(tpath("o.npy")));
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_run_missing_feed, "badinput") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "placeholder 'x'");
  FG_CHECK_STR_CONTAINS(r.err, "--random-inputs");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_run_bad_npy_feed, "badinput") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  char in[600];
  snprintf(in, sizeof in, "x=%s/bad_big_endian.npy", NPY_DIR);
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "feed 'x'");
  FG_CHECK_STR_CONTAINS(r.err, "big-endian");
  result_free(&r);
  /* Truncated data: the valid x.npy less its last byte. */
  char *bytes = slurp(tpath("x.npy"));
  FG_REQUIRE(bytes);
  FILE *f = fopen(tpath("trunc.npy"), "wb");
  FG_REQUIRE(f);
  fwrite(bytes, 1, 128 + 32 - 1, f);
  fclose(f);
  free(bytes);
  snprintf(in, sizeof in, "x=%s", tpath("trunc.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "truncated data");
  FG_CHECK_STR_CONTAINS(r.err, "trunc.npy");
  result_free(&r);
  snprintf(in, sizeof in, "x=%s", tpath("absent.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "absent.npy");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_run_unwritable_output, "badinput") {
  FG_REQUIRE(setup_mlp() == 0);
  FG_REQUIRE(mkdir(tpath("adir"), 0755) == 0);
  cli_result r;
  char in[600], out[600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  snprintf(out, sizeof out, "probs=%s/no/such/dir/p.npy", tmpdir);
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "-o", out, NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "IO_ERROR", "p.npy");
  result_free(&r);
  snprintf(out, sizeof out, "probs=%s", tpath("adir"));
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "-o", out, NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "IO_ERROR", "adir");
  FG_CHECK_INT(fgt_count_entries(tpath("adir")), 0);
  result_free(&r);
  /* The first output is fine, the second is not: neither file may appear. */
  char o1[600];
  snprintf(o1, sizeof o1, "logits=%s", tpath("logits.npy"));
  snprintf(out, sizeof out, "probs=%s/missing/p.npy", tmpdir);
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "-o", o1, "-o", out, NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "IO_ERROR", "p.npy");
  FG_CHECK(!exists(tpath("logits.npy")));
  result_free(&r);
  /* Only what the case made: mlp.fgb, x.npy, adir. */
  FG_CHECK_INT(fgt_count_entries(tmpdir), 3);
  fgt_rmtree(tmpdir);
}

/* -o on a symbolic link writes the file it names (the link stays), on a
 * copy of /dev/null writes the device; on a copy of /dev/full the run
 * fails with an I/O error naming the output, and the device stays one. */
FG_TEST(cli_run_outputs_to_links_and_devices, "badinput") {
  FG_REQUIRE(setup_mlp() == 0);
  FG_REQUIRE(symlink("real.npy", tpath("link.npy")) == 0);
  cli_result r;
  char in[600], o1[600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  snprintf(o1, sizeof o1, "probs=%s", tpath("link.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "-o", o1, NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  struct stat sb;
  FG_CHECK(lstat(tpath("link.npy"), &sb) == 0 && S_ISLNK(sb.st_mode));
  /* A link into a folder that does not exist is refused before the run,
   * naming that folder. */
  FG_REQUIRE(symlink("nowhere/p.npy", tpath("lost.npy")) == 0);
  char o4[700];
  snprintf(o4, sizeof o4, "probs=%s", tpath("lost.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "-o", o4, NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "IO_ERROR", "nowhere does not exist");
  FG_CHECK_INT(strlen(r.out), 0);
  result_free(&r);
  double h[2][3], logits[2][2], probs[2][2];
  mlp_forward(X, 2, h, logits, probs);
  fg_tensor *t = read_npy(tpath("real.npy"));
  check_f32_tensor(t, 2, 2, &probs[0][0], 1e-5);
  fg_tensor_free(t);
  /* Copies of /dev/null and /dev/full (as root), never the machine's. */
  char null_dev[600], full_dev[600], o2[700];
  snprintf(null_dev, sizeof null_dev, "%s", tpath("null"));
  snprintf(full_dev, sizeof full_dev, "%s", tpath("full"));
  if (fgt_make_char_device(null_dev, 1, 3) && fgt_make_char_device(full_dev, 1, 7)) {
    snprintf(o2, sizeof o2, "logits=%s", null_dev);
    FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "-o", o2, NULL) == 0);
    CHECK_OK(r);
    result_free(&r);
    FG_CHECK(stat(null_dev, &sb) == 0 && S_ISCHR(sb.st_mode));
    snprintf(o2, sizeof o2, "probs=%s", full_dev);
    FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "-o", o2, NULL) == 0);
    CHECK_RUNTIME_ERROR(r, "IO_ERROR", "No space left on device");
    FG_CHECK_STR_CONTAINS(r.err, "output 'probs' -> ");
    result_free(&r);
    FG_CHECK(stat(full_dev, &sb) == 0 && S_ISCHR(sb.st_mode));
    /* A file and then the full device: the device fails before any file
     * is renamed into place, so none is left. */
    char o3[700];
    snprintf(o3, sizeof o3, "logits=%s", tpath("logits.npy"));
    FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "-o", o3, "-o", o2, NULL) == 0);
    CHECK_RUNTIME_ERROR(r, "IO_ERROR", "No space left on device");
    result_free(&r);
    FG_CHECK(!exists(tpath("logits.npy")));
  }
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_run_error_leaves_no_output, "badinput") {
  FG_REQUIRE(setup_mlp() == 0);
  float v[8] = {0};
  int64_t d[2] = {2, 4};
  FG_REQUIRE(write_npy_f32(tpath("x.npy"), 2, d, v) == 0);
  cli_result r;
  char in[600], out[600], bad[600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  snprintf(out, sizeof out, "probs=%s", tpath("probs.npy"));
  snprintf(bad, sizeof bad, "ghost=%s", tpath("ghost.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "-o", out, "-o", bad, NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "ghost");
  FG_CHECK(!exists(tpath("probs.npy")));
  FG_CHECK(!exists(tpath("ghost.npy")));
  FG_CHECK_INT(fgt_count_entries(tmpdir), 2);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* Every malformed file of tests/data/bad: exit 1, one line, no
 * signal, nothing written. */
FG_TEST(cli_run_bad_files, "badinput") {
  DIR *d = opendir(BAD_DIR);
  if (!d) FG_SKIP("%s does not exist (the schema engineer's bad-file corpus)", BAD_DIR);
  FG_REQUIRE(make_tmpdir());
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (len < 5 || strcmp(e->d_name + len - 4, ".fgb") != 0) continue;
    char path[1024], out[600];
    snprintf(path, sizeof path, "%s/%s", BAD_DIR, e->d_name);
    snprintf(out, sizeof out, "out=%s", tpath("out.npy"));
    cli_result r;
    FG_REQUIRE(cli(&r, "run", path, "--random-inputs", "-o", out, NULL) == 0);
    if (r.code != 1 || r.signaled || count_lines(r.err) != 1)
      fprintf(stderr, "bad file %s: exit %d signal %d stderr: %s\n", e->d_name, r.code, r.sig,
              r.err);
    CHECK_RUNTIME_ERROR(r, "", "");
    FG_CHECK(!exists(tpath("out.npy")));
    result_free(&r);
    FG_REQUIRE(cli(&r, "inspect", path, NULL) == 0);
    CHECK_RUNTIME_ERROR(r, "", "");
    result_free(&r);
    n++;
  }
  closedir(d);
  FG_CHECK_INT(fgt_count_entries(tmpdir), 0);
  fgt_rmtree(tmpdir);
  if (n == 0) FG_SKIP("no .fgb files in %s yet", BAD_DIR);
  printf("checked %d bad files\n", n);
}

/* ---- training mode ------------------------------------------------------------- */

/* `flowgraph run` on a graph with dropout is inference (the identity)
 * unless the training flag is fed: -i training=t.npy with a bool scalar
 * (true) drops elements and scales the rest by 1 / (1 - p) = 2. */
FG_TEST(cli_run_dropout_inference_unless_training_fed, "") {
  FG_REQUIRE(make_tmpdir());
  fg_graph *g = fg_graph_new();
  const int64_t d[2] = {8, 16};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, d);
  fg_set_name(g, fg_dropout(g, x, fg_training(g), 0.5, 9), "y");
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_graph_save(g, tpath("drop.fgb"), st) == 0);
  float xv[128];
  for (int i = 0; i < 128; i++)
    xv[i] = 1.0f + (float)i;
  FG_REQUIRE(write_npy_f32(tpath("x.npy"), 2, d, xv) == 0);
  fg_tensor *t = fg_tensor_new(FG_BOOL, 0, NULL, st);
  *(uint8_t *)fg_tensor_data(t) = 1;
  FG_REQUIRE(fg_npy_write(tpath("t.npy"), t, st) == 0);
  char in[600], tin[600], out[600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  snprintf(tin, sizeof tin, "training=%s", tpath("t.npy"));
  snprintf(out, sizeof out, "y=%s", tpath("y.npy"));
  cli_result r;
  FG_REQUIRE(cli(&r, "run", tpath("drop.fgb"), "-i", in, "-o", out, NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  fg_tensor *y = read_npy(tpath("y.npy"));
  FG_REQUIRE(y != NULL);
  FG_CHECK(memcmp(fg_tensor_data(y), xv, sizeof xv) == 0);
  fg_tensor_free(y);
  FG_REQUIRE(cli(&r, "run", tpath("drop.fgb"), "-i", in, "-i", tin, "-o", out, NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  y = read_npy(tpath("y.npy"));
  FG_REQUIRE(y != NULL);
  int zeros = 0, bad = 0;
  for (int i = 0; i < 128; i++) {
    const float v = ((const float *)fg_tensor_data(y))[i];
    zeros += v == 0.0f;
    bad += v != 0.0f && v != 2.0f * xv[i];
  }
  FG_CHECK_INT(bad, 0);
  FG_CHECK(zeros > 32 && zeros < 96);
  fg_tensor_free(y);
  fg_tensor_free(t);
  fg_status_free(st);
  fg_graph_free(g);
  fgt_rmtree(tmpdir);
}
