/* Runner for fgtest.h cases; linked into every test binary. */
#define _DEFAULT_SOURCE /* mknod, makedev */
#include "fgtest.h"

#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#ifndef FG_PYTHON
#define FG_PYTHON "/usr/bin/python3"
#endif

int fgt_python(const char *code, const char *arg1, const char *arg2) {
  if (access(FG_PYTHON, X_OK) != 0) return FGT_PY_MISSING;
  const char *argv[] = {FG_PYTHON, "-c", code, arg1, arg1 ? arg2 : NULL, NULL};
  pid_t pid;
  if (posix_spawn(&pid, FG_PYTHON, NULL, NULL, (char *const *)argv, environ) != 0)
    return FGT_PY_BROKEN;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return FGT_PY_BROKEN;
  return WEXITSTATUS(status);
}

int fgt_python_cached(const char *dir, const char *script, const char *arg) {
#ifdef FGT_CACHED_RUN
  char code[1600];
  snprintf(code, sizeof code,
           "import runpy, sys; sys.argv = ['cached_run.py', '%s', sys.argv[1], '%s', "
           "sys.argv[1]%s]; runpy.run_path('%s', run_name='__main__')",
           FGT_PY_CACHE, script, arg ? ", sys.argv[2]" : "", FGT_CACHED_RUN);
  return fgt_python(code, dir, arg);
#else
  (void)dir, (void)script, (void)arg;
  return FGT_PY_BROKEN;
#endif
}

int fgt_make_char_device(const char *path, int major, int minor) {
  if (mknod(path, S_IFCHR | 0666, makedev((unsigned)major, (unsigned)minor)) != 0) return 0;
  int fd = open(path, O_WRONLY);
  if (fd < 0) return 0;
  close(fd);
  return 1;
}

int fgt_require_gpu(void) {
  const char *v = getenv("FG_REQUIRE_GPU");
  return v && v[0] && strcmp(v, "0") != 0;
}

fgt_case fgt_cases[FGT_MAX_CASES];
int fgt_n_cases;
int fgt_failures;
int fgt_skipped;

void fgt_register(const char *name, const char *labels, fgt_fn fn) {
  if (fgt_n_cases >= FGT_MAX_CASES) {
    fprintf(stderr, "fgtest: too many cases (raise FGT_MAX_CASES)\n");
    exit(1);
  }
  fgt_cases[fgt_n_cases++] = (fgt_case){name, labels, fn};
}

void fgt_rmtree(const char *path) {
  struct stat sb;
  if (lstat(path, &sb) != 0) return;
  if (!S_ISDIR(sb.st_mode)) {
    unlink(path);
    return;
  }
  DIR *d = opendir(path);
  if (d) {
    struct dirent *e;
    char child[4096];
    while ((e = readdir(d)) != NULL) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      int n = snprintf(child, sizeof child, "%s/%s", path, e->d_name);
      if (n > 0 && (size_t)n < sizeof child) fgt_rmtree(child);
    }
    closedir(d);
  }
  rmdir(path);
}

char *fgt_mkdtemp(char *buf, size_t size, const char *prefix) {
  int n = snprintf(buf, size, "/tmp/%s_XXXXXX", prefix);
  return (n > 0 && (size_t)n < size) ? mkdtemp(buf) : NULL;
}

int fgt_count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
  closedir(d);
  return n;
}

int fgt_write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t w = n ? fwrite(data, 1, n, f) : 0;
  return (fclose(f) == 0 && w == n) ? 0 : -1;
}

static int run_case(const fgt_case *c) {
  fgt_failures = 0;
  fgt_skipped = 0;
  c->fn();
  if (fgt_failures) {
    printf("FAIL %s (%d checks)\n", c->name, fgt_failures);
    return 1;
  }
  printf("%s %s\n", fgt_skipped ? "SKIP" : "ok", c->name);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--list") == 0) {
    for (int i = 0; i < fgt_n_cases; i++)
      printf("%s %s\n", fgt_cases[i].name, fgt_cases[i].labels[0] ? fgt_cases[i].labels : "-");
    return 0;
  }
  if (argc > 1) {
    for (int i = 0; i < fgt_n_cases; i++)
      if (strcmp(fgt_cases[i].name, argv[1]) == 0) {
        int rc = run_case(&fgt_cases[i]);
        return rc ? 1 : (fgt_skipped ? 77 : 0);
      }
    fprintf(stderr, "no test case named %s\n", argv[1]);
    return 1;
  }
  int failed = 0;
  for (int i = 0; i < fgt_n_cases; i++)
    failed += run_case(&fgt_cases[i]);
  printf("%d cases, %d failed\n", fgt_n_cases, failed);
  return failed ? 1 : 0;
}
