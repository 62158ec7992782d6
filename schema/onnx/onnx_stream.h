/* An ONNX file read without its initializers' large raw_data payloads
 * (onnx_stream.c), for fg_onnx_load. */
#ifndef FG_SCHEMA_ONNX_STREAM_H
#define FG_SCHEMA_ONNX_STREAM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* raw_data payloads below this many bytes stay in the decoded message. */
#define FGX_STREAM_MIN 4096

/* Where initializer `init` (its position in ModelProto.graph.initializer)
 * keeps its raw_data in the file. */
typedef struct fgx_raw_range {
  long init;
  uint64_t offset, length;
} fgx_raw_range;

/* The model file and where its initializers' payloads are. */
typedef struct fgx_stream_src {
  FILE *f;
  const fgx_raw_range *ranges;
  size_t n_ranges;
} fgx_stream_src;

/* The file's `size` bytes as a ModelProto whose initializers' large
 * raw_data fields are empty, with *ranges (malloc'd, *n_ranges of them, in
 * initializer order; none where no payload is that large) saying where
 * each payload is; *out_size bytes. NULL when the file is empty or not of
 * the shape this handles, or memory ran out: the caller then reads the
 * whole file. */
uint8_t *fgx_stream_compact(FILE *f, uint64_t size, size_t *out_size, fgx_raw_range **ranges,
                            size_t *n_ranges);

#endif
