/* Counting allocations: a test binary that includes this (once) and is
 * linked with -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,
 * --wrap=aligned_alloc (tests/CMakeLists.txt) sees every malloc & co. of the
 * library in n_allocs. */
#ifndef FG_TEST_ALLOC_COUNT_H
#define FG_TEST_ALLOC_COUNT_H

#include <stdatomic.h>
#include <stddef.h>

static atomic_long n_allocs;
void *__real_malloc(size_t);
void *__real_calloc(size_t, size_t);
void *__real_realloc(void *, size_t);
void *__real_aligned_alloc(size_t, size_t);
void *__wrap_malloc(size_t n) {
  atomic_fetch_add(&n_allocs, 1);
  return __real_malloc(n);
}
void *__wrap_calloc(size_t a, size_t b) {
  atomic_fetch_add(&n_allocs, 1);
  return __real_calloc(a, b);
}
void *__wrap_realloc(void *p, size_t n) {
  atomic_fetch_add(&n_allocs, 1);
  return __real_realloc(p, n);
}
void *__wrap_aligned_alloc(size_t a, size_t n) {
  atomic_fetch_add(&n_allocs, 1);
  return __real_aligned_alloc(a, n);
}

#endif
