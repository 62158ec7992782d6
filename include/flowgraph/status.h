/* flowgraph: status codes and the fg_status object.
 *
 * Every fallible call takes an `fg_status *` as its last argument. On success
 * the call resets it to FG_OK; on failure it fills a code and a message that
 * names the node, input and values involved. A NULL status is allowed: the
 * call still fails cleanly, the caller just does not learn why.
 */
#ifndef FLOWGRAPH_STATUS_H
#define FLOWGRAPH_STATUS_H

#include "flowgraph/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fg_code {
  FG_OK = 0,
  FG_INVALID_ARGUMENT = 1,   /* a caller passed a bad value (NULL, wrong feed, ...) */
  FG_NOT_FOUND = 2,          /* a name, path or node that does not exist */
  FG_INVALID_GRAPH = 3,      /* the graph breaks a rule (dtype, shape, attr, cycle) */
  FG_FORMAT_ERROR = 4,       /* a file is not a well-formed .fgb / .npy / JSON */
  FG_UNSUPPORTED = 5,        /* a file is well-formed but too new for this reader */
  FG_UNIMPLEMENTED = 6,      /* an op or kernel that does not exist */
  FG_RESOURCE_EXHAUSTED = 7, /* out of memory or over a configured limit */
  FG_DEADLINE_EXCEEDED = 8,  /* a timeout expired */
  FG_IO_ERROR = 9,           /* the OS refused a read or write */
  FG_INTERNAL = 10,          /* a bug in flowgraph: please report it */
  FG_ABORTED = 11            /* stopped because a peer (another rank) failed first */
} fg_code;

typedef struct fg_status fg_status;

/* Returns a new status set to FG_OK, or NULL when out of memory. */
FG_API fg_status *fg_status_new(void);
/* Accepts NULL. */
FG_API void fg_status_free(fg_status *s);
/* FG_OK for a NULL status. */
FG_API fg_code fg_status_code(const fg_status *s);
/* The message; "" when OK. Owned by the status, valid until it next changes. */
FG_API const char *fg_status_message(const fg_status *s);
/* A stable upper-case name such as "INVALID_ARGUMENT". Never NULL. */
FG_API const char *fg_code_name(fg_code code);
/* Sets a code and a printf-style message. Does nothing for a NULL status. */
FG_API void fg_status_set(fg_status *s, fg_code code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Resets to FG_OK. */
FG_API void fg_status_clear(fg_status *s);
/* Copies code and message from src into dst (either may be NULL). */
FG_API void fg_status_copy(fg_status *dst, const fg_status *src);

#ifdef __cplusplus
}
#endif
#endif
