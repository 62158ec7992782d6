/* Where a written file goes: shared by the writers of .fgb files (schema/),
 * .npy files (schema/npy.c) and the CLI's traces, SVGs and -o outputs.
 * The functions are public (flowgraph/io.h, "writing files as the library
 * does"), so that the CLI writes its files the same way through the public
 * API only; the library's own writers include this header.
 *
 * Why the care: a regular file is written beside itself under a temporary
 * name and renamed over the old one, so it appears whole or not at all.
 * That rename must not replace what is not a regular file: run as root,
 * `--trace /dev/full` turned /dev/full into a regular file, and a
 * symbolic link became a file of its own. */
#ifndef FG_GRAPH_FILE_PATH_H
#define FG_GRAPH_FILE_PATH_H

#include "flowgraph/io.h"

#endif
