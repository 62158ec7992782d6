/* NVRTC loaded on first use, and the disk cache of its CUBINs: see
 * nvrtc_cache.h. */
#include "kernels/cuda/nvrtc_cache.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- NVRTC, by dlopen ---------------------------------------------------------- */

/* nvrtc.h's prototypes, declared here so that a build without the toolkit
 * compiles this file too. nvrtcResult is an enum (NVRTC_SUCCESS = 0),
 * returned as an int; nvrtcProgram an opaque pointer. */
typedef int nv_result;
typedef struct nv_program_s *nv_program;
typedef struct nvrtc_api {
  nv_result (*version)(int *major, int *minor);
  nv_result (*create)(nv_program *prog, const char *src, const char *name, int n_headers,
                      const char *const *headers, const char *const *include_names);
  nv_result (*destroy)(nv_program *prog);
  nv_result (*compile)(nv_program prog, int n_options, const char *const *options);
  nv_result (*log_size)(nv_program prog, size_t *size);
  nv_result (*log)(nv_program prog, char *log);
  nv_result (*cubin_size)(nv_program prog, size_t *size);
  nv_result (*cubin)(nv_program prog, char *cubin);
  nv_result (*ptx_size)(nv_program prog, size_t *size);
  nv_result (*ptx)(nv_program prog, char *ptx);
  const char *(*error_string)(nv_result r);
  int major, minor;
} nvrtc_api;

static nvrtc_api api;
static int api_ok;
static char api_why[512];
static pthread_once_t api_once = PTHREAD_ONCE_INIT;
static atomic_long n_compiles;

/* dlsym's void * into the function pointer at dst (POSIX guarantees the
 * conversion; memcpy avoids reading one type through another). */
static int sym(void *lib, const char *name, void *dst, size_t dst_size) {
  void *p = dlsym(lib, name);
  if (!p || dst_size != sizeof p) {
    snprintf(api_why, sizeof api_why, "NVRTC could not be loaded: it has no %s", name);
    return 0;
  }
  memcpy(dst, &p, sizeof p);
  return 1;
}
#define SYM(name, field) sym(lib, name, &a.field, sizeof a.field)

/* The library: $FG_NVRTC_LIBRARY when set, else the soname of the
 * toolkit the build saw, else the file CMake found, else any libnvrtc.so. */
static void *open_nvrtc(void) {
  const char *env = getenv("FG_NVRTC_LIBRARY");
  const char *names[4];
  int n = 0;
  if (env && env[0]) names[n++] = env;
#ifdef FG_NVRTC_SONAME
  names[n++] = FG_NVRTC_SONAME;
#endif
#ifdef FG_NVRTC_PATH
  names[n++] = FG_NVRTC_PATH;
#endif
  names[n++] = "libnvrtc.so";
  const char *last = "";
  for (int i = 0; i < n; i++) {
    void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (lib) return lib;
    const char *e = dlerror();
    last = e ? e : names[i];
  }
  snprintf(api_why, sizeof api_why, "NVRTC could not be loaded: %s", last);
  return NULL;
}

static void load_api(void) {
  void *lib = open_nvrtc();
  if (!lib) return;
  nvrtc_api a;
  memset(&a, 0, sizeof a);
  if (!SYM("nvrtcVersion", version) || !SYM("nvrtcCreateProgram", create) ||
      !SYM("nvrtcDestroyProgram", destroy) || !SYM("nvrtcCompileProgram", compile) ||
      !SYM("nvrtcGetProgramLogSize", log_size) || !SYM("nvrtcGetProgramLog", log) ||
      !SYM("nvrtcGetCUBINSize", cubin_size) || !SYM("nvrtcGetCUBIN", cubin) ||
      !SYM("nvrtcGetPTXSize", ptx_size) || !SYM("nvrtcGetPTX", ptx) ||
      !SYM("nvrtcGetErrorString", error_string))
    return; /* the library stays mapped: harmless, and dlclose could race */
  if (a.version(&a.major, &a.minor) != 0) {
    snprintf(api_why, sizeof api_why, "NVRTC could not be loaded: nvrtcVersion failed");
    return;
  }
  api = a;
  api_ok = 1;
}

int fgc_nvrtc_available(char *why, size_t why_size) {
  pthread_once(&api_once, load_api);
  if (!api_ok && why && why_size > 0) snprintf(why, why_size, "%s", api_why);
  return api_ok;
}

int fgc_nvrtc_version(int *major, int *minor) {
  if (!fgc_nvrtc_available(NULL, 0)) return -1;
  *major = api.major;
  *minor = api.minor;
  return 0;
}

long fgc_nvrtc_compiles(void) { return atomic_load(&n_compiles); }

