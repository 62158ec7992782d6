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

#ifdef __cplusplus
}
#endif
#endif
