/* Opening a CUDA library on first use (kernels/cuda/cublas_lazy.cu,
 * cublaslt_lazy.cu): what both loaders do with dlopen and dlsym, and the
 * one-line reason each gives when it cannot. */
#ifndef FG_KERNELS_CUDA_DL_LIB_H
#define FG_KERNELS_CUDA_DL_LIB_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

/* The toolkit's library folder the build found (cmake/cuda.cmake gives
 * the loaders FG_CUBLAS_DIR), or NULL. */
#ifdef FG_CUBLAS_DIR
#define FGC_TOOLKIT_LIB_DIR FG_CUBLAS_DIR
#else
#define FGC_TOOLKIT_LIB_DIR NULL
#endif

/* soname from the library path, else from dir (NULL: none); NULL with why
 * set ("<what> could not be loaded: <dlerror>") when neither opens. */
static inline void *fgc_dl_open(const char *what, const char *soname, const char *dir, char *why,
                                size_t n) {
  void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!lib && dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, soname);
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }
  if (!lib) {
    const char *e = dlerror();
    snprintf(why, n, "%s could not be loaded: %s", what, e ? e : soname);
  }
  return lib;
}

/* The symbol, or NULL with why set ("<what> could not be loaded: <soname>
 * has no <name>"). */
static inline void *fgc_dl_sym(void *lib, const char *what, const char *soname, const char *name,
                               char *why, size_t n) {
  void *p = dlsym(lib, name);
  if (!p) snprintf(why, n, "%s could not be loaded: %s has no %s", what, soname, name);
  return p;
}

#endif
