/* Assigning plan steps to CUDA streams: pure bookkeeping over the plan's DAG,
 * built and tested in every build (the CUDA executor only reads the result).
 *
 * Steps are visited in plan order, which is topological (every edge goes
 * from a lower to a higher step). A step continues the stream of a
 * predecessor that is still that stream's last step (so a chain stays on one
 * stream and needs no event); otherwise it opens an unused stream, or takes
 * the stream whose last step is oldest. Independent chains therefore land on
 * different streams.
 *
 * Events: a step with a successor on another stream records one event after
 * it; every step waits, before it starts, on the event of each predecessor
 * on another stream. Same-stream edges need nothing: a stream runs its work
 * in launch order, and launches follow plan order. Because every wait names
 * an event recorded by an earlier launch, the stream + event order has no
 * cycle, and the host never synchronises inside a run. */
#ifndef FG_STREAMS_H
#define FG_STREAMS_H

#include <stddef.h>

#define FG_MAX_STREAMS     64
#define FG_DEFAULT_STREAMS 4

typedef struct fg_stream_plan {
  int n_steps;
  int n_streams; /* streams used (1 <= n_streams <= requested; 0 when n_steps == 0) */
  int *stream;   /* per step: its stream */
  int *event_of; /* per step: the index of the event recorded after it, or -1 */
  int n_events;
  int *wait_off; /* n_steps + 1 offsets into wait[] */
  int *wait;     /* producer steps whose events the step waits on */
} fg_stream_plan;

/* Builds the assignment for a DAG of n_steps steps given as successor lists
 * (succ[succ_off[u] .. succ_off[u + 1]) are u's successors) over at most
 * max_streams streams (1 .. FG_MAX_STREAMS). Returns 0, or -1 with err
 * written (bad arguments, an edge that does not go forward, out of memory).
 * On success free with fg_stream_plan_free. */
int fg_stream_plan_build(int n_steps, const int *succ_off, const int *succ, int max_streams,
                         fg_stream_plan *out, char *err, size_t err_size);
void fg_stream_plan_free(fg_stream_plan *sp); /* accepts NULL and zeroed plans */

/* The stream count a session option asks for: 0 means FG_DEFAULT_STREAMS.
 * Returns -1 for values outside 0 .. FG_MAX_STREAMS. */
int fg_streams_from_option(int num_streams);

#endif
