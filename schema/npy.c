/* .npy reading and writing (NumPy format 1.0, 2.0 and 3.0).
 *
 * Files are untrusted: the header is parsed by a small Python-literal parser
 * that accepts exactly the dict NumPy writes (in any key order, with any
 * spacing and an optional trailing comma), every size is computed with
 * overflow checks, and the file's length must equal header + data exactly
 * before anything is allocated. Only the public tensor API is used.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flowgraph/tensor.h"
#include "graph/file_path.h"

static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* A legitimate header (three keys, rank <= 8) is well under 1 KiB; the cap
 * keeps a hostile header length from driving a large allocation. */
#define NPY_MAX_HEADER (1u << 20)
#define NPY_PREFIX_MAX 12

typedef struct npy_info {
  fg_dtype dtype;
  int rank;
  int64_t dims[FG_MAX_RANK];
  size_t data_bytes;
} npy_info;

typedef struct npy_parser {
  const char *p, *end, *start;
  const char *file; /* for messages */
  fg_status *status;
} npy_parser;

static int host_is_little_endian(void) {
  const uint16_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

/* .npy data is little-endian; a big-endian host swaps in place. */
static void swap_to_host(void *data, size_t count, size_t elem) {
  if (elem < 2 || host_is_little_endian()) return;
  unsigned char *b = data;
  for (size_t i = 0; i < count; i++, b += elem)
    for (size_t j = 0; j < elem / 2; j++) {
      unsigned char t = b[j];
      b[j] = b[elem - 1 - j];
      b[elem - 1 - j] = t;
    }
}

/* ---- header dict parsing ------------------------------------------------ */

static void skip_ws(npy_parser *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
    ps->p++;
}

static int expect_char(npy_parser *ps, char c, const char *what) {
  skip_ws(ps);
  if (ps->p >= ps->end || *ps->p != c) {
    fg_status_set(ps->status, FG_FORMAT_ERROR,
                  "%s: malformed header dict: expected '%c' %s at header offset %ld", ps->file, c,
                  what, (long)(ps->p - ps->start));
    return -1;
  }
  ps->p++;
  return 0;
}

/* A quoted Python string without escapes (NumPy never writes any in the
 * keys or simple descrs); copies at most cap-1 characters. */
static int parse_string(npy_parser *ps, char *out, size_t cap, const char *what) {
  skip_ws(ps);
  if (ps->p >= ps->end || (*ps->p != '\'' && *ps->p != '"')) {
    fg_status_set(ps->status, FG_FORMAT_ERROR, "%s: malformed header dict: expected a quoted %s",
                  ps->file, what);
    return -1;
  }
  char q = *ps->p++;
  size_t n = 0;
  while (ps->p < ps->end && *ps->p != q) {
    if (*ps->p == '\\' || (unsigned char)*ps->p < 0x20) {
      fg_status_set(ps->status, FG_FORMAT_ERROR,
                    "%s: malformed header dict: unexpected character in %s", ps->file, what);
      return -1;
    }
    if (n + 1 >= cap) {
      fg_status_set(ps->status, FG_FORMAT_ERROR, "%s: header %s is too long", ps->file, what);
      return -1;
    }
    out[n++] = *ps->p++;
  }
  if (ps->p >= ps->end) {
    fg_status_set(ps->status, FG_FORMAT_ERROR, "%s: malformed header dict: unterminated %s",
                  ps->file, what);
    return -1;
  }
  ps->p++;
  out[n] = '\0';
  return 0;
}

static int parse_bool(npy_parser *ps, int *out) {
  skip_ws(ps);
  size_t left = (size_t)(ps->end - ps->p);
  if (left >= 4 && memcmp(ps->p, "True", 4) == 0) {
    ps->p += 4;
    *out = 1;
    return 0;
  }
  if (left >= 5 && memcmp(ps->p, "False", 5) == 0) {
    ps->p += 5;
    *out = 0;
    return 0;
  }
  fg_status_set(ps->status, FG_FORMAT_ERROR,
                "%s: malformed header dict: 'fortran_order' must be True or False", ps->file);
  return -1;
}

/* "(2, 3)", "(3,)", "()"; every entry a non-negative integer. */
static int parse_shape(npy_parser *ps, npy_info *info) {
  if (expect_char(ps, '(', "to open 'shape'") != 0) return -1;
  int rank = 0;
  for (;;) {
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ')') {
      ps->p++;
      break;
    }
    if (ps->p < ps->end && *ps->p == '-') {
      fg_status_set(ps->status, FG_FORMAT_ERROR, "%s: shape dimension %d is negative", ps->file,
                    rank);
      return -1;
    }
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') {
      fg_status_set(ps->status, FG_FORMAT_ERROR,
                    "%s: malformed header dict: 'shape' must be a tuple of integers", ps->file);
      return -1;
    }
    int64_t v = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
      int64_t d = *ps->p - '0';
      if (v > (INT64_MAX - d) / 10) {
        fg_status_set(ps->status, FG_FORMAT_ERROR, "%s: shape dimension %d does not fit in 64 bits",
                      ps->file, rank);
        return -1;
      }
      v = v * 10 + d;
      ps->p++;
    }
    /* Python 2 era files may carry a long suffix. */
    if (ps->p < ps->end && *ps->p == 'L') ps->p++;
    if (rank >= FG_MAX_RANK) {
      fg_status_set(ps->status, FG_FORMAT_ERROR,
                    "%s: shape has more than %d dimensions (flowgraph's maximum rank)", ps->file,
                    FG_MAX_RANK);
      return -1;
    }
    info->dims[rank++] = v;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ',') {
      ps->p++;
      continue;
    }
    if (ps->p < ps->end && *ps->p == ')') {
      /* A one-element tuple needs its comma in Python: "(3)" is an int. */
      if (rank == 1) {
        fg_status_set(ps->status, FG_FORMAT_ERROR,
                      "%s: malformed header dict: 'shape' (%" PRId64 ") is not a tuple", ps->file,
                      info->dims[0]);
        return -1;
      }
      ps->p++;
      break;
    }
    fg_status_set(ps->status, FG_FORMAT_ERROR,
                  "%s: malformed header dict: expected ',' or ')' in 'shape'", ps->file);
    return -1;
  }
  info->rank = rank;
  return 0;
}