/* The options, for the compiler and for the cache key. Everything else is
 * NVRTC's default, which is nvcc's: IEEE division and square root, no
 * flush to zero, FMA contraction on (as in the unfused kernels; the
 * generated code keeps it from crossing instructions). */
#define N_OPTIONS 2
static void options(int arch, int cubin, char *arch_opt, size_t n, const char **opts) {
  snprintf(arch_opt, n, "--gpu-architecture=%s_%d", cubin ? "sm" : "compute", arch);
  opts[0] = arch_opt;
  opts[1] = "-std=c++17";
}

static int nv_fail(char *err, size_t n, const char *what, nv_result r) {
  if (err && n > 0) snprintf(err, n, "NVRTC %s: %s", what, api.error_string(r));
  return -1;
}

int fgc_nvrtc_compile(const char *src, int arch, int cubin, void **image, size_t *size, char *err,
                      size_t err_size) {
  *image = NULL;
  *size = 0;
  if (!fgc_nvrtc_available(err, err_size)) return -1;
  if (!src || arch < 10 || arch > 999) {
    if (err && err_size) snprintf(err, err_size, "NVRTC: no source, or architecture %d", arch);
    return -1;
  }
  nv_program prog = NULL;
  nv_result r = api.create(&prog, src, "fg_fused.cu", 0, NULL, NULL);
  if (r != 0) return nv_fail(err, err_size, "nvrtcCreateProgram", r);
  char arch_opt[64];
  const char *opts[N_OPTIONS];
  options(arch, cubin, arch_opt, sizeof arch_opt, opts);
  atomic_fetch_add(&n_compiles, 1);
  r = api.compile(prog, N_OPTIONS, opts);
  if (r != 0) {
    /* The log says where the source is wrong: keep as much as fits. */
    size_t ls = 0;
    char *log = NULL;
    if (api.log_size(prog, &ls) == 0 && ls > 1 && (log = malloc(ls)) && api.log(prog, log) != 0)
      log[0] = '\0';
    if (err && err_size)
      snprintf(err, err_size, "NVRTC compilation for sm_%d failed (%s): %s", arch,
               api.error_string(r), log ? log : "no log");
    free(log);
    api.destroy(&prog);
    return -1;
  }
  size_t n = 0;
  r = cubin ? api.cubin_size(prog, &n) : api.ptx_size(prog, &n);
  char *buf = r == 0 && n > 0 ? malloc(n) : NULL;
  if (r == 0 && buf) r = cubin ? api.cubin(prog, buf) : api.ptx(prog, buf);
  api.destroy(&prog);
  if (r != 0 || !buf) {
    free(buf);
    if (r != 0) return nv_fail(err, err_size, cubin ? "nvrtcGetCUBIN" : "nvrtcGetPTX", r);
    if (err && err_size) snprintf(err, err_size, "NVRTC: out of memory for a %zu byte image", n);
    return -1;
  }
  *image = buf;
  *size = n;
  return 0;
}

