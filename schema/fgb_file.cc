/* Whole-file reads with a size cap, atomic writes, and the small helpers the
 * loader and saver share. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <new>

#include "graph/file_path.h"
#include "schema/fgb_common.h"
#include "schema/file_write.h"
/* After fgb_common.h, which makes FlatBuffers' asserts throw. */
#include "flatbuffers/util.h"

namespace fgb {

/* Bytes from 0x80 pass through when the whole string is UTF-8 (names may
 * be "café"), and are escaped otherwise, so a message is always valid text. */
std::string esc(const char *s, size_t n, size_t max) {
  const char *p = s, *end = s + n;
  bool utf8 = true;
  while (utf8 && p < end) {
    if ((unsigned char)*p < 0x80) {
      p++;
      continue;
    }
    /* FromUTF8 may look one byte past a truncated sequence: stop short. */
    size_t need = ((unsigned char)*p >= 0xF0) ? 4 : ((unsigned char)*p >= 0xE0) ? 3 : 2;
    utf8 = (size_t)(end - p) >= need && flatbuffers::FromUTF8(&p) >= 0;
  }
  std::string out;
  size_t i = 0;
  for (; i < n && i < max; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\' || (c >= 0x80 && !utf8)) {
      char buf[8];
      snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += (char)c;
    }
  }
  /* Do not cut a UTF-8 sequence in half. */
  if (i < n && utf8)
    for (; i < n && ((unsigned char)s[i] & 0xC0) == 0x80; i++)
      out += s[i];
  if (i < n) out += "...";
  return out;
}

void status_from_exception(fg_status *st, const char *what) {
  try {
    throw;
  } catch (const std::bad_alloc &) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "%s: out of memory", what);
  } catch (const assert_error &e) {
    fg_status_set(st, FG_INTERNAL, "%s: %s", what, e.what());
  } catch (const std::exception &e) {
    fg_status_set(st, FG_INTERNAL, "%s: %s", what, e.what());
  } catch (...) {
    fg_status_set(st, FG_INTERNAL, "%s: unknown exception", what);
  }
}

static int io_fail(fg_status *st, fg_code code, const char *verb, const char *path, int err) {
  fg_status_set(st, code, "cannot %s '%s': %s", verb, path_str(path).c_str(), strerror(err));
  return -1;
}

int read_file(const char *path, size_t cap, std::string *out, fg_status *st) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    return io_fail(st, err == ENOENT || err == ENOTDIR ? FG_NOT_FOUND : FG_IO_ERROR, "open", path,
                   err);
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int err = errno;
    close(fd);
    return io_fail(st, FG_IO_ERROR, "stat", path, err);
  }
  if (S_ISDIR(sb.st_mode)) {
    close(fd);
    fg_status_set(st, FG_FORMAT_ERROR, "'%s' is a directory, not a file", path_str(path).c_str());
    return -1;
  }
  /* Refuse before reading, so a huge (or sparse) file costs nothing. Pipes
   * and devices report no size: they are read up to the cap. */
  if (S_ISREG(sb.st_mode) && (uint64_t)sb.st_size > (uint64_t)cap) {
    close(fd);
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "'%s' has %lld bytes, over the limit of %zu bytes",
                  path_str(path).c_str(), (long long)sb.st_size, cap);
    return -1;
  }
  out->clear();
  if (S_ISREG(sb.st_mode)) out->reserve((size_t)sb.st_size);
  char chunk[1 << 16];
  for (;;) {
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      return io_fail(st, FG_IO_ERROR, "read", path, err);
    }
    if (n == 0) break;
    if (out->size() + (size_t)n > cap) {
      close(fd);
      fg_status_set(st, FG_RESOURCE_EXHAUSTED, "'%s' is over the limit of %zu bytes",
                    path_str(path).c_str(), cap);
      return -1;
    }
    out->append(chunk, (size_t)n);
  }
  close(fd);
  return 0;
}

int write_file_atomic(const char *path, const void *data, size_t size, fg_status *st) {
  /* A device or FIFO (--save /dev/stdout) is written in place: the rename
   * below would replace it. A link's file is renamed over where it lies
   * (graph/file_path.h). */
  const bool in_place = fg_path_write_in_place(path) != 0;
  char *target_c = in_place ? nullptr : fg_path_write_target(path);
  if (!in_place && !target_c) return io_fail(st, FG_RESOURCE_EXHAUSTED, "resolve", path, ENOMEM);
  std::string target = target_c ? target_c : path;
  free(target_c);
  char *tmp_c = nullptr;
  int fd = in_place ? open(path, O_WRONLY | O_TRUNC) : fg_path_open_temp(target.c_str(), &tmp_c);
  if (fd < 0 && in_place) return io_fail(st, FG_IO_ERROR, "open for writing", path, errno);
  if (fd < 0) return io_fail(st, FG_IO_ERROR, "create a temporary file beside", path, errno);
  std::string tmp = tmp_c ? tmp_c : "";
  free(tmp_c);
  const char *p = (const char *)data;
  size_t left = size;
  int err = 0;
  while (left > 0 && !err) {
    ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    p += n;
    left -= (size_t)n;
  }
  if (!err && !in_place && fsync(fd) != 0) err = errno;
  if (close(fd) != 0 && !err) err = errno;
  if (!err && !in_place && rename(tmp.c_str(), target.c_str()) != 0) err = errno;
  if (err) {
    if (!in_place) unlink(tmp.c_str());
    fg_status_set(st, FG_IO_ERROR, "cannot write '%s': %s", path_str(path).c_str(), strerror(err));
    return -1;
  }
  fg_status_clear(st);
  return 0;
}

} // namespace fgb

extern "C" int fg_file_write_atomic(const char *path, const void *data, size_t size,
                                    fg_status *st) {
  return fgb::write_file_atomic(path, data, size, st);
}
