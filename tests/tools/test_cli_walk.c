/* The CLI robustness walk (issue 7): every subcommand given every kind of
 * malformed argument -- missing option values, empty values, unknown flags,
 * bad NAME=FILE pairs, unreadable inputs, unwritable outputs, out-of-range
 * and non-numeric counts, extra positional arguments. Each run must exit 2
 * with a usage line, or 1 with exactly one "flowgraph: CODE: ..." line (or 0
 * where the value is in fact valid), never die on a signal or hang, and
 * leave no output file behind when it fails. */
#include "test_cli_train_util.h"

#define MAXV 32

typedef struct walk_stats {
  int runs, usage, runtime, ok;
} walk_stats;

static walk_stats stats;
static int baseline_entries;

/* Outputs any case may try to write (all inside the temp dir). */
static const char *const outputs[] = {"out.npy", "out.json", "out.fgb", "trace.json", "mem.svg"};

static void remove_outputs(void) {
  for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++)
    unlink(tpath(outputs[i]));
}

/* Runs argv (NULL-terminated, at most MAXV entries) and checks the
 * contract; `allow_ok`: exit 0 is acceptable for this case. */
static void walk_one(const char *const *argv, int allow_ok) {
  const char *a[MAXV + 1] = {0};
  int n = 0;
  while (argv[n] && n < MAXV)
    a[n] = argv[n], n++;
  char desc[2048] = "";
  for (int i = 0; i < n; i++) {
    strncat(desc, a[i], sizeof desc - strlen(desc) - 2);
    strncat(desc, " ", sizeof desc - strlen(desc) - 1);
  }
  cli_result r;
  FG_REQUIRE(cli(&r, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11],
                 a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20], a[21], a[22], a[23],
                 a[24], a[25], a[26], a[27], a[28], a[29], a[30], a[31], NULL) == 0);
  stats.runs++;
  int good = 1;
  if (r.signaled || !r.exited) {
    good = 0;
  } else if (r.code == 2) {
    stats.usage++;
    good = strstr(r.err, "usage:") != NULL && r.out[0] == '\0';
  } else if (r.code == 1) {
    stats.runtime++;
    good = count_lines(r.err) == 1 && strncmp(r.err, "flowgraph: ", 11) == 0;
  } else if (r.code == 0 && allow_ok) {
    stats.ok++;
  } else {
    good = 0;
  }
  if (!good)
    FG_FAIL_AT("flowgraph %s: exit %d signal %d\nstdout: %.300s\nstderr: %.600s", desc, r.code,
               r.sig, r.out, r.err);
  if (r.exited && r.code != 0) {
    for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++)
      if (exists(tpath(outputs[i])))
        FG_FAIL_AT("flowgraph %s: failed but left %s", desc, outputs[i]);
    if (fgt_count_entries(tmpdir) != baseline_entries)
      FG_FAIL_AT("flowgraph %s: failed but left a file in the temp dir", desc);
  }
  remove_outputs();
  result_free(&r);
}

/* base + extra, NULL-terminated. */
static void walk(const char *const *base, const char *const *extra, int allow_ok) {
  const char *argv[MAXV + 1];
  int n = 0;
  for (; base && base[n] && n < MAXV; n++)
    argv[n] = base[n];
  for (int i = 0; extra && extra[i] && n < MAXV; i++)
    argv[n++] = extra[i];
  argv[n] = NULL;
  walk_one(argv, allow_ok);
}

#define V(...) ((const char *const[]){__VA_ARGS__, NULL})

static char M[512], LIN[512], XN[512], XL[512], YL[512], ADIR[512], OUT_NPY[512], OUT_JSON[512],
    OUT_FGB[512], TRACE[512], SVG[512];
static char P_X[600], P_XL[600], P_YL[600], P_OUT[600];

