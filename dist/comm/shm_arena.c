/* dist/comm/shm_arena.h: arenas in memfds, a registry of this process's ones. */
#define _GNU_SOURCE /* memfd_create */
#include "dist/comm/shm_arena.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct arena {
  struct arena *next;
  unsigned char *base;
  size_t size;
  int fd;
  uint64_t serial;
} arena;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static arena *g_arenas;
static uint64_t g_serial;
static int g_live;

/* Each arena keeps a descriptor open (the others open it through /proc).
 * A process that caches many plans (a shape per batch size, say) must not
 * run out of descriptors for its own files: past this many, arenas come
 * from the heap (fg_shm_arena_alloc_host), only without in-place reads. */
#define MAX_LIVE 64

/* The memfd's name; the /proc link reads "/memfd:NAME (deleted)". */
static void arena_name(uint64_t serial, char *buf, size_t size) {
  snprintf(buf, size, "fg-arena-%llu", (unsigned long long)serial);
}

void *fg_shm_arena_alloc(size_t bytes) {
  if (bytes == 0) bytes = 1;
  arena *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  pthread_mutex_lock(&g_mu);
  int full = g_live >= MAX_LIVE;
  if (!full) {
    a->serial = ++g_serial;
    g_live++; /* reserved; given back below on failure */
  }
  pthread_mutex_unlock(&g_mu);
  if (full) {
    free(a);
    return NULL;
  }
  char name[64];
  arena_name(a->serial, name, sizeof name);
  a->fd = memfd_create(name, MFD_CLOEXEC);
  a->size = bytes;
  void *p = MAP_FAILED;
  if (a->fd >= 0 && ftruncate(a->fd, (off_t)bytes) == 0)
    p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
  if (p == MAP_FAILED) {
    if (a->fd >= 0) close(a->fd);
    free(a);
    pthread_mutex_lock(&g_mu);
    g_live--;
    pthread_mutex_unlock(&g_mu);
    return NULL;
  }
  a->base = p;
  /* Huge pages where shmem allows them (shmem_enabled "advise"): heap
   * arenas get them where anonymous THP is "always", and an arena should
   * not walk more page tables than the memory it replaces. Ignored
   * elsewhere. */
  madvise(p, bytes, MADV_HUGEPAGE);
  pthread_mutex_lock(&g_mu);
  a->next = g_arenas;
  g_arenas = a;
  pthread_mutex_unlock(&g_mu);
  return p;
}

void *fg_shm_arena_alloc_host(size_t bytes) {
  void *p = fg_shm_arena_alloc(bytes);
  if (p) return p;
  size_t n = bytes ? bytes : 1;
  if (n > SIZE_MAX - 63) return NULL;
  return aligned_alloc(64, (n + 63) & ~(size_t)63);
}

void fg_shm_arena_free(void *p) {
  if (!p) return;
  pthread_mutex_lock(&g_mu);
  arena **at = &g_arenas;
  while (*at && (*at)->base != p)
    at = &(*at)->next;
  arena *a = *at;
  if (a) {
    *at = a->next;
    g_live--;
  }
  pthread_mutex_unlock(&g_mu);
  if (!a) {
    free(p); /* fg_shm_arena_alloc_host's fallback */
    return;
  }
  munmap(a->base, a->size);
  close(a->fd);
  free(a);
}

int fg_shm_arena_find(const void *p, size_t len, fg_shm_arena_ref *ref) {
  memset(ref, 0, sizeof *ref);
  /* As integers: the pointer may lie in no arena at all. */
  const uintptr_t at = (uintptr_t)p;
  int found = 0;
  pthread_mutex_lock(&g_mu);
  for (const arena *a = g_arenas; a && !found; a = a->next) {
    const uintptr_t lo = (uintptr_t)a->base;
    if (at >= lo && at - lo <= a->size && len <= a->size - (at - lo)) {
      *ref = (fg_shm_arena_ref){(int32_t)getpid(), a->fd, a->serial, a->size, (uint64_t)(at - lo)};
      found = 1;
    }
  }
  pthread_mutex_unlock(&g_mu);
  return found;
}

void *fg_shm_arena_map(const fg_shm_arena_ref *ref) {
  if (!ref || ref->pid <= 0 || ref->fd < 0 || ref->size == 0) return NULL;
  char path[64], link[128], want[96], name[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)ref->pid, (int)ref->fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return NULL;
  /* What was opened must be this arena: a freed arena's descriptor number
   * may already name another file. Checked on our own descriptor, which
   * cannot change under us. */
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(path, link, sizeof link - 1);
  arena_name(ref->serial, name, sizeof name);
  snprintf(want, sizeof want, "/memfd:%s ", name);
  struct stat sb;
  void *p = MAP_FAILED;
  if (n > 0) link[n] = '\0';
  if (n > 0 && strncmp(link, want, strlen(want)) == 0 && fstat(fd, &sb) == 0 &&
      (uint64_t)sb.st_size >= ref->size)
    p = mmap(NULL, (size_t)ref->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  return p == MAP_FAILED ? NULL : p;
}

void fg_shm_arena_unmap(void *base, size_t size) {
  if (base) munmap(base, size);
}
