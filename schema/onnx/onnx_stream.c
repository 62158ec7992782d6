/* Reading an ONNX file without holding its weights twice.
 *
 * protobuf-c decodes a message into copies of its bytes fields, so a
 * model read whole and then decoded was held twice at the import's peak
 * (the file's buffer and the decoded message's raw_data). Here the file is
 * read field by field into a copy without the initializers' large raw_data
 * payloads (ModelProto.graph.initializer[i].raw_data of at least
 * FGX_STREAM_MIN bytes): each such field is written as an empty raw_data
 * and its place in the file (offset, length) recorded by the initializer's
 * position. The importer decodes the small copy and reads each recorded
 * payload from the file straight into the tensor the graph keeps
 * (onnx_tensor.c), so the weights are in memory once.
 *
 * Only the common shape is taken: one graph field, at most one raw_data
 * per initializer, wire types 0, 1, 2 and 5, lengths within their
 * message. Anything else (a malformed file included) returns "not
 * streamable" and the caller reads and decodes the whole file as before,
 * whose wire check then says where a malformed file goes wrong. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "schema/onnx/onnx_stream.h"

typedef struct bbuf {
  uint8_t *p;
  size_t n, cap;
} bbuf;

typedef struct walk {
  FILE *f;
  uint64_t pos; /* the file position of the next byte */
  int graphs;   /* graph fields seen */
  long init;    /* the current initializer's position, -1 outside one */
  long inits;   /* initializers seen */
  fgx_raw_range *r;
  size_t n, cap;
} walk;

static int put(bbuf *b, const void *src, size_t n) {
  if (n == 0) return 0;
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n)
      cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p, b->cap = cap;
  }
  memcpy(b->p + b->n, src, n);
  b->n += n;
  return 0;
}

static int put_varint(bbuf *b, uint64_t v) {
  uint8_t tmp[10];
  int k = 0;
  do {
    tmp[k++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  return put(b, tmp, (size_t)k);
}

/* A varint of at most 64 bits (the wire check's rule, onnx_wire.c: more is
 * malformed, left to the whole decode to refuse). */
static int get_varint(walk *w, uint64_t end, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 70 && w->pos < end; shift += 7) {
    const int c = getc(w->f);
    if (c == EOF || (shift == 63 && (c & 0x7e))) return -1;
    w->pos++;
    *v |= (uint64_t)(c & 0x7f) << shift;
    if (!(c & 0x80)) return 0;
  }
  return -1;
}

/* n bytes of the file into b. */
static int copy_bytes(walk *w, bbuf *b, uint64_t n) {
  uint8_t tmp[65536];
  while (n) {
    const size_t k = n < sizeof tmp ? (size_t)n : sizeof tmp;
    if (fread(tmp, 1, k, w->f) != k || put(b, tmp, k) != 0) return -1;
    w->pos += k, n -= k;
  }
  return 0;
}

static int add_range(walk *w, uint64_t len) {
  if (w->n == w->cap) {
    size_t cap = w->cap ? 2 * w->cap : 64;
    fgx_raw_range *r = realloc(w->r, cap * sizeof *r);
    if (!r) return -1;
    w->r = r, w->cap = cap;
  }
  w->r[w->n++] = (fgx_raw_range){w->init, w->pos, len};
  return 0;
}

enum { L_MODEL, L_GRAPH, L_TENSOR };

static int walk_msg(walk *w, int level, uint64_t end, bbuf *out);

/* A length-delimited field of len bytes (its tag read) into out: a graph
 * or an initializer walked, a large raw_data skipped, anything else
 * copied. */
static int walk_bytes(walk *w, int level, uint64_t tag, uint64_t len, int *raws, bbuf *out) {
  const uint64_t field = tag >> 3;
  const int sub = level == L_MODEL && field == 7   ? L_GRAPH
                  : level == L_GRAPH && field == 5 ? L_TENSOR
                                                   : -1;
  if (put_varint(out, tag) != 0) return -1;
  if (sub >= 0) {
    if (sub == L_GRAPH && w->graphs++) return -1; /* merged graphs: not this shape */
    if (sub == L_TENSOR) w->init = w->inits++;
    bbuf inner = {NULL, 0, 0};
    int rc = walk_msg(w, sub, w->pos + len, &inner);
    if (rc == 0) rc = put_varint(out, inner.n) == 0 && put(out, inner.p, inner.n) == 0 ? 0 : -1;
    free(inner.p);
    w->init = -1;
    return rc;
  }
  if (level == L_TENSOR && field == 9) {
    if ((*raws)++) return -1; /* a second raw_data replaces the first: not this shape */
    if (len >= FGX_STREAM_MIN) {
      if (add_range(w, len) != 0 || fseeko(w->f, (off_t)len, SEEK_CUR) != 0) return -1;
      w->pos += len;
      return put_varint(out, 0);
    }
  }
  return put_varint(out, len) == 0 ? copy_bytes(w, out, len) : -1;
}

/* The fields of a message ending at file position end into out. */
static int walk_msg(walk *w, int level, uint64_t end, bbuf *out) {
  int raws = 0;
  while (w->pos < end) {
    uint64_t tag, v;
    if (get_varint(w, end, &tag) != 0) return -1;
    switch (tag & 7) {
    case 0:
      if (get_varint(w, end, &v) != 0 || put_varint(out, tag) != 0 || put_varint(out, v) != 0)
        return -1;
      break;
    case 1:
    case 5:
      if (end - w->pos < ((tag & 7) == 1 ? 8u : 4u) || put_varint(out, tag) != 0 ||
          copy_bytes(w, out, (tag & 7) == 1 ? 8 : 4) != 0)
        return -1;
      break;
    case 2:
      if (get_varint(w, end, &v) != 0 || v > end - w->pos ||
          walk_bytes(w, level, tag, v, &raws, out) != 0)
        return -1;
      break;
    default: return -1; /* groups and unknown wire types */
    }
  }
  return w->pos == end ? 0 : -1;
}

uint8_t *fgx_stream_compact(FILE *f, uint64_t size, size_t *out_size, fgx_raw_range **ranges,
                            size_t *n_ranges) {
  walk w = {f, 0, 0, -1, 0, NULL, 0, 0};
  bbuf out = {NULL, 0, 0};
  *ranges = NULL, *n_ranges = 0, *out_size = 0;
  if (fseeko(f, 0, SEEK_SET) != 0 || walk_msg(&w, L_MODEL, size, &out) != 0 || !out.p) {
    /* Not this shape (or empty): the caller reads it all. */
    free(out.p);
    free(w.r);
    return NULL;
  }
  *ranges = w.r, *n_ranges = w.n, *out_size = out.n;
  return out.p;
}
