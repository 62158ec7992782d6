/* `flowgraph train`'s reporting: the progress line on a pseudo-terminal
 * and the plain epoch lines without one, --quiet, validation (--val)
 * against losses worked out in double in the test, --save-best keeping
 * the best epoch's weights, checkpoints (--checkpoint-every, --keep), the
 * CSV of --log and the SVG of --plot; and their bad inputs. */
#include "test_cli_train_util.h"

#define LR       0.1
#define VAL_ROWS 12

/* Held-out rows: a grid of its own; y from `p` (the weights the
 * validation loss is zero at) when given, else the data's rule plus an
 * offset per row, so that no epoch fits it exactly. */
static void val_data(const linp *p, float (*x)[2], float *y) {
  for (int i = 0; i < VAL_ROWS; i++) {
    x[i][0] = (float)((i % 5) - 2) * 0.4f;
    x[i][1] = (float)(((i * 3) % 7) - 3) * 0.3f;
    if (p)
      y[i] = (float)(p->w[0] * x[i][0] + p->w[1] * x[i][1] + p->b);
    else
      y[i] = 2.0f * x[i][0] - 3.0f * x[i][1] + 0.5f + 0.1f * (float)((i % 3) - 1);
  }
}

static void write_val(const linp *p, float (*x)[2], float *y) {
  val_data(p, x, y);
  int64_t xd[2] = {VAL_ROWS, 2}, yd[2] = {VAL_ROWS, 1};
  FG_REQUIRE(write_npy_f32(tpath("vx.npy"), 2, xd, &x[0][0]) == 0);
  FG_REQUIRE(write_npy_f32(tpath("vy.npy"), 2, yd, y) == 0);
}

static double val_mse(const linp *p, const float (*x)[2], const float *y, int rows) {
  double s = 0;
  for (int i = 0; i < rows; i++) {
    double d = p->w[0] * x[i][0] + p->w[1] * x[i][1] + p->b - y[i];
    s += d * d;
  }
  return s / rows;
}

/* The reference weights after `epochs` epochs of batches of 16, in file
 * order, and the epoch losses. */
static linp ref_after(int epochs, double *losses) {
  linp p;
  double l[64];
  lin_train_reference(16, epochs, 0, 0, LR, &p, losses ? losses : l);
  return p;
}

static void setup_lin(void) {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_linreg(tpath("lin.fgb"), 0, LR) == 0);
  FG_REQUIRE(write_linreg_data("x.npy", "y.npy", LIN_ROWS, LIN_ROWS) == 0);
}

/* "x=DIR/x.npy" and the like, in rotating buffers. */
static const char *feed(const char *name, const char *file) {
  static char bufs[8][600];
  static int k;
  char *b = bufs[k++ % 8];
  snprintf(b, 600, "%s=%s", name, tpath(file));
  return b;
}

static char *val_arg(void) {
  static char b[1300];
  snprintf(b, sizeof b, "x=%s,y=%s", tpath("vx.npy"), tpath("vy.npy"));
  return b;
}

/* ---- the epoch lines, --val and --log --------------------------------------------- */

/* Splits `line` at commas into at most max fields (no quoting in these). */
static int csv_split(char *line, char **fields, int max) {
  int n = 0;
  for (char *p = line; p && n < max;) {
    fields[n++] = p;
    p = strchr(p, ',');
    if (p) *p++ = '\0';
  }
  return n;
}

/* Trains lin.fgb for `epochs` epochs of batches of 16 with --eval mae
 * (on the training set) and --val on the held-out rows (written to
 * vx, vy), plus `opt` `path`. */
static void train_lin_val(cli_result *r, const char *epochs, float (*vx)[2], float *vy,
                          const char *opt, const char *path) {
  setup_lin();
  write_val(NULL, vx, vy);
  FG_REQUIRE(cli(r, "train", tpath("lin.fgb"), "-i", feed("x", "x.npy"), "-i", feed("y", "y.npy"),
                 "--batch", "16", "--epochs", epochs, "--eval", "mae", "--val", val_arg(), opt,
                 tpath(path), NULL) == 0);
  CHECK_OK(*r);
}

