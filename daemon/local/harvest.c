/* The harvester: parallel, deadline-bounded harvesting of noise
   mechanisms, health tests per mechanism, combination, conditioning. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/names.h"
#include "local/harvest.h"

/* Von Neumann rounds harvest at most this many raw bytes at a time. */
#define VN_CHUNK_MAX (4u << 20)

static const char *const combine_names[] = {
  [NOISE_XOR] = "xor",
  [NOISE_CONCAT] = "concat",
};

NAMES_DEFINE(noise_combine_parse, noise_combine_name, enum noise_combine,
             combine_names, "concat")

int
noise_new(const struct noise_mech *const *mechs, size_t nmechs,
          enum condition_mode cond, enum noise_combine combine,
          unsigned timeout_ms, double alpha, struct noise **ret_noise,
          char *err, size_t errlen)
{
  struct noise *nz;
  struct noise_slot *s;
  size_t i, j;

  nz = calloc(1, sizeof(*nz));
  if (!nz)
    return -ENOMEM;
  pthread_mutex_init(&nz->lock, NULL);
  pthread_mutex_init(&nz->stats_lock, NULL);
  nz->cond = cond;
  nz->combine = combine;
  nz->timeout_ms = timeout_ms ? timeout_ms : 1000;
  nz->nslot = nmechs ? nmechs : noise_mech_count;
  nz->slot = calloc(nz->nslot, sizeof(*nz->slot));
  if (!nz->slot) {
    noise_free(nz);
    return -ENOMEM;
  }
  for (i = 0; i < nz->nslot; i++) {
    s = &nz->slot[i];
    s->m = nmechs ? mechs[i] : &noise_mechs[i];
    for (j = 0; j < i; j++) {
      if (nz->slot[j].m == s->m) {
        snprintf(err, errlen, "mechanism '%s' is listed twice", s->m->name);
        noise_free(nz);
        return -EINVAL;
      }
    }
    s->available = s->m->probe(s->why, sizeof(s->why));
    if (health_init(&s->health, alpha, s->m->h, 0) < 0) {
      snprintf(err, errlen, "bad health-test parameters (alpha %g)", alpha);
      noise_free(nz);
      return -EINVAL;
    }
    if (s->available)
      nz->navailable++;
  }
  if (nz->navailable == 0) {
    snprintf(err, errlen, "none of the %zu mechanisms is available on this "
             "host (%s: %s)", nz->nslot, nz->slot[0].m->name,
             nz->slot[0].why);
    noise_free(nz);
    return -ENODEV;
  }
  *ret_noise = nz;
  return 0;
}

int
noise_new_named(const char *const *names, size_t nnames,
                enum condition_mode cond, enum noise_combine combine,
                unsigned timeout_ms, double alpha, struct noise **ret_noise,
                char *err, size_t errlen)
{
  const struct noise_mech **m;
  size_t i;
  int r;

  m = calloc(nnames ? nnames : 1, sizeof(*m));
  if (!m)
    return -ENOMEM;
  for (i = 0; i < nnames; i++) {
    m[i] = noise_mech_find(names[i]);
    if (!m[i]) {
      snprintf(err, errlen, "unknown noise mechanism '%s'", names[i]);
      free(m);
      return -EINVAL;
    }
  }
  r = noise_new(m, nnames, cond, combine, timeout_ms, alpha, ret_noise, err,
                errlen);
  free(m);
  return r;
}

void
noise_free(struct noise *nz)
{
  if (!nz)
    return;
  free(nz->slot);
  pthread_mutex_destroy(&nz->lock);
  pthread_mutex_destroy(&nz->stats_lock);
  free(nz);
}

/* A job that may be stopped early harvests in pieces that take about
   PIECE_NS to 4 * PIECE_NS each, per-call overhead included: the piece
   doubles after a quicker call and halves after a slower one (PIECE_MIN
   to PIECE_MAX samples; PIECE_FIRST at first, then what the mechanism's
   last read ended with). */
#define PIECE_NS 2000000ULL
#define PIECE_CAP_NS (16 * PIECE_NS)   /* one harvest call at most */
#define PIECE_MIN 1
#define PIECE_MAX 4096
#define PIECE_FIRST 16

