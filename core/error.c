/* Names and messages of the QRS_E_* codes (qrs/error.h). */
#define _GNU_SOURCE
#include <string.h>

#include <qrs/error.h>

/* One row a code; its name is the code's own spelling. */
#define ERR(code, msg) { code, #code, msg }

static const struct {
  int code;
  const char *name;
  const char *msg;
} errors[] = {
  ERR(QRS_E_PROTOCOL, "Malformed frame or payload"),
  ERR(QRS_E_VERSION, "No common protocol version"),
  ERR(QRS_E_UNSUPPORTED, "Request type not supported"),
  ERR(QRS_E_BAD_REQUEST, "Invalid request field"),
  ERR(QRS_E_UNKNOWN_SOURCE, "No such entropy source"),
  ERR(QRS_E_SAMPLE_COUNT, "Sample count is zero or above the daemon's limit"),
  ERR(QRS_E_ENTROPY, "Entropy source failed and no fallback could serve"),
  ERR(QRS_E_TOO_LARGE, "Frame or request above a limit"),
  ERR(QRS_E_BUSY, "Too many connections or requests in flight"),
  ERR(QRS_E_TIMEOUT, "Request timed out inside the daemon"),
  ERR(QRS_E_INTERNAL, "Internal error in the daemon"),
  ERR(QRS_E_UNKNOWN_AMPLIFIER, "No such amplifier"),
  ERR(QRS_E_SHUTDOWN, "The daemon is shutting down"),
  ERR(QRS_E_HELLO_REQUIRED, "Request sent before the HELLO handshake"),
  ERR(QRS_E_AMP_PARAMS, "Amplifier parameter outside the daemon's limits"),
  ERR(QRS_E_CALIBRATION,
      "Amplifier calibration failed: the source shows no variance"),
  ERR(QRS_E_PERMISSION, "Not allowed to use this daemon"),
  ERR(QRS_E_BAD_CONFIG, "The daemon refused its new configuration"),
  ERR(QRS_E_DISCONNECTED,
      "Connection to the daemon lost with the request in flight"),
  ERR(QRS_E_NO_TICKET, "Unknown or finished draw ticket"),
  ERR(QRS_E_CONFIG_FIELD, "Unknown sampler field, preset or name"),
  ERR(QRS_E_CONFIG_VALUE, "Sampler value of the wrong type or out of range"),
  ERR(QRS_E_LOGITS,
      "Logits row has a NaN or +inf entry, or every entry is -inf"),
  ERR(QRS_E_NO_CANDIDATES, "No token with positive probability to select"),
  ERR(QRS_E_U_RANGE, "Selection u is not a number in [0, 1]"),
};

#undef ERR

#define N_ERRORS (sizeof(errors) / sizeof(errors[0]))

const char *
qrs_strerror(int err)
{
  const char *s;
  size_t i;

  for (i = 0; i < N_ERRORS; i++)
    if (errors[i].code == err)
      return errors[i].msg;
  if (err == 0)
    return "Success";
  if (err < 0 && err > -1000)
    err = -err;
  if (err > 0 && err < 1000) {
    s = strerrordesc_np(err);
    if (s)
      return s;
  }
  return "Unknown error";
}

const char *
qrs_strerror_name(int err)
{
  size_t i;

  for (i = 0; i < N_ERRORS; i++)
    if (errors[i].code == err)
      return errors[i].name;
  if (err < 0 && err > -1000)
    err = -err;
  if (err > 0 && err < 1000)
    return strerrorname_np(err);
  return NULL;
}
