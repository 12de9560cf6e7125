/* Live statistics of the u one source serves: a running Kolmogorov-Smirnov
   distance of the last `window` u values against Uniform(0, 1), and two
   one-sided CUSUMs of the draws' z (upward and downward drift).  Bounded
   memory (window doubles), O(1) per draw plus a sort of the window every
   window/8 draws; not locked (the loop thread owns it). */
#ifndef QRSD_MONITOR_H
#define QRSD_MONITOR_H

#include <stddef.h>
#include <stdint.h>

struct monitor_conf {
  uint32_t window;          /* 0: monitoring off */
  double ks_alarm_p;        /* 0: no KS alarm */
  double cusum_k;
  double cusum_h;
};

struct monitor {
  struct monitor_conf conf;
  double *ring;             /* window values, oldest at head once full;
                               then window more, for sorting */
  uint32_t n;               /* values in the ring */
  uint32_t head;
  uint32_t since_check;
  uint64_t draws;
  double ks;                /* as of the last check */
  double ks_p;
  double cusum_hi;
  double cusum_lo;
  int alarm;                /* latched */
  char reason[160];
};

/* 0 or -ENOMEM. */
int monitor_init(struct monitor *m, const struct monitor_conf *conf);
void monitor_free(struct monitor *m);

/* Account one draw.  Returns 1 when this draw raised the alarm (the
   caller logs m->reason once), else 0. */
int monitor_add(struct monitor *m, double u, double z);

/* Recompute ks / ks_p over the current window now. */
void monitor_refresh(struct monitor *m);

#endif