/* One mechanism's part of one harvest, run on its own thread. */
struct job {
  struct noise_slot *s;
  uint8_t *buf;
  size_t want, got;
  uint64_t deadline;
  _Atomic size_t *total;        /* concat: samples of all jobs so far */
  size_t need;                  /* concat: stop once *total reaches it */
  _Atomic size_t *ndone;        /* xor: jobs that count as done */
  _Atomic size_t *nfull;        /* xor: jobs that delivered everything */
  size_t need_done;             /* xor: stop once *ndone reaches it */
  int required;                 /* xor: the read waits for this one */
  int pinned;                   /* xor, alone: never stops waiting */
  int demoted;                  /* was required, fell behind: counted
                                   done, goes on as not required */
  size_t piece;                 /* samples per harvest call when it may
                                   be stopped early */
  int err;
  int cut;                      /* stopped early: the others were done */
  uint64_t raw;                 /* raw samples harvested (start-up too) */
  struct health health;         /* the slot's, copied back after join */
  struct mcv mcv;               /* this harvest's samples */
  uint64_t busy_ns;
  pthread_t th;
  int started;
};

/* May this job stop now because the harvest has what it needs? */
static int
enough(const struct job *j)
{
  if (j->total)
    return atomic_load(j->total) >= j->need;
  /* xor: once the jobs the read waits for are done, and one of them
     delivered everything (when every required job fell behind, none
     may have: the others go on until one does or the deadline) */
  if (j->ndone && !j->required)
    return atomic_load(j->ndone) >= j->need_done &&
      atomic_load(j->nfull) > 0;
  return 0;
}

/* Harvest n samples into out, in pieces when the job may be stopped
   early (concat: the total matters; xor: a mechanism the read does not
   wait for); count adds them to the concat total.  Each piece is about
   PIECE_NS of work at the rate seen so far, so that a stopped job never
   keeps the read waiting long. */
/* Samples before a rate counts as measured. */
#define RATE_MIN_SAMPLES 64

/* A required xor job that has harvested done of n samples since start:
   at this read's rate, does it miss the deadline? */
static int
behind(const struct job *j, uint64_t start, size_t done, size_t n)
{
  uint64_t now = noise_now_ns();
  double left_ns;

  if (now >= j->deadline)
    return 1;
  if (done < RATE_MIN_SAMPLES || now <= start)
    return 0;                   /* too few samples to judge */
  left_ns = (double)(n - done) * (double)(now - start) / (double)done;
  return left_ns > (double)(j->deadline - now);
}

static ssize_t
harvest_some(struct job *j, uint8_t *out, size_t n, int count)
{
  size_t done, piece;
  uint64_t t0, dt, start, pdl;
  ssize_t r;

  if (!j->total && !j->ndone)
    return j->s->m->harvest(out, n, j->deadline);
  if (j->ndone && j->required && (j->pinned || !count))
    return j->s->m->harvest(out, n, j->deadline);
  done = 0;
  start = noise_now_ns();
  /* at least one piece per read, so that a mechanism that is slower
     than the others still makes progress (and its rate is measured) */
  while (done < n && (done == 0 || !enough(j))) {
    piece = n - done < j->piece ? n - done : j->piece;
    t0 = noise_now_ns();
    /* A piece never runs far past its expected time: a mechanism that
       slowed down since its piece size was learnt returns early. */
    pdl = t0 + PIECE_CAP_NS < j->deadline ? t0 + PIECE_CAP_NS : j->deadline;
    r = j->s->m->harvest(out + done, piece, pdl);
    if (r < 0)
      return r;
    done += (size_t)r;
    if (count && j->total)
      atomic_fetch_add(j->total, (size_t)r);
    dt = noise_now_ns() - t0;
    if ((size_t)r < piece && noise_now_ns() >= j->deadline)
      break;                    /* the deadline */
    if (j->required && behind(j, start, done, n)) {
      /* Its rate was measured before this read; now it cannot finish by
         the deadline: stop waiting for it (it counts as done for the
         read) and let it contribute what it has when the others are
         done, as a mechanism the read never waited for. */
      j->required = 0;
      j->demoted = 1;
      atomic_fetch_add(j->ndone, 1);
    }
    if ((size_t)r < piece)      /* cut at PIECE_CAP_NS: an eighth */
      j->piece = (size_t)r / 8 > PIECE_MIN ? (size_t)r / 8 : PIECE_MIN;
    else if (dt < PIECE_NS && piece == j->piece && j->piece < PIECE_MAX)
      j->piece *= 2;
    else if (dt > 4 * PIECE_NS && j->piece > PIECE_MIN)
      j->piece /= 2;
  }
  return (ssize_t)done;
}

