/* Replace a file atomically: readers see the old or the new content, never
   a mix, and a crash leaves one of the two.  Used for the status file and
   the persisted quota counts.  Rename replaces the name at path, never
   what a link there points to; reading them back: base/regfile.h. */
#ifndef QRSD_ATOMICFILE_H
#define QRSD_ATOMICFILE_H

#include <stddef.h>

/* Write data to "<path>.<pid>.tmp" (mode 0644; always a new file: what
   was there is removed first), fsync it when durable is set, rename it
   over path (and fsync the directory when durable).  0 or a negative
   errno; on failure the temp file is removed and path is left as it was.
   One writer of a path at a time (the temp file is per process). */
int atomicfile_write(const char *path, const void *data, size_t len,
                     int durable);

#endif
