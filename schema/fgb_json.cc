/* The JSON text form of .fgb files. Text -> bytes goes through FlatBuffers'
 * parser with the embedded schema, then through the binary loader, so every
 * check applies. Bytes -> text is written here rather than by FlatBuffers'
 * GenerateText, which prints doubles with 12 fixed decimals (1e-20 becomes
 * 0.0): %.17g keeps every float attribute exact through a round trip. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema/fgb_common.h"
/* After fgb_common.h, which makes FlatBuffers' asserts throw. The one in
 * CheckedError's destructor can only terminate, as the default assert would
 * abort; it guards the parser's own bookkeeping, not anything a file sets. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wterminate"
#endif
#include "flatbuffers/idl.h"
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#include "schema/graph_fbs_text.h"

namespace fb = flowgraph::fb;

namespace fgb {
namespace {

/* Parses `json` (NUL-terminated) against `schema`; the bytes stay in the
 * parser's builder. */
int parse_json(flatbuffers::Parser *parser, const char *schema, const char *json, size_t len,
               const std::string &pre, fg_status *st) {
  if (!parser->Parse(schema ? schema : fg_schema_text)) {
    fg_status_set(st, schema ? FG_INVALID_ARGUMENT : FG_INTERNAL, "schema does not parse: %s",
                  parser->error_.c_str());
    return -1;
  }
  const char *nul = (const char *)memchr(json, '\0', len);
  if (nul) {
    fg_status_set(st, FG_FORMAT_ERROR, "%snot JSON text: NUL byte at offset %zu", pre.c_str(),
                  (size_t)(nul - json));
    return -1;
  }
  if (!parser->Parse(json)) {
    std::string err = parser->error_;
    while (!err.empty() && (err.back() == '\n' || err.back() == ' '))
      err.pop_back();
    for (char &c : err)
      if (c == '\n') c = ' ';
    fg_status_set(st, FG_FORMAT_ERROR, "%snot a valid flowgraph JSON file: %s", pre.c_str(),
                  err.c_str());
    return -1;
  }
  return 0;
}

/* FlatBuffers strings end in a NUL, so FromUTF8 stops at the end even
 * inside a truncated sequence. */
bool utf8_ok(const char *p, size_t n) {
  const char *end = p + n;
  while (p < end)
    if (flatbuffers::FromUTF8(&p) < 0) return false;
  return true;
}

/* Appends JSON for one verified Graph. */
struct Writer {
  std::string out;
  fg_status *st;
  bool ok = true;

  void str(const flatbuffers::String *s) {
    if (!s) {
      out += "\"\"";
      return;
    }
    out += '"';
    const unsigned char *p = (const unsigned char *)s->c_str();
    size_t n = s->size();
    for (size_t i = 0; i < n; i++) {
      unsigned char c = p[i];
      if (c == '"' || c == '\\') {
        out += '\\';
        out += (char)c;
      } else if (c < 0x20) {
        char buf[8];
        snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      } else {
        out += (char)c;
      }
    }
    out += '"';
    if (!utf8_ok(s->c_str(), s->size())) {
      fg_status_set(st, FG_INVALID_ARGUMENT, "string '%s' is not valid UTF-8: JSON cannot hold it",
                    esc(s).c_str());
      ok = false;
    }
  }
  void num(int64_t v) { out += std::to_string(v); }
  void num(double v) {
    char buf[40];
    if (isnan(v))
      snprintf(buf, sizeof buf, "nan"); /* FlatBuffers' parser reads these back */
    else if (isinf(v))
      snprintf(buf, sizeof buf, v > 0 ? "inf" : "-inf");
    else
      snprintf(buf, sizeof buf, "%.17g", v);
    out += buf;
  }
  template <typename T> void nums(const flatbuffers::Vector<T> *v, size_t per_line = 0) {
    out += '[';
    for (flatbuffers::uoffset_t i = 0; v && i < v->size(); i++) {
      if (i) out += per_line && i % per_line == 0 ? ",\n      " : ", ";
      num((typename std::conditional<std::is_floating_point<T>::value, double, int64_t>::type)
              v->Get(i));
    }
    out += ']';
  }
  void dtype(fb::DType d) {
    const char *name = (int)d >= 0 && d <= fb::DType::MAX ? fb::EnumNameDType(d) : "";
    if (*name)
      out += std::string("\"") + name + "\"";
    else
      num((int64_t)d);
  }
  void ref(const fb::TensorRef *r) {
    out += "{\"node\": " + std::to_string(r->node()) +
           ", \"index\": " + std::to_string(r->index()) + "}";
  }

