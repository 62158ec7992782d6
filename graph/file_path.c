/* Where a written file goes (graph/file_path.h). */
#include "graph/file_path.h"

#include <sys/stat.h>

int fg_path_write_in_place(const char *path) {
  struct stat sb;
  return path && lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode);
}
