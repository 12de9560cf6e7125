/* The draw journal's files read back at start-up (journal_int.h): the
   newest file's last line (a torn one set aside), and the last sequence
   of a file that ends in study records. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fdio.h"
#include "base/log.h"
#include "persist/journal_int.h"

int
journal__open_regular(const char *path, int flags, struct stat *st, char *err,
             size_t errlen)
{
  int fd, r;

  fd = open(path, flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    r = -errno;
    snprintf(err, errlen, "journal %s: %s", path, strerror(errno));
    return r;
  }
  if (fstat(fd, st) != 0) {
    r = -errno;
    snprintf(err, errlen, "journal %s: %s", path, strerror(errno));
    close(fd);
    return r;
  }
  if (!S_ISREG(st->st_mode)) {
    snprintf(err, errlen, "journal %s: not a regular file (remove or "
             "rename it)", path);
    close(fd);
    return -EINVAL;
  }
  /* later writes may block (a regular file never does, but say so) */
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
    r = -errno;
    snprintf(err, errlen, "journal %s: %s", path, strerror(errno));
    close(fd);
    return r;
  }
  return fd;
}

/* The last line of a file (entry, gap, study record or header): 0 with
   *seq and hash (its hash; a header gives its prev and no sequence: 1; a
   study record its hash and no sequence: 3), -1 when it does not
   parse.  line is NUL-ended, without its newline. */
static int
parse_last(char *line, uint64_t *seq, char hash[JOURNAL_HEX_LEN + 1])
{
  char *f, *end;
  int i, fields;

  if (strncmp(line, "# qrs-journal 1 ", 16) == 0) {
    f = strstr(line, "prev=");
    if (f == NULL || strlen(f + 5) != JOURNAL_HEX_LEN)
      return -1;
    strcpy(hash, f + 5);
    return 1;
  }
  if (strncmp(line, JOURNAL_STUDY_TAG "\t", sizeof JOURNAL_STUDY_TAG) == 0) {
    f = strrchr(line, '\t');
    if (f == NULL || strlen(f + 1) != JOURNAL_HEX_LEN)
      return -1;
    strcpy(hash, f + 1);
    return 3;
  }
  if (strncmp(line, JOURNAL_GAP_TAG "\t", sizeof JOURNAL_GAP_TAG) == 0) {
    f = strchr(line + sizeof JOURNAL_GAP_TAG, '\t');
    if (f == NULL)
      return -1;
    *seq = strtoull(f + 1, &end, 10);
    fields = 5;
  } else {
    *seq = strtoull(line, &end, 10);
    fields = 15;
  }
  if (end == line || *end != '\t')
    return -1;
  f = line;
  for (i = 0; i < fields && f != NULL; i++) {
    f = strchr(f, '\t');
    if (f)
      f++;
  }
  if (f == NULL || strlen(f) != JOURNAL_HEX_LEN)
    return -1;
  strcpy(hash, f);
  return 0;
}

/* A torn last line (a crash or a full disk mid-write): its n bytes
   torn, at offset at up to the end, are appended to <path>.torn (fsync'd)
   and then cut off the file.  0 or a negative errno with err set. */
static int
set_torn_aside(int fd, const char *path, const char *torn, size_t n,
               off_t at, char *err, size_t errlen)
{
  char aside[4200];
  int afd, r;

  snprintf(aside, sizeof aside, "%s.torn", path);
  afd = open(aside, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW |
             O_NONBLOCK, 0640);
  if (afd < 0)
    r = -errno;
  else
    r = fd_write_all(afd, torn, n);
  if (r == 0 && fsync(afd) != 0)
    r = -errno;
  if (afd >= 0)
    close(afd);
  if (r == 0 && (ftruncate(fd, at) != 0 || fsync(fd) != 0))
    r = -errno;
  if (r != 0) {
    snprintf(err, errlen, "journal %s: its last line is torn (bytes %lld.."
             "%lld) and could not be set aside in %s: %s", path,
             (long long)at, (long long)at + (long long)n - 1, aside,
             strerror(-r));
    return r;
  }
  log_warn("journal %s: its last line was torn (bytes %lld..%lld, no "
           "newline): set aside in %s and cut off", path, (long long)at,
           (long long)at + (long long)n - 1, aside);
  return 0;
}

