/* The statistics of a study: see audit_study_stats.h. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "audit_stats.h"
#include "audit_study_stats.h"
#include "sortcmp.h"
#include "ustat.h"

#define Z975 1.959963984540054      /* Phi^-1(0.975) */

static void
moments(const double *x, size_t n, double *mean, double *var)
{
  double s = 0, ss = 0, m;
  size_t i;

  for (i = 0; i < n; i++)
    s += x[i];
  m = s / (double)n;
  for (i = 0; i < n; i++)
    ss += (x[i] - m) * (x[i] - m);
  *mean = m;
  *var = n > 1 ? ss / (double)(n - 1) : 0;
}

/* The continued fraction of the regularized incomplete beta function
   (modified Lentz), for x < (a + 1) / (a + b + 2). */
static double
beta_cf(double a, double b, double x)
{
  const double tiny = 1e-300;
  double c = 1, d, h, aa, del;
  int m, m2;

  d = 1 - (a + b) * x / (a + 1);
  d = fabs(d) < tiny ? tiny : d;
  d = 1 / d;
  h = d;
  for (m = 1; m <= 300; m++) {
    m2 = 2 * m;
    aa = m * (b - m) * x / ((a + m2 - 1) * (a + m2));
    d = 1 + aa * d;
    d = fabs(d) < tiny ? tiny : d;
    c = 1 + aa / c;
    c = fabs(c) < tiny ? tiny : c;
    d = 1 / d;
    h *= d * c;
    aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));
    d = 1 + aa * d;
    d = fabs(d) < tiny ? tiny : d;
    c = 1 + aa / c;
    c = fabs(c) < tiny ? tiny : c;
    d = 1 / d;
    del = d * c;
    h *= del;
    if (fabs(del - 1) < 1e-15)
      break;
  }
  return h;
}

/* I_x(a, b). */
static double
beta_inc(double a, double b, double x)
{
  double front;

  if (x <= 0)
    return 0;
  if (x >= 1)
    return 1;
  front = exp(lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) +
              b * log1p(-x));
  if (x < (a + 1) / (a + b + 2))
    return front * beta_cf(a, b, x) / a;
  return 1 - front * beta_cf(b, a, 1 - x) / b;
}

double
study_t_pvalue(double t, double df)
{
  if (isnan(t) || !(df > 0))
    return NAN;
  if (isinf(t))
    return 0;
  return beta_inc(df / 2, 0.5, df / (df + t * t));
}

/* t_{df, 1 - q/2}: the t with P(|T| >= t) = q, by bisection. */
static double
t_quantile(double q, double df)
{
  double lo = 0, hi = 1, mid;
  int i;

  while (study_t_pvalue(hi, df) > q && hi < 1e6)
    hi *= 2;
  for (i = 0; i < 200 && hi - lo > 1e-12 * hi; i++) {
    mid = (lo + hi) / 2;
    if (study_t_pvalue(mid, df) > q)
      lo = mid;
    else
      hi = mid;
  }
  return (lo + hi) / 2;
}

int
study_welch(const double *a, size_t na, const double *b, size_t nb,
            struct study_welch *w)
{
  double va, vb, qa, qb, sp, n, tq;

  if (na < 2 || nb < 2)
    return -EINVAL;
  moments(a, na, &w->mean_a, &va);
  moments(b, nb, &w->mean_b, &vb);
  if (va + vb <= 0)
    return -EINVAL;
  w->na = na;
  w->nb = nb;
  w->sd_a = sqrt(va);
  w->sd_b = sqrt(vb);
  qa = va / (double)na;
  qb = vb / (double)nb;
  w->diff = w->mean_a - w->mean_b;
  w->se = sqrt(qa + qb);
  w->t = w->diff / w->se;
  w->df = (qa + qb) * (qa + qb) /
          (qa * qa / (double)(na - 1) + qb * qb / (double)(nb - 1));
  w->p = study_t_pvalue(w->t, w->df);
  tq = t_quantile(0.05, w->df);
  w->diff_lo = w->diff - tq * w->se;
  w->diff_hi = w->diff + tq * w->se;
  n = (double)(na + nb);
  sp = sqrt(((double)(na - 1) * va + (double)(nb - 1) * vb) / (n - 2));
  w->d = sp > 0 ? w->diff / sp : 0;
  sp = Z975 * sqrt(n / ((double)na * (double)nb) + w->d * w->d / (2 * n));
  w->d_lo = w->d - sp;
  w->d_hi = w->d + sp;
  return 0;
}

double
study_ks2(double *a, size_t na, double *b, size_t nb)
{
  qsort(a, na, sizeof(*a), sort_cmp_double);
  qsort(b, nb, sizeof(*b), sort_cmp_double);
  return audit_ks2(a, na, b, nb);
}

double
study_ks2_pvalue(double d, size_t na, size_t nb)
{
  double ne;

  if (na == 0 || nb == 0)
    return 1;
  ne = (double)na * (double)nb / (double)(na + nb);
  return ustat_ks_pvalue(d, (size_t)(ne + 0.5));
}

double
study_power(double effect, size_t na, size_t nb, double alpha)
{
  double s, z;

  if (na == 0 || nb == 0)
    return NAN;
  s = sqrt(1 / (double)na + 1 / (double)nb);
  z = ustat_phi_inv(1 - alpha / 2);
  return ustat_phi(effect / s - z) + ustat_phi(-effect / s - z);
}

unsigned
study_power_ks_sims(size_t na, size_t nb)
{
  double k = 2e7 / (double)(na + nb ? na + nb : 1);

  return k > 1000 ? 1000 : k < 200 ? 200 : (unsigned)k;
}

/* xorshift64*, a uniform in (0, 1) */
static double
uniform(uint64_t *s)
{
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return ((double)((*s * 0x2545f4914f6cdd1dull) >> 11) + 0.5) * 0x1p-53;
}

double
study_power_ks(double effect, size_t na, size_t nb, double alpha,
               unsigned sims, uint64_t seed)
{
  double *a, *b;
  uint64_t s = seed ? seed : 1;
  unsigned k, hits = 0;
  size_t i;

  if (na == 0 || nb == 0 || sims == 0)
    return NAN;
  a = malloc(na * sizeof(*a));
  b = malloc(nb * sizeof(*b));
  if (!a || !b) {
    free(a);
    free(b);
    return -ENOMEM;
  }
  for (k = 0; k < sims; k++) {
    for (i = 0; i < na; i++)
      a[i] = ustat_phi_inv(uniform(&s)) + effect;
    for (i = 0; i < nb; i++)
      b[i] = ustat_phi_inv(uniform(&s));
    hits += study_ks2_pvalue(study_ks2(a, na, b, nb), na, nb) <= alpha;
  }
  free(a);
  free(b);
  return (double)hits / sims;
}