static int setup_walk(void) {
  if (setup_mlp() != 0) return -1;
  if (build_linreg(tpath("lin.fgb"), 0, 0.1) != 0) return -1;
  if (write_linreg_data("xl.npy", "yl.npy", LIN_ROWS, LIN_ROWS) != 0) return -1;
  if (mkdir(tpath("adir"), 0755) != 0) return -1;
  snprintf(M, sizeof M, "%s", tpath("mlp.fgb"));
  snprintf(LIN, sizeof LIN, "%s", tpath("lin.fgb"));
  snprintf(XN, sizeof XN, "%s", tpath("x.npy"));
  snprintf(XL, sizeof XL, "%s", tpath("xl.npy"));
  snprintf(YL, sizeof YL, "%s", tpath("yl.npy"));
  snprintf(ADIR, sizeof ADIR, "%s", tpath("adir"));
  snprintf(OUT_NPY, sizeof OUT_NPY, "%s", tpath("out.npy"));
  snprintf(OUT_JSON, sizeof OUT_JSON, "%s", tpath("out.json"));
  snprintf(OUT_FGB, sizeof OUT_FGB, "%s", tpath("out.fgb"));
  snprintf(TRACE, sizeof TRACE, "%s", tpath("trace.json"));
  snprintf(SVG, sizeof SVG, "%s", tpath("mem.svg"));
  snprintf(P_X, sizeof P_X, "x=%s", XN);
  snprintf(P_XL, sizeof P_XL, "x=%s", XL);
  snprintf(P_YL, sizeof P_YL, "y=%s", YL);
  snprintf(P_OUT, sizeof P_OUT, "probs=%s", OUT_NPY);
  baseline_entries = fgt_count_entries(tmpdir);
  return 0;
}

typedef struct subcmd {
  const char *name;
  const char *base[24];       /* a valid invocation */
  const char *value_opts[16]; /* options taking a value */
  const char *int_opts[8];    /* options taking a count */
  const char *pair_opts[4];   /* options taking NAME=FILE */
  const char *out_opts[4];    /* options taking an output path ("" = positional) */
} subcmd;

/* Values no count option may accept silently: negative, non-numeric,
 * overflowing, fractional, empty, padded. Exit 0 is allowed only for the
 * ones some option treats as valid ("0"). */
static const char *const bad_counts[] = {
    "-1",   "abc", "99999999999999999999", "1.5", "", " 3", "3x",
    "0x10", "1e3", "-9223372036854775808"};

