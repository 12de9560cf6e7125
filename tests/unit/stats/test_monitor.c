/* The live monitor, per-draw amplifier parameters and the KS helpers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <qrs/error.h>

#include "engine/ampreq.h"
#include "amp_exact.h"
#include "stats/monitor.h"
#include "ustat.h"

static double
lcg_u(uint64_t *x)
{
  *x = *x * 6364136223846793005ull + 1442695040888963407ull;
  return ((double)(*x >> 11) + 0.5) * 0x1p-53;
}

Test(ustat, ks_of_a_known_sample)
{
  double u[] = { 0.9, 0.1, 0.5, 0.7 };    /* sorted .1 .5 .7 .9 */

  /* max over i of (i+1)/n - u_i and u_i - i/n:
     i=0: .25-.1=.15, .1-0=.1; i=1: .5-.5=0, .5-.25=.25; i=2: .75-.7=.05,
     .7-.5=.2; i=3: 1-.9=.1, .9-.75=.15 -> 0.25 */
  cr_assert_float_eq(ustat_ks(u, 4), 0.25, 1e-15);
  cr_assert_eq(u[0], 0.1);
  cr_assert_eq(ustat_ks_pvalue(0.0, 10), 1.0);
  /* Kolmogorov's Q(1.36) ~ 0.05 and Q(1.63) ~ 0.01 for large n */
  cr_assert_float_eq(ustat_ks_pvalue(1.358 / sqrt(1e6), 1000000), 0.05,
                     0.001);
  cr_assert_float_eq(ustat_ks_pvalue(1.628 / sqrt(1e6), 1000000), 0.01,
                     0.0005);
}

Test(ustat, phi_inverse_round_trips)
{
  double p;

  for (p = 1e-12; p < 1.0; p = p < 0.01 ? p * 10 : p + 0.01)
    cr_assert_float_eq(ustat_phi(ustat_phi_inv(p)), p, 1e-13 * (p + 1e-3),
                       "p %g", p);
  cr_assert_float_eq(ustat_phi_inv(0.975), 1.959963984540054, 1e-14);
}

static const struct monitor_conf mc = { 2000, 1e-6, 0.5, 20.0 };

Test(monitor, uniform_stream_raises_no_alarm)
{
  struct monitor m;
  uint64_t x = 42;
  double u;
  int i;

  cr_assert_eq(monitor_init(&m, &mc), 0);
  for (i = 0; i < 100000; i++) {
    u = lcg_u(&x);
    cr_assert_eq(monitor_add(&m, u, ustat_phi_inv(u)), 0, "draw %d: %s", i,
                 m.reason);
  }
  cr_assert_eq(m.n, 2000);                   /* bounded window */
  cr_assert_gt(m.ks_p, 1e-4);
  cr_assert_lt(m.cusum_hi, 20.0);
  cr_assert_eq(m.alarm, 0);
  monitor_free(&m);
}

Test(monitor, drifting_z_raises_the_cusum_alarm_once)
{
  struct monitor m;
  uint64_t x = 7;
  double u, z;
  int i, fired, at;

  cr_assert_eq(monitor_init(&m, &mc), 0);
  fired = 0;
  at = -1;
  for (i = 0; i < 5000; i++) {
    u = lcg_u(&x);
    z = ustat_phi_inv(u) - (i >= 1000 ? 1.0 : 0.0);    /* drift down */
    if (monitor_add(&m, ustat_phi(z), z)) {
      fired++;
      at = i;
    }
  }
  cr_assert_eq(fired, 1);
  cr_assert(at > 1000 && at < 1200, "fired at %d", at);
  cr_assert(strstr(m.reason, "down"), "%s", m.reason);
  cr_assert_gt(m.cusum_lo, m.cusum_hi);
  monitor_free(&m);
}

Test(monitor, lattice_u_raises_the_ks_alarm)
{
  struct monitor_conf c = { 5000, 1e-6, 0.5, 1e9 };
  struct monitor m;
  uint64_t x = 9;
  double u;
  int i, fired;

  cr_assert_eq(monitor_init(&m, &c), 0);
  fired = 0;
  for (i = 0; i < 20000; i++) {
    u = lcg_u(&x);
    u = u * u;                               /* not uniform, z unbiased */
    fired += monitor_add(&m, u, 0.0);
  }
  cr_assert_eq(fired, 1);
  cr_assert(strstr(m.reason, "KS"), "%s", m.reason);
  monitor_free(&m);
}

Test(monitor, window_zero_is_off)
{
  struct monitor_conf c = { 0, 1e-6, 0.5, 1.0 };
  struct monitor m;
  int i;

  cr_assert_eq(monitor_init(&m, &c), 0);
  for (i = 0; i < 100; i++)
    cr_assert_eq(monitor_add(&m, 0.999, 5.0), 0);
  cr_assert_eq(m.draws, 0);
  monitor_free(&m);
}

static struct qrsd_conf *
conf_of(void)
{
  static struct qrsd_conf c;

  memset(&c, 0, sizeof(c));
  c.amp_type = (char *)"zscore_mean";
  c.amp_population_mean = 127.5;
  c.amp_population_std = 73.9003;
  c.amp_epsilon = 1e-10;
  c.amp_ecdf_calibration_samples = 2000;
  c.max_calibration_samples = 100000;
  c.max_calibration_bytes = 1u << 28;
  c.exact_cache_bytes = 64u << 20;
  return &c;
}

