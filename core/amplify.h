/* Amplifiers: N raw bytes -> one uniform u in (0,1), as qr-sampler's
   amplifiers do (third_party/qr-sampler/src/qr_sampler/amplification/).

   zscore_mean, zscore_thought and ecdf reproduce the reference; exact
   (amp_exact.h) is qrs's own amplifier whose u is exactly uniform under
   the null.  Everything here is pure computation on caller-supplied
   bytes: no I/O, no global state, safe on any thread. */
#ifndef QRS_CORE_AMPLIFY_H
#define QRS_CORE_AMPLIFY_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

enum amp_type {
  AMP_ZSCORE_MEAN,
  AMP_ZSCORE_THOUGHT,
  AMP_ECDF,
  AMP_EXACT,
  AMP_SERVER,               /* the upstream's PurityService integrates */
  AMP_COUNT
};

/* Errors (negative errno values, as everywhere in qrs). */
#define AMP_E_EMPTY (-EINVAL)          /* no bytes to amplify */
#define AMP_E_UNCALIBRATED (-ENODATA)  /* ecdf without a calibration */
#define AMP_E_ZERO_VARIANCE (-EDOM)    /* calibration saw no variance */

struct amp_params {
  double population_mean;
  double population_std;
  double epsilon;           /* u is clamped to [epsilon, 1 - epsilon] */
};

struct amp_result {
  double u;
  double z;
  double sample_mean;
  double sem;
  uint64_t byte_sum;
  size_t sample_count;
  size_t ecdf_rank;         /* ecdf only */
};

/* The amplifier called name, or -1 if there is none. */
int amp_find(const char *name);
const char *amp_name(enum amp_type t);
/* "zscore_mean, zscore_thought, ecdf, exact" */
const char *amp_known_names(void);

/* The reference's message for an error of amplifier t (the text its
   amplifiers raise SignalAmplificationError with). */
const char *amp_strerror(enum amp_type t, int err);

/* Exact sum of n bytes. */
uint64_t amp_byte_sum(const uint8_t *b, size_t n);

/* Standard normal CDF through the C library erf, clamped to
   [eps, 1 - eps], as ZScoreMeanAmplifier.amplify() does. */
double amp_phi_clamped(double z, double eps);

/* zscore_mean: M = sum/n, z = (M - mean) / (std / sqrt(n)),
   u = clamp(Phi(z)).  Returns 0, or AMP_E_EMPTY for n == 0. */
int amp_zscore_mean(const struct amp_params *p, const uint8_t *b, size_t n,
                    struct amp_result *ret);

/* The same from an exact byte sum of n bytes (zscore_thought's per-draw
   output is identical to zscore_mean's). */
int amp_zscore_sum(const struct amp_params *p, uint64_t sum, size_t n,
                   struct amp_result *ret);

/* zscore_thought's side accumulator (what the reference's
   ZScoreThoughtAmplifier.thought_aggregate() sums): exact byte sum and
   count of every successful draw since the thought began. */
struct amp_thought {
  uint64_t sum;
  uint64_t count;
};

struct amp_aggregate {
  double sample_mean;
  double z;
  double sem;
  uint64_t sample_count;
  double bias;
  double u;
};

void amp_thought_begin(struct amp_thought *t);
void amp_thought_add(struct amp_thought *t, uint64_t byte_sum, uint64_t n);
void amp_thought_aggregate(const struct amp_thought *t,
                           const struct amp_params *p,
                           struct amp_aggregate *ret);

/* numpy's pairwise summation (np.add.reduce on a contiguous float64
   array), so that calibrations match the reference to the last bit. */
double amp_pairwise_sum(const double *a, size_t n);

/* z-score baseline calibration, as the reference's
   ZScoreMeanAmplifier.calibrate() does it, from the byte means of count
   blocks of sample_count bytes: *ret_mean = mean of the means, *ret_std =
   their ddof-1 standard deviation times sqrt(sample_count).  Returns 0, or
   AMP_E_ZERO_VARIANCE when that deviation is 0 (always for count == 1,
   which the reference refuses with the same zero-variance error). */
int amp_zscore_calibrate(const double *block_means, size_t count,
                         uint32_t sample_count, double *ret_mean,
                         double *ret_std);

/* A cache of z-score calibrations of one source, keyed by (sample_count,
   blocks), with at most AMP_CALIB_CACHE entries (least recently used is
   replaced).  Not locked: one owner thread. */
#define AMP_CALIB_CACHE 16

struct amp_calib_cache {
  struct {
    uint32_t sample_count;
    uint32_t blocks;
    double mean;
    double std;
    uint64_t used;
  } e[AMP_CALIB_CACHE];
  unsigned n;
  uint64_t clock;
};

/* 1 and the cached (mean, std), or 0. */
int amp_calib_lookup(struct amp_calib_cache *c, uint32_t sample_count,
                     uint32_t blocks, double *ret_mean, double *ret_std);
void amp_calib_store(struct amp_calib_cache *c, uint32_t sample_count,
                     uint32_t blocks, double mean, double std);

/* ecdf (ECDFAmplifier in the reference): the sorted byte means of the
   calibration blocks. */
struct amp_ecdf {
  double *means;            /* ascending; NULL: not calibrated */
  size_t n;
};

/* Calibrate e from count block means (copied and sorted; replaces a
   previous calibration).  Returns 0, AMP_E_ZERO_VARIANCE when all means
   are identical (e keeps its old state), or -ENOMEM. */
int amp_ecdf_calibrate(struct amp_ecdf *e, const double *block_means,
                       size_t count);
void amp_ecdf_free(struct amp_ecdf *e);

/* rank = #{S[i] <= M}, u = clamp((rank + 1) / (N + 1)).  Returns 0,
   AMP_E_UNCALIBRATED or AMP_E_EMPTY.  z is the z-score of M against p
   (a diagnostic; u does not use it). */
int amp_ecdf(const struct amp_ecdf *e, const struct amp_params *p,
             const uint8_t *b, size_t n, struct amp_result *ret);

#endif