static int descr_to_dtype(const char *file, const char *d, fg_dtype *out, fg_status *status) {
  static const struct {
    const char *descr;
    fg_dtype dtype;
  } ok[] = {{"<f4", FG_F32},  {"<f8", FG_F64},  {"<i4", FG_I32}, {"<i8", FG_I64},
            {"|b1", FG_BOOL}, {"<b1", FG_BOOL}, {">b1", FG_BOOL}}; /* one byte: order moot */
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
    if (strcmp(d, ok[i].descr) == 0) {
      *out = ok[i].dtype;
      return 0;
    }
  if (d[0] == '>' && d[1] != '\0' && strcmp(d + 1, "u1") != 0 && strcmp(d + 1, "i1") != 0) {
    fg_status_set(status, FG_FORMAT_ERROR,
                  "%s: dtype '%s' is big-endian; flowgraph reads little-endian .npy only", file, d);
    return -1;
  }
  if (strchr(d, 'O')) {
    fg_status_set(status, FG_FORMAT_ERROR,
                  "%s: dtype '%s' is an object dtype; flowgraph reads numeric .npy only", file, d);
    return -1;
  }
  fg_status_set(status, FG_FORMAT_ERROR,
                "%s: unsupported dtype '%s' (flowgraph reads <f4 <f8 <i4 <i8 |b1)", file, d);
  return -1;
}

