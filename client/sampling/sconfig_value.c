/* Sampler configuration: a field's value as text (sconfig_int.h lists
   the pieces).

   Numbers are parsed and printed independently of the locale (the
   reference's forms: Python's repr of a float), text is parsed into a
   struct qrs__cfgvals with its range and choices checked, and a whole
   configuration is checked for what single fields cannot say. */
#define _GNU_SOURCE
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <qrs/sampler.h>

#include "sconfig_int.h"

/* ---- locale-independent number text ---- */

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void
c_locale_init(void)
{
  c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
}

static locale_t
cloc(void)
{
  pthread_once(&c_locale_once, c_locale_init);
  return c_locale;
}

/* strtod in the C locale; 0 and *ret on a complete parse. */
static int
parse_double(const char *s, double *ret)
{
  char *end;
  double v;

  while (*s == ' ' || *s == '\t')
    s++;
  if (!*s)
    return -1;
  errno = 0;
  v = cloc() ? strtod_l(s, &end, cloc()) : strtod(s, &end);
  while (*end == ' ' || *end == '\t')
    end++;
  if (*end || end == s)
    return -1;
  *ret = v;
  return 0;
}

static int
parse_int(const char *s, long long *ret)
{
  char *end;
  long long v;
  double d;

  while (*s == ' ' || *s == '\t')
    s++;
  errno = 0;
  v = strtoll(s, &end, 10);
  while (*end == ' ' || *end == '\t')
    end++;
  if (!*end && end != s && errno == 0) {
    *ret = v;
    return 0;
  }
  /* An integral float ("2.0") is an integer too, as in the reference. */
  if (parse_double(s, &d) == 0 && isfinite(d) && d == floor(d) &&
      fabs(d) < 9.2e18) {
    *ret = (long long)d;
    return 0;
  }
  return -1;
}

static int
parse_bool(const char *s, int *ret)
{
  static const char *const t[] = { "1", "true", "yes", "on", "t", "y" };
  static const char *const f[] = { "0", "false", "no", "off", "f", "n" };
  size_t i;

  for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
    if (!strcasecmp(s, t[i])) {
      *ret = 1;
      return 0;
    }
    if (!strcasecmp(s, f[i])) {
      *ret = 0;
      return 0;
    }
  }
  return -1;
}

void
qrs__fmt_double(double x, char *buf, size_t len)
{
  char e[40], digits[24], *p;
  locale_t old;
  int prec, exp10, nd, i, k;
  double back;
  size_t o;

  if (isnan(x)) {
    snprintf(buf, len, "NaN");
    return;
  }
  if (isinf(x)) {
    snprintf(buf, len, x > 0 ? "inf" : "-inf");
    return;
  }
  if (x == 0.0) {
    snprintf(buf, len, signbit(x) ? "-0.0" : "0.0");
    return;
  }
  old = cloc() ? uselocale(cloc()) : (locale_t)0;
  /* The shortest digit string that reads back as x. */
  for (prec = 1; prec <= 17; prec++) {
    snprintf(e, sizeof(e), "%.*e", prec - 1, x);
    back = strtod(e, NULL);
    if (back == x)
      break;
  }
  if (old)
    uselocale(old);
  p = e;
  o = 0;
  if (*p == '-')
    p++;
  nd = 0;
  for (; *p && *p != 'e'; p++)
    if (*p != '.')
      digits[nd++] = *p;
  exp10 = atoi(p + 1);
  while (nd > 1 && digits[nd - 1] == '0')
    nd--;
  digits[nd] = 0;
  k = 0;
  if (x < 0)
    buf[o++] = '-';
#define PUT(c) \
  do { \
    if (o + 1 < len) \
      buf[o++] = (c); \
  } while (0)
  if (fabs(x) >= 1e-5 && fabs(x) < 1e16) {
    if (exp10 >= 0) {
      for (i = 0; i <= exp10; i++)
        PUT(i < nd ? digits[i] : '0');
      PUT('.');
      if (exp10 + 1 < nd)
        for (i = exp10 + 1; i < nd; i++)
          PUT(digits[i]);
      else
        PUT('0');
    } else {
      PUT('0');
      PUT('.');
      for (i = 0; i < -exp10 - 1; i++)
        PUT('0');
      for (i = 0; i < nd; i++)
        PUT(digits[i]);
    }
  } else {
    PUT(digits[0]);
    if (nd > 1) {
      PUT('.');
      for (i = 1; i < nd; i++)
        PUT(digits[i]);
    }
    PUT('e');
    PUT(exp10 < 0 ? '-' : '+');
    snprintf(e, sizeof(e), "%d", exp10 < 0 ? -exp10 : exp10);
    for (k = 0; e[k]; k++)
      PUT(e[k]);
  }
#undef PUT
  buf[o < len ? o : len - 1] = 0;
}

