/* Shared by tests/dist/test_mpi_train.c and tests/dist/test_mpi_hosts.c: the linear
 * regression model of test_cli_train_util.h trained by `mpirun ... flowgraph
 * train --dist mpi`, and its comparison with one process and with SGD by
 * hand. */
#ifndef FG_TEST_MPI_LIN_H
#define FG_TEST_MPI_LIN_H

#include "test_cli_train_util.h"
#include "mpi_run.h"

#define LR 0.1

static inline int setup_linreg(void) {
  if (!make_tmpdir()) return -1;
  if (build_linreg(tpath("lin.fgb"), 0, LR) != 0) return -1;
  return write_linreg_data("x.npy", "y.npy", LIN_ROWS, LIN_ROWS);
}

static inline double rel_err(double a, double b) {
  double d = fabs(a - b), m = fabs(b) > 1e-3 ? fabs(b) : 1e-3;
  return d / m;
}

/* The -i arguments feeding x.npy and y.npy of the test's folder. */
static inline void lin_inputs(char xi[static 700], char yi[static 700]) {
  snprintf(xi, 700, "x=%s", tpath("x.npy"));
  snprintf(yi, 700, "y=%s", tpath("y.npy"));
}

/* Output of mpirun (at `where`: NULL for this machine, see mpirun_at) with
 * the CLI, `train MODEL` (a file of the test's folder) and the train
 * arguments plus `extra`. `ranks_per_host` > 0 puts every that many
 * consecutive ranks on a pretend host of their own (FG_MPI_HOST). */
static inline void mpi_train_at(const char *const where[], int ranks_per_host, int np,
                                const char *model, const char *batch, const char *extra[],
                                const char *save, run_result *res) {
  char xi[700], yi[700], modelbuf[700];
  lin_inputs(xi, yi);
  snprintf(modelbuf, sizeof modelbuf, "%s", tpath(model));
  char *args[40] = {FG_CLI_PATH, "train",          modelbuf,      "-i",       xi,  "-i",
                    yi,          "--batch",        (char *)batch, "--epochs", "3", "--dist",
                    "mpi",       "--dist-timeout", "20"};
  int k = 15;
  if (ranks_per_host > 0) {
    /* Each rank names its pretend host through FG_MPI_HOST, from the rank
     * Open MPI gives it: sh -c '...' flowgraph ARGS... */
    static char script[160];
    snprintf(script, sizeof script,
             "FG_MPI_HOST=pretend-$((OMPI_COMM_WORLD_RANK / %d)) exec \"$0\" \"$@\"",
             ranks_per_host);
    memmove(args + 3, args, (size_t)k * sizeof *args);
    args[0] = "/bin/sh";
    args[1] = "-c";
    args[2] = script;
    k += 3;
  }
  char savebuf[700];
  if (save) {
    snprintf(savebuf, sizeof savebuf, "%s", tpath(save));
    args[k++] = "--save";
    args[k++] = savebuf;
  }
  for (int i = 0; extra && extra[i]; i++)
    args[k++] = (char *)extra[i];
  args[k] = NULL;
  mpirun_at(where, np, NULL, args, 50, res);
}

/* An MPI run's epoch losses (printed in mpi_out, 3 epochs) and saved w, b
 * (mpi_file in the test's folder) against one process's (single_out and
 * single.fgb) within 1e-5 relative, or bit for bit when `exact`, and
 * against SGD by hand in double within 1e-4. The saved w, b are left in
 * wm, bm. */
static inline void check_vs_single(const char *mpi_out, const char *single_out,
                                   const char *mpi_file, int batch, int shuffle, int exact,
                                   float wm[2], float bm[1]) {
  double lm[8], ls[8], ref[8];
  linp p;
  lin_train_reference(batch, 3, shuffle, 7, LR, &p, ref);
  /* Only one process prints: exactly 3 epoch lines. */
  FG_CHECK_INT(parse_epochs(mpi_out, lm, 8, NULL, NULL), 3);
  FG_CHECK_INT(parse_epochs(single_out, ls, 8, NULL, NULL), 3);
  for (int e = 0; e < 3; e++) {
    if (exact) FG_CHECK(lm[e] == ls[e]);
    FG_CHECK(rel_err(lm[e], ls[e]) < 1e-5);
    FG_CHECK(rel_err(lm[e], ref[e]) < 1e-4);
  }
  float ws[2], bs[1];
  FG_CHECK_INT(saved_variable(tpath(mpi_file), "w", wm, 2), 2);
  FG_CHECK_INT(saved_variable(tpath("single.fgb"), "w", ws, 2), 2);
  FG_CHECK_INT(saved_variable(tpath(mpi_file), "b", bm, 1), 1);
  FG_CHECK_INT(saved_variable(tpath("single.fgb"), "b", bs, 1), 1);
  if (exact) FG_CHECK(memcmp(wm, ws, sizeof ws) == 0 && memcmp(bm, bs, sizeof bs) == 0);
  for (int i = 0; i < 2; i++) {
    FG_CHECK(rel_err(wm[i], ws[i]) < 1e-5);
    FG_CHECK(rel_err(wm[i], p.w[i]) < 1e-4);
  }
  FG_CHECK(rel_err(bm[0], bs[0]) < 1e-5);
  FG_CHECK(rel_err(bm[0], p.b) < 1e-4);
}

/* How often `what` occurs in `s`. */
static inline int count_substr(const char *s, const char *what) {
  int n = 0;
  for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
    n++;
  return n;
}

/* One process's `train MODEL` over 3 epochs of `batch`, saved to
 * single.fgb (shuffled with seed 7 when `shuffle`): the reference the MPI
 * runs are compared with. */
static inline void single_train(cli_result *r, const char *model, const char *batch, int shuffle) {
  char xi[700], yi[700], m[700];
  lin_inputs(xi, yi);
  snprintf(m, sizeof m, "%s", tpath(model));
  if (shuffle)
    cli(r, "train", m, "-i", xi, "-i", yi, "--batch", batch, "--epochs", "3", "--shuffle", "7",
        "--save", tpath("single.fgb"), NULL);
  else
    cli(r, "train", m, "-i", xi, "-i", yi, "--batch", batch, "--epochs", "3", "--save",
        tpath("single.fgb"), NULL);
}

/* An MPI run's output (saved to mpi.fgb) against one process training
 * lin.fgb on the same batches (check_vs_single); frees res and the test's
 * folder. */
static inline void check_vs_single_train(run_result *res, const char *batch) {
  cli_result r;
  single_train(&r, "lin.fgb", batch, 0);
  FG_CHECK_INT(r.code, 0);
  float wm[2], bm[1];
  check_vs_single(res->out, r.out, "mpi.fgb", atoi(batch), 0, 0, wm, bm);
  if (fgt_failures) fprintf(stderr, "mpirun output:\n%s\nsingle:\n%s\n", res->out, r.out);
  result_free(&r);
  free(res);
  fgt_rmtree(tmpdir);
}

#endif
