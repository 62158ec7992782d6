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
void xml_text(FILE *f, const char *s, int max_chars) {
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
uint64_t nice_step(uint64_t range, int target) {
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

/* One plot: the tensors of `info` on device `device` (-1: all of them),
 * `y0` below the top of the picture. */
typedef struct panel {
  const fg_plan_info *info;
  int device;
  char label[96]; /* "" for the single panel of a one-device plan */
} panel;

static int on_panel(const panel *pn, const fg_plan_tensor *t) {
  return t->offset >= 0 && (pn->device < 0 || t->device == pn->device);
}

/* A step's width for a plan of n_steps: wide cells for short plans, but
 * the plot never narrower than the legend. */
static double cell_width(int n_steps) {
  double cw = PLOT_W / n_steps, cap = 480.0 / n_steps > 80 ? 480.0 / n_steps : 80;
  return cw > cap ? cap : cw;
}

static void draw_panel(FILE *f, const panel *pn, double y0) {
  const fg_plan_info *info = pn->info;
  int n_steps = info->n_steps > 0 ? info->n_steps : 1;
  double cw = cell_width(n_steps);
  size_t arena = pn->device < 0 ? info->arena_bytes : info->device_arena_bytes[pn->device];
  size_t own = arena;
  /* The plot covers every placed byte even if a tensor ends past the
   * reported arena: a wrong plan should look wrong, not be cut off. */
  int n_arena = 0;
  for (int i = 0; i < info->n_tensors; i++) {
    const fg_plan_tensor *t = &info->tensors[i];
    if (!on_panel(pn, t)) continue;
    n_arena++;
    if ((uint64_t)t->offset + t->bytes > arena) arena = (size_t)((uint64_t)t->offset + t->bytes);
  }
  double yscale = PLOT_H / (double)(arena > 0 ? arena : 1);
  fprintf(f, "<g transform=\"translate(0 %.0f)\">\n", y0);
  if (pn->label[0]) {
    fprintf(f, "<text x=\"8\" y=\"%.0f\" font-size=\"12\">", TOP - 36);
    xml_text(f, pn->label, 200);
    fprintf(f, ": %d arena tensors, arena %zu bytes</text>\n", n_arena, own);
  }
  draw_axes(f, n_steps, cw, arena, yscale);
  for (int i = 0; i < info->n_tensors; i++)
    if (on_panel(pn, &info->tensors[i])) draw_tensor(f, info, i, cw, yscale, n_steps);
  fputs("</g>\n", f);
}

int svg_write_memory_plan(const char *path, const fg_plan_info *const *infos, int n_infos,
                          const fg_partition *part, const char *title, fg_status *st) {
  /* Each device has its own arena, with offsets from its own 0: one panel
   * per device that holds tensors (per rank and device when n_infos > 1). */
  int n_panels = 0, cap = 0;
  panel *pn = NULL;
  for (int r = 0; r < n_infos; r++) {
    const fg_plan_info *info = infos[r];
    int nd = info->n_devices > 1 ? info->n_devices : 1;
    for (int d = 0; d < nd; d++) {
      panel one = {info, info->n_devices > 1 ? d : -1, ""};
      int used = 0;
      for (int i = 0; i < info->n_tensors && !used; i++)
        used = on_panel(&one, &info->tensors[i]);
      if (!used && (n_infos > 1 || nd > 1)) continue;
      if (n_infos > 1 || nd > 1) {
        char dev[64] = "?";
        if (part && d < fg_partition_num_devices(part))
          fg_device_str(fg_partition_device(part, d), dev, sizeof dev);
        snprintf(one.label, sizeof one.label, "%s", dev);
      }
      if (n_panels == cap) {
        cap = cap * 2 + 4;
        panel *np = realloc(pn, (size_t)cap * sizeof *np);
        if (!np) {
          free(pn);
          fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
          return -1;
        }
        pn = np;
      }
      pn[n_panels++] = one;
    }
  }
  out_file o;
  if (out_open(&o, path, st) != 0) {
    free(pn);
    return -1;
  }
  FILE *f = o.f;
  double width = LEFT + RIGHT + 480.0, panel_h = TOP + PLOT_H + BOTTOM;
  int n_steps = 0, n_tensors = 0;
  size_t sum[3] = {0, 0, 0};
  for (int k = 0; k < n_panels; k++) {
    int ns = pn[k].info->n_steps > 0 ? pn[k].info->n_steps : 1;
    if (LEFT + cell_width(ns) * ns + RIGHT > width) width = LEFT + cell_width(ns) * ns + RIGHT;
    for (int i = 0; i < pn[k].info->n_tensors; i++)
      n_tensors += on_panel(&pn[k], &pn[k].info->tensors[i]);
  }
  for (int r = 0; r < n_infos; r++) {
    n_steps += infos[r]->n_steps;
    sum[0] += infos[r]->arena_bytes;
    sum[1] += infos[r]->lower_bound_bytes;
    sum[2] += infos[r]->naive_bytes;
  }
  /* Several plots: room under the title for the first one's heading. */
  double head = n_panels > 0 && pn[0].label[0] ? 24.0 : 0.0;
  double height = head + panel_h * (n_panels > 0 ? n_panels : 1);
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "viewBox=\"0 0 %.0f %.0f\" font-family=\"monospace\" font-size=\"11\" "
          "style=\"background:#fff\">\n",
          width, height, width, height);
  fputs("<title>memory plan of ", f);
  xml_text(f, title, 4096);
  fputs("</title>\n<text x=\"8\" y=\"16\" font-size=\"13\">memory plan: ", f);
  xml_text(f, title, 100);
  fprintf(f, " (%d steps, %d arena tensors)</text>\n", n_steps, n_tensors);
  for (int k = 0; k < n_panels; k++)
    draw_panel(f, &pn[k], head + panel_h * k);
  fprintf(f,
          "<text x=\"%.2f\" y=\"%.2f\">arena %zu bytes | lower bound %zu bytes | naive %zu "
          "bytes%s</text>\n</svg>\n",
          LEFT, height - BOTTOM + 30, sum[0], sum[1], sum[2], n_infos > 1 ? " (all ranks)" : "");
  free(pn);
  return out_commit(&o, st);
}
