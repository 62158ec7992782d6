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
#include "flowgraph/io.h"
#include "trace.h"

/* ---- output files ----------------------------------------------------------- */

int out_open(out_file *o, const char *path, fg_status *st) {
  memset(o, 0, sizeof *o);
  o->path = path;
  if (fg_path_write_in_place(path)) {
    o->f = fopen(path, "wb");
    if (!o->f) {
      fg_status_set(st, FG_IO_ERROR, "cannot open %s for writing: %s", path, strerror(errno));
      return -1;
    }
    return 0;
  }
  o->target = fg_path_write_target(path);
  if (!o->target) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  int fd = fg_path_open_temp(o->target, &o->tmp);
  o->f = fd >= 0 ? fdopen(fd, "wb") : NULL;
  if (!o->f) {
    fg_status_set(st, FG_IO_ERROR, "cannot create a temporary file beside %s: %s", o->target,
                  strerror(errno));
    if (fd >= 0) {
      close(fd);
      unlink(o->tmp);
    }
    free(o->tmp);
    free(o->target);
    o->tmp = o->target = NULL;
    return -1;
  }
  return 0;
}

void out_remove(const char *path) {
  if (fg_path_write_in_place(path)) return;
  char *target = fg_path_write_target(path);
  remove(target ? target : path);
  free(target);
}

void out_abort(out_file *o) {
  if (o->f) fclose(o->f);
  if (o->tmp) {
    unlink(o->tmp);
    free(o->tmp);
  }
  free(o->target);
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
  if (o->tmp && rename(o->tmp, o->target) != 0) {
    fg_status_set(st, FG_IO_ERROR, "cannot rename into %s: %s", o->target, strerror(errno));
    out_abort(o);
    return -1;
  }
  free(o->tmp);
  free(o->target);
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
  /* Cross-process profiles (trace_use_ranks): one trace process per rank,
   * pid rank + 1, its tracks the rank's own lanes; each rank's highest
   * thread id and its devices (the partition's, kept for their names). */
  int n_ranks;
  int *rank_max_thread;
  const fg_partition *part;
  char *process_name;
  int started; /* an element was written: the next one needs a comma */
};

/* Starts the next element of traceEvents. */
static void next_event(trace_writer *t) {
  fputs(t->started ? ",\n" : "\n", t->out.f);
  t->started = 1;
}

void trace_use_devices(trace_writer *t, const fg_partition *p) {
  int nd = fg_partition_num_devices(p);
  if (nd <= 1 || nd > FG_MAX_CPU_DEVICES) return;
  t->n_devices = nd;
  for (int d = 0; d < nd; d++)
    fg_device_str(fg_partition_device(p, d), t->devices[d], sizeof t->devices[d]);
}

int trace_use_ranks(trace_writer *t, const fg_partition *p, fg_status *st) {
  int n = fg_partition_num_ranks(p);
  t->rank_max_thread = calloc((size_t)n + 1, sizeof *t->rank_max_thread);
  if (!t->rank_max_thread) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  t->n_ranks = n;
  t->part = p;
  return 0;
}

static void trace_free(trace_writer *t) {
  free(t->rank_max_thread);
  free(t->process_name);
  free(t);
}

