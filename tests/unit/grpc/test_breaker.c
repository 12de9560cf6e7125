/* The circuit breaker against tests/vectors/breaker.json (reference spec
   6.4), plus the time-dependent behaviour the vectors leave out. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "grpc/breaker.h"
#include "vectors.h"

static void
params_from(struct json_object *j, struct breaker_params *p)
{
  p->window_size = (uint32_t)json_object_get_int(vec_get(j, "window_size"));
  p->min_timeout_ms = vec_double(vec_get(j, "min_timeout_ms"));
  p->timeout_multiplier = vec_double(vec_get(j, "timeout_multiplier"));
  p->max_timeout_ms = vec_double(vec_get(j, "max_timeout_ms"));
  p->recovery_window_s = vec_double(vec_get(j, "recovery_window_s"));
  p->recovery_window_max_s = vec_double(vec_get(j, "recovery_window_max_s"));
  p->max_consecutive_failures =
    (uint32_t)json_object_get_int(vec_get(j, "max_consecutive_failures"));
}

Test(breaker, reproduces_every_reference_trace)
{
  struct json_object *t, *steps, *s, *args, *ret, *st;
  struct breaker_params p;
  struct vec_iter it;
  struct breaker b;
  const char *op, *name;
  size_t j, nsteps = 0;
  double now = 1000.0, w;
  int h;

  t = vec_first(&it, "breaker.json", "traces");
  cr_assert_geq(it.n, 8);
  for (; t; t = vec_next(&it)) {
    name = json_object_get_string(vec_get(t, "name"));
    params_from(vec_get(t, "params"), &p);
    cr_assert_eq(breaker_init(&b, &p), 0, "%s", name);
    steps = vec_get(t, "steps");
    for (j = 0; j < json_object_array_length(steps); j++, nsteps++) {
      s = json_object_array_get_idx(steps, j);
      op = json_object_get_string(vec_get(s, "op"));
      args = vec_get(s, "args");
      ret = vec_get(s, "returns");
      if (strcmp(op, "record_latency") == 0) {
        breaker_record_latency(&b, vec_double(json_object_array_get_idx(args,
                                                                        0)));
      } else if (strcmp(op, "record_censored_latency") == 0) {
        breaker_record_censored(&b,
          vec_double(json_object_array_get_idx(args, 0)),
          vec_double(json_object_array_get_idx(args, 1)));
      } else if (strcmp(op, "note_success") == 0) {
        breaker_note_success(&b, vec_double(json_object_array_get_idx(args,
                                                                      0)));
      } else if (strcmp(op, "note_failure") == 0) {
        w = breaker_note_failure(&b, now);
        if (ret)
          cr_assert_eq(w, vec_double(ret), "%s step %zu", name, j);
        else
          cr_assert_lt(w, 0.0, "%s step %zu", name, j);
      } else if (strcmp(op, "try_half_open") == 0) {
        h = breaker_try_half_open(&b, now);
        cr_assert_eq(h, json_object_get_boolean(ret), "%s step %zu", name,
                     j);
      } else {
        cr_assert_fail("unknown op %s", op);
      }
      st = vec_get(s, "state");
      cr_assert_eq(b.p99_ms, vec_double(vec_get(st, "p99_ms")),
                   "%s step %zu: p99 %.17g", name, j, b.p99_ms);
      cr_assert_eq(breaker_timeout_ms(&b),
                   vec_double(vec_get(st, "timeout_ms")), "%s step %zu",
                   name, j);
      cr_assert_eq(b.consecutive_failures,
                   (uint32_t)json_object_get_int(vec_get(st,
                     "consecutive_failures")), "%s step %zu", name, j);
      cr_assert_eq(b.open,
                   json_object_get_boolean(vec_get(st, "circuit_open")),
                   "%s step %zu", name, j);
      cr_assert_eq(b.open_count,
                   (uint32_t)json_object_get_int(vec_get(st,
                     "circuit_open_count")), "%s step %zu", name, j);
      cr_assert_eq(b.count,
                   (size_t)json_object_get_int(vec_get(st,
                     "latency_sample_count")), "%s step %zu", name, j);
    }
    breaker_done(&b);
  }
  cr_assert_gt(nsteps, 150);
}

Test(breaker, blocks_until_the_window_elapses_then_allows_one_trial)
{
  struct breaker_params p;
  struct breaker b;

  breaker_params_default(&p);
  p.max_consecutive_failures = 2;
  p.recovery_window_s = 1.0;
  p.recovery_window_max_s = 3.0;
  cr_assert_eq(breaker_init(&b, &p), 0);
  cr_assert_lt(breaker_note_failure(&b, 100.0), 0);
  cr_assert_str_eq(breaker_state_name(&b, 100.0), "closed");
  cr_assert_eq(breaker_note_failure(&b, 100.0), 1.0);
  cr_assert(breaker_is_blocking(&b, 100.5));
  cr_assert_str_eq(breaker_state_name(&b, 100.5), "open");
  cr_assert_not(breaker_try_half_open(&b, 100.5));
  cr_assert_str_eq(breaker_state_name(&b, 101.0), "half-open");
  cr_assert(breaker_try_half_open(&b, 101.0));
  cr_assert_not(breaker_is_blocking(&b, 101.0));
  /* The trial fails: re-opened at once with the doubled window. */
  cr_assert_eq(breaker_note_failure(&b, 101.0), 2.0);
  cr_assert(breaker_is_blocking(&b, 102.9));
  cr_assert(breaker_try_half_open(&b, 103.0));
  cr_assert_eq(breaker_note_failure(&b, 103.0), 3.0);   /* capped */
  cr_assert(breaker_try_half_open(&b, 106.0));
  breaker_note_success(&b, 2.0);
  cr_assert_str_eq(breaker_state_name(&b, 106.0), "closed");
  cr_assert_eq(b.consecutive_failures, 0);
  cr_assert_eq(b.opened_total, 3);
  /* Back to the base window after a success. */
  cr_assert_lt(breaker_note_failure(&b, 107.0), 0);
  cr_assert_eq(breaker_note_failure(&b, 107.0), 1.0);
  breaker_done(&b);
}