static void walk_subcommand(const subcmd *c) {
  const char *name[2] = {c->name, NULL};
  /* The valid invocation works (sanity for the rest). */
  walk(c->base, NULL, 1);
  FG_CHECK_INT(stats.ok > 0, 1);
  /* No arguments at all; help; unknown flags; an extra positional. */
  walk(name, NULL, 0);
  walk(name, V("--help"), 1);
  walk(c->base, V("--bogus"), 0);
  walk(c->base, V("-Z"), 0);
  walk(c->base, V("--bogus=1"), 0);
  walk(c->base, V("extra.fgb"), 0);
  walk(c->base, V("--check-numerics=1"), 0);
  /* "--" ends the options of convert (then paths follow); elsewhere it is
   * an unknown option. */
  walk(c->base, V("--"), 1);
  /* The model replaced by something that is not one. */
  const char *bad_models[] = {"/nonexistent_fg/m.fgb", ADIR, XN, "", "-", "m.unknownext"};
  for (size_t k = 0; k < sizeof bad_models / sizeof bad_models[0]; k++) {
    const char *argv[MAXV + 1];
    int n = 0;
    for (; c->base[n]; n++)
      argv[n] = c->base[n];
    argv[n] = NULL;
    argv[1] = bad_models[k];
    walk_one(argv, 0);
  }
  /* Every value option: missing at the end, empty with '='. */
  for (int k = 0; c->value_opts[k]; k++) {
    char eq[64];
    snprintf(eq, sizeof eq, "%s=", c->value_opts[k]);
    walk(c->base, V(c->value_opts[k]), 0);
    walk(c->base, V(eq), 0);
  }
  /* Counts out of range or malformed. */
  for (int k = 0; c->int_opts[k]; k++) {
    for (size_t v = 0; v < sizeof bad_counts / sizeof bad_counts[0]; v++)
      walk(c->base, V(c->int_opts[k], bad_counts[v]), 0);
    /* Valid for some (a seed, a thread count of 0 = cores): any contract
     * exit. */
    walk(c->base, V(c->int_opts[k], "0"), 1);
    walk(c->base, V(c->int_opts[k], "-0"), 1);
    walk(c->base, V(c->int_opts[k], "9223372036854775807"), 1);
  }
  /* NAME=FILE pairs. */
  char missing_npy[600], dir_pair[600], model_pair[600], nosuch[600];
  snprintf(missing_npy, sizeof missing_npy, "x=%s", tpath("missing.npy"));
  snprintf(dir_pair, sizeof dir_pair, "x=%s", ADIR);
  snprintf(model_pair, sizeof model_pair, "x=%s", M);
  snprintf(nosuch, sizeof nosuch, "nosuch=%s", XN);
  const char *bad_pairs[] = {"x", "=x.npy", "x=", "=", missing_npy, dir_pair, model_pair, nosuch};
  char out_nosuch[600], out_dir[600], out_missing_dir[600];
  snprintf(out_nosuch, sizeof out_nosuch, "nosuch=%s", OUT_NPY);
  snprintf(out_dir, sizeof out_dir, "probs=%s", ADIR);
  snprintf(out_missing_dir, sizeof out_missing_dir, "probs=%s", "/nonexistent_fg/o.npy");
  /* -o NAME=OUT: the name must be a tensor, the path writable. */
  const char *bad_out_pairs[] = {"probs",    "=o.npy", "probs=",       "=",
                                 out_nosuch, out_dir,  out_missing_dir};
  for (int k = 0; c->pair_opts[k]; k++) {
    int out = strcmp(c->pair_opts[k], "-o") == 0;
    const char *const *list = out ? bad_out_pairs : bad_pairs;
    size_t n = out ? sizeof bad_out_pairs / sizeof bad_out_pairs[0]
                   : sizeof bad_pairs / sizeof bad_pairs[0];
    for (size_t v = 0; v < n; v++)
      walk(c->base, V(c->pair_opts[k], list[v]), 0);
  }
  /* Output paths that cannot be written. */
  const char *bad_outs[] = {"/nonexistent_fg/out.fgb", ADIR, "/proc/fg_out.fgb"};
  for (int k = 0; c->out_opts[k]; k++)
    for (size_t v = 0; v < sizeof bad_outs / sizeof bad_outs[0]; v++) {
      char pair[600];
      const char *path = bad_outs[v];
      if (strcmp(c->out_opts[k], "-o=") == 0) {
        snprintf(pair, sizeof pair, "probs=%s", bad_outs[v]);
        walk(c->base, V("-o", pair), 0);
      } else if (c->out_opts[k][0] == '\0') {
        /* convert IN OUT: replace OUT. */
        walk(V(c->name, M, path), NULL, 0);
      } else {
        walk(c->base, V(c->out_opts[k], path), 0);
      }
    }
}

FG_TEST(cli_walk_all_subcommands, "badinput,slow") {
  FG_REQUIRE(setup_walk() == 0);
  const subcmd cmds[] = {
      {"inspect", {"inspect", M, NULL}, {NULL}, {NULL}, {NULL}, {NULL}},
      {"run",
       {"run", M, "-i", P_X, "-o", P_OUT, NULL},
       {"-i", "--input", "-o", "--output", "--fetch", "--target", "--seed", "--batch", "--repeat",
        "--threads", "--max-memory", NULL},
       {"--seed", "--batch", "--repeat", "--threads", "--max-memory", NULL},
       {"-i", "-o", NULL},
       {"-o=", NULL}},
      {"convert", {"convert", M, OUT_JSON, NULL}, {NULL}, {NULL}, {NULL}, {"", NULL}},
      {"grad",
       {"grad", M, "--loss", "probs", "--wrt", "W1", "-o", OUT_FGB, NULL},
       {"--loss", "--wrt", "-o", "--output", NULL},
       {NULL},
       {NULL},
       {"-o", NULL}},
      {"train",
       {"train", LIN, "-i", P_XL, "-i", P_YL, "--batch", "8", "--epochs", "1", "--save", OUT_FGB,
        "-q", NULL},
       {"-i", "--input", "--target", "--loss", "--eval", "--eval-input", "--save", "--batch",
        "--epochs", "--shuffle", "--threads", "--max-memory", NULL},
       {"--batch", "--epochs", "--shuffle", "--threads", "--max-memory", NULL},
       {"-i", "--eval-input", NULL},
       {"--save", NULL}},
      {"plan",
       {"plan", M, "-i", P_X, NULL},
       {"-i", "--input", "--fetch", "--target", "--seed", "--batch", "--memory-svg", "--max-memory",
        NULL},
       {"--seed", "--batch", "--max-memory", NULL},
       {"-i", NULL},
       {"--memory-svg", NULL}},
      {"profile",
       {"profile", M, "-i", P_X, "--runs", "1", "--warmup", "0", NULL},
       {"-i", "--input", "--fetch", "--target", "--seed", "--batch", "--runs", "--warmup",
        "--threads", "--trace", "--memory-svg", "--max-memory", NULL},
       {"--seed", "--batch", "--runs", "--warmup", "--threads", "--max-memory", NULL},
       {"-i", NULL},
       {"--trace", "--memory-svg", NULL}},
  };
  for (size_t k = 0; k < sizeof cmds / sizeof cmds[0]; k++) {
    int before = fgt_failures;
    walk_subcommand(&cmds[k]);
    if (fgt_failures != before) fprintf(stderr, "(subcommand %s)\n", cmds[k].name);
  }
  printf("walk: %d runs: %d usage errors, %d runtime errors, %d successes\n", stats.runs,
         stats.usage, stats.runtime, stats.ok);
  fgt_rmtree(tmpdir);
}