/* Parses the header dict text [text, text+len). */
static int parse_dict(const char *file, const char *text, size_t len, npy_info *info,
                      fg_status *status) {
  npy_parser ps = {text, text + len, text, file, status};
  int have_descr = 0, have_fortran = 0, have_shape = 0, fortran = 0;
  char descr[64];
  if (expect_char(&ps, '{', "to open the header dict") != 0) return -1;
  for (;;) {
    skip_ws(&ps);
    if (ps.p < ps.end && *ps.p == '}') {
      ps.p++;
      break;
    }
    if (ps.p < ps.end && (*ps.p == '[' || *ps.p == '(')) {
      fg_status_set(status, FG_FORMAT_ERROR, "%s: malformed header dict: expected a key", file);
      return -1;
    }
    char key[32];
    if (parse_string(&ps, key, sizeof key, "key") != 0) return -1;
    if (expect_char(&ps, ':', "after a key") != 0) return -1;
    if (strcmp(key, "descr") == 0) {
      if (have_descr++) goto duplicate;
      skip_ws(&ps);
      if (ps.p < ps.end && *ps.p == '[') {
        fg_status_set(status, FG_FORMAT_ERROR,
                      "%s: structured dtype (a list 'descr') is not supported; flowgraph reads "
                      "<f4 <f8 <i4 <i8 |b1",
                      file);
        return -1;
      }
      if (parse_string(&ps, descr, sizeof descr, "'descr'") != 0) return -1;
    } else if (strcmp(key, "fortran_order") == 0) {
      if (have_fortran++) goto duplicate;
      if (parse_bool(&ps, &fortran) != 0) return -1;
    } else if (strcmp(key, "shape") == 0) {
      if (have_shape++) goto duplicate;
      if (parse_shape(&ps, info) != 0) return -1;
    } else {
      fg_status_set(status, FG_FORMAT_ERROR,
                    "%s: header dict has unexpected key '%s' (expected descr, fortran_order, "
                    "shape)",
                    file, key);
      return -1;
    }
    skip_ws(&ps);
    if (ps.p < ps.end && *ps.p == ',') {
      ps.p++;
      continue;
    }
    if (ps.p < ps.end && *ps.p == '}') continue;
    fg_status_set(status, FG_FORMAT_ERROR,
                  "%s: malformed header dict: expected ',' or '}' after '%s'", file, key);
    return -1;
  }
  skip_ws(&ps);
  if (ps.p != ps.end) {
    fg_status_set(status, FG_FORMAT_ERROR,
                  "%s: malformed header: unexpected bytes after the header dict", file);
    return -1;
  }
  if (!have_descr || !have_fortran || !have_shape) {
    fg_status_set(status, FG_FORMAT_ERROR, "%s: header dict lacks the key '%s'", file,
                  !have_descr     ? "descr"
                  : !have_fortran ? "fortran_order"
                                  : "shape");
    return -1;
  }
  if (descr_to_dtype(file, descr, &info->dtype, status) != 0) return -1;
  if (fortran) {
    fg_status_set(status, FG_FORMAT_ERROR,
                  "%s: fortran_order is True; flowgraph reads C-order .npy only", file);
    return -1;
  }
  uint64_t count = 1;
  for (int i = 0; i < info->rank; i++) {
    uint64_t d = (uint64_t)info->dims[i];
    if (d != 0 && count > UINT64_MAX / d) goto overflow;
    count *= d;
  }
  uint64_t esize = fg_dtype_size(info->dtype);
  if (count > UINT64_MAX / esize || count * esize > (uint64_t)SIZE_MAX ||
      count * esize > (uint64_t)INT64_MAX)
    goto overflow;
  info->data_bytes = (size_t)(count * esize);
  return 0;
duplicate:
  fg_status_set(status, FG_FORMAT_ERROR, "%s: header dict has a duplicate key", file);
  return -1;
overflow:
  fg_status_set(status, FG_FORMAT_ERROR,
                "%s: shape's byte size overflows 64 bits; refusing to allocate", file);
  return -1;
}

/* Reads the fixed prefix: returns the prefix length (10 or 12) and the
 * header length, or -1. `avail` bytes are at `b`. */
static int parse_prefix(const char *file, const unsigned char *b, size_t avail, size_t *header_len,
                        fg_status *status) {
  if (avail == 0) {
    fg_status_set(status, FG_FORMAT_ERROR, "%s: empty file, not a .npy file", file);
    return -1;
  }
  if (avail < 8 && memcmp(b, npy_magic, avail < 6 ? avail : 6) == 0) {
    fg_status_set(status, FG_FORMAT_ERROR, "%s: truncated header (file is only %zu bytes)", file,
                  avail);
    return -1;
  }
  if (avail < 8 || memcmp(b, npy_magic, 6) != 0) {
    fg_status_set(status, FG_FORMAT_ERROR, "%s: not a .npy file (bad magic; expected \\x93NUMPY)",
                  file);
    return -1;
  }
  unsigned major = b[6], minor = b[7];
  int prefix;
  if (major == 1)
    prefix = 10;
  else if (major == 2 || major == 3)
    prefix = 12;
  else {
    fg_status_set(status, FG_FORMAT_ERROR,
                  "%s: .npy format version %u.%u is not supported (1.0, 2.0, 3.0 are)", file, major,
                  minor);
    return -1;
  }
  if (minor != 0) {
    fg_status_set(status, FG_FORMAT_ERROR,
                  "%s: .npy format version %u.%u is not supported (1.0, 2.0, 3.0 are)", file, major,
                  minor);
    return -1;
  }
  if (avail < (size_t)prefix) {
    fg_status_set(status, FG_FORMAT_ERROR, "%s: truncated header (file ends at byte %zu)", file,
                  avail);
    return -1;
  }
  uint32_t hl = (uint32_t)b[8] | (uint32_t)b[9] << 8;
  if (prefix == 12) hl |= (uint32_t)b[10] << 16 | (uint32_t)b[11] << 24;
  if (hl > NPY_MAX_HEADER) {
    fg_status_set(status, FG_FORMAT_ERROR,
                  "%s: header length %" PRIu32 " exceeds the %u-byte limit", file, hl,
                  NPY_MAX_HEADER);
    return -1;
  }
  *header_len = hl;
  return prefix;
}