void
qrs__cfg_seterr(char *err, size_t len, const char *fmt, ...)
{
  va_list ap;

  if (!err || !len)
    return;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
}

static int
range_ok(const struct field *f, double v)
{
  if (!isnan(f->lo) && !(f->lo_open ? v > f->lo : v >= f->lo))
    return 0;
  if (!isnan(f->hi) && !(f->hi_open ? v < f->hi : v <= f->hi))
    return 0;
  return 1;
}

static void
range_text(const struct field *f, char *buf, size_t len)
{
  char lo[32], hi[32];

  qrs__fmt_double(f->lo, lo, sizeof(lo));
  qrs__fmt_double(f->hi, hi, sizeof(hi));
  if (!isnan(f->lo) && !isnan(f->hi))
    snprintf(buf, len, "%s %s, %s %s", f->lo_open ? ">" : ">=", lo,
             f->hi_open ? "<" : "<=", hi);
  else if (!isnan(f->lo))
    snprintf(buf, len, "%s %s", f->lo_open ? ">" : ">=", lo);
  else
    snprintf(buf, len, "%s %s", f->hi_open ? "<" : "<=", hi);
}

/* 0 when v is within f's range, else QRS_E_CONFIG_VALUE with the
   reason (text: v as the user wrote it) in err. */
static int
check_range(const struct field *f, double v, const char *text, char *err,
            size_t errlen)
{
  char rng[80];

  if (range_ok(f, v))
    return 0;
  range_text(f, rng, sizeof(rng));
  qrs__cfg_seterr(err, errlen, "%s: %s is out of range (%s)", f->name, text,
                  rng);
  return QRS_E_CONFIG_VALUE;
}

/* text is not what field f takes (what: "a number", ...):
   QRS_E_CONFIG_VALUE with the reason in err. */
static int
not_a(const struct field *f, const char *what, const char *text, char *err,
      size_t errlen)
{
  qrs__cfg_seterr(err, errlen, "%s: not %s: '%s'", f->name, what, text);
  return QRS_E_CONFIG_VALUE;
}

/* A number for field f (v: its value; text: as the user wrote it): its
   size bytes at val copied to base when v is within f's range.  0 or
   QRS_E_CONFIG_VALUE (err set). */
static int
store_in_range(const struct field *f, double v, const void *val, size_t size,
               char *base, const char *text, char *err, size_t errlen)
{
  if (check_range(f, v, text, err, errlen) < 0)
    return QRS_E_CONFIG_VALUE;
  memcpy(base, val, size);
  return 0;
}