/* Huge counts: above the documented maxima is a usage error, found before
 * any work (no hang). */
FG_TEST(cli_walk_huge_counts_fail_fast, "badinput") {
  FG_REQUIRE(setup_walk() == 0);
  cli_result r;
  cli(&r, "run", M, "-i", P_X, "--repeat", "10000001", NULL);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "--repeat");
  result_free(&r);
  cli(&r, "run", M, "--random-inputs", "--batch", "1000001", NULL);
  CHECK_USAGE_ERROR(r);
  result_free(&r);
  cli(&r, "train", LIN, "-i", P_XL, "-i", P_YL, "--batch", "8", "--epochs", "10000001", NULL);
  CHECK_USAGE_ERROR(r);
  result_free(&r);
  cli(&r, "profile", M, "-i", P_X, "--runs", "99999999999", NULL);
  CHECK_USAGE_ERROR(r);
  result_free(&r);
  /* Bad thread counts through the CLI: usage errors, before the session
   * (which refuses them too) is made. */
  cli(&r, "run", M, "-i", P_X, "--threads", "1000000", NULL);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "--threads needs an integer from 0 (all cores) to 1024");
  result_free(&r);
  cli(&r, "run", M, "-i", P_X, "--threads", "-1", NULL);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "--threads needs an integer from 0 (all cores) to 1024");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_max_memory_flag, "badinput") {
  FG_REQUIRE(setup_walk() == 0);
  cli_result r;
  /* The MLP on 2 rows: mm1 is [2,3] f32 = 24 bytes, so 16 bytes is too
   * little, named; 1M is plenty. */
  cli(&r, "run", M, "-i", P_X, "--max-memory", "16", NULL);
  CHECK_RUNTIME_ERROR(r, "RESOURCE_EXHAUSTED", "limit of 16 bytes");
  FG_CHECK_STR_CONTAINS(r.err, "needs 24 bytes");
  result_free(&r);
  cli(&r, "run", M, "-i", P_X, "--max-memory", "1M", "-o", P_OUT, NULL);
  CHECK_OK(r);
  FG_CHECK(exists(OUT_NPY));
  result_free(&r);
  unlink(OUT_NPY);
  cli(&r, "run", M, "-i", P_X, "--max-memory", "16", "-o", P_OUT, NULL);
  FG_CHECK_INT(r.code, 1);
  FG_CHECK(!exists(OUT_NPY));
  result_free(&r);
  /* Suffixes are powers of 1024: 1K = 1024 bytes is named as such. */
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {512};
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, d);
  fg_graph_add_output(g, fg_set_name(g, fg_tanh(g, x), "t"));
  FG_REQUIRE(fg_graph_save(g, tpath("t.fgb"), NULL) == 0);
  fg_graph_free(g);
  cli(&r, "run", tpath("t.fgb"), "--random-inputs", "--max-memory", "1K", NULL);
  CHECK_RUNTIME_ERROR(r, "RESOURCE_EXHAUSTED", "node 't' (tanh) output 0 needs 2048 bytes");
  FG_CHECK_STR_CONTAINS(r.err, "limit of 1024 bytes");
  result_free(&r);
  cli(&r, "plan", tpath("t.fgb"), "--random-inputs", "--max-memory", "1k", NULL);
  CHECK_RUNTIME_ERROR(r, "RESOURCE_EXHAUSTED", "limit of 1024 bytes");
  result_free(&r);
  cli(&r, "profile", tpath("t.fgb"), "--random-inputs", "--runs", "1", "--max-memory", "1G", NULL);
  CHECK_OK(r);
  result_free(&r);
  cli(&r, "train", LIN, "-i", P_XL, "-i", P_YL, "--batch", "8", "--epochs", "1", "-q",
      "--max-memory", "64", NULL);
  CHECK_RUNTIME_ERROR(r, "RESOURCE_EXHAUSTED", "limit of 64 bytes");
  result_free(&r);
  /* Malformed sizes are usage errors. */
  const char *bad[] = {"0", "-5", "K", "1T", "1KB", "99999999999G", "1.5M", ""};
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    cli(&r, "run", M, "-i", P_X, "--max-memory", bad[k], NULL);
    CHECK_USAGE_ERROR(r);
    FG_CHECK_STR_CONTAINS(r.err, "--max-memory");
    result_free(&r);
  }
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_check_numerics_flag, "badinput") {
  FG_REQUIRE(make_tmpdir());
  /* lg = log(x), fed x = [1, -1, 0]: 1 NaN (log -1) and 1 Inf (log 0). */
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {3};
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, d);
  fg_graph_add_output(g, fg_set_name(g, fg_log(g, x), "lg"));
  FG_REQUIRE(fg_graph_save(g, tpath("log.fgb"), NULL) == 0);
  fg_graph_free(g);
  const float xv[3] = {1, -1, 0};
  FG_REQUIRE(write_npy_f32(tpath("x.npy"), 1, d, xv) == 0);
  char px[600], po[600];
  snprintf(px, sizeof px, "x=%s", tpath("x.npy"));
  snprintf(po, sizeof po, "lg=%s", tpath("out.npy"));
  cli_result r;
  cli(&r, "run", tpath("log.fgb"), "-i", px, "--check-numerics", "-o", po, NULL);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT",
                      "node 'lg' (log): produced 1 NaN and 1 Inf in output 0");
  FG_CHECK(!exists(tpath("out.npy")));
  result_free(&r);
  /* Off: the values come out. */
  cli(&r, "run", tpath("log.fgb"), "-i", px, "-o", po, NULL);
  CHECK_OK(r);
  fg_tensor *t = read_npy(tpath("out.npy"));
  FG_REQUIRE(t);
  const float *v = fg_tensor_data(t);
  FG_CHECK(v[0] == 0.0f && isnan(v[1]) && isinf(v[2]));
  fg_tensor_free(t);
  result_free(&r);
  cli(&r, "profile", tpath("log.fgb"), "-i", px, "--runs", "1", "--check-numerics", NULL);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "node 'lg' (log)");
  result_free(&r);
  /* plan runs nothing: the flag is not one of its options. */
  cli(&r, "plan", tpath("log.fgb"), "-i", px, "--check-numerics", NULL);
  CHECK_USAGE_ERROR(r);
  result_free(&r);
  /* Training that diverges: linear regression at lr 1e30 overflows. */
  FG_REQUIRE(build_linreg(tpath("lin.fgb"), 0, 1e30) == 0);
  FG_REQUIRE(write_linreg_data("xl.npy", "yl.npy", LIN_ROWS, LIN_ROWS) == 0);
  char pxl[600], pyl[600];
  snprintf(pxl, sizeof pxl, "x=%s", tpath("xl.npy"));
  snprintf(pyl, sizeof pyl, "y=%s", tpath("yl.npy"));
  cli(&r, "train", tpath("lin.fgb"), "-i", pxl, "-i", pyl, "--batch", "8", "--epochs", "3", "-q",
      "--check-numerics", "--save", tpath("out.fgb"), NULL);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "(check_numerics)");
  FG_CHECK(!exists(tpath("out.fgb")));
  result_free(&r);
  fgt_rmtree(tmpdir);
}