/* ---- the cache key -------------------------------------------------------------- */

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *s = p;
  for (size_t i = 0; i < n; i++) {
    h ^= s[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

/* splitmix64's finaliser: spreads the bits of the second hash. */
static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Two independent 64-bit hashes of what decides the CUBIN: the file is
 * named by the first, and the second, stored inside, guards against a
 * collision of the first. */
static void key_pair(const char *src, int arch, uint64_t *key, uint64_t *check) {
  char arch_opt[64], head[256];
  const char *opts[N_OPTIONS];
  options(arch, 1, arch_opt, sizeof arch_opt, opts);
  int n =
      snprintf(head, sizeof head, "flowgraph nvrtc cubin 1; nvrtc %d.%d;", api.major, api.minor);
  for (int i = 0; i < N_OPTIONS && n > 0 && (size_t)n < sizeof head; i++)
    n += snprintf(head + n, sizeof head - (size_t)n, " %s", opts[i]);
  const size_t hl = strlen(head), sl = strlen(src);
  *key = fnv1a(fnv1a(0xcbf29ce484222325ull, head, hl), src, sl);
  *check = mix(fnv1a(fnv1a(0x6c62272e07bb0142ull ^ sl, src, sl), head, hl));
}

uint64_t fgc_nvrtc_key(const char *src, int arch) {
  if (!src || !fgc_nvrtc_available(NULL, 0)) return 0;
  uint64_t k, c;
  key_pair(src, arch, &k, &c);
  return k;
}

/* ---- the folder and the files --------------------------------------------------- */

int fgc_nvrtc_cache_dir(char *buf, size_t n) {
  const char *fg = getenv("FG_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  int w;
  if (fg)
    w = fg[0] ? snprintf(buf, n, "%s/nvrtc", fg) : -1;
  else if (xdg && xdg[0])
    w = snprintf(buf, n, "%s/flowgraph/nvrtc", xdg);
  else if (home && home[0])
    w = snprintf(buf, n, "%s/.cache/flowgraph/nvrtc", home);
  else
    w = -1;
  return w < 0 || (size_t)w >= n ? -1 : 0;
}

void fgc_nvrtc_cache_file(const char *dir, uint64_t key, char *buf, size_t n) {
  snprintf(buf, n, "%s/%016llx.cubin", dir, (unsigned long long)key);
}

/* mkdir -p, private to the user (the files are code this process runs). */
static int make_dirs(const char *path) {
  char p[1024];
  if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) return -1;
  for (char *s = p + 1;; s++) {
    const int end = *s == '\0';
    if (*s == '/' || end) {
      *s = '\0';
      if (mkdir(p, 0700) != 0 && errno != EEXIST) return -1;
      if (end) break;
      *s = '/';
    }
  }
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}

#define MAGIC     "FGCUBIN1"
#define MAX_IMAGE ((uint64_t)256 << 20)
typedef struct file_head {
  char magic[8];
  uint64_t key, check, size, sum;
} file_head;

static int read_all(int fd, void *buf, size_t n) {
  char *p = buf;
  while (n > 0) {
    const ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

static int write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* The cached CUBIN, when the file exists and matches in every field. */
static int load_file(const char *path, uint64_t key, uint64_t check, void **image, size_t *size) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  file_head h;
  struct stat st;
  void *buf = NULL;
  int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && read_all(fd, &h, sizeof h) == 0 &&
           memcmp(h.magic, MAGIC, 8) == 0 && h.key == key && h.check == check && h.size >= 4 &&
           h.size <= MAX_IMAGE && (uint64_t)st.st_size == sizeof h + h.size &&
           (buf = malloc((size_t)h.size)) && read_all(fd, buf, (size_t)h.size) == 0 &&
           fnv1a(0xcbf29ce484222325ull, buf, (size_t)h.size) == h.sum &&
           memcmp(buf, "\177ELF", 4) == 0;
  close(fd);
  if (!ok) {
    free(buf);
    return -1;
  }
  *image = buf;
  *size = (size_t)h.size;
  return 0;
}

/* Writes the file under a temporary name, then renames it into place. */
static int store_file(const char *dir, const char *path, uint64_t key, uint64_t check,
                      const void *image, size_t size) {
  if (make_dirs(dir) != 0) return -1;
  char tmp[1100];
  if (snprintf(tmp, sizeof tmp, "%s/.tmp-%016llx-XXXXXX", dir, (unsigned long long)key) >=
      (int)sizeof tmp)
    return -1;
  const int fd = mkstemp(tmp);
  if (fd < 0) return -1;
  file_head h;
  memcpy(h.magic, MAGIC, 8);
  h.key = key;
  h.check = check;
  h.size = size;
  h.sum = fnv1a(0xcbf29ce484222325ull, image, size);
  int ok = write_all(fd, &h, sizeof h) == 0 && write_all(fd, image, size) == 0;
  ok = close(fd) == 0 && ok;
  if (ok && rename(tmp, path) == 0) return 0;
  unlink(tmp);
  return -1;
}

void fgc_nvrtc_cache_drop(const char *src, int arch) {
  char dir[1024], path[1100];
  if (!src || !fgc_nvrtc_available(NULL, 0) || fgc_nvrtc_cache_dir(dir, sizeof dir) != 0) return;
  uint64_t key, check;
  key_pair(src, arch, &key, &check);
  fgc_nvrtc_cache_file(dir, key, path, sizeof path);
  unlink(path);
}

int fgc_nvrtc_cubin(const char *src, int arch, void **image, size_t *size, int *origin, char *err,
                    size_t err_size) {
  *image = NULL;
  *size = 0;
  *origin = FGC_NVRTC_NOT_STORED;
  if (!fgc_nvrtc_available(err, err_size)) return -1;
  if (!src) {
    if (err && err_size) snprintf(err, err_size, "NVRTC: no source");
    return -1;
  }
  uint64_t key, check;
  key_pair(src, arch, &key, &check);
  char dir[1024], path[1100];
  const int have_dir = fgc_nvrtc_cache_dir(dir, sizeof dir) == 0;
  if (have_dir) {
    fgc_nvrtc_cache_file(dir, key, path, sizeof path);
    if (load_file(path, key, check, image, size) == 0) {
      *origin = FGC_NVRTC_FROM_DISK;
      return 0;
    }
  }
  if (fgc_nvrtc_compile(src, arch, 1, image, size, err, err_size) != 0) return -1;
  if (have_dir && store_file(dir, path, key, check, *image, *size) == 0)
    *origin = FGC_NVRTC_COMPILED;
  return 0;
}
