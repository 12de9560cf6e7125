/* The amplifier of one DRAW request: its type and parameters from the
   request's fields (qrs_ipc.proto Draw 2, 20-24) over the configured
   defaults, checked against the daemon's limits. */
#ifndef QRSD_AMPREQ_H
#define QRSD_AMPREQ_H

#include <stddef.h>
#include <stdint.h>

#include "amplify.h"
#include "conf.h"
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

#endif