/* Bool bytes must be 0 or 1: kernels rely on it. */
static int check_bools(const char *file, const fg_tensor *t, fg_status *status) {
  if (fg_tensor_dtype(t) != FG_BOOL) return 0;
  const unsigned char *b = fg_tensor_data(t);
  size_t n = fg_tensor_num_bytes(t);
  for (size_t i = 0; i < n; i++)
    if (b[i] > 1) {
      fg_status_set(status, FG_FORMAT_ERROR,
                    "%s: bool element %zu has byte value %u (must be 0 or 1)", file, i, b[i]);
      return -1;
    }
  return 0;
}

static int check_sizes(const char *file, const npy_info *info, size_t have, fg_status *status) {
  if (have < info->data_bytes) {
    fg_status_set(status, FG_FORMAT_ERROR,
                  "%s: truncated data: shape needs %zu bytes, file has %zu", file, info->data_bytes,
                  have);
    return -1;
  }
  if (have > info->data_bytes) {
    fg_status_set(status, FG_FORMAT_ERROR,
                  "%s: %zu trailing bytes after the data (shape needs %zu bytes, file has %zu)",
                  file, have - info->data_bytes, info->data_bytes, have);
    return -1;
  }
  return 0;
}

static fg_tensor *npy_from_buffer(const char *name, const unsigned char *b, size_t size,
                                  fg_status *status) {
  size_t hl;
  int prefix = parse_prefix(name, b, size, &hl, status);
  if (prefix < 0) return NULL;
  if (size - (size_t)prefix < hl) {
    fg_status_set(status, FG_FORMAT_ERROR,
                  "%s: truncated header: header length is %zu bytes, only %zu present", name, hl,
                  size - (size_t)prefix);
    return NULL;
  }
  npy_info info;
  memset(&info, 0, sizeof info);
  if (parse_dict(name, (const char *)b + prefix, hl, &info, status) != 0) return NULL;
  size_t off = (size_t)prefix + hl;
  if (check_sizes(name, &info, size - off, status) != 0) return NULL;
  fg_tensor *t =
      fg_tensor_from_data(info.dtype, info.rank, info.dims, b + off, info.data_bytes, status);
  if (!t) return NULL;
  swap_to_host(fg_tensor_data(t), info.data_bytes / fg_dtype_size(info.dtype),
               fg_dtype_size(info.dtype));
  if (check_bools(name, t, status) != 0) {
    fg_tensor_free(t);
    return NULL;
  }
  fg_status_clear(status);
  return t;
}

fg_tensor *fg_npy_read_memory(const void *data, size_t size, fg_status *status) {
  if (!data && size) {
    fg_status_set(status, FG_INVALID_ARGUMENT, "fg_npy_read_memory: data is NULL");
    return NULL;
  }
  static const unsigned char empty[1] = {0};
  return npy_from_buffer("<memory>", data ? data : empty, size, status);
}

/* Reads exactly n bytes; -1 on error or early EOF (errno kept for errors). */
static int read_full(int fd, void *buf, size_t n, size_t *got) {
  unsigned char *p = buf;
  *got = 0;
  while (*got < n) {
    size_t chunk = n - *got > (1u << 30) ? (1u << 30) : n - *got;
    ssize_t r = read(fd, p + *got, chunk);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) return 0;
    *got += (size_t)r;
  }
  return 0;
}

