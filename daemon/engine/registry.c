/* The source registry: lookup, fallback, admission, health, statistics.
   See registry.h for the contract.

   A request walks a chain of legs: the source asked for, then its
   fallback, then the fallback's fallback.  Each leg is one source fetch
   with its own buffer.  A leg whose deadline passed is abandoned (its
   request moves on without it) and freed when the source completes it,
   so a late source never writes into memory that was handed on, and its
   bytes count against the budget until then. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qrs/error.h>

#include "base/log.h"
#include "base/notify.h"
#include "sources/local.h"
#include "engine/registry.h"
#include "sources/source.h"

#define FALLBACK_RESERVE_MAX_NS 1000000000LL

struct rsrc {
  struct registry *reg;
  struct source *src;
  unsigned refs;                /* requests asking for it, legs and
                                   server draws running on it */
  int retired;                  /* a reload removed or replaced it: in
                                   reg->old until refs is 0 */
  char *fallback;               /* "error" or a source name */
  int builtin;
  int disabled;                 /* by an operator: takes no fetches */
  enum reg_state state;
  uint64_t draws;
  uint64_t bytes;
  uint64_t failures;
  uint64_t timeouts;
  uint64_t fallbacks;
  uint64_t refusals;
  char last_failure[192];
  int64_t last_failure_ns;
  struct log_ratelimit warn_rl;
};

struct registry {
  uv_loop_t *loop;
  struct rsrc **v;
  size_t n;
  size_t cap;
  struct rsrc *def;
  struct reg_limits lim;
  size_t bytes_held;            /* buffers of legs not yet completed */
  uint64_t bytes_total;
  reg_observer_fn observer;
  void *observer_ctx;
  char last_used[CONF_MAX_SOURCE_NAME + 1];
  struct rsrc **old;            /* retired, still referenced */
  size_t n_old;
};

struct request;

struct leg {
  struct source_fetch f;
  struct registry *reg;
  struct reg_owner *owner;
  struct rsrc *rs;
  struct request *rq;           /* NULL: abandoned at its deadline */
  int64_t start_ns;
};

struct request {
  struct registry *reg;
  struct reg_owner *owner;
  struct rsrc *asked;
  struct leg *leg;              /* the leg running, or NULL */
  unsigned leg_gen;
  size_t n;
  uint64_t nonce;
  int64_t deadline_ns;
  reg_done_fn done;
  void *ctx;
  uv_timer_t timer;
  int timer_init;
  int starting;                 /* depth of try_leg() on the stack */
  int finished;
  int timed_out;                /* some leg hit its deadline */
  int study;                    /* a study draw: no fallback, and the
                                   source counts nothing of it */
  uint8_t stream[12];           /* a study draw's stream nonce */
  unsigned depth;
  struct rsrc *failed[8];       /* legs that failed, for their state */
  unsigned n_failed;
  char why[400];
};

const char *
registry_state_name(enum reg_state s)
{
  switch (s) {
  case REG_OK:
    return "ok";
  case REG_DEGRADED:
    return "degraded";
  case REG_FAILED:
    return "failed";
  }
  return "unknown";
}

/* ---- sources ---------------------------------------------------------- */

static struct rsrc *
find(const struct registry *reg, const char *name)
{
  size_t i;

  for (i = 0; i < reg->n; i++)
    if (!strcmp(reg->v[i]->src->name, name))
      return reg->v[i];
  return NULL;
}

static void
rsrc_free(struct rsrc *rs)
{
  source_free(rs->src);
  free(rs->fallback);
  free(rs);
}

/* A retired source with nothing in flight: stopped now, freed two loop
   iterations later.  Its stop closes libuv handles inside it (a local
   source's completion queue) whose close callbacks run in the loop's
   closing phase; freeing it at once would leave them pointing into freed
   memory.  A zero timer twice over runs after any closing phase that can
   hold them. */
struct deferred {
  uv_timer_t t;
  struct rsrc *rs;
  int hops;
};

static void
on_deferred_closed(uv_handle_t *h)
{
  free(h->data);
}

static void
on_deferred(uv_timer_t *t)
{
  struct deferred *d = t->data;

  if (++d->hops < 2) {
    uv_timer_start(t, on_deferred, 0, 0);
    return;
  }
  rsrc_free(d->rs);
  uv_close((uv_handle_t *)t, on_deferred_closed);
}

static void
close_retired(struct rsrc *rs)
{
  struct registry *reg = rs->reg;
  struct deferred *d;
  struct rsrc **v;

  if (rs->src->ops->stop)
    rs->src->ops->stop(rs->src);
  d = calloc(1, sizeof(*d));
  if (d && uv_timer_init(reg->loop, &d->t) == 0) {
    d->rs = rs;
    d->t.data = d;
    uv_timer_start(&d->t, on_deferred, 0, 0);
    return;
  }
  free(d);
  /* out of memory: kept (stopped) and freed with the registry */
  v = realloc(reg->old, (reg->n_old + 1) * sizeof(*v));
  if (v) {
    reg->old = v;
    reg->old[reg->n_old++] = rs;
  } else {
    log_warn("source '%s': out of memory closing it: it is not freed",
             rs->src->name);
  }
}

