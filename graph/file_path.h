/* Where a written file goes (internal): shared by the writers of .fgb
 * files (schema/), .npy files (tools/lib/npy.c) and the CLI's traces,
 * SVGs and -o outputs. */
#ifndef FG_GRAPH_FILE_PATH_H
#define FG_GRAPH_FILE_PATH_H

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when a file written to `path` must be written in place rather than
 * beside it and renamed over it: `path` exists and is not a regular file (a
 * device such as /dev/stdout, a FIFO, a socket, or a symbolic link). The
 * writers' rename, which makes a regular file appear whole or not at all,
 * would replace such an entry instead of writing where it leads (run as
 * root, `--trace /dev/full` turned /dev/full into a regular file). 0 for a
 * regular file or a path that does not exist. */
int fg_path_write_in_place(const char *path);

#ifdef __cplusplus
}
#endif

#endif