static void *
job_run(void *arg)
{
  struct job *j = arg;
  uint8_t startup[HEALTH_STARTUP_SAMPLES];
  uint64_t t0;
  size_t left;
  ssize_t r;

  t0 = noise_now_ns();
  j->got = 0;
  j->err = 0;

  /* A new or failed mechanism first passes a start-up test on samples
     that are never used.  Its progress is kept across reads: a mechanism
     stopped early (xor) or cut off by the deadline goes on with the
     test at its next read. */
  if (j->health.state == HEALTH_FAILED)
    health_retest(&j->health);
  if (j->health.state == HEALTH_STARTUP) {
    left = j->health.startup_left;
    if (left > sizeof(startup))
      left = sizeof(startup);
    r = harvest_some(j, startup, left, 0);
    if (r < 0) {
      j->err = (int)r;
      goto out;
    }
    j->raw += (uint64_t)r;
    if (health_feed(&j->health, startup, (size_t)r) < 0) {
      j->err = -EIO;
      goto out;
    }
    if (j->health.state != HEALTH_OK) {
      if (enough(j))
        j->cut = 1;
      else
        j->err = -ETIMEDOUT;
      goto out;
    }
  }

  r = harvest_some(j, j->buf, j->want, 1);
  if (r < 0) {
    j->err = (int)r;
    goto out;
  }
  j->got = (size_t)r;
  j->raw += (uint64_t)r;
  mcv_add(&j->mcv, j->buf, j->got);
  if (health_feed(&j->health, j->buf, j->got) < 0) {
    j->err = -EIO;
    j->got = 0;                 /* never used */
    goto out;
  }
  if (j->nfull && j->got == j->want)
    atomic_fetch_add(j->nfull, 1);
  if (j->got < j->want && enough(j))
    j->cut = 1;

out:
  /* xor: a required job counts when it ends, however it ends (the read
     waits for no more than that); without required jobs the first
     mechanism that delivered everything ends the read */
  if (j->ndone && !j->demoted &&
      (j->required || (j->need_done == 1 && !j->err &&
                       j->got == j->want)))
    atomic_fetch_add(j->ndone, 1);
  j->busy_ns = noise_now_ns() - t0;
  return NULL;
}

/* Raw samples per second slot s harvested so far; 0: not measured. */
static double
slot_rate(const struct noise_slot *s)
{
  if (s->busy_ns == 0 || s->raw_harvested == 0)
    return 0.0;
  return (double)s->raw_harvested * 1e9 / (double)s->busy_ns;
}


/* xor: does the read wait for slot s?  Only when its rate is measured
   over at least RATE_MIN_SAMPLES samples and it can deliver n samples
   (after what is left of its start-up test) by the deadline at that rate
   with a margin of 2. */
static int
can_make_it(const struct noise_slot *s, size_t n, uint64_t deadline)
{
  uint64_t now = noise_now_ns();
  double rate, need;

  rate = slot_rate(s);
  if (s->raw_harvested < RATE_MIN_SAMPLES || rate <= 0.0 || now >= deadline)
    return 0;
  need = (double)n;
  if (s->health.state == HEALTH_STARTUP)
    need += s->health.startup_left;
  else if (s->health.state == HEALTH_FAILED)
    need += HEALTH_STARTUP_SAMPLES;
  return 2.0 * need / rate * 1e9 <= (double)(deadline - now);
}

