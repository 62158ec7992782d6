/* Shared by tests/dist/test_mpi*.c: starting programs under mpirun on
 * localhost with a wall-clock limit that kills the whole process group, so
 * a hang is a failure, never a stuck ctest. Open MPI refuses root unless two
 * environment variables allow it; they are set for the child only. */
#ifndef FG_TEST_MPI_RUN_H
#define FG_TEST_MPI_RUN_H

/* What the ranks preload (tests/CMakeLists.txt): empty but under ASan. */
#ifndef FG_MPI_RANK_PRELOAD
#define FG_MPI_RANK_PRELOAD ""
#endif

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#include "fgtest.h"
#include "dist/comm/shm_reduce.h"

#ifndef FG_MPIEXEC
#define FG_MPIEXEC ""
#endif
#ifndef FG_MPI_HELPER_DIR
#define FG_MPI_HELPER_DIR ""
#endif

static inline double mpi_now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Skips visibly (returning from the case) unless this build has MPI and
 * mpirun exists. */
#ifdef FG_HAVE_MPI
#define MPI_REQUIRED()                                                                             \
  do {                                                                                             \
    if (!FG_MPIEXEC[0] || access(FG_MPIEXEC, X_OK) != 0) FG_SKIP("mpirun not found");              \
  } while (0)
#else
#define MPI_REQUIRED()                                                                             \
  FG_SKIP("flowgraph was built without MPI (FG_MPI=OFF or libopenmpi-dev missing)")
#endif

/* The all_reduce path the MPI communicator takes when every rank is on
 * this machine: "shared memory" where a POSIX shared-memory segment can be
 * created (Debian's /dev/shm), else MPI messages, whose reported path
 * starts with "MPI messages (". A machine without /dev/shm thus checks the
 * fallback rather than failing. */
static inline const char *mpi_local_reduce_path(void) {
  char name[64];
  snprintf(name, sizeof name, "/fg-test-probe-%d", (int)getpid());
  fg_status *st = fg_status_new();
  int ok = fg_shm_reduce_create(name, 2, 4096, st) == 0;
  if (ok) fg_shm_reduce_unlink(name);
  fg_status_free(st);
  return ok ? "shared memory" : "MPI messages (";
}

/* Whether the rank list at `q` ("2, 3", as a deadline prints it after
 * "for rank(s) ") names a rank `want` accepts (`me`: the caller's, passed
 * on). */
static inline int rank_list_any(const char *q, int (*want)(int rank, int me), int me) {
  while (*q >= '0' && *q <= '9') {
    char *end;
    long r = strtol(q, &end, 10);
    if (want((int)r, me)) return 1;
    q = end;
    if (q[0] == ',' && q[1] == ' ') q += 2;
  }
  return 0;
}

typedef struct run_result {
  int status; /* exit code, 128+signal, or -1 when it hung */
  double wall;
  char out[65536];
} run_result;

/* Runs argv with stdout+stderr captured; kills its process group after
 * `limit` seconds. */
