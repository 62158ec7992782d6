/* OpenBLAS's kernels for the CPU it runs on.
 *
 * A DYNAMIC_ARCH OpenBLAS (Debian's) picks its kernels by the CPU's model
 * number, and a model newer than the library falls back to Prescott's SSE3
 * kernels. Debian 12's 0.3.21 does that on Emerald Rapids (family 6 model
 * 207): one thread's 1024^3 sgemm ran at 21.5 GFLOP/s against 99.4 with
 * the SkylakeX kernels on the same core, and every product OpenBLAS makes
 * for flowgraph (the tiles libxsmm and oneDNN leave to it, the
 * matmul_apply_sgd GEMMs) was 4 to 5 times slower than it should be.
 *
 * So when OpenBLAS reports a core without AVX2 kernels on a CPU that has
 * AVX2 and FMA (or AVX-512), it is initialised again with the best of its
 * kernels the CPU runs (SkylakeX, else Haswell) through OPENBLAS_CORETYPE,
 * its documented switch, set only for that call. A user's own
 * OPENBLAS_CORETYPE is left to rule, and a core OpenBLAS chose with AVX2
 * kernels (Haswell, Zen, SkylakeX...) is kept: that choice is OpenBLAS's.
 *
 * This runs when the library is loaded (a constructor: OpenBLAS, a
 * dependency, has made its choice by then, and no product has run), so
 * every BLAS call in the process, the user's own included, uses one set
 * of kernels; and again at the first session (fg_cpu_kernels_start),
 * which does nothing the second time. Loaded with dlopen while other
 * threads read the environment or call OpenBLAS, the reinitialisation
 * could race with them: load flowgraph before starting such threads. */
#include <pthread.h>
#include <stdlib.h>
#include <strings.h>

#include <cblas.h>

#include "kernels/cpu/cpu_kernels.h"

/* OpenBLAS's DYNAMIC_ARCH entry points; absent from single-target
 * builds, which have no kernels to choose. */
extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));

/* OpenBLAS's x86-64 core names whose kernels use neither AVX2 nor
 * AVX-512 (interface/dynamic.c's corename table). */
static const char *const WEAK_CORES[] = {
    "Katmai", "Coppermine",  "Northwood", "Prescott",  "Banias",     "Atom",         "Core2",
    "Penryn", "Dunnington",  "Nehalem",   "Athlon",    "Opteron",    "Opteron_SSE3", "Barcelona",
    "Nano",   "Sandybridge", "Bobcat",    "Bulldozer", "Piledriver", "Steamroller"};

const char *fgk_blas_core_upgrade(const char *detected, int avx2_fma, int avx512) {
  if (!detected) return NULL;
  int weak = 0;
  for (size_t i = 0; i < sizeof WEAK_CORES / sizeof *WEAK_CORES; i++)
    weak |= strcasecmp(detected, WEAK_CORES[i]) == 0;
  if (!weak) return NULL;
  return avx512 ? "SkylakeX" : avx2_fma ? "Haswell" : NULL;
}

/* 1 when decided (fixed or kept), 0 when OpenBLAS has not chosen yet
 * ("Unknown": a static OpenBLAS whose constructor runs after this
 * library's), to be asked again at the first session. */
static int fix_core(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (getenv("OPENBLAS_CORETYPE") || !gotoblas_dynamic_init || !gotoblas_dynamic_quit) return 1;
  const char *core = openblas_get_corename();
  if (!core || strcasecmp(core, "Unknown") == 0) return 0;
  __builtin_cpu_init();
  const int avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                     __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  const char *want = fgk_blas_core_upgrade(core, avx2_fma, avx512);
  if (!want || setenv("OPENBLAS_CORETYPE", want, 0) != 0) return 1;
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");
#endif
  return 1;
}

static pthread_mutex_t core_mu = PTHREAD_MUTEX_INITIALIZER;
static int core_decided;

void fgk_blas_core_start(void) {
  pthread_mutex_lock(&core_mu);
  if (!core_decided) core_decided = fix_core();
  pthread_mutex_unlock(&core_mu);
}

__attribute__((constructor)) static void blas_core_at_load(void) { fgk_blas_core_start(); }
