/* A session's store of what kernels derive from constant inputs, shared by
 * its plans.
 *
 * A plan's convolution keeps its constant weight converted into oneDNN's
 * blocked layout, made once and reused by every run. Each plan made its
 * own: a session that ran batch 1, 2, 4 and 8 held the weights four times
 * besides the graph's copy (and a plan per fetch set, as an evaluation
 * beside inference makes, another). The store gives every plan of the
 * session the same converted copy: one entry per (source bytes, offset,
 * layout), counted by the states that use it and freed with the last.
 *
 * An entry is keyed by the address of the bytes it was converted from, so
 * those bytes must not change while it lives: only constants qualify
 * (fg_kctx.const_inputs), whose buffers the session's graph version owns,
 * and the session drops every plan, so every entry, before its graph
 * changes. Variables do not: a run may assign one between two readers.
 *
 * Thread safety: lookups and releases take the store's lock (plans are
 * built and freed by one thread at a time, but a multi-device session may
 * run several plans' steps at once). Filling an entry takes the entry's
 * own lock, so two steps of one run that read the same constant convert it
 * once, and neither reads it half made. */
#ifndef FG_KERNELS_SHARE_H
#define FG_KERNELS_SHARE_H

#include <stddef.h>
#include <stdint.h>

typedef struct fgk_share fgk_share;
typedef struct fgk_shared fgk_shared;

/* Equality of two layout descriptions (the caller's type, desc_size
 * bytes each). */
typedef int (*fgk_share_same_fn)(const void *a, const void *b);

/* NULL when out of memory. */
fgk_share *fgk_share_new(void);
/* Accepts NULL. Entries still held are freed too (their holders must be
 * gone). */
void fgk_share_free(fgk_share *s);

/* The entry for `src` + `offset` in the layout `desc` (copied,
 * desc_size bytes, compared with `same`): a 64-byte aligned buffer of
 * `bytes`, new and not filled when no holder had it. Each get is released
 * by one fgk_share_put. NULL when out of memory, or when an entry with the
 * same key has another size (which equal layouts never have). */
fgk_shared *fgk_share_get(fgk_share *s, const void *src, int64_t offset, const void *desc,
                          size_t desc_size, fgk_share_same_fn same, size_t bytes);
/* Releases one hold; the last frees the entry. Accepts NULL e. */
void fgk_share_put(fgk_share *s, fgk_shared *e);

void *fgk_shared_buf(const fgk_shared *e);
/* Locks e and says whether it holds its converted bytes already. A caller
 * that finds it empty fills it, then unlocks with filled 1; one that finds
 * it filled unlocks with 1 at once. A failed fill unlocks with 0, leaving
 * it empty for the next caller. */
int fgk_shared_lock(fgk_shared *e);
void fgk_shared_unlock(fgk_shared *e, int filled);

/* The store's entries and the bytes of their buffers (tests, reports). */
int fgk_share_count(fgk_share *s);
size_t fgk_share_bytes(fgk_share *s);

#endif
