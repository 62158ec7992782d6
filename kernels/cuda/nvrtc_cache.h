/* NVRTC, loaded on first use, and a disk cache of what it compiles. Plain
 * C in every build (CUDA or not): NVRTC needs no GPU, so the generated
 * kernels are compiled and the cache exercised on any machine with the
 * toolkit's libnvrtc.
 *
 * NVRTC is not linked: like cuBLAS (kernels/cuda/cublas_lazy.cu) the first
 * call dlopens it (libnvrtc.so.<major>, else the one beside the toolkit the
 * build saw), so a process that never compiles a fused kernel never maps
 * it, and a machine without it runs everything but the fused GPU kernels.
 *
 * The disk cache keeps one file per (source, architecture, NVRTC version,
 * options), named by a 64-bit hash of those, in the first of:
 *   $FG_CACHE_DIR/nvrtc (an empty FG_CACHE_DIR turns the disk cache off),
 *   $XDG_CACHE_HOME/flowgraph/nvrtc, $HOME/.cache/flowgraph/nvrtc.
 * A file holds a header (magic, the key, a second hash of the same text,
 * the payload's size and checksum) and the CUBIN; one that does not match
 * in every field is compiled again and replaced. Files are written to a
 * temporary name and renamed, so readers see whole files only. Any failure
 * of the cache (no folder, no room, not writable) only costs a compile.
 * Thread-safe. */
#ifndef FG_CUDA_NVRTC_CACHE_H
#define FG_CUDA_NVRTC_CACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when NVRTC is loaded (loading it now if need be); 0 with why in why[]. */
int fgc_nvrtc_available(char *why, size_t why_size);

/* NVRTC's version (13, 0); -1 when it cannot be loaded. */
int fgc_nvrtc_version(int *major, int *minor);

/* Compiles CUDA C++ `src` for sm_<arch> (90 for H100/H200), to a CUBIN
 * when cubin is 1, else to PTX (NUL-terminated). 0 with *image (malloc;
 * the caller frees it) and *size, or -1 with NVRTC's error and log in err.
 * No cache. */
int fgc_nvrtc_compile(const char *src, int arch, int cubin, void **image, size_t *size, char *err,
                      size_t err_size);

/* Where the compiled kernel comes from (fgc_nvrtc_cubin). */
enum {
  FGC_NVRTC_COMPILED = 0, /* compiled now, and stored on disk */
  FGC_NVRTC_FROM_DISK = 1,
  FGC_NVRTC_NOT_STORED = 2 /* compiled now; the disk cache is off or refused the file */
};

/* The CUBIN of `src` for sm_<arch>: from the disk cache, or compiled and
 * stored there. 0 with *image (malloc), *size and *origin
 * (FGC_NVRTC_*), or -1 with the reason in err. */
int fgc_nvrtc_cubin(const char *src, int arch, void **image, size_t *size, int *origin, char *err,
                    size_t err_size);

/* Removes the disk cache's file of (src, arch), if any: one whose CUBIN
 * the driver refused, so the next request compiles and stores it again. */
void fgc_nvrtc_cache_drop(const char *src, int arch);

/* The cache key of (src, arch): a 64-bit hash of the source, the
 * architecture, NVRTC's version and the compile options. 0 when NVRTC
 * cannot be loaded (its version is part of the key). */
uint64_t fgc_nvrtc_key(const char *src, int arch);

/* The disk cache folder as the environment names it now (not created);
 * 0, or -1 when there is none (FG_CACHE_DIR empty, no HOME). */
int fgc_nvrtc_cache_dir(char *buf, size_t n);

/* The file of key in folder dir ("<dir>/<16 hex digits>.cubin"). */
void fgc_nvrtc_cache_file(const char *dir, uint64_t key, char *buf, size_t n);

/* NVRTC compilations this process has run (tests check the caches). */
long fgc_nvrtc_compiles(void);

#ifdef __cplusplus
}
#endif
#endif
