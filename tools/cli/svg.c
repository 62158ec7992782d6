/* The memory plan as SVG: one rectangle per arena tensor, x from its first
 * to its last step, y from its offset over its size, so reuse shows as
 * rectangles stacked in the same rows and the arena's height is the plot's. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "svg.h"
#include "trace.h"

#define LEFT   90.0
#define TOP    56.0
#define RIGHT  24.0
#define BOTTOM 48.0
#define PLOT_W 960.0
#define PLOT_H 560.0
#define CHAR_W 6.6 /* monospace 11px, roughly */

/* Writes `s` as XML text: markup characters escaped, control characters and
 * invalid UTF-8 as '?' (XML forbids them), at most `max_chars` characters,
 * ending in "..." when cut. */
static void xml_text(FILE *f, const char *s, int max_chars) {
  const unsigned char *p = (const unsigned char *)(s ? s : "");
  int total = 0;
  for (const unsigned char *q = p; *q; q++)
    total += (*q & 0xC0) != 0x80;
  int limit = total > max_chars ? (max_chars > 3 ? max_chars - 3 : 0) : total;
  for (int chars = 0; *p && chars < limit; chars++) {
    unsigned c = *p;
    int n = 1;
    if (c >= 0x80) {
      n = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
      for (int i = 1; i < n; i++)
        if ((p[i] & 0xC0) != 0x80) n = 0;
      /* Overlong or out-of-range forms still pass here; XML parsers accept
       * any well-formed sequence of these lengths except these leads. */
      if (c == 0xC0 || c == 0xC1 || c > 0xF4) n = 0;
    }
    if (n == 0) {
      fputc('?', f);
      p++;
      continue;
    }
    if (n == 1) {
      switch (c) {
      case '&': fputs("&amp;", f); break;
      case '<': fputs("&lt;", f); break;
      case '>': fputs("&gt;", f); break;
      case '"': fputs("&quot;", f); break;
      case '\'': fputs("&apos;", f); break;
      default: fputc(c < 0x20 || c == 0x7F ? '?' : (int)c, f); break;
      }
    } else {
      fwrite(p, 1, (size_t)n, f);
    }
    p += n;
  }
  if (limit < total) fputs("...", f);
}

/* 1, 2 or 5 times a power of ten, at least range / target. */
static uint64_t nice_step(uint64_t range, int target) {
  uint64_t want = range / (uint64_t)target + (range % (uint64_t)target != 0);
  if (want < 1) want = 1;
  for (uint64_t p = 1;; p *= 10) {
    if (p >= want) return p;
    if (p * 2 >= want) return p * 2;
    if (p * 5 >= want) return p * 5;
    if (p > UINT64_MAX / 100) return p * 10;
  }
}

/* "512", "64k", "1.5M": decimal prefixes, the axis says "bytes". */
static void bytes_label(uint64_t v, char *buf, size_t size) {
  static const char *units[] = {"", "k", "M", "G", "T", "P", "E"};
  double d = (double)v;
  int u = 0;
  while (d >= 1000.0 && u < 6) {
    d /= 1000.0;
    u++;
  }
  if (u == 0 || d == (double)(int64_t)d)
    snprintf(buf, size, "%.0f%s", d, units[u]);
  else
    snprintf(buf, size, "%.1f%s", d, units[u]);
}

static void draw_axes(FILE *f, int n_steps, double cw, size_t arena, double yscale) {
  double x0 = LEFT, y0 = TOP, x1 = LEFT + cw * n_steps, y1 = TOP + PLOT_H;
  fprintf(f, "<path d=\"M%.2f %.2f H%.2f V%.2f H%.2f Z\" fill=\"none\" stroke=\"#444\"/>\n", x0, y0,
          x1, y1, x0);
  uint64_t sstep = nice_step((uint64_t)n_steps, 24);
  for (uint64_t s = 0; s < (uint64_t)n_steps; s += sstep) {
    double x = LEFT + cw * (double)s;
    fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#ddd\"/>\n", x, y0,
            x, y1);
    fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%" PRIu64 "</text>\n",
            x + cw / 2, y0 - 6, s);
  }
  fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">step</text>\n", (x0 + x1) / 2,
          y0 - 22);
  uint64_t bstep = nice_step((uint64_t)arena, 10);
  for (uint64_t b = 0; b <= (uint64_t)arena; b += bstep) {
    double y = TOP + (double)b * yscale;
    char lab[32];
    bytes_label(b, lab, sizeof lab);
    fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#444\"/>\n", x0 - 4,
            y, x0, y);
    fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\">%s</text>\n", x0 - 7, y + 4, lab);
    if (b > UINT64_MAX - bstep) break;
  }
  fprintf(f,
          "<text transform=\"translate(%.2f %.2f) rotate(-90)\" text-anchor=\"middle\">offset "
          "(bytes)</text>\n",
          16.0, (y0 + y1) / 2);
}

