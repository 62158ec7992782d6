#include "schema/onnx/onnx_import.h"

const fgx_op fgx_ops_tensor[] = {{NULL, NULL}};