/* 40 rows in batches of 16 (3 steps an epoch), 3 epochs: every figure of
 * the epoch lines and the log against the reference in double. */
FG_TEST(cli_train_val_and_log_match_reference, "") {
  float vx[VAL_ROWS][2], vy[VAL_ROWS];
  cli_result r;
  train_lin_val(&r, "3", vx, vy, "--log", "log.csv");
  FG_CHECK(strchr(r.out, '\r') == NULL);
  double losses[3], vloss[3], vmae[3], got[8];
  float x[LIN_ROWS][2], y[LIN_ROWS];
  linreg_data(LIN_ROWS, x, y);
  ref_after(3, losses);
  FG_CHECK_INT(parse_epochs(r.out, got, 8, "val_loss", vloss), 3);
  FG_CHECK_INT(parse_epochs(r.out, got, 8, "val_mae", vmae), 3);
  for (int e = 0; e < 3; e++) {
    linp p = ref_after(e + 1, NULL);
    FG_CHECK_NEAR(got[e], losses[e], 1e-4);
    FG_CHECK_NEAR(vloss[e], val_mse(&p, (const float(*)[2])vx, vy, VAL_ROWS), 1e-4);
    FG_CHECK_NEAR(vmae[e], lin_mae(&p, (const float(*)[2])vx, vy, VAL_ROWS), 1e-4);
  }
  /* The plain line carries the global step and the throughput. */
  FG_CHECK_STR_CONTAINS(r.out, ", step 3, ");
  FG_CHECK_STR_CONTAINS(r.out, ", step 9, ");
  FG_CHECK_STR_CONTAINS(r.out, " samples/s, ETA ");
  FG_CHECK_STR_CONTAINS(r.out, "wrote ");
  result_free(&r);

  char *csv = slurp(tpath("log.csv"));
  FG_REQUIRE(csv);
  char *save = NULL, *line = strtok_r(csv, "\n", &save);
  FG_REQUIRE(line);
  FG_CHECK_STR(line, "epoch,step,loss,mae,val_loss,val_mae,samples_per_s,lr,seconds");
  int rows = 0;
  double prev_s = 0;
  while ((line = strtok_r(NULL, "\n", &save)) != NULL) {
    char *f[16];
    FG_REQUIRE(csv_split(line, f, 16) == 9);
    FG_REQUIRE(rows < 3);
    linp p = ref_after(rows + 1, NULL);
    FG_CHECK_INT(atoi(f[0]), rows + 1);
    FG_CHECK_INT(atoi(f[1]), 3 * (rows + 1));
    FG_CHECK_NEAR(strtod(f[2], NULL), losses[rows], 1e-4);
    FG_CHECK_NEAR(strtod(f[3], NULL), lin_mae(&p, (const float(*)[2])x, y, LIN_ROWS), 1e-4);
    FG_CHECK_NEAR(strtod(f[4], NULL), val_mse(&p, (const float(*)[2])vx, vy, VAL_ROWS), 1e-4);
    FG_CHECK_NEAR(strtod(f[5], NULL), lin_mae(&p, (const float(*)[2])vx, vy, VAL_ROWS), 1e-4);
    FG_CHECK(strtod(f[6], NULL) > 0);
    FG_CHECK_NEAR(strtod(f[7], NULL), LR, 1e-7); /* the model's SGD rate */
    FG_CHECK(strtod(f[8], NULL) >= prev_s);
    prev_s = strtod(f[8], NULL);
    rows++;
  }
  FG_CHECK_INT(rows, 3);
  free(csv);
  fgt_rmtree(tmpdir);
}