static void
note_error(struct noise_slot *s, int err)
{
  s->failures++;
  if (err == -EIO && s->health.state == HEALTH_FAILED)
    snprintf(s->last_error, sizeof(s->last_error), "%s", s->health.reason);
  else if (err == -ETIMEDOUT)
    snprintf(s->last_error, sizeof(s->last_error),
             "start-up test not finished by the deadline");
  else
    snprintf(s->last_error, sizeof(s->last_error), "%s", strerror(-err));
}

/* Harvest n raw bytes from every available mechanism and combine them. */
static int
harvest(struct noise *nz, uint8_t *out, size_t n, uint64_t deadline,
        char *detail, size_t dlen)
{
  struct job *jobs;
  _Atomic size_t total, ndone, nfull;
  size_t i, k, nj, nreq, full, copied, take;
  int r, timeouts, healthfail;

  jobs = calloc(nz->nslot, sizeof(*jobs));
  if (!jobs)
    return -ENOMEM;
  atomic_init(&total, 0);
  atomic_init(&ndone, 0);
  atomic_init(&nfull, 0);
  r = 0;
  nj = 0;
  nreq = 0;
  pthread_mutex_lock(&nz->stats_lock);
  for (i = 0; i < nz->nslot; i++) {
    if (!nz->slot[i].available)
      continue;
    jobs[nj].s = &nz->slot[i];
    jobs[nj].want = n;
    jobs[nj].deadline = deadline;
    jobs[nj].health = nz->slot[i].health;
    jobs[nj].piece = nz->slot[i].piece ? nz->slot[i].piece : PIECE_FIRST;
    if (nz->combine == NOISE_CONCAT) {
      jobs[nj].total = &total;
      jobs[nj].need = n;
    } else {
      jobs[nj].ndone = &ndone;
      jobs[nj].nfull = &nfull;
      jobs[nj].required = can_make_it(&nz->slot[i], n, deadline);
      nreq += (size_t)jobs[nj].required;
    }
    nj++;
  }
  pthread_mutex_unlock(&nz->stats_lock);
  if (nz->combine == NOISE_XOR && nj == 1 && !nreq) {
    jobs[0].required = 1;       /* alone: the read is its harvest */
    jobs[0].pinned = 1;
    nreq = 1;
  }
  for (k = 0; k < nj; k++) {
    /* xor: wait for the mechanisms that can make the deadline; before
       any is measured, for the first one that delivers everything */
    jobs[k].need_done = nreq ? nreq : 1;
    jobs[k].buf = malloc(n ? n : 1);
    if (!jobs[k].buf) {
      r = -ENOMEM;
      goto done;
    }
  }
  for (k = 0; k < nj; k++) {
    if (pthread_create(&jobs[k].th, NULL, job_run, &jobs[k]) == 0)
      jobs[k].started = 1;
    else
      job_run(&jobs[k]);        /* no thread to spare: harvest here */
  }
  for (k = 0; k < nj; k++)
    if (jobs[k].started)
      pthread_join(jobs[k].th, NULL);

  /* Account, then combine what passed. */
  timeouts = 0;
  healthfail = 0;
  full = 0;
  copied = 0;
  if (nz->combine == NOISE_XOR)
    memset(out, 0, n);
  pthread_mutex_lock(&nz->stats_lock);
  for (k = 0; k < nj; k++) {
    struct noise_slot *s = jobs[k].s;

    s->health = jobs[k].health;
    for (i = 0; i < 256; i++)
      s->mcv.count[i] += jobs[k].mcv.count[i];
    s->mcv.n += jobs[k].mcv.n;
    s->busy_ns += jobs[k].busy_ns;
    s->raw_harvested += jobs[k].raw;
    s->piece = jobs[k].piece;
    s->harvests++;
    s->samples += jobs[k].got;
    if (jobs[k].cut)
      s->cut++;
    if (jobs[k].err) {
      note_error(s, jobs[k].err);
      if (jobs[k].err == -EIO)
        healthfail++;
      else
        timeouts++;
      continue;
    }
    if (nz->combine == NOISE_XOR) {
      if (jobs[k].got < n && !jobs[k].cut) {
        s->timeouts++;
        timeouts++;
      } else if (jobs[k].got == n) {
        full++;
      }
      for (i = 0; i < jobs[k].got; i++)
        out[i] ^= jobs[k].buf[i];
    } else {
      take = n - copied < jobs[k].got ? n - copied : jobs[k].got;
      memcpy(out + copied, jobs[k].buf, take);
      copied += take;
    }
  }
  if (nz->combine == NOISE_CONCAT && copied < n) {
    for (k = 0; k < nj; k++)
      if (!jobs[k].err)
        jobs[k].s->timeouts++;
    full = 0;
  } else if (nz->combine == NOISE_CONCAT) {
    full = 1;
  }
  if (full)
    mcv_add(&nz->raw_mcv, out, n);
  pthread_mutex_unlock(&nz->stats_lock);
  if (full == 0) {
    r = healthfail == (int)nj ? -EIO : -ETIMEDOUT;
    if (detail) {
      if (r == -EIO)
        snprintf(detail, dlen, "every mechanism failed its health tests "
                 "(%s: %s)", jobs[0].s->m->name, jobs[0].s->last_error);
      else
        snprintf(detail, dlen, "%zu of %zu bytes harvested in time "
                 "(%d mechanisms short, %d failed health tests)",
                 nz->combine == NOISE_XOR ? (size_t)0 : copied, n, timeouts,
                 healthfail);
    }
  }

done:
  for (k = 0; k < nz->nslot; k++)
    free(jobs[k].buf);
  free(jobs);
  return r;
}

