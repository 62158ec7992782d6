/* flowgraph: element types and shapes. */
#ifndef FLOWGRAPH_TYPES_H
#define FLOWGRAPH_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "flowgraph/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Values are stored in files: never renumber, only append. */
typedef enum fg_dtype {
  FG_DTYPE_INVALID = 0,
  FG_F32 = 1,
  FG_F64 = 2,
  FG_I32 = 3,
  FG_I64 = 4,
  FG_BOOL = 5 /* one byte per element, 0 or 1 */
} fg_dtype;

#define FG_DTYPE_COUNT 6
#define FG_MAX_RANK    8
/* A dimension whose size is only known when the graph is fed. Allowed only
 * as the leading dimension of a placeholder (and what inference derives). */
#define FG_DIM_UNKNOWN (-1)

/* Bytes per element; 0 for an unknown dtype. */
FG_API size_t fg_dtype_size(fg_dtype dtype);
/* "f32", "f64", "i32", "i64", "bool"; "invalid" for anything else. */
FG_API const char *fg_dtype_name(fg_dtype dtype);
/* Parses a name from fg_dtype_name(); FG_DTYPE_INVALID when unknown. */
FG_API fg_dtype fg_dtype_from_name(const char *name);
/* 1 for f32/f64. */
FG_API int fg_dtype_is_float(fg_dtype dtype);

/* A 2-D pooling window over NCHW planes: kernel (kh, kw), strides (sh,
 * sw), pads (top, left, bottom, right), dilations (dh, dw), ceil_mode and
 * count_include_pad. Builders take it as fg_pool2d_opts (flowgraph/graph.h:
 * zero fields mean defaults), kernels as fg_pool2d_params
 * (flowgraph/op_params.h: normalised values). */
typedef struct fg_pool2d_opts {
  int64_t kernel[2];
  int64_t strides[2];
  int64_t pads[4];
  int64_t dilations[2];
  int ceil_mode;
  int count_include_pad;
} fg_pool2d_opts;

/* Resizing the last two dims (height, width) of a tensor, as ONNX Resize
 * (opsets 11 and 13) with mode "nearest" (fg_resize_nearest) or "linear"
 * (fg_resize_linear, bilinear). Output (oh, ow) takes the input at source
 * coordinate x(o) along each dim, from the coordinate mode (scale s, input
 * length n, output length m):
 * - HALF_PIXEL: (o + 0.5) / s - 0.5 (torch's align_corners=False);
 * - PYTORCH_HALF_PIXEL: as HALF_PIXEL, but 0 when m is 1;
 * - ASYMMETRIC: o / s (torch's mode "nearest");
 * - ALIGN_CORNERS: o (n - 1) / (m - 1), 0 when m is 1.
 * Linear blends the two neighbours of x clamped to [0, n - 1]; nearest
 * rounds x by its nearest mode and clamps the index to [0, n - 1].
 * scales: 0 means m / n (what ONNX uses when the model gives sizes). */
typedef enum fg_resize_coord {
  FG_RESIZE_HALF_PIXEL = 0,
  FG_RESIZE_PYTORCH_HALF_PIXEL = 1,
  FG_RESIZE_ASYMMETRIC = 2,
  FG_RESIZE_ALIGN_CORNERS = 3
} fg_resize_coord;

typedef enum fg_resize_nearest_mode {
  FG_NEAREST_ROUND_PREFER_FLOOR = 0, /* halves go down */
  FG_NEAREST_ROUND_PREFER_CEIL = 1,  /* halves go up */
  FG_NEAREST_FLOOR = 2,
  FG_NEAREST_CEIL = 3
} fg_resize_nearest_mode;

typedef struct fg_resize_opts {
  int64_t sizes[2];               /* output height and width, >= 1 */
  double scales[2];               /* coordinate scales (h, w), > 0; 0: sizes / input */
  fg_resize_coord coord;          /* default (0): HALF_PIXEL */
  fg_resize_nearest_mode nearest; /* fg_resize_nearest only; default ROUND_PREFER_FLOOR */
} fg_resize_opts;

#ifdef __cplusplus
}
#endif
#endif
