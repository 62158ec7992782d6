/* OpenBLAS's kernels for the CPU (kernels/cpu/blas_core.c): the rule that
 * picks a core type in place of one without AVX2 kernels, that a process
 * linked with flowgraph runs the kernels its CPU has, and that a user's
 * OPENBLAS_CORETYPE stays in force. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cblas.h>

#include "fgtest.h"
#include "kernels/cpu/cpu_kernels.h"

/* Present in a DYNAMIC_ARCH OpenBLAS only: one built for a single CPU
 * has no kernels to choose, and these cases skip. */
extern void gotoblas_dynamic_init(void) __attribute__((weak));

static const char *upgrade(const char *detected, int avx2_fma, int avx512) {
  const char *s = fgk_blas_core_upgrade(detected, avx2_fma, avx512);
  return s ? s : "(keep)";
}

FG_TEST(blas_core_upgrade_rules, "") {
  /* OpenBLAS's fallback and other cores without AVX2 kernels. */
  FG_CHECK_STR(upgrade("Prescott", 1, 1), "SkylakeX");
  FG_CHECK_STR(upgrade("Prescott", 1, 0), "Haswell");
  FG_CHECK_STR(upgrade("prescott", 1, 0), "Haswell"); /* names in any case */
  FG_CHECK_STR(upgrade("Nehalem", 1, 1), "SkylakeX");
  FG_CHECK_STR(upgrade("Sandybridge", 1, 0), "Haswell");
  FG_CHECK_STR(upgrade("Core2", 1, 1), "SkylakeX");
  /* A CPU without AVX2 and FMA: nothing better to give it. */
  FG_CHECK_STR(upgrade("Prescott", 0, 0), "(keep)");
  /* Cores with AVX2 or AVX-512 kernels are OpenBLAS's choice. */
  FG_CHECK_STR(upgrade("Haswell", 1, 1), "(keep)");
  FG_CHECK_STR(upgrade("Zen", 1, 1), "(keep)");
  FG_CHECK_STR(upgrade("SkylakeX", 1, 1), "(keep)");
  FG_CHECK_STR(upgrade("Cooperlake", 1, 1), "(keep)");
  FG_CHECK_STR(upgrade("SapphireRapids", 1, 1), "(keep)");
  /* A name this table does not know, OpenBLAS before its choice, and none. */
  FG_CHECK_STR(upgrade("SomeFutureCore", 1, 1), "(keep)");
  FG_CHECK_STR(upgrade("Unknown", 1, 1), "(keep)");
  FG_CHECK_STR(upgrade(NULL, 1, 1), "(keep)");
}

/* Run alone, the core OpenBLAS runs has the AVX2 or AVX-512 kernels the
 * CPU supports; run by the next case with OPENBLAS_CORETYPE set (and
 * FG_TEST_USER_CORE, which the library does not read, the same), it is
 * the core the user named, and the user's variable is still set. */
FG_TEST(blas_core_is_the_cpus_or_the_users, "") {
#if !defined(__x86_64__)
  FG_SKIP("the core types are x86-64's");
#endif
  if (!gotoblas_dynamic_init) FG_SKIP("OpenBLAS is built for one CPU");
  if (getenv("OPENBLAS_CORETYPE") && !getenv("FG_TEST_USER_CORE"))
    FG_SKIP("OPENBLAS_CORETYPE is set for this run");
  fgk_blas_core_start();
  const char *core = openblas_get_corename();
  FG_REQUIRE(core != NULL);
  const char *user = getenv("FG_TEST_USER_CORE");
  if (user) {
    if (strcasecmp(core, user) != 0) FG_FAIL_AT("OPENBLAS_CORETYPE=%s, core %s", user, core);
    const char *env = getenv("OPENBLAS_CORETYPE");
    FG_CHECK(env && strcmp(env, user) == 0);
    return;
  }
#if defined(__x86_64__)
  __builtin_cpu_init();
  const int avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                     __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  if (fgk_blas_core_upgrade(core, avx2_fma, avx512) != NULL)
    FG_FAIL_AT("OpenBLAS runs %s kernels on a CPU with%s AVX2 and FMA%s", core,
               avx2_fma ? "" : "out", avx512 ? " and AVX-512" : "");
#endif
  /* The kernels it runs still multiply: [[1, 2], [3, 4]] [[5, 6], [7, 8]]. */
  const float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
  float c[4] = {0, 0, 0, 0};
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
  FG_CHECK(c[0] == 19 && c[1] == 22 && c[2] == 43 && c[3] == 50);
}

FG_TEST(blas_core_leaves_the_users_choice, "") {
  if (getenv("FG_TEST_USER_CORE")) return; /* run by this case: nothing to spawn */
#if !defined(__x86_64__)
  FG_SKIP("the core types are x86-64's");
#endif
  if (!gotoblas_dynamic_init) FG_SKIP("OpenBLAS is built for one CPU");
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  FG_REQUIRE(n > 0);
  self[n] = '\0';
  char cmd[4200];
  snprintf(cmd, sizeof cmd,
           "OPENBLAS_CORETYPE=Prescott FG_TEST_USER_CORE=Prescott '%s' "
           "blas_core_is_the_cpus_or_the_users",
           self);
  const int rc = system(cmd);
  FG_CHECK(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
}