int
noise_read(struct noise *nz, uint8_t *out, size_t n, uint64_t deadline_ns,
           char *detail, size_t dlen)
{
  uint8_t *raw;
  uint64_t deadline;
  unsigned acc, nacc;
  size_t done, chunk;
  int r;

  if (n == 0)
    return 0;
  deadline = noise_now_ns() + (uint64_t)nz->timeout_ms * 1000000u;
  if (deadline_ns && deadline_ns < deadline)
    deadline = deadline_ns;

  pthread_mutex_lock(&nz->lock);
  switch (nz->cond) {
  case COND_RAW:
    r = harvest(nz, out, n, deadline, detail, dlen);
    break;
  case COND_SHA256:
    raw = malloc(n * COND_SHA256_RAW_PER_BYTE);
    if (!raw) {
      r = -ENOMEM;
      break;
    }
    r = harvest(nz, raw, n * COND_SHA256_RAW_PER_BYTE, deadline, detail,
                dlen);
    if (r == 0)
      r = condition_sha256(raw, n * COND_SHA256_RAW_PER_BYTE, out, n);
    free(raw);
    break;
  case COND_VONNEUMANN:
  default:
    acc = 0;
    nacc = 0;
    done = 0;
    r = 0;
    while (done < n) {
      chunk = 4 * (n - done) + 64;
      if (chunk > VN_CHUNK_MAX)
        chunk = VN_CHUNK_MAX;
      raw = malloc(chunk);
      if (!raw) {
        r = -ENOMEM;
        break;
      }
      r = harvest(nz, raw, chunk, deadline, detail, dlen);
      if (r == 0)
        done += condition_vonneumann(raw, chunk, out + done, n - done, &acc,
                                     &nacc);
      free(raw);
      if (r < 0)
        break;
      if (done < n && noise_now_ns() >= deadline) {
        r = -ETIMEDOUT;
        if (detail)
          snprintf(detail, dlen, "von Neumann: %zu of %zu bytes by the "
                   "deadline", done, n);
        break;
      }
    }
    break;
  }
  pthread_mutex_unlock(&nz->lock);
  return r;
}

size_t
noise_snapshot(struct noise *nz, struct noise_slot *out, size_t max)
{
  size_t i;

  pthread_mutex_lock(&nz->stats_lock);
  for (i = 0; i < nz->nslot && i < max; i++)
    out[i] = nz->slot[i];
  pthread_mutex_unlock(&nz->stats_lock);
  return i;
}
