/* The Chrome-trace writer of `flowgraph profile` and the output-file
 * helpers (temporary name, then rename) shared with svg.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "trace.h"

/* ---- output files ----------------------------------------------------------- */

int out_check_writable(const char *path, const char *what, fg_status *st) {
  struct stat sb;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    fg_status_set(st, FG_IO_ERROR, "%s %s: is a directory", what, path);
    return -1;
  }
  const char *slash = strrchr(path, '/');
  char dir[4096];
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == path)
    snprintf(dir, sizeof dir, "/");
  else
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    fg_status_set(st, FG_IO_ERROR, "%s %s: directory %s does not exist", what, path, dir);
    return -1;
  }
  if (access(dir, W_OK | X_OK) != 0) {
    fg_status_set(st, FG_IO_ERROR, "%s %s: cannot write in %s: %s", what, path, dir,
                  strerror(errno));
    return -1;
  }
  return 0;
}

int out_open(out_file *o, const char *path, fg_status *st) {
  memset(o, 0, sizeof *o);
  o->path = path;
  size_t len = strlen(path) + 48;
  o->tmp = malloc(len);
  if (!o->tmp) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  snprintf(o->tmp, len, "%s.part.%ld", path, (long)getpid());
  o->f = fopen(o->tmp, "wb");
  if (!o->f) {
    fg_status_set(st, FG_IO_ERROR, "cannot create %s: %s", o->tmp, strerror(errno));
    free(o->tmp);
    o->tmp = NULL;
    return -1;
  }
  return 0;
}

void out_abort(out_file *o) {
  if (o->f) fclose(o->f);
  if (o->tmp) {
    unlink(o->tmp);
    free(o->tmp);
  }
  memset(o, 0, sizeof *o);
}

int out_commit(out_file *o, fg_status *st) {
  int failed = ferror(o->f) != 0;
  int err = errno;
  if (fclose(o->f) != 0 && !failed) {
    failed = 1;
    err = errno;
  }
  o->f = NULL;
  if (failed) {
    fg_status_set(st, FG_IO_ERROR, "writing %s failed: %s", o->path, strerror(err));
    out_abort(o);
    return -1;
  }
  if (rename(o->tmp, o->path) != 0) {
    fg_status_set(st, FG_IO_ERROR, "cannot rename into %s: %s", o->path, strerror(errno));
    out_abort(o);
    return -1;
  }
  free(o->tmp);
  memset(o, 0, sizeof *o);
  return 0;
}

/* ---- JSON --------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at `p`, or 0 (overlongs, surrogates and
 * code points above U+10FFFF count as invalid, as JSON parsers demand). */
static int utf8_len(const unsigned char *p) {
  unsigned c = p[0];
  if (c < 0x80) return 1;
  int n;
  unsigned min, cp;
  if ((c & 0xE0) == 0xC0) {
    n = 2, min = 0x80, cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, min = 0x800, cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, min = 0x10000, cp = c & 0x07;
  } else {
    return 0;
  }
  for (int i = 1; i < n; i++) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

void json_write_escaped(FILE *f, const char *s) {
  const unsigned char *p = (const unsigned char *)(s ? s : "");
  while (*p) {
    unsigned c = *p;
    if (c == '"' || c == '\\') {
      fputc('\\', f);
      fputc((int)c, f);
      p++;
    } else if (c < 0x20) {
      fprintf(f, "\\u%04x", c);
      p++;
    } else {
      int n = utf8_len(p);
      if (n == 0) {
        fputs("\\ufffd", f);
        p++;
      } else {
        fwrite(p, 1, (size_t)n, f);
        p += n;
      }
    }
  }
}

/* ---- the trace ---------------------------------------------------------------- */

struct trace_writer {
  out_file out;
  int64_t n_events;
  int64_t base_ns; /* where the next run starts on the time axis */
  int max_thread;  /* highest thread id seen or offered */
  int n_devices;   /* > 1: tracks are lanes of these devices */
  char devices[FG_MAX_CPU_DEVICES][48];
};

void trace_use_devices(trace_writer *t, const fg_partition *p) {
  int nd = fg_partition_num_devices(p);
  if (nd <= 1 || nd > FG_MAX_CPU_DEVICES) return;
  t->n_devices = nd;
  for (int d = 0; d < nd; d++)
    fg_device_str(fg_partition_device(p, d), t->devices[d], sizeof t->devices[d]);
}

trace_writer *trace_open(const char *path, const char *process_name, fg_status *st) {
  trace_writer *t = calloc(1, sizeof *t);
  if (!t) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
    return NULL;
  }
  if (out_open(&t->out, path, st) != 0) {
    free(t);
    return NULL;
  }
  fputs("{\"traceEvents\":[\n", t->out.f);
  fputs("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"",
        t->out.f);
  json_write_escaped(t->out.f, process_name);
  fputs("\"}}", t->out.f);
  return t;
}

