/* The amplifier of one DRAW request: its type and parameters from the
   request's fields (qrs_ipc.proto Draw 2, 20-24) over the configured
   defaults, checked against the daemon's limits. */
#ifndef QRSD_AMPREQ_H
#define QRSD_AMPREQ_H

#include <stddef.h>
#include <stdint.h>

#include "amp_exact.h"
#include "amplify.h"
#include "conf/conf.h"
#include "qrs_ipc.pb-c.h"

struct amp_req {
  enum amp_type type;
  struct amp_params p;      /* mean/std before any calibration */
  uint32_t sample_count;
  uint32_t zcal;            /* z-score calibration blocks (0: none) */
  uint32_t ecal;            /* ecdf calibration blocks */
};

/* Resolve m for sample_count bytes (already checked against
   limits.max_sample_count).  Returns 0, or QRS_E_UNKNOWN_AMPLIFIER /
   QRS_E_AMP_PARAMS with a one-line reason in msg (capacity len). */
int ampreq_resolve(const struct qrsd_conf *conf, const QrsIpc__Draw *m,
                   uint32_t sample_count, struct amp_req *ret, char *msg,
                   size_t len);

/* Bytes the draw reads from the source (exact: sample_count + 7). */
size_t ampreq_read_bytes(const struct amp_req *a);

/* Blocks the draw's calibration needs (0: none). */
uint32_t ampreq_calibration_blocks(const struct amp_req *a);

/* The calibrations of one source: z-score (mean, std) and ecdf tables,
   keyed by (sample_count, blocks), each cache bounded (least recently used
   replaced).  Owned by one thread (the daemon's loop). */
#define AMP_ECDF_CACHE 8

struct amp_state {
  struct amp_calib_cache z;
  struct {
    uint32_t sample_count;
    uint32_t blocks;
    uint64_t used;
    struct amp_ecdf e;
  } ecdf[AMP_ECDF_CACHE];
  uint64_t clock;
};

void amp_state_init(struct amp_state *st);
void amp_state_free(struct amp_state *st);

/* Whether a's calibration is needed and not cached: the blocks to draw
   (of a->sample_count bytes each), or 0. */
uint32_t amp_state_missing(struct amp_state *st, const struct amp_req *a);

/* Calibrate from blocks * a->sample_count bytes and cache the result.
   Returns 0, QRS_E_CALIBRATION (zero variance; msg says so in the
   reference's words) or -ENOMEM. */
int amp_state_calibrate(struct amp_state *st, const struct amp_req *a,
                        const uint8_t *buf, uint32_t blocks, char *msg,
                        size_t len);
/* The same in two halves: compute a calibration from the blocks' byte
   means (any thread; c owns what it computed), then store it in st (the
   owner thread; takes c's memory).  compute returns like calibrate. */
struct amp_calibration {
  struct amp_ecdf ecdf;     /* ecdf */
  double mean, std;         /* zscore_* */
  uint32_t blocks;
};

int amp_calibration_compute(const struct amp_req *a, const double *means,
                            uint32_t blocks, struct amp_calibration *c,
                            char *msg, size_t len);
void amp_calibration_store(struct amp_state *st, const struct amp_req *a,
                           struct amp_calibration *c);
void amp_calibration_free(struct amp_calibration *c);

/* Amplify buf (ampreq_read_bytes(a) bytes) with a's amplifier, using the
   cached calibration (which must be there: amp_state_missing() == 0) and,
   for exact, the table t (t->n == a->sample_count).  *ret_p receives the
   parameters z was computed with.  Returns 0 or a negative error
   (QRS_E_CALIBRATION if the calibration is missing). */
int amp_state_run(struct amp_state *st, const struct amp_req *a,
                  const struct amp_exact_table *t, const uint8_t *buf,
                  struct amp_result *ret, struct amp_params *ret_p);

#endif