  void attr(const fb::Attr *a) {
    out += "        {\"name\": ";
    str(a->name());
    out += std::string(", \"value_type\": \"") + fb::EnumNameAttrValue(a->value_type()) +
           "\", \"value\": {";
    switch (a->value_type()) {
    case fb::AttrValue::IntValue:
      out += "\"v\": ";
      num((int64_t)a->value_as_IntValue()->v());
      break;
    case fb::AttrValue::FloatValue:
      out += "\"v\": ";
      num(a->value_as_FloatValue()->v());
      break;
    case fb::AttrValue::StringValue:
      out += "\"v\": ";
      str(a->value_as_StringValue()->v());
      break;
    case fb::AttrValue::IntList:
      out += "\"v\": ";
      nums(a->value_as_IntList()->v());
      break;
    case fb::AttrValue::FloatList:
      out += "\"v\": ";
      nums(a->value_as_FloatList()->v());
      break;
    case fb::AttrValue::TensorValue: {
      auto t = a->value_as_TensorValue();
      out += "\"dtype\": ";
      dtype(t->dtype());
      out += ", \"shape\": ";
      nums(t->shape());
      out += ", \"buffer\": " + std::to_string(t->buffer());
      break;
    }
    default: break;
    }
    out += "}}";
  }

  void node(const fb::Node *n) {
    out += "    {\n      \"name\": ";
    str(n->name());
    out += ",\n      \"op\": ";
    str(n->op());
    out += ",\n      \"inputs\": [";
    for (flatbuffers::uoffset_t i = 0; n->inputs() && i < n->inputs()->size(); i++) {
      if (i) out += ", ";
      ref(n->inputs()->Get(i));
    }
    out += "],\n      \"attrs\": [";
    for (flatbuffers::uoffset_t i = 0; n->attrs() && i < n->attrs()->size(); i++) {
      out += i ? ",\n" : "\n";
      attr(n->attrs()->Get(i));
    }
    out += n->attrs() && n->attrs()->size() ? "\n      ],\n" : "],\n";
    out += "      \"outputs\": [";
    for (flatbuffers::uoffset_t i = 0; n->outputs() && i < n->outputs()->size(); i++) {
      auto ti = n->outputs()->Get(i);
      out += i ? ", {\"dtype\": " : "{\"dtype\": ";
      dtype(ti->dtype());
      out += ", \"shape\": ";
      nums(ti->shape());
      out += "}";
    }
    out += "]";
    /* An unplaced node has no device (not ""), so it stays unplaced. */
    if (n->device()) {
      out += ",\n      \"device\": ";
      str(n->device());
    }
    if (n->made_by_gradients()) out += ",\n      \"made_by_gradients\": true";
    out += "\n    }";
  }

  void graph(const fb::Graph *g) {
    out += "{\n  \"version\": " + std::to_string(g->version()) + ",\n  \"nodes\": [";
    for (flatbuffers::uoffset_t i = 0; g->nodes() && i < g->nodes()->size(); i++) {
      out += i ? ",\n" : "\n";
      node(g->nodes()->Get(i));
    }
    out += g->nodes() && g->nodes()->size() ? "\n  ],\n  \"buffers\": [" : "],\n  \"buffers\": [";
    for (flatbuffers::uoffset_t i = 0; g->buffers() && i < g->buffers()->size(); i++) {
      out += i ? ",\n    {\"data\": " : "\n    {\"data\": ";
      nums(g->buffers()->Get(i)->data(), 32);
      out += "}";
    }
    out += g->buffers() && g->buffers()->size() ? "\n  ],\n  \"inputs\": [" : "],\n  \"inputs\": [";
    for (flatbuffers::uoffset_t i = 0; g->inputs() && i < g->inputs()->size(); i++) {
      if (i) out += ", ";
      str(g->inputs()->Get(i));
    }
    out += "],\n  \"outputs\": [";
    for (flatbuffers::uoffset_t i = 0; g->outputs() && i < g->outputs()->size(); i++) {
      if (i) out += ", ";
      ref(g->outputs()->Get(i));
    }
    out += "],\n  \"metadata\": [";
    for (flatbuffers::uoffset_t i = 0; g->metadata() && i < g->metadata()->size(); i++) {
      auto kv = g->metadata()->Get(i);
      out += i ? ",\n    {\"key\": " : "\n    {\"key\": ";
      str(kv->key());
      out += ", \"value\": ";
      str(kv->value());
      out += "}";
    }
    out += g->metadata() && g->metadata()->size() ? "\n  ]\n}\n" : "]\n}\n";
  }
};

