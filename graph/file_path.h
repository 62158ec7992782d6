/* Where a written file goes (internal): shared by the writers of .fgb
 * files (schema/), .npy files (tools/lib/npy.c) and the CLI's traces,
 * SVGs and -o outputs.
 *
 * A regular file is written beside itself under a temporary name and
 * renamed over the old one, so it appears whole or not at all. That
 * rename must not replace what is not a regular file: run as root,
 * `--trace /dev/full` turned /dev/full into a regular file, and a
 * symbolic link became a file of its own. */
#ifndef FG_GRAPH_FILE_PATH_H
#define FG_GRAPH_FILE_PATH_H

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when a file written to `path` must be opened and written in place: it
 * exists and, following links, is not a regular file (a device such as
 * /dev/stdout, a FIFO, a socket). 0 for a regular file, a link to one or to
 * nothing yet, or a path where nothing is. */
int fg_path_write_in_place(const char *path);

/* Where the write-beside-and-rename of `path` happens (when
 * fg_path_write_in_place is 0): for a symbolic link, the file it leads to
 * (or names, when that does not exist yet), so the link stays and leads to
 * the new file; else `path` itself. A new string (free it), or NULL when
 * out of memory. */
char *fg_path_write_target(const char *path);

/* Creates "<target>.tmp.<pid>.<k>" beside `target` (exclusively, k counting
 * up past names taken), opened for writing with mode 0666 less the umask,
 * as the final file should have: its descriptor, and the name in *tmp_out
 * (free it). -1 with errno set when it cannot. */
int fg_path_open_temp(const char *target, char **tmp_out);

#ifdef __cplusplus
}
#endif

#endif
