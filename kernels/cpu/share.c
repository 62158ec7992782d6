/* The store of converted constant inputs (kernels/share.h): a list under
 * one lock. A session holds one entry per constant weight and layout, a
 * few hundred at most, looked up when a plan's step first runs. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/share.h"

struct fgk_shared {
  fgk_shared *next;
  const void *src;
  int64_t offset;
  void *desc;
  size_t desc_size;
  fgk_share_same_fn same;
  void *buf;
  size_t bytes;
  int holds;
  int filled;
  pthread_mutex_t mu;
};

struct fgk_share {
  pthread_mutex_t mu;
  fgk_shared *entries;
};

fgk_share *fgk_share_new(void) {
  fgk_share *s = calloc(1, sizeof *s);
  if (s && pthread_mutex_init(&s->mu, NULL) != 0) {
    free(s);
    return NULL;
  }
  return s;
}

static void entry_free(fgk_shared *e) {
  pthread_mutex_destroy(&e->mu);
  free(e->desc);
  free(e->buf);
  free(e);
}

void fgk_share_free(fgk_share *s) {
  if (!s) return;
  while (s->entries) {
    fgk_shared *next = s->entries->next;
    entry_free(s->entries);
    s->entries = next;
  }
  pthread_mutex_destroy(&s->mu);
  free(s);
}

static int same_key(const fgk_shared *e, const void *src, int64_t offset, const void *desc,
                    size_t desc_size, fgk_share_same_fn same) {
  return e->src == src && e->offset == offset && e->desc_size == desc_size && e->same == same &&
         same(e->desc, desc);
}

static fgk_shared *entry_new(const void *src, int64_t offset, const void *desc, size_t desc_size,
                             fgk_share_same_fn same, size_t bytes) {
  fgk_shared *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  e->desc = malloc(desc_size ? desc_size : 1);
  if (!e->desc || posix_memalign(&e->buf, 64, bytes ? bytes : 64) != 0) e->buf = NULL;
  if (!e->buf || pthread_mutex_init(&e->mu, NULL) != 0) {
    free(e->buf);
    free(e->desc);
    free(e);
    return NULL;
  }
  memcpy(e->desc, desc, desc_size);
  e->src = src, e->offset = offset, e->desc_size = desc_size, e->same = same;
  e->bytes = bytes;
  return e;
}

fgk_shared *fgk_share_get(fgk_share *s, const void *src, int64_t offset, const void *desc,
                          size_t desc_size, fgk_share_same_fn same, size_t bytes) {
  pthread_mutex_lock(&s->mu);
  fgk_shared *e = s->entries;
  while (e && !same_key(e, src, offset, desc, desc_size, same))
    e = e->next;
  if (e && e->bytes != bytes) {
    e = NULL; /* the same layout cannot take two sizes: keep out of it */
  } else if (e) {
    e->holds++;
  } else if ((e = entry_new(src, offset, desc, desc_size, same, bytes))) {
    e->holds = 1;
    e->next = s->entries;
    s->entries = e;
  }
  pthread_mutex_unlock(&s->mu);
  return e;
}

void fgk_share_put(fgk_share *s, fgk_shared *e) {
  if (!e) return;
  pthread_mutex_lock(&s->mu);
  if (--e->holds == 0) {
    fgk_shared **p = &s->entries;
    while (*p != e)
      p = &(*p)->next;
    *p = e->next;
    entry_free(e);
  }
  pthread_mutex_unlock(&s->mu);
}

void *fgk_shared_buf(const fgk_shared *e) { return e->buf; }

int fgk_shared_lock(fgk_shared *e) {
  pthread_mutex_lock(&e->mu);
  return e->filled;
}

void fgk_shared_unlock(fgk_shared *e, int filled) {
  e->filled = filled;
  pthread_mutex_unlock(&e->mu);
}

int fgk_share_count(fgk_share *s) {
  pthread_mutex_lock(&s->mu);
  int n = 0;
  for (const fgk_shared *e = s->entries; e; e = e->next)
    n++;
  pthread_mutex_unlock(&s->mu);
  return n;
}

size_t fgk_share_bytes(fgk_share *s) {
  pthread_mutex_lock(&s->mu);
  size_t n = 0;
  for (const fgk_shared *e = s->entries; e; e = e->next)
    n += e->bytes;
  pthread_mutex_unlock(&s->mu);
  return n;
}
