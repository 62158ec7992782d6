/* A small test framework: each test binary holds many named cases, and
 * ctest registers each case on its own (see tests/CMakeLists.txt), so the
 * ctest summary counts what ran.
 *
 *   FG_TEST(add_broadcast, "") { FG_CHECK_NEAR(x, 1.5, 1e-6); }
 *   FG_TEST(load_truncated, "badinput") { ... }
 *
 * `binary --list` prints "name labels" per line; `binary NAME` runs one
 * case; `binary` with no argument runs them all. A case fails when any
 * check fails; checks print the file, line and both values. A case may call
 * FG_SKIP("why") to report a visible skip (exit code 77, which ctest's
 * SKIP_RETURN_CODE turns into "skipped"). Label a case "slow" when it
 * takes 10 s or more under the sanitizers: ctest then starts it first.
 */
#ifndef FG_TEST_H
#define FG_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*fgt_fn)(void);
typedef struct fgt_case {
  const char *name;
  const char *labels;
  fgt_fn fn;
} fgt_case;

#define FGT_MAX_CASES 1024
extern fgt_case fgt_cases[FGT_MAX_CASES];
extern int fgt_n_cases;
extern int fgt_failures;
extern int fgt_skipped;
void fgt_register(const char *name, const char *labels, fgt_fn fn);
/* Removes a scratch file or folder tree (tests' temporary outputs). */
void fgt_rmtree(const char *path);
/* Makes a new empty folder /tmp/<prefix>_XXXXXX in buf; NULL on failure. */
char *fgt_mkdtemp(char *buf, size_t size, const char *prefix);
/* Entries in `dir` other than . and .., or -1. */
int fgt_count_entries(const char *dir);
/* Writes n bytes to path; 0 or -1. */
int fgt_write_file(const char *path, const void *data, size_t n);
/* A character device node at `path` (a scratch copy of /dev/null: 1, 3,
 * or /dev/full: 1, 7), as root can make one: 1 when it exists and opens
 * for writing, else 0 (not root, a nodev mount). Tests of writers write to
 * such a copy, never to the machine's own /dev entries, which a writer
 * that renames over its target would replace. */
int fgt_make_char_device(const char *path, int major, int minor);

/* Runs FG_PYTHON -c CODE [ARG1 [ARG2]] (either may be NULL) and returns its
 * exit status (0-255); FGT_PY_MISSING when FG_PYTHON is not an executable
 * file, FGT_PY_BROKEN when it could not be started or died of a signal. */
#define FGT_PY_MISSING (-1)
#define FGT_PY_BROKEN  (-2)
int fgt_python(const char *code, const char *arg1, const char *arg2);

/* tests/cached_run.py, which runs a reference script or reuses the results
 * of an earlier run on the same input, and its store: in the folder of
 * generated cases, which the sanitizer builds share with the Release
 * build. */
#ifdef FG_SOURCE_DIR
#define FGT_CACHED_RUN FG_SOURCE_DIR "/tests/cached_run.py"
#endif
#ifdef FG_CASES_DIR
#define FGT_PY_CACHE FG_CASES_DIR "/py_results"
#else
#define FGT_PY_CACHE ""
#endif
/* Runs FG_PYTHON SCRIPT DIR [ARG] through tests/cached_run.py: SCRIPT
 * reads the files in DIR (made when missing) and writes its results there.
 * Its exit status, as fgt_python's. */
int fgt_python_cached(const char *dir, const char *script, const char *arg);

#define FG_TEST(name, labels)                                                                      \
  static void fgt_case_##name(void);                                                               \
  __attribute__((constructor)) static void fgt_reg_##name(void) {                                  \
    fgt_register(#name, labels, fgt_case_##name);                                                  \
  }                                                                                                \
  static void fgt_case_##name(void)

#define FG_FAIL_AT(...)                                                                            \
  do {                                                                                             \
    fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                                \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fprintf(stderr, "\n");                                                                         \
    fgt_failures++;                                                                                \
  } while (0)

#define FG_CHECK(cond)                                                                             \
  do {                                                                                             \
    if (!(cond)) FG_FAIL_AT("check failed: %s", #cond);                                            \
  } while (0)

/* Stops the case when the condition fails (use before dereferencing). */
#define FG_REQUIRE(cond)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      FG_FAIL_AT("requirement failed: %s", #cond);                                                 \
      return;                                                                                      \
    }                                                                                              \
  } while (0)

