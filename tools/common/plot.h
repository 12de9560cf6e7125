/* Plots drawn by gnuplot (Debian: gnuplot-nox) for qrs-stat and
   qrs-audit: a data or script file in a report folder, and gnuplot run
   on a script there. */
#ifndef QRS_TOOLS_PLOT_H
#define QRS_TOOLS_PLOT_H

#include <stdio.h>

/* dir/name opened for writing; NULL after saying why on stderr, with
   prog (the tool's name) in front. */
FILE *plot_open(const char *prog, const char *dir, const char *name);

/* Run gnuplot on dir/script with dir as its working folder.  0, or
   -errno / -EIO after saying on stderr what failed (and, when gnuplot is
   missing, which package has it). */
int plot_run(const char *prog, const char *dir, const char *script);

#endif
