/* Live statistics of a served stream (monitor.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats/monitor.h"
#include "ustat.h"

int
monitor_init(struct monitor *m, const struct monitor_conf *conf)
{
  memset(m, 0, sizeof(*m));
  m->conf = *conf;
  m->ks_p = 1.0;
  if (!conf->window)
    return 0;
  m->ring = malloc(2 * (size_t)conf->window * sizeof(double));
  if (!m->ring)
    return -ENOMEM;
  return 0;
}

void
monitor_free(struct monitor *m)
{
  free(m->ring);
  m->ring = NULL;
}

void
monitor_refresh(struct monitor *m)
{
  double *scratch;

  if (!m->n) {
    m->ks = 0.0;
    m->ks_p = 1.0;
    return;
  }
  scratch = m->ring + m->conf.window;
  memcpy(scratch, m->ring, m->n * sizeof(double));
  m->ks = ustat_ks(scratch, m->n);
  m->ks_p = ustat_ks_pvalue(m->ks, m->n);
}

int
monitor_add(struct monitor *m, double u, double z)
{
  uint32_t every;
  double k;

  if (!m->conf.window)
    return 0;
  m->draws++;
  m->ring[m->head] = u;
  m->head = (m->head + 1) % m->conf.window;
  if (m->n < m->conf.window)
    m->n++;

  k = m->conf.cusum_k;
  if (z == z) {                 /* NaN z (no z-score) does not count */
    m->cusum_hi = m->cusum_hi + z - k > 0.0 ? m->cusum_hi + z - k : 0.0;
    m->cusum_lo = m->cusum_lo - z - k > 0.0 ? m->cusum_lo - z - k : 0.0;
  }

  every = m->conf.window / 8 ? m->conf.window / 8 : 1;
  if (++m->since_check >= every) {
    m->since_check = 0;
    monitor_refresh(m);
  }
  if (m->alarm)
    return 0;
  if (m->cusum_hi > m->conf.cusum_h || m->cusum_lo > m->conf.cusum_h) {
    snprintf(m->reason, sizeof(m->reason), "CUSUM of z %s %.1f > %g after "
             "%llu draws: the byte mean drifts %s",
             m->cusum_hi > m->cusum_lo ? "up" : "down",
             m->cusum_hi > m->cusum_lo ? m->cusum_hi : m->cusum_lo,
             m->conf.cusum_h, (unsigned long long)m->draws,
             m->cusum_hi > m->cusum_lo ? "up" : "down");
    m->alarm = 1;
    return 1;
  }
  if (m->conf.ks_alarm_p > 0.0 && m->n == m->conf.window && !m->since_check &&
      m->ks_p < m->conf.ks_alarm_p) {
    snprintf(m->reason, sizeof(m->reason), "KS distance %.4f of the last %u "
             "u against uniform (p = %.2g < %g): u is not uniform",
             m->ks, m->n, m->ks_p, m->conf.ks_alarm_p);
    m->alarm = 1;
    return 1;
  }
  return 0;
}
