/* Host memory that other processes of this host can map (internal): the
 * arenas of sessions whose all_reduce goes through shared memory
 * (dist/comm/shm_reduce.c), so a rank reads the other ranks' gradient buffers
 * where they are instead of copying them through a segment first.
 *
 * Why: the copy through the segment's slots moved each gradient byte about
 * four times more than the sum needs. The in-process group, which reads
 * the other ranks' buffers in place, all-reduced the same bytes in about
 * two thirds of the slot path's time.
 *
 * An arena is a memfd (an anonymous file: it goes away with its last
 * mapping, so a crash leaves nothing behind, unlike a name in /dev/shm).
 * A peer opens it through /proc/PID/fd/FD, which the kernel allows to the
 * same user (the file's link names the arena's serial, which the peer
 * checks, so a reused descriptor number is never taken for another
 * arena). Where memfd or /proc is missing, allocation or mapping fails and
 * the caller falls back. */
#ifndef FG_DIST_SHM_ARENA_H
#define FG_DIST_SHM_ARENA_H

#include <stddef.h>
#include <stdint.h>

/* Where some bytes of an arena are, for a peer to map: the owner's pid
 * and descriptor, the arena's serial (unique in the process) and size, and
 * the offset of the bytes in it. pid 0: not in an arena. */
typedef struct fg_shm_arena_ref {
  int32_t pid, fd;
  uint64_t serial;
  uint64_t size, offset;
} fg_shm_arena_ref;

/* `bytes` (0 is taken as 1) of zeroed, page-aligned memory in a new arena,
 * or NULL when memfd_create, ftruncate or mmap fails, or when 64 arenas are
 * alive already (each holds a descriptor open). */
void *fg_shm_arena_alloc(size_t bytes);
/* fg_shm_arena_alloc, or 64-byte aligned heap memory where that fails
 * (the caller then works as before, only without peers reading in place). */
void *fg_shm_arena_alloc_host(size_t bytes);
/* Frees what either returned (NULL: nothing). Peers' mappings keep an
 * arena's pages until they unmap them. */
void fg_shm_arena_free(void *p);
/* 1 with *ref set when [p, p + len) lies inside one of this process's
 * arenas; else 0 (ref->pid = 0). */
int fg_shm_arena_find(const void *p, size_t len, fg_shm_arena_ref *ref);

/* A peer's arena mapped read-write into this process (ref->offset is
 * ignored): its base, or NULL when it cannot be opened, is not the arena
 * `ref` names, or is smaller than ref->size. Unmap with
 * fg_shm_arena_unmap(base, ref->size). */
void *fg_shm_arena_map(const fg_shm_arena_ref *ref);
void fg_shm_arena_unmap(void *base, size_t size);

#endif
