/* A walk over the protobuf wire format of a ModelProto before protobuf-c
 * decodes it. protobuf-c only says "no" to a malformed message; this walk
 * says where (the field path and the byte offset), using the generated
 * descriptors for the field names, and bounds the nesting depth (a
 * GraphProto may hold nodes whose attributes hold graphs, to any depth;
 * protobuf-c's decoder recurses without a limit). */
#include <stdio.h>
#include <string.h>

#include "schema/onnx/onnx_internal.h"

/* Deeper than any real model (a Loop body inside an If branch is 6). */
#define WIRE_MAX_DEPTH 32

typedef struct wire {
  const uint8_t *base;
  char *msg;
  size_t msg_size;
} wire;

static int get_varint(const uint8_t *p, size_t end, size_t *pos, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 70 && *pos < end; shift += 7) {
    uint8_t b = p[(*pos)++];
    if (shift == 63 && (b & 0x7e)) return -1; /* more than 64 bits */
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return 0;
  }
  return -1;
}

/* The wire type a field of this type has when not packed. */
static int wire_type_of(ProtobufCType t) {
  switch (t) {
  case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_FIXED64:
  case PROTOBUF_C_TYPE_DOUBLE: return 1;
  case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_FIXED32:
  case PROTOBUF_C_TYPE_FLOAT: return 5;
  case PROTOBUF_C_TYPE_STRING:
  case PROTOBUF_C_TYPE_BYTES:
  case PROTOBUF_C_TYPE_MESSAGE: return 2;
  default: return 0;
  }
}

static const char *wire_name(unsigned wt) {
  static const char *names[] = {"varint",    "64-bit", "length-delimited", "start-group",
                                "end-group", "32-bit", "invalid (6)",      "invalid (7)"};
  return names[wt & 7];
}

static int bad(wire *w, const char *path, size_t at, const char *fmt, const char *a,
               unsigned long long x, unsigned long long y) {
  char what[256];
  snprintf(what, sizeof what, fmt, a, x, y);
  /* A path through deeply nested messages keeps its two ends. */
  size_t len = strlen(path);
  if (len > 240)
    snprintf(w->msg, w->msg_size, "%.100s...%s at byte %zu: %s", path, path + len - 100, at, what);
  else
    snprintf(w->msg, w->msg_size, "%s at byte %zu: %s", path, at, what);
  return -1;
}

/* Walks the message of type d in [pos, end); path names it. */
static int walk(wire *w, const ProtobufCMessageDescriptor *d, size_t pos, size_t end,
                const char *path, int depth) {
  const uint8_t *p = w->base;
  unsigned counts[64] = {0};
  if (depth > WIRE_MAX_DEPTH)
    return bad(w, path, pos, "messages nest deeper than %s%llu levels", "", WIRE_MAX_DEPTH, 0);
  while (pos < end) {
    size_t at = pos;
    uint64_t tag, v;
    if (get_varint(p, end, &pos, &tag) != 0)
      return bad(w, path, at, "a field tag is truncated%s", "", 0, 0);
    unsigned wt = (unsigned)(tag & 7);
    uint64_t id = tag >> 3;
    if (id == 0 || id > 536870911u)
      return bad(w, path, at, "field number %s%llu is invalid", "", id, 0);
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(d, (unsigned)id);
    char fpath[512];
    unsigned idx = 0;
    if (f) {
      size_t fi = (size_t)(f - d->fields);
      idx = fi < 64 ? counts[fi]++ : 0;
      if (f->label == PROTOBUF_C_LABEL_REPEATED)
        snprintf(fpath, sizeof fpath, "%.380s.%.60s[%u]", path, f->name, idx);
      else
        snprintf(fpath, sizeof fpath, "%.380s.%.60s", path, f->name);
    } else {
      snprintf(fpath, sizeof fpath, "%.380s.<field %llu>", path, (unsigned long long)id);
    }
    if (f) {
      int want = wire_type_of(f->type);
      int packed_ok = f->label == PROTOBUF_C_LABEL_REPEATED && want != 2 && wt == 2;
      if ((int)wt != want && !packed_ok) {
        snprintf(w->msg, w->msg_size, "%s at byte %zu: wire type %s, expected %s", fpath, at,
                 wire_name(wt), wire_name((unsigned)want));
        return -1;
      }
    }
    switch (wt) {
    case 0:
      if (get_varint(p, end, &pos, &v) != 0)
        return bad(w, fpath, at, "a varint is truncated or longer than 10 bytes%s", "", 0, 0);
      break;
    case 1:
    case 5: {
      size_t n = wt == 1 ? 8 : 4;
      if (end - pos < n)
        return bad(w, fpath, at, "a %s%llu-byte value runs past the end (%llu bytes left)", "", n,
                   end - pos);
      pos += n;
      break;
    }
    case 2:
      if (get_varint(p, end, &pos, &v) != 0)
        return bad(w, fpath, at, "a length is truncated%s", "", 0, 0);
      if (v > end - pos)
        return bad(w, fpath, at, "a length of %s%llu bytes runs past the end (%llu bytes left)", "",
                   v, end - pos);
      if (f && f->type == PROTOBUF_C_TYPE_MESSAGE &&
          walk(w, f->descriptor, pos, pos + (size_t)v, fpath, depth + 1) != 0)
        return -1;
      if (f && wt == 2 && wire_type_of(f->type) == 1 && v % 8)
        return bad(w, fpath, at, "packed 64-bit values of %s%llu bytes", "", v, 0);
      if (f && wt == 2 && wire_type_of(f->type) == 5 && v % 4)
        return bad(w, fpath, at, "packed 32-bit values of %s%llu bytes", "", v, 0);
      pos += (size_t)v;
      break;
    default: return bad(w, fpath, at, "wire type %s is not accepted", wire_name(wt), 0, 0);
    }
  }
  return 0;
}

int fgx_wire_check(const uint8_t *data, size_t size, char *buf, size_t buf_size) {
  wire w = {data, buf, buf_size};
  buf[0] = '\0';
  return walk(&w, &onnx__model_proto__descriptor, 0, size, "ModelProto", 0);
}
