/* qrs error codes, shared by libqrs, qrsd and qrsctl.

   Every libqrs function that can fail returns an int: 0 (or a count) on
   success, or a negative number on failure.  A failure is either a negative
   errno value (-ENOMEM, -ETIMEDOUT, -ECONNREFUSED, ...) or one of the
   QRS_E_* codes below, which are all <= -1000 and so never collide with
   errno.  qrs_strerror() turns either kind into a short English message. */
#ifndef QRS_ERROR_H
#define QRS_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

#ifndef QRS_EXPORT
#define QRS_EXPORT __attribute__((visibility("default")))
#endif

enum qrs_error {
  /* Errors the daemon reports (they travel on the wire as
     qrs_ipc.ErrorCode n, and arrive here as -(1000 + n)). */
  QRS_E_PROTOCOL = -1001,         /* malformed frame or payload */
  QRS_E_VERSION = -1002,          /* no common protocol version */
  QRS_E_UNSUPPORTED = -1003,      /* request type unknown to the peer */
  QRS_E_BAD_REQUEST = -1004,      /* a request field is invalid */
  QRS_E_UNKNOWN_SOURCE = -1005,   /* no such entropy source */
  QRS_E_SAMPLE_COUNT = -1006,     /* sample_count 0 or above the limit */
  QRS_E_ENTROPY = -1007,          /* the source failed, no fallback */
  QRS_E_TOO_LARGE = -1008,        /* frame or request above a limit */
  QRS_E_BUSY = -1009,             /* too many connections or requests */
  QRS_E_TIMEOUT = -1010,          /* request timed out inside qrsd */
  QRS_E_INTERNAL = -1011,         /* bug or resource failure in qrsd */
  QRS_E_UNKNOWN_AMPLIFIER = -1012,/* no such amplifier */
  QRS_E_SHUTDOWN = -1013,         /* qrsd is shutting down */
  QRS_E_HELLO_REQUIRED = -1014,   /* request sent before HELLO */
  QRS_E_AMP_PARAMS = -1020,       /* amplifier parameter out of range */
  QRS_E_CALIBRATION = -1021,      /* amplifier calibration failed */
  QRS_E_PERMISSION = -1022,       /* the peer is not allowed (access) */
  QRS_E_BAD_CONFIG = -1023,       /* qrsd refused its new configuration */

  /* Errors raised inside libqrs itself. */
  QRS_E_DISCONNECTED = -1100,     /* connection lost with the request
                                     in flight (its answer is gone) */
  QRS_E_NO_TICKET = -1101,        /* unknown or already finished ticket */
  QRS_E_CONFIG_FIELD = -1102,     /* unknown sampler field, preset or name */
  QRS_E_CONFIG_VALUE = -1103,     /* sampler value wrong type / range */
  QRS_E_LOGITS = -1104,           /* NaN or +inf logit, or all -inf row */
  QRS_E_NO_CANDIDATES = -1105,    /* no token with positive probability */
  QRS_E_U_RANGE = -1106,          /* a selection u that is NaN, infinite or
                                     outside [0, 1] */
};

/* A static, NUL-terminated English description of err, which is a negative
   errno or a QRS_E_* code (a positive errno is accepted too).  Never NULL;
   the string must not be freed.  Thread-safe.  Added in 0.1. */
QRS_EXPORT const char *qrs_strerror(int err);

/* The constant's name ("QRS_E_BUSY", "ETIMEDOUT", ...) or NULL if unknown.
   Static storage.  Added in 0.1. */
QRS_EXPORT const char *qrs_strerror_name(int err);

#ifdef __cplusplus
}
#endif

#endif