static void
ref(struct rsrc *rs)
{
  rs->refs++;
}

/* A retired source goes when its last draw in flight is done. */
static void
unref(struct rsrc *rs)
{
  struct registry *reg = rs->reg;
  size_t i;

  if (--rs->refs || !rs->retired)
    return;
  for (i = 0; i < reg->n_old; i++)
    if (reg->old[i] == rs) {
      reg->old[i] = reg->old[--reg->n_old];
      break;
    }
  log_info("source '%s': its last draw in flight is done; closed",
           rs->src->name);
  close_retired(rs);
}

static int
add(struct registry *reg, struct source *s, const char *fb, int builtin)
{
  struct rsrc **v, *rs;
  size_t cap;

  if (reg->n == reg->cap) {
    cap = reg->cap ? 2 * reg->cap : 8;
    v = realloc(reg->v, cap * sizeof(*v));
    if (!v)
      return -ENOMEM;
    reg->v = v;
    reg->cap = cap;
  }
  rs = calloc(1, sizeof(*rs));
  if (!rs)
    return -ENOMEM;
  rs->fallback = strdup(fb && *fb ? fb : "error");
  if (!rs->fallback) {
    free(rs);
    return -ENOMEM;
  }
  rs->reg = reg;
  rs->src = s;
  rs->builtin = builtin;
  rs->state = REG_OK;
  reg->v[reg->n++] = rs;
  return 0;
}

/* Create the built-in "system" / "mock" sources that fallbacks name but
   the config does not declare. */
static int
ensure_builtins(struct registry *reg, char *err, size_t errlen)
{
  struct conf_source cs;
  struct source *s;
  size_t i;
  int r;

  for (i = 0; i < reg->n; i++) {
    const char *fb = reg->v[i]->fallback;

    if (find(reg, fb) || (strcmp(fb, "system") && strcmp(fb, "mock")))
      continue;
    memset(&cs, 0, sizeof(cs));
    cs.name = (char *)fb;
    cs.type = strcmp(fb, "system") ? CONF_SOURCE_MOCK : CONF_SOURCE_SYSTEM;
    cs.fallback = (char *)"error";
    r = source_new(&cs, reg->loop, &s, err, errlen);
    if (r < 0)
      return r;
    r = add(reg, s, "error", 1);
    if (r < 0) {
      source_free(s);
      snprintf(err, errlen, "out of memory");
      return r;
    }
    log_info("source '%s' is a fallback and not declared: using a "
             "built-in %s source", fb, fb);
  }
  return 0;
}

int
registry_new(uv_loop_t *loop, const struct qrsd_conf *conf,
             const struct reg_limits *limits, struct registry **ret_reg,
             char *err, size_t errlen)
{
  struct registry *reg;
  struct source *s;
  size_t i;
  int r;

  reg = calloc(1, sizeof(*reg));
  if (!reg)
    return -ENOMEM;
  reg->loop = loop;
  reg->lim = *limits;
  for (i = 0; i < conf->n_sources; i++) {
    notify_step("opening source '%s'", conf->sources[i].name);
    r = source_new(&conf->sources[i], loop, &s, err, errlen);
    if (r == 0)
      s->draw_bytes = conf->amp_sample_count;
    if (r < 0)
      goto fail;
    r = add(reg, s, conf->sources[i].fallback, 0);
    if (r < 0) {
      source_free(s);
      snprintf(err, errlen, "out of memory");
      goto fail;
    }
  }
  r = ensure_builtins(reg, err, errlen);
  if (r < 0)
    goto fail;
  for (i = 0; i < reg->n && !conf->allow_test_sources; i++)
    if (!reg->v[i]->src->ops->production) {
      snprintf(err, errlen, "source '%s' is a %s source, for tests only; "
               "it serves only with allow_test_sources: true",
               reg->v[i]->src->name, reg->v[i]->src->ops->type);
      r = -EPERM;
      goto fail;
    }
  reg->def = find(reg, conf->default_source);
  if (!reg->def || reg->def->builtin) {
    snprintf(err, errlen, "default source '%s' is not declared",
             conf->default_source);
    r = -EINVAL;
    goto fail;
  }
  *ret_reg = reg;
  return 0;

fail:
  registry_free(reg);
  return r;
}

/* ---- reload ----------------------------------------------------------- */

struct reg_reload {
  struct source **s;            /* by next's source index; NULL: keep */
  unsigned char *quota;         /* kept, with new quota limits */
  size_t n;
};

void
registry_reload_abort(struct reg_reload *rl)
{
  size_t i;

  if (!rl)
    return;
  for (i = 0; i < rl->n; i++)
    source_free(rl->s[i]);
  free(rl->s);
  free(rl->quota);
  free(rl);
}

