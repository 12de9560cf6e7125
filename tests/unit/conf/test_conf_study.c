/* The studies section of the configuration (conf_study.c): a study's plan
   loaded and printed back, each mistake refused naming its line and key,
   and a reload that may add or remove a study but not change one (nor
   one of its arms). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "conf/conf.h"

/* Sources quantum (mock) and control (prng), the journal on, then
   studies. */
#define HEAD \
  "allow_test_sources: true\n" \
  "journal: { dir: /var/lib/qrsd/journal }\n" \
  "sources:\n" \
  "  system: { type: system }\n" \
  "  quantum: { type: mock, seed: 3 }\n" \
  "  control: { type: prng, seed_file: /etc/qrsd/control.seed }\n"
/* lines of HEAD: the first study is at line 7 */
#define PLAN(arms, unit) \
  "    arms: " arms "\n    unit: " unit "\n    planned_units: 2000\n" \
  "    statistic: mean_probit_diff\n    alpha: 0.05\n    effect: 0.1\n" \
  "    assignment_seed_file: /etc/qrsd/p.assign\n"

static struct qrsd_conf *
load(const char *text)
{
  struct qrsd_conf *c = NULL;
  char err[512];
  int r;

  r = conf_load_string(text, strlen(text), "t.yaml", &c, err, sizeof err);
  cr_assert_eq(r, 0, "%s\n--- text:\n%s", err, text);
  return c;
}

/* text is refused with err containing want. */
static void
refused(const char *text, const char *want)
{
  struct qrsd_conf *c = NULL;
  char err[512] = "";
  int r;

  r = conf_load_string(text, strlen(text), "t.yaml", &c, err, sizeof err);
  cr_expect_eq(r, -EINVAL, "loaded:\n%s", text);
  cr_expect_null(c);
  cr_expect(strstr(err, want) != NULL, "want \"%s\" in \"%s\"", want, err);
  conf_free(c);
}

Test(conf_study, a_plan_loads_and_prints_back)
{
  struct qrsd_conf *c, *back;
  const struct conf_study *t;
  char *text;
  size_t len;
  FILE *f;

  c = load(HEAD "studies:\n  pilot1:\n" PLAN("[quantum, control]", "request")
           "  p2:\n" PLAN("[control, system, quantum]", "draw"));
  cr_assert_eq(c->n_studies, 2);
  t = conf_find_study(c, "pilot1");
  cr_assert_not_null(t);
  cr_assert_eq(t->line, 8);
  cr_assert_eq(t->n_arms, 2);
  cr_assert_str_eq(t->arms[0], "quantum");
  cr_assert_str_eq(t->arms[1], "control");
  cr_assert_str_eq(t->unit, "request");
  cr_assert_eq(t->planned_units, 2000);
  cr_assert_str_eq(t->statistic, "mean_probit_diff");
  cr_assert_eq(t->alpha, 0.05);
  cr_assert_eq(t->effect, 0.1);
  cr_assert_str_eq(t->assignment_seed_file, "/etc/qrsd/p.assign");
  cr_assert_eq(conf_find_study(c, "p2")->n_arms, 3);
  cr_assert_null(conf_find_study(c, "quantum"));
  cr_assert_str_eq(conf_find_source(c, "control")->prng_seed_file,
                   "/etc/qrsd/control.seed");
  cr_assert_str_eq(conf_source_type_name(conf_find_source(c, "control")
                                         ->type), "prng");

  text = NULL;
  f = open_memstream(&text, &len);
  cr_assert_not_null(f);
  cr_assert_eq(conf_print(c, f), 0);
  cr_assert_eq(fclose(f), 0);
  back = load(text);
  cr_assert_eq(back->n_studies, 2);
  cr_assert(conf_study_same(conf_find_study(back, "pilot1"), t));
  cr_assert(conf_study_same(conf_find_study(back, "p2"),
                            conf_find_study(c, "p2")));
  free(text);
  conf_free(back);
  conf_free(c);

  /* none: the default */
  c = load(HEAD);
  cr_assert_eq(c->n_studies, 0);
  conf_free(c);
}

