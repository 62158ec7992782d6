/* Helpers shared by tests/test_io*.c and tests/test_badfiles*.c: scratch
 * folders and whole-file I/O. */
#ifndef FG_TEST_IO_UTIL_H
#define FG_TEST_IO_UTIL_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A new empty folder under /tmp; the path is static storage per call site
 * (copy it if you need two). */
static inline char *tio_mkdtemp(char *buf, size_t size) {
  snprintf(buf, size, "/tmp/fg_io_test_XXXXXX");
  return mkdtemp(buf);
}

/* Entries in `dir` other than . and .. */
static inline int tio_count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
  closedir(d);
  return n;
}

static inline int tio_write(const char *path, const void *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t n = size ? fwrite(data, 1, size, f) : 0;
  return (fclose(f) == 0 && n == size) ? 0 : -1;
}

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
