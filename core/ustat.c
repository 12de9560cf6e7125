/* Uniformity statistics (ustat.h). */
#include <math.h>
#include <stdlib.h>

#include "ustat.h"

static int
cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;

  return (x > y) - (x < y);
}

double
ustat_ks(double *u, size_t n)
{
  double d, a, b;
  size_t i;

  if (n == 0)
    return 0.0;
  qsort(u, n, sizeof(*u), cmp_double);
  d = 0.0;
  for (i = 0; i < n; i++) {
    a = (double)(i + 1) / (double)n - u[i];
    b = u[i] - (double)i / (double)n;
    if (a > d)
      d = a;
    if (b > d)
      d = b;
  }
  return d;
}

double
ustat_ks_pvalue(double d, size_t n)
{
  double sn, lambda, sum, term;
  int k;

  if (n == 0 || d <= 0.0)
    return 1.0;
  sn = sqrt((double)n);
  lambda = (sn + 0.12 + 0.11 / sn) * d;
  if (lambda < 0.2)
    return 1.0;
  /* Q(lambda) = 2 sum_{k>=1} (-1)^{k-1} exp(-2 k^2 lambda^2) */
  sum = 0.0;
  for (k = 1; k <= 100; k++) {
    term = exp(-2.0 * k * k * lambda * lambda);
    sum += (k & 1) ? term : -term;
    if (term < 1e-300)
      break;
  }
  sum *= 2.0;
  return sum < 0.0 ? 0.0 : sum > 1.0 ? 1.0 : sum;
}

double
ustat_phi(double z)
{
  return 0.5 * erfc(-z / sqrt(2.0));
}

double
ustat_phi_inv(double p)
{
  static const double a[] = { -3.969683028665376e+01, 2.209460984245205e+02,
    -2.759285104469687e+02, 1.383577518672690e+02, -3.066479806614716e+01,
    2.506628277459239e+00 };
  static const double b[] = { -5.447609879822406e+01, 1.615858368580409e+02,
    -1.556989798598866e+02, 6.680131188771972e+01, -1.328068155288572e+01 };
  static const double c[] = { -7.784894002430293e-03, -3.223964580411365e-01,
    -2.400758277161838e+00, -2.549732539343734e+00, 4.374664141464968e+00,
    2.938163982698783e+00 };
  static const double d[] = { 7.784695709041462e-03, 3.224671290700398e-01,
    2.445134137142996e+00, 3.754408661907416e+00 };
  double q, r, x, e, u;

  if (p <= 0.0)
    return -INFINITY;
  if (p >= 1.0)
    return INFINITY;
  if (p < 0.02425) {
    q = sqrt(-2.0 * log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  } else if (p > 1.0 - 0.02425) {
    q = sqrt(-2.0 * log1p(-p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  } else {
    q = p - 0.5;
    r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) *
        q / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r +
             1.0);
  }
  /* one Halley step */
  e = ustat_phi(x) - p;
  u = e * sqrt(2.0 * M_PI) * exp(x * x / 2.0);
  return x - u / (1.0 + x * u / 2.0);
}
