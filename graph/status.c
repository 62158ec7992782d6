/* fg_status: a code plus a message. Messages are bounded so that setting a
 * status can never fail for lack of memory. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flowgraph/status.h"

#define FG_STATUS_MSG_MAX 1024

struct fg_status {
  fg_code code;
  char msg[FG_STATUS_MSG_MAX];
};

fg_status *fg_status_new(void) { return calloc(1, sizeof(fg_status)); }

void fg_status_free(fg_status *s) { free(s); }

fg_code fg_status_code(const fg_status *s) { return s ? s->code : FG_OK; }

const char *fg_status_message(const fg_status *s) { return s ? s->msg : ""; }

const char *fg_code_name(fg_code code) {
  switch (code) {
  case FG_OK: return "OK";
  case FG_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
  case FG_NOT_FOUND: return "NOT_FOUND";
  case FG_INVALID_GRAPH: return "INVALID_GRAPH";
  case FG_FORMAT_ERROR: return "FORMAT_ERROR";
  case FG_UNSUPPORTED: return "UNSUPPORTED";
  case FG_UNIMPLEMENTED: return "UNIMPLEMENTED";
  case FG_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
  case FG_DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
  case FG_IO_ERROR: return "IO_ERROR";
  case FG_INTERNAL: return "INTERNAL";
  case FG_ABORTED: return "ABORTED";
  }
  return "UNKNOWN";
}

void fg_status_set(fg_status *s, fg_code code, const char *fmt, ...) {
  if (!s) return;
  /* Format into a temporary first: callers may pass this status's own
   * message as an argument (to add context to it). */
  char tmp[FG_STATUS_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  s->code = code;
  memcpy(s->msg, tmp, sizeof tmp);
}

void fg_status_clear(fg_status *s) {
  if (!s) return;
  s->code = FG_OK;
  s->msg[0] = '\0';
}

void fg_status_copy(fg_status *dst, const fg_status *src) {
  if (!dst) return;
  if (!src) {
    fg_status_clear(dst);
    return;
  }
  if (dst != src) *dst = *src;
}
