/* Where a written file goes (graph/file_path.h). */
#define _DEFAULT_SOURCE /* realpath */
#include "graph/file_path.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int fg_path_write_in_place(const char *path) {
  struct stat sb;
  if (!path || lstat(path, &sb) != 0) return 0;
  if (!S_ISLNK(sb.st_mode)) return !S_ISREG(sb.st_mode);
  return stat(path, &sb) != 0 || !S_ISREG(sb.st_mode);
}

char *fg_path_write_target(const char *path) {
  struct stat sb;
  if (path && lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode)) {
    char *real = realpath(path, NULL);
    if (real) return real;
  }
  return path ? strdup(path) : NULL;
}
