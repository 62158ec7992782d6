/* Where a written file goes (graph/file_path.h). */
#define _DEFAULT_SOURCE /* realpath */
#include "graph/file_path.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fg_path_write_in_place(const char *path) {
  struct stat sb;
  return path && stat(path, &sb) == 0 && !S_ISREG(sb.st_mode);
}

/* The file a dangling symbolic link names, as a path from here (a relative
 * target is relative to the link's folder); NULL when out of memory or not
 * a link. */
static char *dangling_target(const char *path) {
  char buf[4096];
  ssize_t n = readlink(path, buf, sizeof buf - 1);
  if (n <= 0) return NULL;
  buf[n] = '\0';
  const char *slash = strrchr(path, '/');
  size_t base = buf[0] == '/' || !slash ? 0 : (size_t)(slash - path) + 1;
  char *out = malloc(base + (size_t)n + 1);
  if (out) snprintf(out, base + (size_t)n + 1, "%.*s%s", (int)base, path, buf);
  return out;
}

char *fg_path_write_target(const char *path) {
  struct stat sb;
  if (path && lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode)) {
    char *real = realpath(path, NULL);
    if (real) return real;
    char *named = dangling_target(path);
    if (named) return named;
  }
  return path ? strdup(path) : NULL;
}

int fg_path_open_temp(const char *target, char **tmp_out) {
  static unsigned counter;
  size_t len = strlen(target) + 64;
  char *tmp = malloc(len);
  if (!tmp) {
    errno = ENOMEM;
    return -1;
  }
  for (int attempt = 0; attempt < 100; attempt++) {
    snprintf(tmp, len, "%s.tmp.%ld.%u", target, (long)getpid(), counter++);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
    if (fd >= 0) {
      *tmp_out = tmp;
      return fd;
    }
    if (errno != EEXIST) break;
  }
  int e = errno;
  free(tmp);
  errno = e;
  return -1;
}