/* Parse text for field f into v.  0 or QRS_E_CONFIG_VALUE (err set). */
int
qrs__cfg_parse(const struct field *f, const char *text, struct qrs__cfgvals *v,
               char *err, size_t errlen)
{
  char *base;
  double d;
  long long ll;
  int b;
  size_t i, l;

  base = (char *)v + f->off;
  switch (f->type) {
  case F_DBL:
    if (parse_double(text, &d) < 0)
      return not_a(f, "a number", text, err, errlen);
    return store_in_range(f, d, &d, sizeof(d), base, text, err, errlen);
  case F_INT:
    if (parse_int(text, &ll) < 0)
      return not_a(f, "an integer", text, err, errlen);
    return store_in_range(f, (double)ll, &ll, sizeof(ll), base, text, err,
                          errlen);
  case F_BOOL:
    if (parse_bool(text, &b) < 0)
      return not_a(f, "a boolean", text, err, errlen);
    memcpy(base, &b, sizeof(b));
    return 0;
  case F_STR:
    l = strlen(text);
    if (l >= f->size) {
      qrs__cfg_seterr(err, errlen, "%s: longer than %zu bytes", f->name,
                      f->size - 1);
      return QRS_E_CONFIG_VALUE;
    }
    if (f->choices) {
      for (i = 0; f->choices[i]; i++)
        if (!strcmp(f->choices[i], text))
          break;
      if (!f->choices[i]) {
        qrs__cfg_seterr(err, errlen, "%s: unknown value '%s'", f->name, text);
        return QRS_E_CONFIG_VALUE;
      }
    }
    memcpy(base, text, l + 1);
    return 0;
  }
  return QRS_E_CONFIG_VALUE;
}

void
qrs__cfg_copy_field(const struct field *f, struct qrs__cfgvals *dst,
                    const struct qrs__cfgvals *src)
{
  size_t sz;

  switch (f->type) {
  case F_DBL:
    sz = sizeof(double);
    break;
  case F_INT:
    sz = sizeof(long long);
    break;
  case F_BOOL:
    sz = sizeof(int);
    break;
  default:
    sz = f->size;
    break;
  }
  memcpy((char *)dst + f->off, (const char *)src + f->off, sz);
}

/* The field's value as text (buf of len). */
void
qrs__cfg_field_text(const struct field *f, const struct qrs__cfgvals *v,
                    char *buf, size_t len)
{
  const char *base;
  double d;
  long long ll;
  int b;

  base = (const char *)v + f->off;
  switch (f->type) {
  case F_DBL:
    memcpy(&d, base, sizeof(d));
    qrs__fmt_double(d, buf, len);
    break;
  case F_INT:
    memcpy(&ll, base, sizeof(ll));
    snprintf(buf, len, "%lld", ll);
    break;
  case F_BOOL:
    memcpy(&b, base, sizeof(b));
    snprintf(buf, len, "%s", b ? "true" : "false");
    break;
  case F_STR:
    snprintf(buf, len, "%s", base);
    break;
  }
}

void
qrs__cfg_defaults(struct qrs__cfgvals *v)
{
  size_t i;

  memset(v, 0, sizeof(*v));
  for (i = 0; i < QRS__NFIELDS; i++)
    qrs__cfg_parse(&qrs__cfg_fields[i], qrs__cfg_fields[i].def, v, NULL, 0);
}

/* Every double field must be finite and at most this large in magnitude;
   the values set accept what the reference accepts (NaN, infinities),
   the check of the whole configuration refuses them. */
#define DBL_SANE_MAX 1e6

/* Tighter ranges, checked with the whole configuration, for double fields
   that the table above leaves open (probabilities, the amplifier's
   constants, EMA weights). */
static const struct {
  const char *name;
  double lo, hi;
  unsigned char lo_open, hi_open;
} sane_ranges[] = {
  { "population_mean", 0.0, 255.0, 0, 0 },
  { "population_std", 0.0, 127.5, 1, 0 },
  { "uniform_clamp_epsilon", 0.0, 0.5, 1, 1 },
  { "top_p", 0.0, 1.0, 0, 0 },
  { "hvh_min_p_base", 0.0, 1.0, 0, 0 },
  { "hvh_lambda_ema", 0.0, 1.0, 0, 0 },
  { "tt_min_p_base", 0.0, 1.0, 0, 0 },
  { "evdt_min_p_base", 0.0, 1.0, 0, 0 },
  { "gdt_min_p_base", 0.0, 1.0, 0, 0 },
  { "belltemp_min_p_base", 0.0, 1.0, 0, 0 },
};