static inline void run_limited(char *const argv[], double limit, run_result *res) {
  char path[] = "/tmp/fg_mpi_out_XXXXXX";
  int fd = mkstemp(path);
  memset(res, 0, sizeof *res);
  res->status = -2;
  if (fd < 0) return;
  /* The child's environment is made here, before fork, and handed to
   * execve, so the child calls nothing but async-signal-safe functions
   * before exec (a test's other thread may hold an allocator lock at fork),
   * and the test's own environment stays as it is. */
  static char *const extra_env[] = {
      "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
      /* Under LSan, Open MPI's own allocations are suppressed by library:
       * the ranks keep its components loaded (FG_MPI_RANK_PRELOAD), so the
       * frame that called malloc names one. TLS is scanned: use_tls=0 was
       * set, while components were unloaded, after a dlopen'ed component's
       * dynamic TLS entry read as a bogus range and crashed LSan's tracer
       * in 4-process hybrid runs; with it, libgomp's per-thread settings
       * and dlerror's buffer, held only in TLS, read as leaks. */
      "LSAN_OPTIONS=suppressions=" FG_SOURCE_DIR
      "/tests/dist/mpi/lsan_openmpi.supp:print_suppressions=0"};
  const size_t n_extra = sizeof extra_env / sizeof *extra_env;
  size_t n_env = 0;
  while (environ[n_env])
    n_env++;
  char **envp = malloc((n_env + n_extra + 1) * sizeof *envp);
  if (!envp) {
    close(fd);
    unlink(path);
    return;
  }
  size_t k = 0;
  for (size_t i = 0; i < n_env; i++) {
    int replaced = 0;
    for (size_t j = 0; j < n_extra; j++) {
      size_t name = (size_t)(strchr(extra_env[j], '=') - extra_env[j]) + 1;
      replaced |= strncmp(environ[i], extra_env[j], name) == 0;
    }
    if (!replaced) envp[k++] = environ[i];
  }
  for (size_t j = 0; j < n_extra; j++)
    envp[k++] = extra_env[j];
  envp[k] = NULL;
  double t0 = mpi_now_s();
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    execve(argv[0], argv, envp);
    _exit(127);
  }
  free(envp);
  int wst = 0;
  for (;;) {
    pid_t w = waitpid(pid, &wst, WNOHANG);
    if (w == pid) {
      res->status = WIFEXITED(wst) ? WEXITSTATUS(wst) : 128 + WTERMSIG(wst);
      break;
    }
    if (mpi_now_s() - t0 > limit) {
      kill(-pid, SIGKILL);
      waitpid(pid, &wst, 0);
      res->status = -1;
      break;
    }
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
  }
  res->wall = mpi_now_s() - t0;
  /* Anything left in the group (a rank mpirun abandoned) goes too. */
  kill(-pid, SIGKILL);
  lseek(fd, 0, SEEK_SET);
  ssize_t n = read(fd, res->out, sizeof res->out - 1);
  res->out[n > 0 ? n : 0] = '\0';
  close(fd);
  unlink(path);
  if (res->status == -1) fprintf(stderr, "HUNG after %.1f s; output:\n%s\n", res->wall, res->out);
}

/* Appends `path`'s contents to res->out (as much as fits). */
static inline void mpi_append_file(run_result *res, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return;
  size_t len = strlen(res->out);
  size_t n = fread(res->out + len, 1, sizeof res->out - 1 - len, f);
  res->out[len + n] = '\0';
  fclose(f);
}

/* mpirun --oversubscribe -np N [extra] PROGRAM args...
 * `where`: NULL runs FG_MPIEXEC on this machine; else the words that start
 * mpirun elsewhere, e.g. on two hosts of tools/netns_hosts.sh
 * (tests/dist/mpi/netns_hosts.h), which stand in for FG_MPIEXEC.
 * The ranks' stdout and stderr reach mpirun's output interleaved (down to
 * single characters when several ranks fail at once), so each rank also
 * writes its own files (--output-filename). With that option Open MPI 4.1
 * still echoes the ranks' stdout but no longer their stderr, so each rank's
 * stderr file is appended to res->out in rank order: a test can look for one
 * rank's whole error line. */
static inline void mpirun_at(const char *const where[], int np, const char *extra,
                             char *const prog_args[], double limit, run_result *res) {
  char *argv[64];
  int k = 0;
  char npbuf[16];
  char dir[] = "/tmp/fg_mpi_ranks_XXXXXX";
  int have_dir = mkdtemp(dir) != NULL;
  snprintf(npbuf, sizeof npbuf, "%d", np);
  if (!where) argv[k++] = (char *)FG_MPIEXEC;
  for (int i = 0; where && where[i] && k < 16; i++)
    argv[k++] = (char *)where[i];
  argv[k++] = "--oversubscribe";
  argv[k++] = "--bind-to";
  argv[k++] = "none";
  if (FG_MPI_RANK_PRELOAD[0]) { /* the ranks only, not mpirun */
    argv[k++] = "-x";
    argv[k++] = "LD_PRELOAD=" FG_MPI_RANK_PRELOAD;
  }
  argv[k++] = "-np";
  argv[k++] = npbuf;
  if (have_dir) {
    argv[k++] = "--output-filename";
    argv[k++] = dir;
  }
  if (extra) argv[k++] = (char *)extra;
  for (int i = 0; prog_args[i] && k < 63; i++)
    argv[k++] = prog_args[i];
  argv[k] = NULL;
  run_limited(argv, limit, res);
  if (!have_dir) return;
  for (int r = 0; r < np; r++) {
    char path[128];
    snprintf(path, sizeof path, "%s/1/rank.%d/stderr", dir, r);
    mpi_append_file(res, path);
  }
  fgt_rmtree(dir);
}

static inline void mpirun(int np, const char *extra, char *const prog_args[], double limit,
                          run_result *res) {
  mpirun_at(NULL, np, extra, prog_args, limit, res);
}

#endif