Test(breaker, refuses_nonsense_parameters)
{
  struct breaker_params p;
  struct breaker b;

  breaker_params_default(&p);
  p.window_size = 0;
  cr_assert_eq(breaker_init(&b, &p), -EINVAL);
  breaker_done(&b);
  breaker_params_default(&p);
  p.max_consecutive_failures = 0;
  cr_assert_eq(breaker_init(&b, &p), -EINVAL);
  breaker_params_default(&p);
  p.max_timeout_ms = -1;
  cr_assert_eq(breaker_init(&b, &p), -EINVAL);
}

static int
cmp_d(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;

  return (x > y) - (x < y);
}

/* The incrementally sorted window gives the spec's P99 (sort the window,
   take sorted[floor(len * 0.99)]) after every sample, duplicates and
   evictions included. */
Test(breaker, p99_equals_sorting_the_window_every_time)
{
  static const uint32_t sizes[] = { 10, 37, 100, 250 };
  struct breaker_params p;
  struct breaker b;
  double ring[250], tmp[250];
  size_t s, i, n, k, idx;
  unsigned seed = 12345;

  for (s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
    breaker_params_default(&p);
    p.window_size = sizes[s];
    cr_assert_eq(breaker_init(&b, &p), 0);
    for (i = 0; i < 3000; i++) {
      /* Few distinct values: many duplicates. */
      ring[i % sizes[s]] = (double)(rand_r(&seed) % 40) * 0.25;
      breaker_record_latency(&b, ring[i % sizes[s]]);
      n = i + 1 < sizes[s] ? i + 1 : sizes[s];
      if (n < 10)
        continue;
      for (k = 0; k < n; k++)
        tmp[k] = ring[k];
      qsort(tmp, n, sizeof(double), cmp_d);
      idx = (size_t)floor((double)n * 0.99);
      if (idx > n - 1)
        idx = n - 1;
      cr_assert_eq(b.p99_ms, tmp[idx], "window %u, sample %zu",
                   sizes[s], i);
    }
    breaker_done(&b);
  }
}
