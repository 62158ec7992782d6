/* `flowgraph train --plot FILE.svg`: the training curves per epoch, in the
 * manner of the memory-plan picture (svg.c, whose helpers it shares): a
 * panel of losses (training and validation), and under it, when the run
 * has any, a panel of the other metrics (--eval values, validation
 * accuracy), whose scale differs. One <polyline> per curve, a legend, a
 * <title> per point for the exact value. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "svg.h"
#include "trace.h"
#include "train.h"

#define LEFT     90.0
#define TOP      56.0
#define RIGHT    180.0 /* the legend */
#define BOTTOM   48.0
#define PLOT_W   720.0
#define PLOT_H   300.0
#define MAX_DOTS 200 /* points marked with a circle (and a tooltip) up to this many epochs */

static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                     "#9467bd", "#8c564b", "#e377c2", "#17becf"};

/* The history columns of one panel. */
typedef struct plot_panel {
  const char *title;
  int cols[16];
  int n;
} plot_panel;

/* A round tick step (1, 2 or 5 times a power of ten) giving about `target`
 * ticks over `range` > 0: nice_step's rule for real numbers. */
static double tick_step(double range, int target) {
  double p = pow(10.0, floor(log10(range / target)));
  double want = range / target;
  return want <= p ? p : want <= 2 * p ? 2 * p : want <= 5 * p ? 5 * p : 10 * p;
}

static void panel_range(const train_report *r, const plot_panel *pn, double *lo, double *hi) {
  *lo = INFINITY;
  *hi = -INFINITY;
  for (int k = 0; k < pn->n; k++)
    for (int64_t i = 0; i < r->n_rows; i++) {
      double v = r->hist[i * r->n_cols + pn->cols[k]];
      if (!isfinite(v)) continue;
      if (v < *lo) *lo = v;
      if (v > *hi) *hi = v;
    }
  if (!(*lo <= *hi)) *lo = 0, *hi = 1; /* nothing finite */
  if (*hi - *lo < 1e-12 * (fabs(*hi) + 1)) {
    double pad = fabs(*hi) > 0 ? fabs(*hi) * 0.1 : 0.5;
    *lo -= pad;
    *hi += pad;
  }
}

static double x_of(const train_report *r, double epoch) {
  int64_t n = r->n_rows > 1 ? r->n_rows - 1 : 1;
  return LEFT + (epoch - 1) / (double)n * PLOT_W;
}

static void draw_frame(FILE *f, const train_report *r, const plot_panel *pn, double lo, double hi) {
  double y0 = TOP, y1 = TOP + PLOT_H;
  fprintf(f, "<path d=\"M%.2f %.2f H%.2f V%.2f H%.2f Z\" fill=\"none\" stroke=\"#444\"/>\n", LEFT,
          y0, LEFT + PLOT_W, y1, LEFT);
  fprintf(f, "<text x=\"8\" y=\"%.0f\" font-size=\"12\">", TOP - 20);
  xml_text(f, pn->title, 100);
  fputs("</text>\n", f);
  uint64_t estep = nice_step((uint64_t)r->n_rows, 12);
  for (uint64_t e = 1; e <= (uint64_t)r->n_rows; e += (e == 1 && estep > 1 ? estep - 1 : estep)) {
    double x = x_of(r, (double)e);
    fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#ddd\"/>\n", x, y0,
            x, y1);
    fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%" PRIu64 "</text>\n", x,
            y1 + 16, e);
  }
  fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">epoch</text>\n", LEFT + PLOT_W / 2,
          y1 + 34);
  double step = tick_step(hi - lo, 8);
  for (double v = ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
    double y = y1 - (v - lo) / (hi - lo) * PLOT_H;
    fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#eee\"/>\n", LEFT, y,
            LEFT + PLOT_W, y);
    fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\">%.4g</text>\n", LEFT - 7, y + 4,
            fabs(v) < step * 1e-9 ? 0.0 : v);
  }
}

/* One curve: a polyline through its finite points (a NaN epoch is left
 * out), a dot with a tooltip per point for short runs, a legend entry. */