int
registry_reload_open(struct registry *reg, const struct qrsd_conf *cur,
                     const struct qrsd_conf *next, struct reg_reload **ret,
                     char *err, size_t errlen)
{
  const struct conf_source *a, *b;
  struct reg_reload *rl;
  struct rsrc *rs;
  size_t i;
  int r, same;

  rl = calloc(1, sizeof(*rl));
  if (rl)
    rl->s = calloc(next->n_sources ? next->n_sources : 1, sizeof(*rl->s));
  if (rl)
    rl->quota = calloc(next->n_sources ? next->n_sources : 1, 1);
  if (!rl || !rl->s || !rl->quota) {
    if (rl)
      free(rl->s);
    free(rl);
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  rl->n = next->n_sources;
  for (i = 0; i < next->n_sources; i++) {
    b = &next->sources[i];
    a = conf_find_source(cur, b->name);
    rs = find(reg, b->name);
    same = a && rs && !rs->builtin ? conf_source_same(a, b, 0) : 0;
    /* Only its quota limits changed: it keeps running, and its use. */
    if (same == 0 && a && rs && !rs->builtin && rs->src->ops->set_quota &&
        conf_source_same(a, b, 1) == 1) {
      rl->quota[i] = 1;
      continue;
    }
    if (same < 0) {
      r = same;
      snprintf(err, errlen, "out of memory");
      goto fail;
    }
    if (same)
      continue;
    /* The opens are those startup makes: none reads a device or waits
       for the network (a device's start-up test, a noise source's
       warm-up and a gRPC channel's connection happen on their own
       threads, at the first fetch). */
    r = source_new(b, reg->loop, &rl->s[i], err, errlen);
    if (r < 0) {
      rl->s[i] = NULL;
      goto fail;
    }
    rl->s[i]->draw_bytes = cur->amp_sample_count;
    if (!rl->s[i]->ops->production && !next->allow_test_sources) {
      snprintf(err, errlen, "%s:%d: sources.%s.type: a %s source is for "
               "tests only; it serves only with allow_test_sources: true",
               next->file, b->line, b->name, rl->s[i]->ops->type);
      r = -EPERM;
      goto fail;
    }
  }
  *ret = rl;
  return 0;

fail:
  registry_reload_abort(rl);
  return r;
}

static void
retire(struct registry *reg, struct rsrc *rs, const char *why)
{
  struct rsrc **v;

  rs->retired = 1;
  if (!rs->refs) {
    log_info("source '%s' %s: closed", rs->src->name, why);
    close_retired(rs);
    return;
  }
  log_info("source '%s' %s: takes no new draws; closed when the draws "
           "in flight on it are done", rs->src->name, why);
  v = realloc(reg->old, (reg->n_old + 1) * sizeof(*v));
  if (!v) {
    /* Not freed then, and not lost: it is freed with the registry. */
    log_warn("source '%s': out of memory retiring it", rs->src->name);
    rs->retired = 0;
    return;
  }
  reg->old = v;
  reg->old[reg->n_old++] = rs;
}

static int
named_fallback(const struct qrsd_conf *conf, const char *name)
{
  size_t i;

  for (i = 0; i < conf->n_sources; i++)
    if (!strcmp(conf->sources[i].fallback, name))
      return 1;
  return 0;
}

int
registry_reload_commit(struct registry *reg, struct reg_reload *rl,
                       const struct qrsd_conf *conf, char *err,
                       size_t errlen)
{
  struct rsrc **old, **v, *rs;
  size_t i, j, n_old;
  char *fb;
  int r;

  v = calloc(conf->n_sources + 8, sizeof(*v));
  if (!v) {
    registry_reload_abort(rl);
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  old = reg->v;
  n_old = reg->n;
  reg->v = v;
  reg->n = 0;
  reg->cap = conf->n_sources + 8;
  r = 0;
  for (i = 0; i < conf->n_sources; i++) {
    if (rl->s[i]) {
      /* A source replaced: the new one takes the old one's quota use. */
      for (j = 0; j < n_old; j++)
        if (old[j] && !old[j]->builtin &&
            old[j]->src->ops == rl->s[i]->ops && rl->s[i]->ops->take_use &&
            !strcmp(old[j]->src->name, conf->sources[i].name)) {
          rl->s[i]->ops->take_use(rl->s[i], old[j]->src);
          break;
        }
      /* add() cannot fail here: the array has room, but its strdup may */
      if (add(reg, rl->s[i], conf->sources[i].fallback, 0) < 0) {
        source_free(rl->s[i]);
        r = -ENOMEM;
      }
      rl->s[i] = NULL;
      continue;
    }
    for (j = 0; j < n_old; j++)
      if (old[j] && !old[j]->builtin &&
          !strcmp(old[j]->src->name, conf->sources[i].name))
        break;
    if (j == n_old)
      continue;                 /* not possible: reload_open opened it */
    rs = old[j];
    old[j] = NULL;
    if (rl->quota[i] &&
        rs->src->ops->set_quota(rs->src, &conf->sources[i]) < 0) {
      snprintf(err, errlen, "source '%s': cannot change its quota limits",
               rs->src->name);
      r = -ENOMEM;
    } else if (rl->quota[i]) {
      log_info("source '%s': new quota limits, its use kept",
               rs->src->name);
    }
    if (strcmp(rs->fallback, conf->sources[i].fallback)) {
      fb = strdup(conf->sources[i].fallback);
      if (fb) {
        free(rs->fallback);
        rs->fallback = fb;
      } else {
        r = -ENOMEM;
      }
    }
    reg->v[reg->n++] = rs;
  }
  /* Built-in fallbacks stay while some fallback names them and no
     declared source took their name. */
  for (j = 0; j < n_old; j++) {
    rs = old[j];
    if (!rs)
      continue;
    if (rs->builtin && !find(reg, rs->src->name) &&
        named_fallback(conf, rs->src->name) && reg->n < reg->cap)
      reg->v[reg->n++] = rs;
    else
      retire(reg, rs, find(reg, rs->src->name) ? "replaced by the reload" :
             "removed by the reload");
  }
  free(old);
  registry_reload_abort(rl);
  if (ensure_builtins(reg, err, errlen) < 0)
    r = -ENOMEM;
  reg->def = find(reg, conf->default_source);
  if (!reg->def && reg->n)
    reg->def = reg->v[0];     /* the loader makes default_source declared */
  if (reg->observer)
    reg->observer(reg->observer_ctx, 1);
  if (r < 0 && err[0] == '\0')
    snprintf(err, errlen, "out of memory");
  return r;
}

int
registry_add(struct registry *reg, struct source *s, const char *fb)
{
  char err[256];
  int r;

  if (find(reg, s->name))
    return -EEXIST;
  r = add(reg, s, fb, 0);
  if (r < 0)
    return r;
  if (!reg->def)
    reg->def = reg->v[reg->n - 1];
  return ensure_builtins(reg, err, sizeof(err));
}

void
registry_set_limits(struct registry *reg, const struct reg_limits *limits)
{
  reg->lim = *limits;
}

int
registry_set_fallbacks(struct registry *reg, const struct qrsd_conf *conf)
{
  struct rsrc *rs;
  char *fb;
  size_t i;
  int r;

  r = 0;
  for (i = 0; i < conf->n_sources; i++) {
    rs = find(reg, conf->sources[i].name);
    if (!rs || rs->builtin || !strcmp(rs->fallback, conf->sources[i].fallback))
      continue;
    fb = strdup(conf->sources[i].fallback);
    if (!fb) {
      r = -ENOMEM;
      continue;
    }
    free(rs->fallback);
    rs->fallback = fb;
  }
  return r;
}

int
registry_set_disabled(struct registry *reg, const char *name, int disabled)
{
  struct rsrc *rs;

  rs = find(reg, name);
  if (!rs || rs->builtin)
    return -ENOENT;
  if (rs->disabled == !!disabled)
    return 0;
  rs->disabled = !!disabled;
  log_ev(LOG_LEVEL_WARN, &(struct log_fields){
           .event = disabled ? "source-disabled" : "source-enabled",
           .source = rs->src->name },
         "source '%s' %s by an operator%s", rs->src->name,
         disabled ? "disabled" : "enabled",
         disabled ? ": its requests go to its fallback" : "");
  if (reg->observer)
    reg->observer(reg->observer_ctx, 1);
  return 1;
}

int
registry_quota_reset(struct registry *reg, const char *name, char *why,
                     size_t whylen)
{
  struct rsrc *rs;
  int r;

  rs = find(reg, name);
  if (!rs || rs->builtin)
    return -ENOENT;
  if (!rs->src->ops->quota_reset) {
    snprintf(why, whylen, "source '%s' is a %s source: it has no quota",
             rs->src->name, rs->src->ops->type);
    return -ENOSYS;
  }
  r = rs->src->ops->quota_reset(rs->src, why, whylen);
  if (r == 0) {
    log_ev(LOG_LEVEL_WARN, &(struct log_fields){ .event = "quota-reset",
                                                 .source = rs->src->name },
           "source '%s': quota use reset to 0 by an operator",
           rs->src->name);
    if (reg->observer)
      reg->observer(reg->observer_ctx, 1);
  }
  return r;
}

/* Stop the n sources of v (the registry's, or its retired ones). */
static void
stop_all(struct rsrc **v, size_t n)
{
  size_t i;

  for (i = 0; i < n; i++)
    if (v[i]->src->ops->stop)
      v[i]->src->ops->stop(v[i]->src);
}

void
registry_stop(struct registry *reg)
{
  stop_all(reg->v, reg->n);
  stop_all(reg->old, reg->n_old);
}

/* Free the n sources of v, then v. */
static void
free_all(struct rsrc **v, size_t n)
{
  size_t i;

  for (i = 0; i < n; i++)
    rsrc_free(v[i]);
  free(v);
}

void
registry_free(struct registry *reg)
{
  if (!reg)
    return;
  free_all(reg->v, reg->n);
  free_all(reg->old, reg->n_old);
  free(reg);
}

int
registry_has(const struct registry *reg, const char *name)
{
  const struct rsrc *rs;

  if (!name || !*name)
    return 1;
  rs = find(reg, name);
  return rs && !rs->builtin;
}

const char *
registry_default(const struct registry *reg)
{
  return reg->def->src->name;
}

int
registry_type(const struct registry *reg, const char *name,
              const char **type, int *production)
{
  const struct rsrc *rs;

  rs = name && *name ? find(reg, name) : reg->def;
  if (!rs)
    return -ENOENT;
  *type = rs->src->ops->type;
  *production = rs->src->ops->production;
  return 0;
}

size_t
registry_count(const struct registry *reg)
{
  return reg->n;
}

uint64_t
registry_bytes(const struct registry *reg)
{
  return reg->bytes_total;
}

size_t
registry_bytes_held(const struct registry *reg)
{
  return reg->bytes_held;
}

void
registry_info(const struct registry *reg, size_t i, struct reg_info *info)
{
  const struct rsrc *rs;

  rs = reg->v[i];
  memset(info, 0, sizeof(*info));
  info->name = rs->src->name;
  info->type = rs->src->ops->type;
  info->production = rs->src->ops->production;
  info->is_default = rs == reg->def;
  info->builtin = rs->builtin;
  info->disabled = rs->disabled;
  info->fallback = rs->fallback;
  info->state = rs->state;
  info->draws = rs->draws;
  info->bytes = rs->bytes;
  info->failures = rs->failures;
  info->timeouts = rs->timeouts;
  info->fallbacks = rs->fallbacks;
  info->refusals = rs->refusals;
  info->last_failure = rs->last_failure;
  info->last_failure_ns = rs->last_failure_ns;
  if (rs->src->ops->upstream_stats) {
    info->has_upstream = 1;
    rs->src->ops->upstream_stats(rs->src, &info->up);
  }
  if (rs->disabled) {
    snprintf(info->detail, sizeof(info->detail), "disabled by an operator "
             "(qrsctl source enable %s)", rs->src->name);
  } else if (rs->state != REG_OK && rs->last_failure[0]) {
    snprintf(info->detail, sizeof(info->detail), "%s%s",
             rs->state == REG_DEGRADED ? "serving from its fallback: " : "",
             rs->last_failure);
  } else {
    source_describe(rs->src, info->detail, sizeof(info->detail));
    if (rs->builtin) {
      size_t len = strlen(info->detail);

      snprintf(info->detail + len, sizeof(info->detail) - len,
               " [built-in fallback]");
    }
  }
}

int
registry_has_local_stats(const struct registry *reg, size_t i)
{
  return reg->v[i]->src->ops->local_stats != NULL;
}

int
registry_local_stats(const struct registry *reg, size_t i,
                     struct local_stats *st)
{
  struct source *src = reg->v[i]->src;

  memset(st, 0, sizeof(*st));
  if (!src->ops->local_stats)
    return -ENOSYS;
  src->ops->local_stats(src, st);
  return 0;
}

enum reg_state
registry_health(const struct registry *reg, char *msg, size_t len)
{
  size_t i, bad;

  bad = 0;
  for (i = 0; i < reg->n; i++)
    bad += reg->v[i]->state != REG_OK;
  if (reg->def->state == REG_FAILED) {
    snprintf(msg, len, "default source '%s' is failing: %.160s",
             reg->def->src->name, reg->def->last_failure);
    return REG_FAILED;
  }
  if (bad) {
    for (i = 0; i < reg->n; i++)
      if (reg->v[i]->state != REG_OK)
        break;
    snprintf(msg, len, "%zu of %zu sources degraded or failing (first: "
             "'%s' %s: %.120s)", bad, reg->n, reg->v[i]->src->name,
             registry_state_name(reg->v[i]->state),
             reg->v[i]->last_failure);
    return REG_DEGRADED;
  }
  /* Disabled by an operator: not a fault while a fallback serves its
     draws; without one, the draws naming it fail. */
  for (i = 0; i < reg->n; i++)
    if (reg->v[i]->disabled && !strcmp(reg->v[i]->fallback, "error")) {
      snprintf(msg, len, "source '%s' is disabled by an operator and has "
               "no fallback: draws from it fail", reg->v[i]->src->name);
      return REG_DEGRADED;
    }
  for (i = 0, bad = 0; i < reg->n; i++)
    bad += reg->v[i]->disabled != 0;
  if (bad == 0) {
    snprintf(msg, len, "all %zu sources healthy", reg->n);
    return REG_OK;
  }
  for (i = 0; i < reg->n; i++)
    if (reg->v[i]->disabled)
      break;
  snprintf(msg, len, "all %zu sources healthy; %zu disabled by an operator "
           "(first: '%s'), their draws served by their fallbacks", reg->n,
           bad, reg->v[i]->src->name);
  return REG_OK;
}

static void
on_draw_done(struct source_draw *d)
{
  struct rsrc *rs = d->reg_rs;

  d->done = d->reg_done;
  d->done(d);
  unref(rs);
}

int
registry_draw(struct registry *reg, const char *name, struct source_draw *d)
{
  struct rsrc *rs;
  char why[160];
  int r;

  rs = name && *name ? find(reg, name) : reg->def;
  if (!rs || rs->builtin)
    return -ENOENT;
  if (!rs->src->ops->draw)
    return -ENOSYS;
  if (rs->disabled) {
    rs->refusals++;
    snprintf(d->why, sizeof(d->why), "source '%s' is disabled",
             rs->src->name);
    return -EPERM;
  }
  if (rs->src->ops->admit) {
    why[0] = '\0';
    r = rs->src->ops->admit(rs->src, d->block_bytes ? d->block_bytes : 1,
                            why, sizeof(why));
    if (r < 0) {
      rs->refusals++;
      snprintf(d->why, sizeof(d->why), "%s", why);
      return r;
    }
  }
  /* The source stays until the draw is done, also if a reload retires
     it meanwhile. */
  d->reg_done = d->done;
  d->reg_rs = rs;
  d->done = on_draw_done;
  ref(rs);
  r = rs->src->ops->draw(rs->src, d);
  if (r < 0) {
    d->done = d->reg_done;
    unref(rs);
  }
  return r;
}

void
registry_set_observer(struct registry *reg, reg_observer_fn fn, void *ctx)
{
  reg->observer = fn;
  reg->observer_ctx = ctx;
}

const char *
registry_last_used(const struct registry *reg)
{
  return reg->last_used;
}

uint64_t
registry_fallbacks(const struct registry *reg)
{
  uint64_t n = 0;
  size_t i;

  for (i = 0; i < reg->n; i++)
    n += reg->v[i]->fallbacks;
  return n;
}

/* ---- state and statistics --------------------------------------------- */

static void
set_state(struct registry *reg, struct rsrc *rs, enum reg_state st)
{
  if (rs->state == st)
    return;
  if (st == REG_OK)
    log_ev(LOG_LEVEL_INFO, &(struct log_fields){ .event = "source-recovered",
                                                 .source = rs->src->name },
           "source '%s' recovered", rs->src->name);
  else if (st == REG_DEGRADED)
    log_ev(LOG_LEVEL_WARN, &(struct log_fields){ .event = "source-degraded",
                                                 .source = rs->src->name },
           "source '%s' degraded: its requests are served by its "
           "fallback '%s' (%s)", rs->src->name, rs->fallback,
           rs->last_failure);
  else
    log_ev(LOG_LEVEL_WARN, &(struct log_fields){ .event = "source-failed",
                                                 .source = rs->src->name },
           "source '%s' failed: its requests fail (%s)", rs->src->name,
           rs->last_failure);
  rs->state = st;
  if (reg->observer)
    reg->observer(reg->observer_ctx, 1);
}

/* Why rs did not serve rq, for the reply when no leg serves it. */
static void
note_why(struct request *rq, const struct rsrc *rs, const char *why)
{
  size_t len = strlen(rq->why);

  snprintf(rq->why + len, sizeof(rq->why) - len, "%ssource '%s': %s",
           len ? "; " : "", rs->src->name, why);
}

static void
note_failure(struct request *rq, struct rsrc *rs, int status,
             const char *why)
{
  struct ts now;

  if (rq->study) {
    /* nothing of a study draw shows on its arm's source */
    note_why(rq, rs, why);
    if (status == -ETIMEDOUT)
      rq->timed_out = 1;
    return;
  }
  ts_now(&now);
  snprintf(rs->last_failure, sizeof(rs->last_failure), "%s", why);
  rs->last_failure_ns = now.realtime_ns;
  if (rq->n_failed < sizeof(rq->failed) / sizeof(rq->failed[0]))
    rq->failed[rq->n_failed++] = rs;
  note_why(rq, rs, why);
  if (status == -ETIMEDOUT)
    rq->timed_out = 1;
  /* The first failure is the state transition's log line. */
  if (rs->state != REG_OK)
    log_limited(&rs->warn_rl, LOG_LEVEL_WARN, "source '%s': %s",
                rs->src->name, why);
}

/* ---- requests --------------------------------------------------------- */

static void try_leg(struct request *rq, struct rsrc *rs);

static void
on_timer_closed(uv_handle_t *h)
{
  free(h->data);
}

static void
request_free(struct request *rq)
{
  unref(rq->asked);
  if (rq->timer_init)
    uv_close((uv_handle_t *)&rq->timer, on_timer_closed);
  else
    free(rq);
}

static void
finish(struct request *rq, struct reg_result *res)
{
  unsigned i;

  rq->finished = 1;
  if (rq->timer_init)
    uv_timer_stop(&rq->timer);
  for (i = 0; i < rq->n_failed; i++)
    set_state(rq->reg, rq->failed[i],
              res->status == 0 ? REG_DEGRADED : REG_FAILED);
  if (res->status == 0 && !rq->study)
    snprintf(rq->reg->last_used, sizeof(rq->reg->last_used), "%s",
             res->served_by);
  res->n = rq->n;
  res->source = rq->asked->src->name;
  res->why = res->status < 0 ? rq->why : "";
  rq->done(rq->ctx, res);
  if (res->status == 0 && rq->reg->observer)
    rq->reg->observer(rq->reg->observer_ctx, 0);
  if (!rq->starting)
    request_free(rq);
}

/* The leg at rs failed: on to its fallback, or the request fails. */
static void
next_leg(struct request *rq, struct rsrc *rs)
{
  struct reg_result res;
  struct rsrc *fb;

  fb = strcmp(rs->fallback, "error") && !rq->study ?
       find(rq->reg, rs->fallback) : NULL;
  if (fb && ++rq->depth <= rq->reg->n) {
    if (rs == rq->asked)
      rs->fallbacks++;
    try_leg(rq, fb);
    return;
  }
  memset(&res, 0, sizeof(res));
  res.status = rq->timed_out ? -ETIMEDOUT : QRS_E_ENTROPY;
  finish(rq, &res);
}

static void
leg_free(struct leg *leg)
{
  leg->reg->bytes_held -= leg->f.n;
  if (leg->owner) {
    leg->owner->held -= leg->f.n;
    leg->owner->put(leg->owner);
  }
  free(leg->f.buf);
  unref(leg->rs);
  free(leg);
}

static void
on_leg_done(struct source_fetch *f)
{
  struct reg_result res;
  struct request *rq;
  struct leg *leg;
  struct rsrc *rs;

  leg = f->ctx;
  rs = leg->rs;
  rq = leg->rq;
  if (!rq) {
    log_debug("source '%s': a fetch completed after its deadline (%s); "
              "discarded", rs->src->name, f->status ? f->why : "ok");
    leg_free(leg);
    return;
  }
  rq->leg = NULL;
  if (rs->src->ops->outcome)
    rs->src->ops->outcome(rs->src, f, f->status,
                          mono_now_ns() - leg->start_ns);
  if (f->status < 0) {
    rs->failures += !rq->study;
    note_failure(rq, rs, f->status, f->why);
    leg_free(leg);
    next_leg(rq, rs);
    return;
  }

  if (!rq->study) {
    rs->draws++;
    rs->bytes += f->n;
    rq->reg->bytes_total += f->n;
    set_state(leg->reg, rs, REG_OK);
  }
  memset(&res, 0, sizeof(res));
  res.status = 0;
  res.data = f->buf;
  res.served_by = rs->src->name;
  res.served_type = rs->src->ops->type;
  res.production = rs->src->ops->production;
  res.fallback = rs != rq->asked;
  res.generated = f->generated;
  res.echo = f->echo;
  finish(rq, &res);
  leg_free(leg);
}

static void
on_deadline(uv_timer_t *t)
{
  struct request *rq;
  struct leg *leg;
  struct rsrc *rs;
  char why[128];

  rq = t->data;
  leg = rq->leg;
  if (!leg)
    return;
  rs = leg->rs;
  leg->rq = NULL;
  rq->leg = NULL;
  if (!rq->study) {
    rs->failures++;
    rs->timeouts++;
  }
  if (rs->src->ops->outcome)
    rs->src->ops->outcome(rs->src, &leg->f, -ETIMEDOUT,
                          mono_now_ns() - leg->start_ns);
  if (rs->src->ops->cancel)
    rs->src->ops->cancel(rs->src, &leg->f);
  snprintf(why, sizeof(why), "%zu bytes not delivered within %lld ms",
           rq->n, (long long)((mono_now_ns() - leg->start_ns) / 1000000));
  note_failure(rq, rs, -ETIMEDOUT, why);
  next_leg(rq, rs);
}

/* The deadline of a leg at rs: the request's, less a reserve for the
   fallback when there is one. */
static int64_t
leg_deadline(const struct request *rq, const struct rsrc *rs, int64_t now)
{
  int64_t left, reserve;

  left = rq->deadline_ns - now;
  if (!strcmp(rs->fallback, "error") || rq->study || left <= 0)
    return rq->deadline_ns;
  reserve = left / 5;
  if (reserve > FALLBACK_RESERVE_MAX_NS)
    reserve = FALLBACK_RESERVE_MAX_NS;
  return rq->deadline_ns - reserve;
}

static void
try_leg(struct request *rq, struct rsrc *rs)
{
  struct registry *reg;
  struct leg *leg;
  char why[160];
  unsigned gen;
  int64_t now, dl;
  int r;

  reg = rq->reg;
  if (rs->disabled) {
    /* not a failure: its health stays what it was */
    rs->refusals += !rq->study;
    snprintf(why, sizeof(why), "disabled by an operator (qrsctl source "
             "enable %.64s)", rs->src->name);
    note_why(rq, rs, why);
    next_leg(rq, rs);
    return;
  }
  if (rs->src->ops->admit) {
    why[0] = '\0';
    r = rs->src->ops->admit(rs->src, rq->n, why, sizeof(why));
    if (r < 0) {
      rs->refusals += !rq->study;
      if (!why[0])
        snprintf(why, sizeof(why), "not admitted: %s", qrs_strerror(r));
      note_failure(rq, rs, r, why);
      next_leg(rq, rs);
      return;
    }
  }

  leg = calloc(1, sizeof(*leg));
  if (leg)
    leg->f.buf = malloc(rq->n ? rq->n : 1);
  if (!leg || !leg->f.buf) {
    free(leg);
    note_failure(rq, rs, -ENOMEM, "out of memory for the buffer");
    next_leg(rq, rs);
    return;
  }
  now = mono_now_ns();
  dl = leg_deadline(rq, rs, now);
  leg->reg = reg;
  leg->owner = rq->owner;
  if (leg->owner) {
    leg->owner->held += rq->n;
    leg->owner->get(leg->owner);
  }
  leg->rs = rs;
  ref(rs);
  leg->rq = rq;
  leg->start_ns = now;
  leg->f.src = rs->src;
  leg->f.n = rq->n;
  leg->f.deadline_ns = dl;
  leg->f.nonce = rq->nonce;
  leg->f.has_stream = rq->study;
  memcpy(leg->f.stream, rq->stream, sizeof(leg->f.stream));
  leg->f.done = on_leg_done;
  leg->f.ctx = leg;
  reg->bytes_held += rq->n;
  rq->leg = leg;
  gen = ++rq->leg_gen;

  rq->starting++;
  r = source_fetch_start(&leg->f, reg->lim.inline_max);
  rq->starting--;
  if (r < 0) {
    /* No completion follows: the leg is ours to free. */
    rq->leg = NULL;
    snprintf(why, sizeof(why), "cannot start a fetch: %s", qrs_strerror(r));
    rs->failures += !rq->study;
    leg_free(leg);
    note_failure(rq, rs, r, why);
    next_leg(rq, rs);
    return;
  }
  if (rq->finished) {
    if (!rq->starting)
      request_free(rq);
    return;
  }
  if (rq->leg && rq->leg_gen == gen) {
    if (!rq->timer_init) {
      uv_timer_init(reg->loop, &rq->timer);
      rq->timer.data = rq;
      rq->timer_init = 1;
    }
    uv_timer_start(&rq->timer, on_deadline,
                   dl > now ? (uint64_t)((dl - now + 999999) / 1000000) : 0,
                   0);
  }
}

int
registry_fetch(struct registry *reg, const char *name, size_t n,
               uint64_t nonce, int64_t deadline_ns, reg_done_fn done,
               void *ctx)
{
  return registry_fetch_for(reg, NULL, name, n, nonce, deadline_ns, done,
                            ctx);
}

static int
fetch_start(struct registry *reg, struct reg_owner *owner, const char *name,
            size_t n, uint64_t nonce, const uint8_t *stream,
            int64_t deadline_ns, reg_done_fn done, void *ctx)
{
  struct request *rq;
  struct rsrc *rs;

  if (!name || !*name)
    rs = reg->def;
  else
    rs = find(reg, name);
  if (!rs || rs->builtin)
    return -ENOENT;
  if (reg->bytes_held + n > reg->lim.bytes_max)
    return -EBUSY;
  rq = calloc(1, sizeof(*rq));
  if (!rq)
    return -ENOMEM;
  rq->reg = reg;
  rq->owner = owner;
  rq->asked = rs;
  ref(rs);
  rq->n = n;
  rq->nonce = nonce;
  rq->deadline_ns = deadline_ns;
  rq->done = done;
  rq->ctx = ctx;
  if (stream) {
    rq->study = 1;
    memcpy(rq->stream, stream, sizeof(rq->stream));
  }
  rq->starting = 1;
  try_leg(rq, rs);
  rq->starting = 0;
  if (rq->finished)
    request_free(rq);
  return 0;
}

int
registry_fetch_for(struct registry *reg, struct reg_owner *owner,
                   const char *name, size_t n, uint64_t nonce,
                   int64_t deadline_ns, reg_done_fn done, void *ctx)
{
  return fetch_start(reg, owner, name, n, nonce, NULL, deadline_ns, done,
                     ctx);
}

int
registry_fetch_study(struct registry *reg, struct reg_owner *owner,
                     const char *name, size_t n, const uint8_t stream[12],
                     int64_t deadline_ns, reg_done_fn done, void *ctx)
{
  if (!name || !*name)
    return -ENOENT;
  return fetch_start(reg, owner, name, n, 0, stream, deadline_ns, done, ctx);
}

int
registry_commitment(const struct registry *reg, const char *name, char *hex)
{
  const struct rsrc *rs;

  rs = find(reg, name);
  if (!rs || !rs->src->ops->commitment)
    return -ENOSYS;
  return rs->src->ops->commitment(rs->src, hex);
}