Test(ampreq, absent_fields_take_the_configured_values)
{
  QrsIpc__Draw m = QRS_IPC__DRAW__INIT;
  struct amp_req a;
  char msg[200];

  m.amplifier = (char *)"";
  cr_assert_eq(ampreq_resolve(conf_of(), &m, 1000, &a, msg, sizeof(msg)), 0);
  cr_assert_eq(a.type, AMP_ZSCORE_MEAN);
  cr_assert_eq(a.p.population_std, 73.9003);
  cr_assert_eq(a.zcal, 0);
  cr_assert_eq(ampreq_read_bytes(&a), 1000);
  m.amplifier = (char *)"exact";
  cr_assert_eq(ampreq_resolve(conf_of(), &m, 1000, &a, msg, sizeof(msg)), 0);
  cr_assert_eq(ampreq_read_bytes(&a), 1000 + AMP_EXACT_EXTRA);
  cr_assert_eq(ampreq_calibration_blocks(&a), 0);
  m.amplifier = (char *)"ecdf";
  cr_assert_eq(ampreq_resolve(conf_of(), &m, 1000, &a, msg, sizeof(msg)), 0);
  cr_assert_eq(ampreq_calibration_blocks(&a), 2000);
}

Test(ampreq, request_fields_override_within_limits)
{
  QrsIpc__Draw m = QRS_IPC__DRAW__INIT;
  QrsIpc__DoubleValue mean = QRS_IPC__DOUBLE_VALUE__INIT,
                      std = QRS_IPC__DOUBLE_VALUE__INIT,
                      eps = QRS_IPC__DOUBLE_VALUE__INIT;
  QrsIpc__UInt32Value zc = QRS_IPC__UINT32_VALUE__INIT,
                      ec = QRS_IPC__UINT32_VALUE__INIT;
  struct amp_req a;
  char msg[200];

  m.amplifier = (char *)"zscore_thought";
  mean.value = 127.0;
  std.value = 73.612;
  eps.value = 0.0;
  zc.value = 200;
  m.population_mean = &mean;
  m.population_std = &std;
  m.uniform_clamp_epsilon = &eps;
  m.zscore_calibration_samples = &zc;
  cr_assert_eq(ampreq_resolve(conf_of(), &m, 1000, &a, msg, sizeof(msg)), 0);
  cr_assert_eq(a.type, AMP_ZSCORE_THOUGHT);
  cr_assert_eq(a.p.population_mean, 127.0);
  cr_assert_eq(a.p.population_std, 73.612);
  cr_assert_eq(a.p.epsilon, 0.0);
  cr_assert_eq(ampreq_calibration_blocks(&a), 200);

  std.value = 0.0;
  cr_assert_eq(ampreq_resolve(conf_of(), &m, 1000, &a, msg, sizeof(msg)),
               QRS_E_AMP_PARAMS);
  cr_assert(strstr(msg, "population_std"), "%s", msg);
  std.value = NAN;
  cr_assert_eq(ampreq_resolve(conf_of(), &m, 1000, &a, msg, sizeof(msg)),
               QRS_E_AMP_PARAMS);
  std.value = 73.612;
  mean.value = 256.0;
  cr_assert_eq(ampreq_resolve(conf_of(), &m, 1000, &a, msg, sizeof(msg)),
               QRS_E_AMP_PARAMS);
  mean.value = 127.5;
  eps.value = 0.5;
  cr_assert_eq(ampreq_resolve(conf_of(), &m, 1000, &a, msg, sizeof(msg)),
               QRS_E_AMP_PARAMS);
  eps.value = 1e-10;
  zc.value = 200000;                    /* above max_calibration_samples */
  cr_assert_eq(ampreq_resolve(conf_of(), &m, 1000, &a, msg, sizeof(msg)),
               QRS_E_AMP_PARAMS);
  cr_assert(strstr(msg, "max_calibration_samples"), "%s", msg);
  zc.value = 100000;                    /* 10^8 bytes: fits */
  cr_assert_eq(ampreq_resolve(conf_of(), &m, 1000, &a, msg, sizeof(msg)), 0);
  cr_assert_eq(ampreq_resolve(conf_of(), &m, 10000, &a, msg, sizeof(msg)),
               QRS_E_AMP_PARAMS);       /* 10^9 bytes: too many */
  cr_assert(strstr(msg, "max_calibration_bytes"), "%s", msg);

  m.zscore_calibration_samples = NULL;
  m.amplifier = (char *)"ecdf";
  ec.value = 1;
  m.ecdf_calibration_samples = &ec;
  cr_assert_eq(ampreq_resolve(conf_of(), &m, 1000, &a, msg, sizeof(msg)),
               QRS_E_AMP_PARAMS);
  m.amplifier = (char *)"servers";
  cr_assert_eq(ampreq_resolve(conf_of(), &m, 1000, &a, msg, sizeof(msg)),
               QRS_E_UNKNOWN_AMPLIFIER);
  cr_assert(strstr(msg, "exact"), "%s", msg);
}
