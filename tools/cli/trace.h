/* Output files of `flowgraph profile` and `flowgraph plan`: the Chrome-trace
 * JSON writer, and the temporary-file-plus-rename helpers svg.c shares. */
#ifndef FG_CLI_TRACE_H
#define FG_CLI_TRACE_H

#include <stdio.h>

#include "flowgraph/dist.h"
#include "flowgraph/profile.h"

/* A file written under a temporary name beside `path` (beside the file a
 * link leads to) and renamed over it only by out_commit, so a failure
 * never leaves a partial file; a device or FIFO (flowgraph/io.h) is
 * written in place (tmp NULL). */
typedef struct out_file {
  FILE *f;
  char *tmp, *target; /* target: where tmp is renamed to */
  const char *path;
} out_file;

int out_open(out_file *o, const char *path, fg_status *st);
/* Flushes, closes and renames; on any failure removes the temporary file.
 * Always releases `o`. */
int out_commit(out_file *o, fg_status *st);
/* Removes the temporary file and releases `o`; accepts a closed one. */
void out_abort(out_file *o);
/* Takes back a committed output after a later failure: removes the file
 * that out_commit renamed into place (a link's target, not the link);
 * nothing for one written in place (a device is not removed). */
void out_remove(const char *path);

/* Writes `s` as the inside of a JSON string: quotes, backslashes and
 * control characters escaped, invalid UTF-8 replaced by U+FFFD. */
void json_write_escaped(FILE *f, const char *s);

/* Chrome trace ("Trace Event Format"), which Perfetto and chrome://tracing
 * open: one complete ("ph":"X") event per node per run (category "op"),
 * and per run one "run N" event (category "run") on track 0 spanning it,
 * runs laid one after another on the time axis, then thread_name metadata
 * events. */
typedef struct trace_writer trace_writer;

trace_writer *trace_open(const char *path, const char *process_name, fg_status *st);
/* Several devices (a partition of more than one): tracks are lanes, named
 * after their device ("cpu:1"; lanes from n_devices on run that device's
 * collectives: "cpu:1 collectives") instead of "main"/"worker k". */
void trace_use_devices(trace_writer *t, const fg_partition *p);
/* Appends the nodes of one run; `run` numbers it in the event args. */
int trace_add_run(trace_writer *t, const fg_run_metadata *md, int64_t run, fg_status *st);
/* A cross-process profile (p names ranks): one trace process per rank,
 * "MODEL rank R", whose tracks are that rank's lanes named after its
 * devices ("rank:1/cpu:0", "... collectives", "... sends"). p must outlive
 * the writer. 0 or -1 (out of memory). */
int trace_use_ranks(trace_writer *t, const fg_partition *p, fg_status *st);
/* Appends run `run` of every rank (mds[r]; NULL: none) after the runs
 * before it, rank r's events shifted by shift[r] ns (NULL: none): the time
 * from the first rank's start to rank r's, on one clock. */
int trace_add_rank_runs(trace_writer *t, const fg_run_metadata *const *mds, const int64_t *shift,
                        int64_t run, fg_status *st);
/* Writes the tail and renames into place; frees `t` either way. */
int trace_finish(trace_writer *t, fg_status *st);
/* Drops the partial file; accepts NULL. */
void trace_abort(trace_writer *t);

#endif
