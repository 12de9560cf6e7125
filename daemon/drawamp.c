/* The amplifier stage of the draw engine (drawamp.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qrs/error.h>

#include "drawamp.h"
#include "log.h"
#include "server.h"

/* Calibration reads go through a buffer of at most this many bytes (or one
   block, if a block is larger). */
#define PREP_CHUNK (1u << 20)

int
drawamp_init(struct server *srv, char *err, size_t errlen)
{
  struct monitor_conf mc;
  size_t i;

  srv->amp = calloc(srv->n_sources ? srv->n_sources : 1, sizeof(*srv->amp));
  if (!srv->amp) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  mc.window = srv->conf->monitor_window;
  mc.ks_alarm_p = srv->conf->monitor_ks_alarm_p;
  mc.cusum_k = srv->conf->monitor_cusum_k;
  mc.cusum_h = srv->conf->monitor_cusum_h;
  for (i = 0; i < srv->n_sources; i++) {
    amp_state_init(&srv->amp[i].st);
    if (monitor_init(&srv->amp[i].mon, &mc) < 0) {
      snprintf(err, errlen, "out of memory for the monitor window");
      return -ENOMEM;
    }
  }
  amp_exact_cache_limit(srv->conf->exact_cache_bytes);
  return 0;
}

void
drawamp_done(struct server *srv)
{
  size_t i;

  if (!srv->amp)
    return;
  for (i = 0; i < srv->n_sources; i++) {
    amp_state_free(&srv->amp[i].st);
    monitor_free(&srv->amp[i].mon);
  }
  free(srv->amp);
  srv->amp = NULL;
}

struct srcamp *
drawamp_of(struct server *srv, const struct source *src)
{
  size_t i;

  for (i = 0; i < srv->n_sources; i++)
    if (srv->sources[i] == src)
      return &srv->amp[i];
  return NULL;
}

int
drawamp_needs_prep(struct server *srv, struct source *src,
                   const struct amp_req *a, struct amp_exact_table **ret_table,
                   struct drawamp_prep *p)
{
  struct srcamp *sa;
  uint32_t blocks;
  int want;

  sa = drawamp_of(srv, src);
  blocks = amp_state_missing(&sa->st, a);
  *ret_table = NULL;
  want = 0;
  if (a->type == AMP_EXACT && amp_exact_try_get(a->sample_count,
                                                ret_table) < 0)
    want = 1;
  if (!blocks && !want)
    return 0;
  memset(p, 0, sizeof(*p));
  p->src = src;
  p->amp = *a;
  p->blocks = blocks;
  p->want_table = want;
  return 1;
}

int
drawamp_prep_same(const struct drawamp_prep *a, const struct drawamp_prep *b)
{
  int za, zb;

  if (a->src != b->src || a->amp.sample_count != b->amp.sample_count ||
      a->blocks != b->blocks || a->want_table != b->want_table)
    return 0;
  za = a->amp.type == AMP_ZSCORE_MEAN || a->amp.type == AMP_ZSCORE_THOUGHT;
  zb = b->amp.type == AMP_ZSCORE_MEAN || b->amp.type == AMP_ZSCORE_THOUGHT;
  return za == zb && (za || a->amp.type == b->amp.type);
}

size_t
drawamp_prep_bytes(const struct drawamp_prep *p)
{
  size_t chunk;

  if (!p->blocks)
    return 0;
  chunk = p->amp.sample_count > PREP_CHUNK ? p->amp.sample_count
                                            : PREP_CHUNK;
  return chunk + (size_t)p->blocks * sizeof(double);
}

void
drawamp_prep_work(struct drawamp_prep *p)
{
  uint32_t per, i, done, k;
  double *means;
  size_t n;
  uint8_t *buf;
  int r;

  if (p->want_table) {
    r = amp_exact_get(p->amp.sample_count, &p->table);
    if (r < 0) {
      p->err = r;
      snprintf(p->msg, sizeof(p->msg), "cannot build the exact amplifier's "
               "table for sample_count %u: %s", p->amp.sample_count,
               qrs_strerror(r));
      return;
    }
  }
  if (!p->blocks)
    return;
  n = p->amp.sample_count;
  per = n >= PREP_CHUNK ? 1 : (uint32_t)(PREP_CHUNK / n);
  buf = malloc(per * n);
  means = malloc((size_t)p->blocks * sizeof(double));
  if (!buf || !means) {
    free(buf);
    free(means);
    p->err = -ENOMEM;
    snprintf(p->msg, sizeof(p->msg), "out of memory for the calibration");
    return;
  }
  for (done = 0; done < p->blocks; done += k) {
    k = p->blocks - done < per ? p->blocks - done : per;
    r = p->src->ops->read(p->src, buf, k * n);
    if (r < 0) {
      p->err = QRS_E_ENTROPY;
      snprintf(p->msg, sizeof(p->msg), "source '%s' failed during the %s "
               "calibration: %s", p->src->name, amp_name(p->amp.type),
               qrs_strerror(r));
      break;
    }
    for (i = 0; i < k; i++)
      means[done + i] = (double)amp_byte_sum(buf + (size_t)i * n, n) /
                        (double)n;
  }
  free(buf);
  if (!p->err)
    p->err = amp_calibration_compute(&p->amp, means, p->blocks, &p->cal,
                                     p->msg, sizeof(p->msg));
  free(means);
}

int
drawamp_prep_finish(struct server *srv, struct drawamp_prep *p)
{
  struct srcamp *sa;

  if (p->blocks && p->err == 0) {
    sa = drawamp_of(srv, p->src);
    amp_calibration_store(&sa->st, &p->amp, &p->cal);
    log_info("source '%s': %s calibrated from %u blocks of %u bytes",
             p->src->name, amp_name(p->amp.type), p->blocks,
             p->amp.sample_count);
  } else if (p->blocks && p->err == QRS_E_CALIBRATION) {
    log_warn("source '%s': %s calibration failed: %s", p->src->name,
             amp_name(p->amp.type), p->msg);
  }
  amp_calibration_free(&p->cal);
  return p->err;
}

int
drawamp_run(struct server *srv, struct source *src, const struct amp_req *a,
            const struct amp_exact_table *t, const uint8_t *buf,
            struct amp_result *ret, struct amp_params *ret_p)
{
  struct srcamp *sa;
  int r;

  sa = drawamp_of(srv, src);
  r = amp_state_run(&sa->st, a, t, buf, ret, ret_p);
  if (r < 0)
    return r;
  if (monitor_add(&sa->mon, ret->u, ret->z))
    log_warn("source '%s': statistics alarm: %s", src->name, sa->mon.reason);
  return 0;
}