fg_tensor *fg_npy_read(const char *path, fg_status *status) {
  if (!path) {
    fg_status_set(status, FG_INVALID_ARGUMENT, "fg_npy_read: path is NULL");
    return NULL;
  }
  int fd = open(path, O_RDONLY);
  if (fd < 0) {
    int e = errno;
    fg_status_set(status, e == ENOENT ? FG_NOT_FOUND : FG_IO_ERROR, "%s: cannot open: %s", path,
                  strerror(e));
    return NULL;
  }
  fg_tensor *t = NULL;
  char *header = NULL;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    fg_status_set(status, FG_IO_ERROR, "%s: cannot stat: %s", path, strerror(errno));
    goto done;
  }
  if (S_ISDIR(st.st_mode)) {
    fg_status_set(status, FG_IO_ERROR, "%s: is a directory, not a .npy file", path);
    goto done;
  }
  if (!S_ISREG(st.st_mode)) {
    fg_status_set(status, FG_IO_ERROR, "%s: not a regular file", path);
    goto done;
  }
  size_t fsize = (size_t)st.st_size;
  unsigned char pre[NPY_PREFIX_MAX];
  size_t got;
  if (read_full(fd, pre, fsize < sizeof pre ? fsize : sizeof pre, &got) != 0) {
    fg_status_set(status, FG_IO_ERROR, "%s: read failed: %s", path, strerror(errno));
    goto done;
  }
  size_t hl;
  int prefix = parse_prefix(path, pre, got, &hl, status);
  if (prefix < 0) goto done;
  if (fsize - (size_t)prefix < hl) {
    fg_status_set(status, FG_FORMAT_ERROR,
                  "%s: truncated header: header length is %zu bytes, only %zu present", path, hl,
                  fsize - (size_t)prefix);
    goto done;
  }
  /* The prefix read may have consumed bytes past it (a v1 prefix is 10). */
  header = malloc(hl + 1);
  if (!header) {
    fg_status_set(status, FG_RESOURCE_EXHAUSTED, "%s: out of memory for the header", path);
    goto done;
  }
  if (lseek(fd, prefix, SEEK_SET) < 0 || read_full(fd, header, hl, &got) != 0 || got != hl) {
    fg_status_set(status, FG_IO_ERROR, "%s: read failed while reading the header", path);
    goto done;
  }
  npy_info info;
  memset(&info, 0, sizeof info);
  if (parse_dict(path, header, hl, &info, status) != 0) goto done;
  size_t off = (size_t)prefix + hl;
  if (check_sizes(path, &info, fsize - off, status) != 0) goto done;
  t = fg_tensor_new(info.dtype, info.rank, info.dims, status);
  if (!t) goto done;
  if (info.data_bytes &&
      (read_full(fd, fg_tensor_data(t), info.data_bytes, &got) != 0 || got != info.data_bytes)) {
    fg_status_set(status, FG_IO_ERROR, "%s: read failed or file changed while reading data", path);
    fg_tensor_free(t);
    t = NULL;
    goto done;
  }
  swap_to_host(fg_tensor_data(t), info.data_bytes / fg_dtype_size(info.dtype),
               fg_dtype_size(info.dtype));
  if (check_bools(path, t, status) != 0) {
    fg_tensor_free(t);
    t = NULL;
    goto done;
  }
  fg_status_clear(status);
done:
  free(header);
  close(fd);
  return t;
}

/* ---- writing ------------------------------------------------------------ */

static const char *dtype_descr(fg_dtype d) {
  switch (d) {
  case FG_F32: return "<f4";
  case FG_F64: return "<f8";
  case FG_I32: return "<i4";
  case FG_I64: return "<i8";
  case FG_BOOL: return "|b1";
  default: return NULL;
  }
}

/* Builds prefix + dict + padding + '\n' so that data starts on a 64-byte
 * boundary, as NumPy does. Returns a malloc'ed buffer or NULL. */