trace_writer *trace_open(const char *path, const char *process_name, fg_status *st) {
  trace_writer *t = calloc(1, sizeof *t);
  if (!t || !(t->process_name = strdup(process_name))) {
    free(t);
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
    return NULL;
  }
  if (out_open(&t->out, path, st) != 0) {
    trace_free(t);
    return NULL;
  }
  /* The processes' and tracks' names follow the events (trace_finish),
   * when the ranks and threads seen are known. */
  fputs("{\"traceEvents\":[", t->out.f);
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

/* Writes one run's events of trace process `pid` from t->base_ns + shift;
 * returns the run's span from t->base_ns (shift plus its wall time, or its
 * last event's end if later). */
static int64_t write_run(trace_writer *t, const fg_run_metadata *md, int64_t run, int pid,
                         int *max_thread, int64_t shift) {
  FILE *f = t->out.f;
  int64_t span = md->run_ns > 0 ? md->run_ns : 0;
  if (md->threads - 1 > *max_thread) *max_thread = md->threads - 1;
  for (int i = 0; i < md->n_nodes; i++) {
    const fg_node_timing *n = &md->nodes[i];
    int64_t dur = n->end_ns - n->start_ns;
    if (dur < 0) dur = 0;
    if (n->end_ns > span) span = n->end_ns;
    if (n->thread > *max_thread) *max_thread = n->thread;
    char shape[256];
    int rank = n->rank < 0 ? 0 : n->rank > FG_MAX_RANK ? FG_MAX_RANK : n->rank;
    cli_shape_str(rank, n->dims, shape, sizeof shape);
    next_event(t);
    fputs("{\"name\":\"", f);
    json_write_escaped(f, n->name);
    fputs("\",\"cat\":\"op\",\"ph\":\"X\",\"ts\":", f);
    write_us(f, t->base_ns + shift + n->start_ns);
    fputs(",\"dur\":", f);
    write_us(f, dur);
    fprintf(f, ",\"pid\":%d,\"tid\":%d,\"args\":{\"op\":\"", pid, n->thread < 0 ? 0 : n->thread);
    json_write_escaped(f, n->op);
    fprintf(f, "\",\"shape\":\"%s\",\"dtype\":\"%s\",\"bytes\":%zu,\"run\":%" PRId64 "}}", shape,
            fg_dtype_name(n->dtype), n->output_bytes, run);
    t->n_events++;
  }
  /* The run itself, on the main track: it encloses that track's nodes,
   * and tells one run from the next. */
  next_event(t);
  fprintf(f, "{\"name\":\"run %" PRId64 "\",\"cat\":\"run\",\"ph\":\"X\",\"ts\":", run);
  write_us(f, t->base_ns + shift);
  fputs(",\"dur\":", f);
  write_us(f, span);
  fprintf(f, ",\"pid\":%d,\"tid\":0,\"args\":{\"run\":%" PRId64 "}}", pid, run);
  t->n_events++;
  return shift + span;
}

static int check_written(const trace_writer *t, fg_status *st) {
  if (!ferror(t->out.f)) return 0;
  fg_status_set(st, FG_IO_ERROR, "writing %s failed", t->out.path);
  return -1;
}

int trace_add_run(trace_writer *t, const fg_run_metadata *md, int64_t run, fg_status *st) {
  t->base_ns += write_run(t, md, run, 1, &t->max_thread, 0);
  return check_written(t, st);
}

int trace_add_rank_runs(trace_writer *t, const fg_run_metadata *const *mds, const int64_t *shift,
                        int64_t run, fg_status *st) {
  int64_t span = 0;
  for (int r = 0; r < t->n_ranks; r++) {
    if (!mds[r]) continue;
    int64_t s = write_run(t, mds[r], run, r + 1, &t->rank_max_thread[r], shift ? shift[r] : 0);
    if (s > span) span = s;
  }
  t->base_ns += span;
  return check_written(t, st);
}

/* Track names of rank r's lanes (executor/dist/exec.h: compute, collectives and
 * sends per local device, in device order), then its process's name. */
static void write_rank_names(trace_writer *t, int r) {
  FILE *f = t->out.f;
  char devs[FG_MAX_CPU_DEVICES][48];
  int n_local = 0;
  for (int d = 0; d < fg_partition_num_devices(t->part) && n_local < FG_MAX_CPU_DEVICES; d++)
    if (fg_partition_device(t->part, d).rank == r)
      fg_device_str(fg_partition_device(t->part, d), devs[n_local++], sizeof devs[0]);
  static const char *const kinds[3] = {"", " collectives", " sends"};
  next_event(t);
  fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"",
          r + 1);
  json_write_escaped(f, t->process_name);
  fprintf(f, " rank %d\"}}", r);
  for (int k = 0; k <= t->rank_max_thread[r]; k++) {
    next_event(t);
    fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":", r + 1, k);
    if (n_local > 0 && k < 3 * n_local)
      fprintf(f, "{\"name\":\"%s%s\"}}", devs[k % n_local], kinds[k / n_local]);
    else
      fprintf(f, "{\"name\":\"worker %d\"}}", k);
  }
}

int trace_finish(trace_writer *t, fg_status *st) {
  FILE *f = t->out.f;
  for (int r = 0; r < t->n_ranks; r++)
    write_rank_names(t, r);
  if (t->n_ranks == 0) {
    next_event(t);
    fputs("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"", f);
    json_write_escaped(f, t->process_name);
    fputs("\"}}", f);
  }
  for (int k = 0; t->n_ranks == 0 && k <= t->max_thread; k++) {
    next_event(t);
    fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":", k);
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
  trace_free(t);
  return rc;
}

void trace_abort(trace_writer *t) {
  if (!t) return;
  out_abort(&t->out);
  trace_free(t);
}