/* Text for bytes this process just made or the caller vouches for: they
 * are verified first all the same. */
int to_json(const void *data, size_t size, std::string *text, fg_status *st) {
  if (!data || size < 8 || size > kMaxFileBytes || (uintptr_t)data % 8 != 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fgb_binary_to_json: need 8-byte aligned .fgb bytes");
    return -1;
  }
  flatbuffers::Verifier verifier((const uint8_t *)data, size);
  if (!fb::VerifyGraphBuffer(verifier)) {
    fg_status_set(st, FG_FORMAT_ERROR, "not a valid .fgb file: verifier failed");
    return -1;
  }
  Writer w;
  w.st = st;
  w.graph(fb::GetGraph(data));
  if (!w.ok) return -1;
  text->swap(w.out);
  return 0;
}

} // namespace
} // namespace fgb

extern "C" int fgb_json_to_binary(const char *schema, const char *json, size_t len, void **data,
                                  size_t *size, fg_status *status) {
  if (!json || !data || !size) {
    fg_status_set(status, FG_INVALID_ARGUMENT, "fgb_json_to_binary: NULL argument");
    return -1;
  }
  *data = NULL;
  *size = 0;
  try {
    flatbuffers::Parser parser;
    if (fgb::parse_json(&parser, schema, json, len, "", status) != 0) return -1;
    size_t n = parser.builder_.GetSize();
    void *copy = malloc(n ? n : 1);
    if (!copy) throw std::bad_alloc();
    memcpy(copy, parser.builder_.GetBufferPointer(), n);
    *data = copy;
    *size = n;
  } catch (...) {
    fgb::status_from_exception(status, "fgb_json_to_binary");
    return -1;
  }
  fg_status_clear(status);
  return 0;
}

extern "C" int fgb_binary_to_json(const void *data, size_t size, char **text, size_t *len,
                                  fg_status *status) {
  if (!text || !len) {
    fg_status_set(status, FG_INVALID_ARGUMENT, "fgb_binary_to_json: NULL argument");
    return -1;
  }
  *text = NULL;
  *len = 0;
  try {
    std::string s;
    if (fgb::to_json(data, size, &s, status) != 0) return -1;
    char *copy = (char *)malloc(s.size() + 1);
    if (!copy) throw std::bad_alloc();
    memcpy(copy, s.c_str(), s.size() + 1);
    *text = copy;
    *len = s.size();
  } catch (...) {
    fgb::status_from_exception(status, "fgb_binary_to_json");
    return -1;
  }
  fg_status_clear(status);
  return 0;
}

extern "C" fg_graph *fg_graph_load_json(const char *path, fg_status *status) {
  if (!path) {
    fg_status_set(status, FG_INVALID_ARGUMENT, "fg_graph_load_json: path is NULL");
    return NULL;
  }
  try {
    std::string text;
    if (fgb::read_file(path, fgb::kMaxJsonBytes, &text, status) != 0) return NULL;
    std::string pre = "'" + fgb::path_str(path) + "': ";
    flatbuffers::Parser parser;
    if (fgb::parse_json(&parser, NULL, text.c_str(), text.size(), pre, status) != 0) return NULL;
    return fgb::load_bytes(parser.builder_.GetBufferPointer(), parser.builder_.GetSize(), path,
                           FGB_VERIFY_MAX_DEPTH, FGB_VERIFY_MAX_TABLES, status);
  } catch (...) {
    fgb::status_from_exception(status, "fg_graph_load_json");
    return NULL;
  }
}

extern "C" int fg_graph_save_json(const fg_graph *g, const char *path, fg_status *status) {
  if (!path) {
    fg_status_set(status, FG_INVALID_ARGUMENT, "fg_graph_save_json: path is NULL");
    return -1;
  }
  if (fgb::check_graph(g, "fg_graph_save_json", status) != 0) return -1;
  try {
    flatbuffers::FlatBufferBuilder fbb(1 << 16);
    if (fgb::serialize(g, &fbb, status) != 0) return -1;
    std::string text;
    /* The builder's memory comes from operator new[]: aligned enough. */
    if (fgb::to_json(fbb.GetBufferPointer(), fbb.GetSize(), &text, status) != 0) return -1;
    return fgb::write_file_atomic(path, text.data(), text.size(), status);
  } catch (...) {
    fgb::status_from_exception(status, "fg_graph_save_json");
    return -1;
  }
}