static unsigned char *build_header(const fg_tensor *t, size_t *out_len) {
  char dict[512];
  int rank = fg_tensor_rank(t);
  const int64_t *dims = fg_tensor_dims(t);
  int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                   dtype_descr(fg_tensor_dtype(t)));
  for (int i = 0; i < rank; i++)
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%s%" PRId64, i ? ", " : "", dims[i]);
  n += snprintf(dict + n, sizeof dict - (size_t)n, "%s), }", rank == 1 ? "," : "");
  size_t dlen = (size_t)n;
  size_t prefix = 10;
  size_t total = (prefix + dlen + 1 + 63) / 64 * 64;
  if (total - prefix > 65535) {
    prefix = 12;
    total = (prefix + dlen + 1 + 63) / 64 * 64;
  }
  unsigned char *h = malloc(total);
  if (!h) return NULL;
  size_t hl = total - prefix;
  memcpy(h, npy_magic, 6);
  h[6] = prefix == 10 ? 1 : 2;
  h[7] = 0;
  h[8] = (unsigned char)(hl & 0xff);
  h[9] = (unsigned char)(hl >> 8 & 0xff);
  if (prefix == 12) {
    h[10] = (unsigned char)(hl >> 16 & 0xff);
    h[11] = (unsigned char)(hl >> 24 & 0xff);
  }
  memcpy(h + prefix, dict, dlen);
  memset(h + prefix + dlen, ' ', total - prefix - dlen - 1);
  h[total - 1] = '\n';
  *out_len = total;
  return h;
}

static int write_full(int fd, const void *buf, size_t n) {
  const unsigned char *p = buf;
  while (n) {
    size_t chunk = n > (1u << 30) ? (1u << 30) : n;
    ssize_t w = write(fd, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

int fg_npy_write(const char *path, const fg_tensor *t, fg_status *status) {
  if (!path || !t) {
    fg_status_set(status, FG_INVALID_ARGUMENT, "fg_npy_write: %s is NULL",
                  !path ? "path" : "tensor");
    return -1;
  }
  fg_dtype dtype = fg_tensor_dtype(t);
  if (!dtype_descr(dtype)) {
    fg_status_set(status, FG_INVALID_ARGUMENT, "%s: cannot write dtype %s", path,
                  fg_dtype_name(dtype));
    return -1;
  }
  size_t hlen;
  unsigned char *header = build_header(t, &hlen);
  if (!header) {
    fg_status_set(status, FG_RESOURCE_EXHAUSTED, "%s: out of memory", path);
    return -1;
  }
  size_t bytes = fg_tensor_num_bytes(t);
  size_t esize = fg_dtype_size(dtype);
  const void *data = fg_tensor_data(t);
  void *swapped = NULL;
  if (!host_is_little_endian() && esize > 1 && bytes) {
    swapped = malloc(bytes);
    if (!swapped) {
      free(header);
      fg_status_set(status, FG_RESOURCE_EXHAUSTED, "%s: out of memory", path);
      return -1;
    }
    memcpy(swapped, data, bytes);
    swap_to_host(swapped, bytes / esize, esize);
    data = swapped;
  }
  char *tmp = NULL, *target = NULL;
  int rc = -1;
  /* A device or FIFO is written in place, not replaced; a link's file is
   * renamed over where it lies (graph/file_path.h). */
  const int in_place = fg_path_write_in_place(path);
  if (!in_place && !(target = fg_path_write_target(path))) {
    fg_status_set(status, FG_RESOURCE_EXHAUSTED, "%s: out of memory", path);
    goto out;
  }
  int fd = in_place ? open(path, O_WRONLY | O_TRUNC) : fg_path_open_temp(target, &tmp);
  if (fd < 0) {
    if (in_place)
      fg_status_set(status, FG_IO_ERROR, "%s: cannot open it for writing: %s", path,
                    strerror(errno));
    else
      fg_status_set(status, FG_IO_ERROR, "%s: cannot create a temporary file beside it: %s", path,
                    strerror(errno));
    goto out;
  }
  int werr = 0;
  if (write_full(fd, header, hlen) != 0 || (bytes && write_full(fd, data, bytes) != 0))
    werr = errno;
  if (close(fd) != 0 && !werr) werr = errno;
  if (werr) {
    fg_status_set(status, FG_IO_ERROR, "%s: write failed: %s", path, strerror(werr));
    if (tmp) unlink(tmp);
    goto out;
  }
  if (tmp && rename(tmp, target) != 0) {
    fg_status_set(status, FG_IO_ERROR, "%s: cannot rename the temporary file into place: %s", path,
                  strerror(errno));
    unlink(tmp);
    goto out;
  }
  fg_status_clear(status);
  rc = 0;
out:
  free(tmp);
  free(target);
  free(header);
  free(swapped);
  return rc;
}