#define FG_CHECK_INT(a, b)                                                                         \
  do {                                                                                             \
    long long fgt_a = (long long)(a), fgt_b = (long long)(b);                                      \
    if (fgt_a != fgt_b) FG_FAIL_AT("%s == %s: %lld != %lld", #a, #b, fgt_a, fgt_b);                \
  } while (0)

#define FG_CHECK_NEAR(a, b, tol)                                                                   \
  do {                                                                                             \
    double fgt_a = (double)(a), fgt_b = (double)(b);                                               \
    if (!(fabs(fgt_a - fgt_b) <= (tol) * (1.0 + fabs(fgt_b))))                                     \
      FG_FAIL_AT("%s ~ %s: %.17g vs %.17g (tol %g)", #a, #b, fgt_a, fgt_b, (double)(tol));         \
  } while (0)

#define FG_CHECK_STR_CONTAINS(hay, needle)                                                         \
  do {                                                                                             \
    const char *fgt_h = (hay), *fgt_n = (needle);                                                  \
    if (!fgt_h || !strstr(fgt_h, fgt_n))                                                           \
      FG_FAIL_AT("\"%s\" does not contain \"%s\"", fgt_h ? fgt_h : "(null)", fgt_n);               \
  } while (0)

#define FG_CHECK_STR(got, want)                                                                    \
  do {                                                                                             \
    const char *fgt_g = (got), *fgt_w = (want);                                                    \
    if (!fgt_g || strcmp(fgt_g, fgt_w) != 0)                                                       \
      FG_FAIL_AT("\"%s\" is not \"%s\"", fgt_g ? fgt_g : "(null)", fgt_w);                         \
  } while (0)

#define FG_SKIP(...)                                                                               \
  do {                                                                                             \
    printf("SKIPPED: ");                                                                           \
    printf(__VA_ARGS__);                                                                           \
    printf("\n");                                                                                  \
    fgt_skipped = 1;                                                                               \
    return;                                                                                        \
  } while (0)

/* 1 when the environment sets FG_REQUIRE_GPU to anything but "" or "0":
 * the machine is known to have a GPU (tools/device/gpu_check.sh sets it),
 * so finding none is a failure, not a reason to skip. */
int fgt_require_gpu(void);

/* A GPU case that finds no usable GPU (no CUDA backend in the build, no
 * driver, a device count that fails or is 0): a visible skip, or a failure
 * under FG_REQUIRE_GPU=1, where a broken driver must not pass as "no GPU".
 * The arguments are a format string literal and its values, the reason. */
#define FG_SKIP_NO_GPU(...)                                                                        \
  do {                                                                                             \
    if (fgt_require_gpu()) {                                                                       \
      FG_FAIL_AT("FG_REQUIRE_GPU is set, but no usable GPU: " __VA_ARGS__);                        \
      return;                                                                                      \
    }                                                                                              \
    FG_SKIP(__VA_ARGS__);                                                                          \
  } while (0)

/* In a GPU case built with CUDA (the file includes <cuda_runtime_api.h>):
 * FG_SKIP_NO_GPU unless the runtime counts at least one device. */
#define FG_SKIP_NO_CUDA_DEVICE()                                                                   \
  do {                                                                                             \
    int fgt_ndev = 0;                                                                              \
    if (cudaGetDeviceCount(&fgt_ndev) != cudaSuccess || fgt_ndev == 0)                             \
      FG_SKIP_NO_GPU("no CUDA device");                                                            \
  } while (0)

/* The result of a Python cross-check (fgt_python): exit 0 passes; a
 * missing interpreter, the one reason such a check may not run, marks the
 * case skipped (visibly, and without returning, so its other checks still
 * count and a failure among them still fails it); anything else fails. */
#define FG_CHECK_PYTHON(rc)                                                                        \
  do {                                                                                             \
    int fgt_rc = (rc);                                                                             \
    if (fgt_rc == FGT_PY_MISSING) {                                                                \
      printf("SKIPPED: no Python interpreter: a Python cross-check did not run\n");                \
      fgt_skipped = 1;                                                                             \
    } else if (fgt_rc != 0) {                                                                      \
      FG_FAIL_AT("%s: the Python cross-check %s", #rc,                                             \
                 fgt_rc == FGT_PY_BROKEN ? "did not start or died of a signal" : "failed");        \
      if (fgt_rc > 0) fprintf(stderr, "  (exit status %d)\n", fgt_rc);                             \
    }                                                                                              \
  } while (0)

/* The folder holding test fixtures (set by CMake). */
#ifndef FG_TEST_DATA_DIR
#define FG_TEST_DATA_DIR "tests/data"
#endif

#endif
