/* Uniformity statistics shared by the tests, qrs-stat and the live
   monitor: the Kolmogorov-Smirnov distance of a sample of u against
   Uniform(0, 1) and its p-value. */
#ifndef QRS_CORE_USTAT_H
#define QRS_CORE_USTAT_H

#include <stddef.h>

/* D = sup |F_n(x) - x| of the n values in u (sorted in place). */
double ustat_ks(double *u, size_t n);

/* P(D_n >= d) under the null, by the asymptotic Kolmogorov distribution
   with Stephens' small-sample correction (accurate to a few percent for
   n >= 35, which is all the tests and tools use it for). */
double ustat_ks_pvalue(double d, size_t n);

/* Standard normal CDF and its inverse (Acklam's rational approximation
   refined by one Halley step; relative error below 1e-15). */
double ustat_phi(double z);
double ustat_phi_inv(double p);

#endif
