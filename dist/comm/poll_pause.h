/* The back-off of the host-memory communicators' polled waits (internal):
 * MPI progresses only inside MPI calls and the shared-memory barrier has
 * nothing to block on, so both poll. A spin first (a peer on another core
 * answers within microseconds), then yields, then 50 us sleeps, so a rank
 * waiting for a slow peer on a shared core does not starve it. */
#ifndef FG_DIST_POLL_PAUSE_H
#define FG_DIST_POLL_PAUSE_H

#include <sched.h>
#include <time.h>

/* Polls below this count spin without pausing. */
#define FG_POLL_SPINS 200

/* The pause after poll number `polls` (0-based, reset on progress). */
static inline void fg_poll_pause(long polls) {
  if (polls < FG_POLL_SPINS) return;
  if (polls < 10 * FG_POLL_SPINS) {
    sched_yield();
  } else {
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
  }
}

#endif