/* Microseconds with nanosecond resolution, as the format's "ts" wants. */
static void write_us(FILE *f, int64_t ns) {
  if (ns < 0) {
    fputc('-', f);
    ns = -ns;
  }
  fprintf(f, "%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000);
}

int trace_add_run(trace_writer *t, const fg_run_metadata *md, int64_t run, fg_status *st) {
  FILE *f = t->out.f;
  int64_t span = md->run_ns > 0 ? md->run_ns : 0;
  if (md->threads - 1 > t->max_thread) t->max_thread = md->threads - 1;
  for (int i = 0; i < md->n_nodes; i++) {
    const fg_node_timing *n = &md->nodes[i];
    int64_t dur = n->end_ns - n->start_ns;
    if (dur < 0) dur = 0;
    if (n->end_ns > span) span = n->end_ns;
    if (n->thread > t->max_thread) t->max_thread = n->thread;
    char shape[256];
    int rank = n->rank < 0 ? 0 : n->rank > FG_MAX_RANK ? FG_MAX_RANK : n->rank;
    cli_shape_str(rank, n->dims, shape, sizeof shape);
    fputs(",\n{\"name\":\"", f);
    json_write_escaped(f, n->name);
    fputs("\",\"cat\":\"op\",\"ph\":\"X\",\"ts\":", f);
    write_us(f, t->base_ns + n->start_ns);
    fputs(",\"dur\":", f);
    write_us(f, dur);
    fprintf(f, ",\"pid\":1,\"tid\":%d,\"args\":{\"op\":\"", n->thread < 0 ? 0 : n->thread);
    json_write_escaped(f, n->op);
    fprintf(f, "\",\"shape\":\"%s\",\"dtype\":\"%s\",\"bytes\":%zu,\"run\":%" PRId64 "}}", shape,
            fg_dtype_name(n->dtype), n->output_bytes, run);
    t->n_events++;
  }
  t->base_ns += span;
  if (ferror(f)) {
    fg_status_set(st, FG_IO_ERROR, "writing %s failed", t->out.path);
    return -1;
  }
  return 0;
}

int trace_finish(trace_writer *t, fg_status *st) {
  FILE *f = t->out.f;
  for (int k = 0; k <= t->max_thread; k++) {
    fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":", k);
    if (t->n_devices > 1 && k < 2 * t->n_devices)
      fprintf(f, "{\"name\":\"%s%s\"}}", t->devices[k % t->n_devices],
              k >= t->n_devices ? " collectives" : "");
    else if (k == 0)
      fputs("{\"name\":\"main\"}}", f);
    else
      fprintf(f, "{\"name\":\"worker %d\"}}", k);
  }
  fputs("\n],\"displayTimeUnit\":\"ms\"}\n", f);
  int rc = out_commit(&t->out, st);
  free(t);
  return rc;
}

void trace_abort(trace_writer *t) {
  if (!t) return;
  out_abort(&t->out);
  free(t);
}
