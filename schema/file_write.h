/* The atomic whole-file write every saver shares (schema/fgb_file.cc), for
 * the C side of schema/: `size` bytes go to a temporary file beside `path`,
 * synced and renamed over it (a device or FIFO is written in place; a
 * link's file is replaced where it lies). On failure the temporary file is
 * removed, `path` is untouched and status says why (FG_IO_ERROR). */
#ifndef FG_SCHEMA_FILE_WRITE_H
#define FG_SCHEMA_FILE_WRITE_H

#include <stddef.h>

#include "flowgraph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

int fg_file_write_atomic(const char *path, const void *data, size_t size, fg_status *st);

#ifdef __cplusplus
}
#endif

#endif /* FG_SCHEMA_FILE_WRITE_H */