/* Each double field finite, within DBL_SANE_MAX and its sane range. */
static int
check_doubles(const struct qrs__cfgvals *v, char *err, size_t errlen)
{
  char txt[32];
  struct field f;
  size_t i, k;
  double d;

  for (i = 0; i < QRS__NFIELDS; i++) {
    if (qrs__cfg_fields[i].type != F_DBL)
      continue;
    memcpy(&d, (const char *)v + qrs__cfg_fields[i].off, sizeof(d));
    qrs__fmt_double(d, txt, sizeof(txt));
    if (!isfinite(d)) {
      qrs__cfg_seterr(err, errlen, "%s: %s is not a finite number",
                      qrs__cfg_fields[i].name, txt);
      return QRS_E_CONFIG_VALUE;
    }
    if (fabs(d) > DBL_SANE_MAX) {
      qrs__cfg_seterr(err, errlen,
                      "%s: %s is out of range (magnitude at most 1e6)",
                      qrs__cfg_fields[i].name, txt);
      return QRS_E_CONFIG_VALUE;
    }
    for (k = 0; k < sizeof(sane_ranges) / sizeof(sane_ranges[0]); k++) {
      if (strcmp(sane_ranges[k].name, qrs__cfg_fields[i].name) != 0)
        continue;
      f = qrs__cfg_fields[i];
      f.lo = sane_ranges[k].lo;
      f.hi = sane_ranges[k].hi;
      f.lo_open = sane_ranges[k].lo_open;
      f.hi_open = sane_ranges[k].hi_open;
      if (check_range(&f, d, txt, err, errlen) < 0)
        return QRS_E_CONFIG_VALUE;
    }
  }
  return 0;
}

/* entropy_throttle and mirostat_v2 cut the nucleus themselves. */
static int
cuts_nucleus(const char *strategy)
{
  return !strcmp(strategy, "entropy_throttle") ||
         !strcmp(strategy, "mirostat_v2");
}

int
qrs__config_check(const struct qrs__cfgvals *v, char *err, size_t errlen)
{
  int r;

  r = check_doubles(v, err, errlen);
  if (r < 0)
    return r;
  if (v->truncate_first && strcmp(v->stage_order, "reference") != 0) {
    qrs__cfg_seterr(err, errlen,
                    "truncate_first: only with stage_order reference (not "
                    "'%s')", v->stage_order);
    return QRS_E_CONFIG_VALUE;
  }
  if (v->throttle_p_min > v->throttle_p_max) {
    qrs__cfg_seterr(err, errlen, "throttle_p_min: above throttle_p_max");
    return QRS_E_CONFIG_VALUE;
  }
  if (cuts_nucleus(v->temperature_strategy) &&
      strcmp(v->stage_order, "reference") != 0) {
    qrs__cfg_seterr(err, errlen,
                    "temperature_strategy: %s cuts the nucleus itself: only "
                    "with stage_order reference", v->temperature_strategy);
    return QRS_E_CONFIG_VALUE;
  }
  if (!strcmp(v->temperature_strategy, "coherence_gate") &&
      cuts_nucleus(v->coherence_inner_strategy) &&
      strcmp(v->stage_order, "reference") != 0) {
    qrs__cfg_seterr(err, errlen,
                    "coherence_inner_strategy: %s cuts the nucleus itself: "
                    "only with stage_order reference",
                    v->coherence_inner_strategy);
    return QRS_E_CONFIG_VALUE;
  }
  return 0;
}

int
qrs__cfgvals_text(const struct qrs__cfgvals *v, const char *field,
                  char *buf, size_t len)
{
  int k;

  k = qrs__cfg_field_index(field);
  if (k < 0)
    return QRS_E_CONFIG_FIELD;
  qrs__cfg_field_text(&qrs__cfg_fields[k], v, buf, len);
  return 0;
}