static void draw_tensor(FILE *f, const fg_plan_info *info, int i, double cw, double yscale,
                        int n_steps) {
  const fg_plan_tensor *t = &info->tensors[i];
  int first = t->first_step < 0 ? 0 : t->first_step;
  int last = t->last_step < first ? first : t->last_step;
  if (first >= n_steps) first = n_steps - 1;
  if (last >= n_steps) last = n_steps - 1;
  double x = LEFT + cw * first, w = cw * (last - first + 1);
  double y = TOP + (double)t->offset * yscale, h = (double)t->bytes * yscale;
  if (h < 1.0) h = 1.0;
  unsigned hue = (unsigned)(i * 137) % 360u;
  char shape[256];
  cli_shape_str(t->rank, t->dims, shape, sizeof shape);
  fprintf(f, "<g>\n<title>");
  char label[64];
  snprintf(label, sizeof label, ":%d", t->output);
  xml_text(f, t->name, 4096);
  xml_text(f, label, 64);
  fprintf(f, " %s %s, %zu bytes at offset %" PRId64 ", steps %d..%d", fg_dtype_name(t->dtype),
          shape, t->bytes, t->offset, t->first_step, t->last_step);
  if (t->shared_with >= 0 && t->shared_with < info->n_tensors) {
    fputs(", in place of ", f);
    xml_text(f, info->tensors[t->shared_with].name, 4096);
    fprintf(f, ":%d", info->tensors[t->shared_with].output);
  }
  fprintf(f,
          "</title>\n<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" "
          "fill=\"hsl(%u,60%%,72%%)\" fill-opacity=\"0.85\" stroke=\"#333\" "
          "stroke-width=\"0.5\"/>\n",
          x, y, w, h, hue);
  int fit = (int)((w - 6) / CHAR_W);
  if (h >= 12.0 && fit >= 4) {
    fprintf(f, "<text x=\"%.2f\" y=\"%.2f\">", x + 3, y + (h < 24 ? h / 2 + 4 : 14));
    /* Scoped names ("gradients/matmul_33") keep their distinctive tail. */
    const char *name = t->name ? t->name : "?", *slash = strrchr(name, '/');
    if ((int)strlen(name) > fit && slash && slash[1]) name = slash + 1;
    xml_text(f, name, fit);
    fputs("</text>\n", f);
  }
  fputs("</g>\n", f);
}

int svg_write_memory_plan(const char *path, const fg_plan_info *info, const char *title,
                          fg_status *st) {
  out_file o;
  if (out_open(&o, path, st) != 0) return -1;
  FILE *f = o.f;
  int n_steps = info->n_steps > 0 ? info->n_steps : 1;
  /* Wide cells for short plans, but never narrower than the legend. */
  double cw = PLOT_W / n_steps, cap = 480.0 / n_steps > 80 ? 480.0 / n_steps : 80;
  if (cw > cap) cw = cap;
  size_t arena = info->arena_bytes;
  /* The plot covers every placed byte even if a tensor ends past the
   * reported arena: a wrong plan should look wrong, not be cut off. */
  int n_arena = 0;
  for (int i = 0; i < info->n_tensors; i++) {
    const fg_plan_tensor *t = &info->tensors[i];
    if (t->offset < 0) continue;
    n_arena++;
    if ((uint64_t)t->offset + t->bytes > arena) arena = (size_t)((uint64_t)t->offset + t->bytes);
  }
  double yscale = PLOT_H / (double)(arena > 0 ? arena : 1);
  double width = LEFT + cw * n_steps + RIGHT, height = TOP + PLOT_H + BOTTOM;
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "viewBox=\"0 0 %.0f %.0f\" font-family=\"monospace\" font-size=\"11\" "
          "style=\"background:#fff\">\n",
          width, height, width, height);
  fputs("<title>memory plan of ", f);
  xml_text(f, title, 4096);
  fputs("</title>\n<text x=\"8\" y=\"16\" font-size=\"13\">memory plan: ", f);
  xml_text(f, title, 100);
  fprintf(f, " (%d steps, %d arena tensors)</text>\n", info->n_steps, n_arena);
  draw_axes(f, n_steps, cw, arena, yscale);
  for (int i = 0; i < info->n_tensors; i++)
    if (info->tensors[i].offset >= 0) draw_tensor(f, info, i, cw, yscale, n_steps);
  fprintf(f,
          "<text x=\"%.2f\" y=\"%.2f\">arena %zu bytes | lower bound %zu bytes | naive %zu "
          "bytes</text>\n</svg>\n",
          LEFT, TOP + PLOT_H + 30, info->arena_bytes, info->lower_bound_bytes, info->naive_bytes);
  return out_commit(&o, st);
}
