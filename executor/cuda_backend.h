/* The CUDA executor: device selection, per-session GPU state (streams,
 * cuBLAS handles, device copies of variables and constants) and running a
 * plan on a GPU. Built from executor/cuda/backend.c, staging.c and run.c
 * (cuda_internal.h) when the CUDA backend is on, from executor/cuda/stub.c
 * (no devices, every call refused) otherwise, so the session code is the
 * same in both builds.
 *
 * A GPU plan is an ordinary plan (plan.h) built with req->cuda set: its
 * kernels come from the CUDA row of the backend table (backend.h) and its
 * arena is left unallocated;
 * fg_cuda_plan_prepare then gives it one cudaMalloc arena, device buffers
 * for feeds and fetched outputs, pinned host staging for both, and the
 * stream assignment of streams.h. Variables live on the device for the
 * session's lifetime; fg_cuda_vars_to_host copies them back when the
 * session is asked for them (fg_session_variable, fg_session_save). */
#ifndef FG_CUDA_BACKEND_H
#define FG_CUDA_BACKEND_H

#include "executor/plan.h"
#include "flowgraph/session.h"
#include "flowgraph/status.h"

typedef struct fg_cuda_ctx fg_cuda_ctx;

/* GPUs the process can use: 0 in a build without CUDA, without a driver, or
 * without a device. Never fails. */
int fg_cuda_device_count(void);

/* Parses a device option. Returns 0 for the CPU (NULL, "cpu", "cpu:0"),
 * 1 with *index set for "cuda:N" (N a decimal without sign, any value; the
 * caller checks it against fg_cuda_device_count), -1 for anything else. */
int fg_device_parse(const char *device, int *index);

/* The CUDA part of a session's options, checked by fg_session_new in every
 * build: num_streams in range, a "cuda:N" device that exists (one that
 * does not is refused at placement), and no node placed on a CUDA device other than the session's.
 * Sets *cuda_index to N, or -1 for a CPU session; devices not named "cuda:..." are left to the
 * caller. Returns 0 or -1 with status set (FG_INVALID_ARGUMENT). */
int fg_session_cuda_check(const fg_graph *g, const fg_session_options *opts, int *cuda_index,
                          fg_status *st);

/* Session-wide GPU state on device `index`: opts gives num_streams,
 * allow_tf32 and cuda_graphs. NULL with status set on failure. */
fg_cuda_ctx *fg_cuda_ctx_new(int index, const fg_session_options *opts, fg_status *st);
void fg_cuda_ctx_free(fg_cuda_ctx *c); /* accepts NULL; frees device variables too */

/* Makes c's device the calling thread's current one (*prev: the one it
 * was, for fg_cuda_ctx_leave), as plan building needs: kernels' prepare
 * hooks (the fused kernels' NVRTC compile, for the device's architecture)
 * run on the current device. 0, or -1 with st set. */
int fg_cuda_ctx_enter(const fg_cuda_ctx *c, int *prev, fg_status *st);
void fg_cuda_ctx_leave(int prev);

/* Gives a freshly built GPU plan its device memory and streams. `vars` is
 * the session's per-node variable storage (n_vars entries): a variable seen
 * for the first time is uploaded from it. On failure the plan is left for
 * fg_plan_free. */
int fg_cuda_plan_prepare(fg_cuda_ctx *c, const fg_graph *g, fg_plan *plan, fg_tensor *const *vars,
                         int n_vars, fg_status *st);

/* Runs a prepared plan once with the request's feeds; on success the fetched
 * values are in host memory at fg_cuda_plan_fetch(plan, i). With `timings`
 * set, fills plan->timings from CUDA events (thread = stream index) and does
 * not use a CUDA Graph. */
int fg_cuda_plan_run(fg_cuda_ctx *c, const fg_graph *g, fg_plan *plan, const fg_plan_request *req,
                     int timings, fg_status *st);
const void *fg_cuda_plan_fetch(const fg_plan *plan, int i);

/* Frees plan->device (called by fg_plan_free; accepts NULL). */
void fg_cuda_plan_release(void *device);

/* Copies the device value of variable `node` (-1: of every variable the
 * device holds) back into vars[node]->data. */
int fg_cuda_vars_to_host(fg_cuda_ctx *c, fg_tensor **vars, int n_vars, int node, fg_status *st);

/* The reverse, for every variable the device holds: vars' host values
 * replace the device copies (after fg_session_broadcast_variables). */
int fg_cuda_vars_to_device(fg_cuda_ctx *c, fg_tensor **vars, int n_vars, fg_status *st);

/* Forgets the device copy of every constant (their values may change with
 * the graph); variables keep theirs. Called when the graph changed. */
void fg_cuda_graph_changed(fg_cuda_ctx *c);

#endif
