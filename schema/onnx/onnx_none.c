/* The ONNX entry points of a library built without protobuf-c or
 * onnx.proto (cmake/onnx.cmake says which was missing): every call reports
 * FG_UNIMPLEMENTED, so programs link the same either way. */
#include <string.h>

#include "flowgraph/onnx.h"

static const char no_onnx[] =
    "this flowgraph was built without ONNX support (it needs libprotobuf-c-dev, "
    "protobuf-c-compiler and python3-onnx at configure time; tools/install_deps.sh installs them)";

void fg_onnx_options_init(fg_onnx_options *o) {
  if (o) memset(o, 0, sizeof *o);
}

fg_graph *fg_onnx_load(const char *path, const fg_onnx_options *opts, fg_status *status) {
  (void)path, (void)opts;
  fg_status_set(status, FG_UNIMPLEMENTED, "%s", no_onnx);
  return NULL;
}

fg_graph *fg_onnx_load_memory(const void *data, size_t size, const fg_onnx_options *opts,
                              fg_status *status) {
  (void)data, (void)size, (void)opts;
  fg_status_set(status, FG_UNIMPLEMENTED, "%s", no_onnx);
  return NULL;
}

int fg_onnx_sniff(const void *data, size_t size) {
  (void)data, (void)size;
  return 0;
}

int fg_onnx_available(void) { return 0; }

void fg_onnx_export_options_init(fg_onnx_export_options *o) {
  if (o) memset(o, 0, sizeof *o);
}

int fg_onnx_save(const fg_graph *g, const char *path, const fg_onnx_export_options *o,
                 fg_status *status) {
  (void)g, (void)path, (void)o;
  fg_status_set(status, FG_UNIMPLEMENTED, "%s", no_onnx);
  return -1;
}

int fg_onnx_save_memory(const fg_graph *g, void **data, size_t *size,
                        const fg_onnx_export_options *o, fg_status *status) {
  (void)g, (void)o;
  if (data) *data = NULL;
  if (size) *size = 0;
  fg_status_set(status, FG_UNIMPLEMENTED, "%s", no_onnx);
  return -1;
}
