/* Continuous health tests on the raw samples of a local noise source
   (NIST SP 800-90B section 4.4), and a most-common-value min-entropy
   estimate (SP 800-90B section 6.3.1).

   A sample is one byte (uint8_t).  A "binary" source delivers samples
   that are 0 or 1 (one bit each); every other source is "non-binary".

   The tests follow the standard:
   - Repetition count test (4.4.1): cutoff C = 1 + ceil(-log2(alpha) / H);
     a run of C identical samples is a failure.
   - Adaptive proportion test (4.4.2): window W = 1024 (binary) or 512
     (non-binary); the first sample of a window is the reference A, and
     the test fails when A occurs C times within the window, where
     C = 1 + CRITBINOM(W, 2^-H, 1 - alpha), the smallest k whose binomial
     CDF reaches 1 - alpha, plus one.  Not capped: for a claim so low
     that a whole window of one value is likelier than alpha (below about
     0.06 bits at W = 512, alpha = 2^-30) C is W + 1 and only the
     repetition count test can fail (a cap at W would fail a healthy
     source at P(X = W) per window).
   - Start-up test (4.3 item 4): a fresh or failed source must pass both
     tests over 1,024 consecutive samples before it serves again.

   Not thread-safe: one struct health per source, used by one thread at a
   time. */
#ifndef QRSD_HEALTH_H
#define QRSD_HEALTH_H

#include <stddef.h>
#include <stdint.h>

#define HEALTH_ALPHA_DEFAULT 9.313225746154785e-10   /* 2^-30 */
#define HEALTH_STARTUP_SAMPLES 1024
#define HEALTH_APT_WINDOW_BINARY 1024
#define HEALTH_APT_WINDOW_NONBINARY 512

enum health_state {
  HEALTH_STARTUP,     /* testing, not serving yet */
  HEALTH_OK,          /* start-up test passed, no failure since */
  HEALTH_FAILED,      /* a test failed; health_retest() starts over */
};

struct health {
  /* Parameters. */
  double alpha;
  double h;                     /* assessed min-entropy per sample, bits */
  int binary;
  unsigned rct_cutoff;
  unsigned apt_cutoff;
  unsigned apt_window;

  /* Repetition count test. */
  uint8_t rct_last;
  unsigned rct_run;             /* 0: no sample seen yet */

  /* Adaptive proportion test. */
  uint8_t apt_ref;
  unsigned apt_count;
  unsigned apt_pos;             /* 0: the next sample starts a window */

  enum health_state state;
  unsigned startup_left;        /* samples still to pass in HEALTH_STARTUP */

  /* Statistics. */
  uint64_t samples;
  uint64_t rct_failures;
  uint64_t apt_failures;
  char reason[160];             /* why the last failure happened, or "" */
};

/* The repetition count test cutoff for false-alarm probability alpha and
   h bits of min-entropy per sample.  Returns 0 if alpha is not in (0, 1)
   or h not in (0, 8]. */
unsigned health_rct_cutoff(double alpha, double h);

/* The adaptive proportion test cutoff for window w (512 or 1024 in the
   standard; any w from 2 to 65536 works), alpha and h as above.  Computed
   from the exact binomial upper tail; w + 1 (never fails) when a window
   of one value is likelier than alpha.  0 on bad input. */
unsigned health_apt_cutoff(double alpha, double h, unsigned w);

/* Set up the tests; the source starts in HEALTH_STARTUP.  binary: samples
   are single bits (h <= 1, W = 1024).  Returns 0 or -EINVAL (alpha not in
   (0, 1), h not in (0, 8], or h > 1 for a binary source). */
int health_init(struct health *hs, double alpha, double h, int binary);

/* Run n samples through both tests.  Returns 0 when no test failed, or
   -EIO when one did (hs->state becomes HEALTH_FAILED and hs->reason says
   which test, the value and the count).  In HEALTH_STARTUP, the state
   becomes HEALTH_OK once 1,024 samples have passed.  Samples fed to a
   failed source are counted but not tested: it stays failed until
   health_retest(). */
int health_feed(struct health *hs, const uint8_t *s, size_t n);

/* Forget the test state and start a new start-up test (HEALTH_STARTUP);
   statistics and the last reason are kept. */
void health_retest(struct health *hs);

/* "startup", "ok" or "failed". */
const char *health_state_name(enum health_state st);

/* Running most-common-value estimate over byte samples. */
struct mcv {
  uint64_t count[256];
  uint64_t n;
};

void mcv_add(struct mcv *m, const uint8_t *s, size_t n);

/* SP 800-90B 6.3.1: p_u = min(1, p + 2.576 sqrt(p (1 - p) / (n - 1))),
   H = -log2(p_u), where p is the proportion of the most common value.
   Returns the estimate in bits per sample (0 to 8), or -1 with fewer than
   two samples. */
double mcv_estimate(const struct mcv *m);

/* The same for one buffer. */
double mcv_min_entropy(const uint8_t *s, size_t n);

#endif