/* --quiet prints nothing, yet writes the log and the plot. */
FG_TEST(cli_train_quiet_still_logs, "") {
  setup_lin();
  cli_result r;
  FG_REQUIRE(cli(&r, "train", tpath("lin.fgb"), "-i", feed("x", "x.npy"), "-i", feed("y", "y.npy"),
                 "--batch", "16", "--epochs", "2", "--quiet", "--log", tpath("log.csv"), "--plot",
                 tpath("c.svg"), NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_INT(strlen(r.out), 0);
  char *csv = slurp(tpath("log.csv"));
  FG_REQUIRE(csv);
  FG_CHECK_INT(count_lines(csv), 3);
  FG_CHECK_STR_CONTAINS(csv, "epoch,step,loss,samples_per_s,lr,seconds\n1,3,");
  free(csv);
  FG_CHECK(exists(tpath("c.svg")));
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* ---- progress on a terminal ---------------------------------------------------------- */

/* Runs `flowgraph ARGS...` under script(1), which gives it a
 * pseudo-terminal for stdout and stderr; what the terminal showed. */
static char *run_on_pty(const char *const *args, int *status) {
  char cmd[4096];
  int n = snprintf(cmd, sizeof cmd, "%s", FG_CLI_PATH);
  for (int i = 0; args[i]; i++)
    n += snprintf(cmd + n, sizeof cmd - (size_t)n, " %s", args[i]);
  const char *argv[] = {"script", "-qec", cmd, "/dev/null", NULL};
  char out[600];
  snprintf(out, sizeof out, "%s.pty", tmpdir);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int rc = posix_spawnp(&pid, "script", &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return NULL;
  if (waitpid(pid, status, 0) != pid) return NULL;
  char *text = slurp(out);
  unlink(out);
  return text;
}

FG_TEST(cli_train_progress_on_a_terminal, "") {
  setup_lin();
  char xi[600], yi[600];
  snprintf(xi, sizeof xi, "%s", feed("x", "x.npy"));
  snprintf(yi, sizeof yi, "%s", feed("y", "y.npy"));
  const char *args[] = {"train", tpath("lin.fgb"), "-i", xi,  "-i", yi, "--batch",
                        "16",    "--epochs",       "3",  NULL};
  int status = 0;
  char *tty = run_on_pty(args, &status);
  FG_REQUIRE(tty); /* script(1) is util-linux's, a test dependency */
  FG_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  /* Each epoch's progress line is drawn at its first and last step and
   * wiped (\r, spaces, \r) before the epoch line. */
  FG_CHECK_STR_CONTAINS(tty, "\repoch 1/3  step 1/3  loss ");
  FG_CHECK_STR_CONTAINS(tty, "\repoch 3/3  step 3/3  loss ");
  FG_CHECK_STR_CONTAINS(tty, " samples/s  ETA ");
  FG_CHECK(strstr(tty, "      \repoch 3/3  loss ") != NULL);
  double losses[3], got[8];
  ref_after(3, losses);
  /* What the terminal shows at the end: per line (ended by \r\n there),
   * the text after the last \r: the epoch lines alone. */
  char *shown = calloc(strlen(tty) + 1, 1);
  FG_REQUIRE(shown);
  for (char *line = tty, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = '\0';
    size_t n = strlen(line);
    if (n && line[n - 1] == '\r') line[--n] = '\0';
    const char *cr = strrchr(line, '\r');
    strcat(shown, cr ? cr + 1 : line);
    strcat(shown, "\n");
  }
  FG_CHECK_INT(parse_epochs(shown, got, 8, NULL, NULL), 3);
  FG_CHECK(strstr(shown, "  step 1/3  ") == NULL); /* every progress line wiped */
  free(shown);
  for (int e = 0; e < 3; e++)
    FG_CHECK_NEAR(got[e], losses[e], 1e-4);
  free(tty);

  /* stdout on the terminal, stderr not (script(1) runs the line with sh):
   * the epoch lines alone, no progress line. */
  const char *no_err[] = {
      "train", tpath("lin.fgb"), "-i", xi, "-i", yi, "--batch", "16", "--epochs",
      "3",     "2>/dev/null",    NULL};
  tty = run_on_pty(no_err, &status);
  FG_REQUIRE(tty);
  FG_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  FG_CHECK_STR_CONTAINS(tty, "epoch 3/3  loss ");
  FG_CHECK(strstr(tty, "  step 1/3  ") == NULL);
  FG_CHECK(strstr(tty, "\repoch") == NULL);
  free(tty);

  /* --quiet: nothing at all, terminal or not. */
  const char *quiet[] = {"train", tpath("lin.fgb"), "-i", xi,   "-i", yi, "--batch",
                         "16",    "--epochs",       "3",  "-q", NULL};
  tty = run_on_pty(quiet, &status);
  FG_REQUIRE(tty);
  FG_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  FG_CHECK_INT(strlen(tty), 0);
  free(tty);
  fgt_rmtree(tmpdir);
}

/* ---- --save-best and checkpoints ------------------------------------------------- */

/* The held-out targets are what the weights after epoch 2 predict: the
 * validation loss is lowest there, and rises after, so the best model is
 * epoch 2's, not the last. */
FG_TEST(cli_train_save_best_keeps_best_epoch, "") {
  setup_lin();
  float vx[VAL_ROWS][2], vy[VAL_ROWS];
  linp p2 = ref_after(2, NULL);
  write_val(&p2, vx, vy);
  for (int e = 1; e <= 4; e++) {
    linp p = ref_after(e, NULL);
    if (e != 2) FG_CHECK(val_mse(&p, (const float(*)[2])vx, vy, VAL_ROWS) > 1e-3);
  }
  cli_result r;
  FG_REQUIRE(cli(&r, "train", tpath("lin.fgb"), "-i", feed("x", "x.npy"), "-i", feed("y", "y.npy"),
                 "--batch", "16", "--epochs", "4", "--val", val_arg(), "--save-best",
                 tpath("best.fgb"), "--save", tpath("last.fgb"), NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "best val_loss ");
  FG_CHECK_STR_CONTAINS(r.out, " at epoch 2: wrote ");
  /* Epochs 1 and 2 improve; 3 and 4 do not. */
  FG_CHECK(strstr(r.out, "epoch 2/4  loss ") && strstr(strstr(r.out, "epoch 2/4"), "(best)"));
  const char *e3 = strstr(r.out, "epoch 3/4  loss ");
  FG_REQUIRE(e3);
  FG_CHECK(strstr(e3, "(best)") == NULL);
  check_saved_linp(tpath("best.fgb"), &p2, 1e-5);
  linp p4 = ref_after(4, NULL);
  check_saved_linp(tpath("last.fgb"), &p4, 1e-5);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* Every epoch's checkpoint, the last 2 kept: after 4 epochs (K + 2), the
 * folder (made by train) holds epochs 3 and 4 alone, no temporary file,
 * with epoch 3's weights; training on from it for one epoch gives the
 * 4-epoch weights. */
FG_TEST(cli_train_checkpoints_keep_last, "") {
  setup_lin();
  char dir[600];
  snprintf(dir, sizeof dir, "%s", tpath("ckpt"));
  cli_result r;
  FG_REQUIRE(cli(&r, "train", tpath("lin.fgb"), "-i", feed("x", "x.npy"), "-i", feed("y", "y.npy"),
                 "--batch", "16", "--epochs", "4", "--checkpoint-every", "1", "--checkpoint-dir",
                 dir, "--keep", "2", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "checkpoints: kept the last 2 of 4 in ");
  result_free(&r);
  FG_CHECK_INT(fgt_count_entries(dir), 2);
  char c3[700], c4[700];
  snprintf(c3, sizeof c3, "%s/checkpoint-epoch-000003.fgb", dir);
  snprintf(c4, sizeof c4, "%s/checkpoint-epoch-000004.fgb", dir);
  FG_CHECK(exists(c3));
  FG_CHECK(exists(c4));
  linp p3 = ref_after(3, NULL), p4 = ref_after(4, NULL);
  check_saved_linp(c3, &p3, 1e-5);
  check_saved_linp(c4, &p4, 1e-5);
  FG_REQUIRE(cli(&r, "train", c3, "-i", feed("x", "x.npy"), "-i", feed("y", "y.npy"), "--batch",
                 "16", "--epochs", "1", "--save", tpath("resumed.fgb"), NULL) == 0);
  CHECK_OK(r);
  check_saved_linp(tpath("resumed.fgb"), &p4, 1e-5);
  result_free(&r);

  /* Every 2 epochs of 5, the default --keep (3): epochs 2 and 4. */
  FG_REQUIRE(cli(&r, "train", tpath("lin.fgb"), "-i", feed("x", "x.npy"), "-i", feed("y", "y.npy"),
                 "--batch", "16", "--epochs", "5", "--checkpoint-every", "2", "--checkpoint-dir",
                 tpath("c2"), "-q", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_INT(fgt_count_entries(tpath("c2")), 2);
  FG_CHECK(exists(tpath("c2/checkpoint-epoch-000002.fgb")));
  FG_CHECK(exists(tpath("c2/checkpoint-epoch-000004.fgb")));
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* ---- --plot ---------------------------------------------------------------------- */

static int count_of(const char *s, const char *needle) {
  int n = 0;
  for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
    n++;
  return n;
}

/* Four curves (loss, val_loss; mae, val_mae in the metrics panel): four
 * polylines, each point of each curve a circle, and XML that parses. */
FG_TEST(cli_train_plot_svg, "") {
  float vx[VAL_ROWS][2], vy[VAL_ROWS];
  cli_result r;
  train_lin_val(&r, "5", vx, vy, "--plot", "c.svg");
  result_free(&r);
  char *svg = slurp(tpath("c.svg"));
  FG_REQUIRE(svg);
  FG_CHECK(strncmp(svg, "<svg", 4) == 0);
  FG_CHECK_INT(count_of(svg, "<polyline"), 4);
  FG_CHECK_INT(count_of(svg, "<circle"), 4 * 5);
  FG_CHECK_STR_CONTAINS(svg, ">val_loss</text>");
  FG_CHECK_STR_CONTAINS(svg, ">val_mae</text>");
  /* Every polyline has one point per epoch. */
  for (const char *p = strstr(svg, "points=\""); p; p = strstr(p + 1, "points=\"")) {
    const char *end = strchr(p + 8, '"');
    int pts = 0;
    for (const char *q = p + 8; q < end; q++)
      pts += *q == ',';
    FG_CHECK_INT(pts, 5);
  }
  int py = fgt_python("import sys, xml.etree.ElementTree as E\n"
                      "r = E.parse(sys.argv[1]).getroot()\n"
                      "ns = '{http://www.w3.org/2000/svg}'\n"
                      "assert r.tag == ns + 'svg', r.tag\n"
                      "assert len(r.findall('.//' + ns + 'polyline')) == 4\n",
                      tpath("c.svg"), NULL);
  FG_CHECK_PYTHON(py);
  free(svg);
  fgt_rmtree(tmpdir);
}

/* ---- the digits MLP: accuracy found by name ---------------------------------------- */

/* The model has a scalar node "accuracy": validated without --eval, and
 * the best model's accuracy and loss on the held-out set, as `run`
 * computes them from the saved file, are the ones printed for its epoch. */
FG_TEST(cli_train_val_digits_accuracy, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(run_builder(tpath("mlp.fgb")) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "train", tpath("mlp.fgb"), "-i", "x=" DIGITS_DATA "/train_x.npy", "-i",
                 "y=" DIGITS_DATA "/train_y.npy", "--batch", "64", "--epochs", "3", "--shuffle",
                 "1", "--val", "x=" DIGITS_DATA "/test_x.npy,y=" DIGITS_DATA "/test_y.npy",
                 "--save-best", tpath("best.fgb"), NULL) == 0);
  CHECK_OK(r);
  double loss[3], vloss[3], vacc[3];
  FG_CHECK_INT(parse_epochs(r.out, loss, 3, "val_loss", vloss), 3);
  FG_CHECK_INT(parse_epochs(r.out, loss, 3, "val_accuracy", vacc), 3);
  int best = 0;
  for (int e = 1; e < 3; e++)
    if (vloss[e] < vloss[best]) best = e;
  double acc = digits_accuracy(tpath("best.fgb"));
  FG_CHECK_NEAR(acc, vacc[best], 1e-6);
  FG_CHECK(vacc[2] > 0.5); /* three epochs of Adam learn the digits */
  result_free(&r);
  FG_REQUIRE(cli(&r, "run", tpath("best.fgb"), "-i", "x=" DIGITS_DATA "/test_x.npy", "-i",
                 "y=" DIGITS_DATA "/test_y.npy", "--fetch", "loss", NULL) == 0);
  CHECK_OK(r);
  double l[1] = {-1};
  FG_CHECK_INT(parse_printed(r.out, "loss", l, 1), 1);
  FG_CHECK_NEAR(l[0], vloss[best], 1e-5 * (1 + vloss[best]));
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* ---- bad inputs ------------------------------------------------------------------ */

/* Runs train on lin.fgb with `extra` options; exit 1 naming `needle`,
 * before training started (nothing on stdout). */
static void train_fails(const char *code, const char *needle, const char *o1, const char *v1,
                        const char *o2, const char *v2) {
  cli_result r;
  FG_REQUIRE(cli(&r, "train", tpath("lin.fgb"), "-i", feed("x", "x.npy"), "-i", feed("y", "y.npy"),
                 "--batch", "16", "--epochs", "2", o1, v1, o2, v2, NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "", needle);
  char head[64];
  snprintf(head, sizeof head, "flowgraph: %s: ", code);
  FG_CHECK_STR_CONTAINS(r.err, head);
  FG_CHECK_INT(strlen(r.out), 0);
  result_free(&r);
}

static void train_usage(const char *needle, const char *o1, const char *v1, const char *o2,
                        const char *v2) {
  cli_result r;
  FG_REQUIRE(cli(&r, "train", tpath("lin.fgb"), "-i", feed("x", "x.npy"), "-i", feed("y", "y.npy"),
                 "--batch", "16", "--epochs", "2", o1, v1, o2, v2, NULL) == 0);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, needle);
  result_free(&r);
}

FG_TEST(cli_train_val_wrong_columns, "badinput") {
  setup_lin();
  float vx[VAL_ROWS][2], vy[VAL_ROWS];
  write_val(NULL, vx, vy);
  char arg[1400];
  /* A name that is not a placeholder, or no node at all. */
  snprintf(arg, sizeof arg, "x=%s,pred=%s", tpath("vx.npy"), tpath("vy.npy"));
  train_fails("NOT_FOUND", "--val: feed 'pred': node 'pred' is a add, not a placeholder", "--val",
              arg, NULL, NULL);
  snprintf(arg, sizeof arg, "x=%s,z=%s", tpath("vx.npy"), tpath("vy.npy"));
  train_fails("NOT_FOUND", "--val: feed 'z'", "--val", arg, NULL, NULL);
  /* A column missing: the loss needs y. */
  snprintf(arg, sizeof arg, "x=%s", tpath("vx.npy"));
  train_fails("INVALID_ARGUMENT", "pass --val y=FILE.npy", "--val", arg, NULL, NULL);
  /* Rows that disagree: 12 against 8. */
  int64_t d8[2] = {8, 1};
  FG_REQUIRE(write_npy_f32(tpath("vy8.npy"), 2, d8, vy) == 0);
  snprintf(arg, sizeof arg, "x=%s,y=%s", tpath("vx.npy"), tpath("vy8.npy"));
  train_fails("INVALID_ARGUMENT", "has 12, y=", "--val", arg, NULL, NULL);
  train_fails("INVALID_ARGUMENT", "vy8.npy has 8", "--val", arg, NULL, NULL);
  /* A shape that does not fit the placeholder: y [?,1] fed [12,2]. */
  snprintf(arg, sizeof arg, "x=%s,y=%s", tpath("vx.npy"), tpath("vx.npy"));
  train_fails("INVALID_ARGUMENT", "--val: ", "--val", arg, NULL, NULL);
  train_fails("INVALID_ARGUMENT", "[12,2]", "--val", arg, NULL, NULL);
  /* The same column twice. */
  snprintf(arg, sizeof arg, "x=%s,x=%s,y=%s", tpath("vx.npy"), tpath("vx.npy"), tpath("vy.npy"));
  train_fails("INVALID_ARGUMENT", "feed 'x' is given twice", "--val", arg, NULL, NULL);
  /* Not NAME=FILE. */
  train_usage("--val column", "--val", "x", NULL, NULL);
  snprintf(arg, sizeof arg, "x=%s,", tpath("vx.npy"));
  train_usage("--val column", "--val", arg, NULL, NULL);
  FG_CHECK_INT(fgt_count_entries(tmpdir), 6); /* nothing written */
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_train_report_option_rules, "badinput") {
  setup_lin();
  train_usage("--save-best needs --val", "--save-best", tpath("b.fgb"), NULL, NULL);
  train_usage("--checkpoint-every needs an integer from 1", "--checkpoint-every", "0",
              "--checkpoint-dir", tpath("c"));
  train_usage("--checkpoint-every needs an integer from 1", "--checkpoint-every", "-2",
              "--checkpoint-dir", tpath("c"));
  train_usage("--checkpoint-every needs --checkpoint-dir", "--checkpoint-every", "1", NULL, NULL);
  train_usage("need --checkpoint-every", "--keep", "2", NULL, NULL);
  train_usage("--keep needs an integer from 1", "--checkpoint-every", "1", "--keep", "0");
  train_usage("--log given twice", "--log", tpath("a.csv"), "--log", tpath("b.csv"));
  FG_CHECK(!exists(tpath("c")));
  fgt_rmtree(tmpdir);
}

/* Unwritable outputs fail before the first step, naming the path. */
FG_TEST(cli_train_report_unwritable_paths, "badinput") {
  setup_lin();
  FG_REQUIRE(fgt_write_file(tpath("file"), "x", 1) == 0);
  char bad[700];
  snprintf(bad, sizeof bad, "%s/ckpt", tpath("file"));
  train_fails("IO_ERROR", "--checkpoint-dir", "--checkpoint-every", "1", "--checkpoint-dir", bad);
  train_fails("IO_ERROR", bad, "--checkpoint-every", "1", "--checkpoint-dir", bad);
  train_fails("IO_ERROR", "not a directory", "--checkpoint-every", "1", "--checkpoint-dir",
              tpath("file"));
  snprintf(bad, sizeof bad, "%s/log.csv", tpath("nodir"));
  train_fails("IO_ERROR", "--log", "--log", bad, NULL, NULL);
  train_fails("IO_ERROR", "nodir", "--log", bad, NULL, NULL);
  snprintf(bad, sizeof bad, "%s/c.svg", tpath("nodir"));
  train_fails("IO_ERROR", "--plot", "--plot", bad, NULL, NULL);
  float vx[VAL_ROWS][2], vy[VAL_ROWS];
  write_val(NULL, vx, vy);
  train_fails("IO_ERROR", "--save-best", "--val", val_arg(), "--save-best", tpath("nodir/b.fgb"));
  if (geteuid() != 0) {
    /* Root writes into a read-only folder; others may not. */
    FG_REQUIRE(mkdir(tpath("ro"), 0555) == 0);
    train_fails("IO_ERROR", "cannot write in", "--checkpoint-every", "1", "--checkpoint-dir",
                tpath("ro"));
    chmod(tpath("ro"), 0755);
  }
  fgt_rmtree(tmpdir);
}
