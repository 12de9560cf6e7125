/* Fixtures shared by the unit tests (testutil.c; libc and criterion
   only): a FIFO in a temporary directory that the test writes, standing
   in for a device, temporary directories and the files in them. */
#ifndef QRS_TESTUTIL_H
#define QRS_TESTUTIL_H

#include <stddef.h>

struct test_fifo {
  char dir[64];                 /* a new directory under /tmp */
  char path[128];               /* dir/fifo */
  int hold;                     /* see test_fifo_writer(); -1: none */
};

/* Make /tmp/<prefix>-XXXXXX with a FIFO in it, and ignore SIGPIPE; fails
   the test on error. */
void test_fifo_init(struct test_fifo *f, const char *prefix);

/* Connect a writer to the FIFO without blocking on the reader under
   test: hold an idle reader of our own (it never reads), so that the open
   returns at once and writes before the reader under test opens do not
   raise SIGPIPE.  EOF still comes when the last writer closes.  The
   caller closes the writer. */
int test_fifo_writer(struct test_fifo *f);

/* Close the held reader, remove the FIFO and the (then empty)
   directory. */
void test_fifo_done(struct test_fifo *f);

/* Make /tmp/<prefix>-XXXXXX into dir (capacity len); fails the test on
   error. */
void test_tmpdir(char *dir, size_t len, const char *prefix);

/* rm -rf dir (a test_tmpdir()). */
void test_tmpdir_remove(const char *dir);

/* Create (or truncate) path holding text; fails the test on error. */
void test_write_file(const char *path, const char *text);

void test_sleep_ms(unsigned ms);

#endif
