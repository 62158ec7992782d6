/* Element types: sizes and names. */
#include <string.h>

#include "flowgraph/types.h"

size_t fg_dtype_size(fg_dtype dtype) {
  switch (dtype) {
  case FG_F32: return 4;
  case FG_F64: return 8;
  case FG_I32: return 4;
  case FG_I64: return 8;
  case FG_BOOL: return 1;
  default: return 0;
  }
}

const char *fg_dtype_name(fg_dtype dtype) {
  switch (dtype) {
  case FG_F32: return "f32";
  case FG_F64: return "f64";
  case FG_I32: return "i32";
  case FG_I64: return "i64";
  case FG_BOOL: return "bool";
  default: return "invalid";
  }
}

fg_dtype fg_dtype_from_name(const char *name) {
  if (!name) return FG_DTYPE_INVALID;
  for (int d = FG_F32; d < FG_DTYPE_COUNT; d++)
    if (strcmp(name, fg_dtype_name((fg_dtype)d)) == 0) return (fg_dtype)d;
  return FG_DTYPE_INVALID;
}

int fg_dtype_is_float(fg_dtype dtype) { return dtype == FG_F32 || dtype == FG_F64; }