Test(conf_study, each_mistake_is_refused_naming_it)
{
  refused(HEAD "studies:\n  s:\n" PLAN("[quantum, nosuch]", "draw"),
          "t.yaml:8: studies.s: arm 'nosuch' is not declared under sources");
  refused(HEAD "studies:\n  s:\n" PLAN("[quantum, quantum]", "draw"),
          "t.yaml:9: studies.s.arms: source 'quantum' is an arm twice");
  refused(HEAD "studies:\n  s:\n" PLAN("[quantum]", "draw"),
          "studies.s.arms: 1 arms; a study has 2 to 8");
  refused(HEAD "studies:\n  s:\n" PLAN("[a, b, c, d, e, f, g, h, i]",
                                       "draw"),
          "studies.s.arms: 9 arms; a study has 2 to 8");
  refused(HEAD "studies:\n  control:\n" PLAN("[quantum, system]", "draw"),
          "t.yaml:8: studies.control: a source has this name too");
  refused(HEAD "studies:\n  \"bad name\":\n" PLAN("[quantum, system]",
                                                  "draw"),
          "invalid study name");
  refused(HEAD "studies:\n  s:\n" PLAN("[quantum, system]", "weekly"),
          "studies.s.unit");
  refused(HEAD "studies:\n  s:\n    arms: [quantum, system]\n",
          "studies.s: missing key 'unit'");
  refused(HEAD "studies:\n  s:\n" PLAN("[quantum, system]", "draw")
          "    alpha_typo: 1\n", "studies.s.alpha_typo: unknown key");
  refused(HEAD "studies:\n  s:\n" PLAN("[quantum, system]", "draw")
          "    colour: red\n", "studies.s.colour: unknown key");
  refused("allow_test_sources: true\nsources:\n  system: { type: system }\n"
          "  quantum: { type: mock }\nstudies:\n  s:\n"
          PLAN("[quantum, system]", "draw"),
          "studies.s: a study needs the draw journal");
  refused("sources:\n  c: { type: prng }\n",
          "sources.c: missing key 'seed_file'");
  refused(HEAD "studies: [a, b]\n", "studies: expected a mapping");
}

static void
alpha_refused(const char *alpha)
{
  char text[2048];

  snprintf(text, sizeof text, HEAD "studies:\n  s:\n"
           "    arms: [quantum, system]\n    unit: draw\n"
           "    planned_units: 10\n    statistic: ks_u\n    alpha: %s\n"
           "    effect: 0.1\n    assignment_seed_file: /x\n", alpha);
  refused(text, "studies.s.alpha");
}

Test(conf_study, alpha_is_in_0_to_half_and_planned_units_at_least_2)
{
  alpha_refused("0");
  alpha_refused("0.51");
  alpha_refused("-0.1");
  refused(HEAD "studies:\n  s:\n    arms: [quantum, system]\n    unit: draw\n"
          "    planned_units: 1\n", "studies.s.planned_units");
}

Test(conf_study, a_reload_adds_and_removes_but_never_changes_a_study)
{
  struct qrsd_conf *a, *b;
  struct conf_change *v;
  size_t n, i;
  char err[512];
  int added, removed;

  a = load(HEAD "studies:\n  pilot1:\n" PLAN("[quantum, control]",
                                             "request"));
  /* a changed plan */
  b = load(HEAD "studies:\n  pilot1:\n" PLAN("[control, quantum]",
                                             "request"));
  cr_assert_eq(conf_check_live(a, b, err, sizeof err), -EINVAL);
  cr_assert(strstr(err, "studies.pilot1: the plan of a running study cannot "
                   "change"), "%s", err);
  conf_free(b);
  /* a changed arm */
  b = load("allow_test_sources: true\n"
           "journal: { dir: /var/lib/qrsd/journal }\n"
           "sources:\n  system: { type: system }\n"
           "  quantum: { type: mock, seed: 3 }\n"
           "  control: { type: prng, seed_file: /etc/qrsd/other.seed }\n"
           "studies:\n  pilot1:\n" PLAN("[quantum, control]", "request"));
  cr_assert_eq(conf_check_live(a, b, err, sizeof err), -EINVAL);
  cr_assert(strstr(err, "sources.control: an arm of running study 'pilot1' "
                   "cannot change"), "%s", err);
  conf_free(b);
  /* one removed, one added: both live */
  b = load(HEAD "studies:\n  pilot2:\n" PLAN("[quantum, control]", "draw"));
  cr_assert_eq(conf_check_live(a, b, err, sizeof err), 0, "%s", err);
  cr_assert_eq(conf_diff(a, b, &v, &n), 0);
  added = removed = 0;
  for (i = 0; i < n; i++) {
    if (!strcmp(v[i].key, "studies.pilot1")) {
      removed = 1;
      cr_assert_str_eq(v[i].new_value, "(removed)");
      cr_assert(v[i].live);
    }
    if (!strcmp(v[i].key, "studies.pilot2")) {
      added = 1;
      cr_assert_str_eq(v[i].new_value, "added (2 arms)");
      cr_assert(v[i].live);
    }
  }
  cr_assert(added && removed);
  free(v);
  conf_apply_live(a, b);
  cr_assert_eq(a->n_studies, 1);
  cr_assert_not_null(conf_find_study(a, "pilot2"));
  cr_assert_not_null(conf_find_study(b, "pilot1"));
  conf_free(a);
  conf_free(b);
}