int
journal__last_line(const char *path, int repair, uint64_t *seq,
                   char hash[JOURNAL_HEX_LEN + 1], uint64_t *size, char *err,
                   size_t errlen)
{
  /* a torn line and the complete one before it, with its newline */
  char tail[3 * JOURNAL_LINE_MAX + 1], *line, *nl;
  struct stat st;
  ssize_t n;
  off_t off;
  int fd, r;

  fd = journal__open_regular(path, repair ? O_RDWR : O_RDONLY, &st, err, errlen);
  if (fd < 0)
    return fd;
  off = st.st_size > (off_t)(sizeof tail - 1) ?
        st.st_size - (off_t)(sizeof tail - 1) : 0;
  n = pread(fd, tail, sizeof tail - 1, off);
  if (n < 0 || (off_t)n != st.st_size - off) {
    snprintf(err, errlen, "journal %s: %s", path,
             n < 0 ? strerror(errno) : "short read");
    r = -EIO;
    goto out;
  }
  nl = n > 0 ? memrchr(tail, '\n', (size_t)n) : NULL;
  if (n == 0 || nl == NULL) {
    if (off > 0 || !repair) {
      snprintf(err, errlen, "journal %s: no line ends in its last %zd "
               "bytes (from offset %lld): not a torn entry; check it with "
               "qrs-audit", path, n, (long long)off);
      r = -EINVAL;
      goto out;
    }
    /* not even a header: a crash between creating it and its header */
    r = n > 0 ? set_torn_aside(fd, path, tail, (size_t)n, 0, err, errlen) :
        0;
    if (r == 0 && unlink(path) != 0) {
      r = -errno;
      snprintf(err, errlen, "journal %s: %s", path, strerror(errno));
    }
    if (r == 0) {
      log_warn("journal %s: no complete line (a start cut short): removed",
               path);
      r = 2;
    }
    goto out;
  }
  if (nl != tail + n - 1) {
    if (!repair || tail + n - 1 - nl > JOURNAL_LINE_MAX) {
      snprintf(err, errlen, "journal %s: %zd bytes after its last line "
               "(from offset %lld): %s; check it with qrs-audit", path,
               tail + n - 1 - nl, (long long)(off + (nl + 1 - tail)),
               repair ? "more than an entry, not a torn one" :
               "a torn line in a file before the newest");
      r = -EINVAL;
      goto out;
    }
    r = set_torn_aside(fd, path, nl + 1, (size_t)(tail + n - 1 - nl),
                       off + (nl + 1 - tail), err, errlen);
    if (r != 0)
      goto out;
    n = nl + 1 - tail;
  }
  tail[n - 1] = '\0';
  line = memrchr(tail, '\n', (size_t)n - 1);
  line = line ? line + 1 : tail;
  if (line == tail && off > 0) {
    snprintf(err, errlen, "journal %s: last line longer than any entry "
             "(check it with qrs-audit)", path);
    r = -EINVAL;
    goto out;
  }
  r = parse_last(line, seq, hash);
  if (r < 0) {
    snprintf(err, errlen, "journal %s: last line does not parse "
             "(check it with qrs-audit)", path);
    r = -EINVAL;
    goto out;
  }
  *size = (uint64_t)(off + n);
out:
  close(fd);
  return r;
}

int
journal__file_seq(const char *path, uint64_t *seq, char *err, size_t errlen)
{
  struct journal_lines lr = { .fd = -1, .cap = JOURNAL_LINES_BLOCK };
  char hash[JOURNAL_HEX_LEN + 1], *line;
  uint64_t s;
  size_t len;
  int nl, r = 1;

  lr.buf = malloc(lr.cap + 1);
  if (lr.buf == NULL)
    return -ENOMEM;
  if (journal_lines_open(&lr, path) < 0) {
    snprintf(err, errlen, "journal %s: %s", path, strerror(errno));
    free(lr.buf);
    return -EIO;
  }
  while ((line = journal_lines_next(&lr, &len, &nl)) != NULL)
    if (nl && parse_last(line, &s, hash) == 0) {
      *seq = s;
      r = 0;
    }
  if (lr.err) {
    snprintf(err, errlen, "journal %s: %s", path, strerror(lr.err));
    r = -EIO;
  }
  close(lr.fd);
  free(lr.buf);
  return r;
}

