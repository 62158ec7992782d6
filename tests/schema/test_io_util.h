/* Helpers shared by tests/schema/test_io*.c and tests/schema/test_badfiles*.c: scratch
 * folders and whole-file I/O. */
#ifndef FG_TEST_IO_UTIL_H
#define FG_TEST_IO_UTIL_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* malloc'ed contents plus a NUL; NULL on failure. */
static inline void *tio_read(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap + 1);
  while (buf) {
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (n < cap) break;
    char *bigger = realloc(buf, cap * 2 + 1);
    if (!bigger) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = bigger;
    cap *= 2;
  }
  fclose(f);
  if (buf) buf[n] = '\0';
  *size = n;
  return buf;
}

/* Offset of the first occurrence of needle in hay, or -1. */
static inline long tio_find(const void *hay, size_t n, const void *needle, size_t m) {
  if (m == 0 || m > n) return -1;
  const unsigned char *h = hay;
  for (size_t i = 0; i + m <= n; i++)
    if (memcmp(h + i, needle, m) == 0) return (long)i;
  return -1;
}

#endif