static void draw_curve(FILE *f, const train_report *r, int col, int k, double lo, double hi) {
  const char *color = colors[k % (int)(sizeof colors / sizeof colors[0])];
  char name[512];
  train_report_col_name(r, col, name, sizeof name);
  fputs("<g>\n<title>", f);
  xml_text(f, name, 200);
  fprintf(f, "</title>\n<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\" points=\"",
          color);
  for (int64_t i = 0, n = 0; i < r->n_rows; i++) {
    double v = r->hist[i * r->n_cols + col];
    if (!isfinite(v)) continue;
    fprintf(f, "%s%.2f,%.2f", n++ ? " " : "", x_of(r, r->hist[i * r->n_cols + TR_COL_EPOCH]),
            TOP + PLOT_H - (v - lo) / (hi - lo) * PLOT_H);
  }
  fputs("\"/>\n", f);
  for (int64_t i = 0; r->n_rows <= MAX_DOTS && i < r->n_rows; i++) {
    double v = r->hist[i * r->n_cols + col], e = r->hist[i * r->n_cols + TR_COL_EPOCH];
    if (!isfinite(v)) continue;
    fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"2.5\" fill=\"%s\"><title>", x_of(r, e),
            TOP + PLOT_H - (v - lo) / (hi - lo) * PLOT_H, color);
    xml_text(f, name, 200);
    fprintf(f, " at epoch %.0f: %.6g</title></circle>\n", e, v);
  }
  double ly = TOP + 14 + 18.0 * k;
  fprintf(f,
          "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" "
          "stroke-width=\"2\"/>\n<text x=\"%.2f\" y=\"%.2f\">",
          LEFT + PLOT_W + 14, ly - 4, LEFT + PLOT_W + 36, ly - 4, color, LEFT + PLOT_W + 42, ly);
  xml_text(f, name, 20);
  fputs("</text>\n</g>\n", f);
}

static void draw_plot_panel(FILE *f, const train_report *r, const plot_panel *pn, double y0) {
  double lo, hi;
  panel_range(r, pn, &lo, &hi);
  fprintf(f, "<g transform=\"translate(0 %.0f)\">\n", y0);
  draw_frame(f, r, pn, lo, hi);
  for (int k = 0; k < pn->n; k++)
    draw_curve(f, r, pn->cols[k], k, lo, hi);
  fputs("</g>\n", f);
}

int train_plot_write(const train_report *r, const char *path, fg_status *st) {
  /* Losses in one panel; every other metric (evals, validation metrics
   * after the loss) in a second one. */
  plot_panel pn[2] = {{"loss", {TR_COL_LOSS}, 1}, {"metrics", {0}, 0}};
  int first_val = TR_COL_EVAL + r->n_evals;
  if (r->n_val_fetch > 0) pn[0].cols[pn[0].n++] = first_val;
  int max = (int)(sizeof pn[1].cols / sizeof pn[1].cols[0]);
  for (int c = TR_COL_EVAL; c < first_val + r->n_val_fetch && pn[1].n < max; c++)
    if (c != first_val) pn[1].cols[pn[1].n++] = c;
  int n_panels = pn[1].n > 0 ? 2 : 1;
  double panel_h = TOP + PLOT_H + BOTTOM, width = LEFT + PLOT_W + RIGHT;
  double height = 24 + panel_h * n_panels;
  out_file o;
  if (out_open(&o, path, st) != 0) return -1;
  FILE *f = o.f;
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "viewBox=\"0 0 %.0f %.0f\" font-family=\"monospace\" font-size=\"11\" "
          "style=\"background:#fff\">\n",
          width, height, width, height);
  fputs("<title>training of ", f);
  xml_text(f, r->a->model, 4096);
  fputs("</title>\n<text x=\"8\" y=\"16\" font-size=\"13\">training: ", f);
  xml_text(f, r->a->model, 100);
  fprintf(f, " (%" PRId64 " epoch%s, %" PRId64 " steps)</text>\n", r->n_rows,
          r->n_rows == 1 ? "" : "s",
          r->n_rows > 0 ? (int64_t)r->hist[(r->n_rows - 1) * r->n_cols + TR_COL_STEP] : 0);
  for (int k = 0; k < n_panels; k++)
    draw_plot_panel(f, r, &pn[k], 24 + panel_h * k);
  fputs("</svg>\n", f);
  return out_commit(&o, st);
}
