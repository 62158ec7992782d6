/* The in-process communicator: ranks are threads of one process (one per
 * cpu:N device of a data-parallel session) sharing memory. */
#ifndef FG_DIST_COMM_INPROC_H
#define FG_DIST_COMM_INPROC_H

#include "dist/comm/comm.h"

/* A group of `size` ranks (1 .. FG_MAX_CPU_DEVICES): fills handles[0..size)
 * with one fg_comm per rank. Each handle is freed with its ops->free; the
 * shared state goes with the last one. timeout_s <= 0: 60 s. 0 or -1. */
int fg_comm_inproc_group(int size, double timeout_s, fg_comm **handles, fg_status *st);

/* Makes every waiting and later collective, send and recv of the group fail at once
 * (FG_DEADLINE_EXCEEDED, "group aborted (<why>)") instead of waiting for the
 * timeout: the executor calls it when a rank's step failed, so its peers do
 * not wait out the timeout. */
void fg_comm_inproc_abort(fg_comm *c, const char *why);
/* Clears an abort (before the next run) and drops the messages nobody
 * received. Only while no rank is inside a collective, send or recv. */
void fg_comm_inproc_reset(fg_comm *c);

#endif
