/* The studies section of the configuration (conf_int.h): each study's
   keys, its arms, the checks across keys, printing and the comparison a
   reload makes.  A study's secrets stay in their files: the loader reads
   no seed (the daemon does, when the study starts). */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf_int.h"

#define T_OFF(field) offsetof(struct conf_study, field)

static const char *const units[] = { "request", "draw", NULL };
static const char *const statistics[] = { "mean_probit_diff", "ks_u",
                                          "mean_surprisal", NULL };

static const struct key study_keys[] = {
  { .name = "arms", .kind = KEY_ARMS },
  { .name = "unit", .kind = KEY_STRING, .offset = T_OFF(unit), .umin = 1,
    .umax = 16, .choices = units },
  { .name = "planned_units", .kind = KEY_U64,
    .offset = T_OFF(planned_units), .umin = 2, .umax = UINT64_MAX / 2 },
  { .name = "statistic", .kind = KEY_STRING, .offset = T_OFF(statistic),
    .umin = 1, .umax = 32, .choices = statistics },
  { .name = "alpha", .kind = KEY_DOUBLE, .offset = T_OFF(alpha),
    .dmin = 0.0, .dmax = 0.5, .open = OPEN_MIN },
  { .name = "effect", .kind = KEY_DOUBLE, .offset = T_OFF(effect),
    .dmin = 0.0, .dmax = 1e6, .open = OPEN_MIN },
  { .name = "assignment_seed_file", .kind = KEY_STRING,
    .offset = T_OFF(assignment_seed_file), .umin = 1, .umax = 4000 },
  { .name = NULL }
};

/* The keys every study must give (none has a default). */
static const char *const required[] = { "arms", "unit", "planned_units",
                                        "statistic", "alpha", "effect",
                                        "assignment_seed_file", NULL };

static void
free_study(struct conf_study *t)
{
  size_t i;

  free(t->name);
  for (i = 0; i < t->n_arms; i++)
    free(t->arms[i]);
  free(t->arms);
  free(t->unit);
  free(t->statistic);
  free(t->assignment_seed_file);
}

void
conf__free_studies(struct qrsd_conf *conf)
{
  size_t i;

  for (i = 0; i < conf->n_studies; i++)
    free_study(&conf->studies[i]);
  free(conf->studies);
  conf->studies = NULL;
  conf->n_studies = 0;
}

int
conf__parse_arms(struct parser *p, const struct node *v, const char *path,
                 void *base)
{
  struct conf_study *t = base;
  const struct node *it;
  size_t n, i;

  if (v->kind != NODE_SEQUENCE)
    return conf__fail_type(p, v, path, "a list of source names");
  n = 0;
  for (it = v->children; it; it = it->next)
    n++;
  if (n < CONF_STUDY_MIN_ARMS || n > CONF_STUDY_MAX_ARMS)
    return conf__fail(p, v->line, path, "%zu arms; a study has %d to %d",
                      n, CONF_STUDY_MIN_ARMS, CONF_STUDY_MAX_ARMS);
  t->arms = calloc(n, sizeof(*t->arms));
  if (!t->arms)
    return conf__fail_nomem(p);
  for (it = v->children; it; it = it->next) {
    if (it->kind != NODE_SCALAR || conf__is_null(it))
      return conf__fail_type(p, it, path, "a source name");
    for (i = 0; i < t->n_arms; i++)
      if (!strcmp(t->arms[i], it->text))
        return conf__fail(p, it->line, path, "source '%.*s' is an arm "
                          "twice (each arm is a different source)", SHOW,
                          it->text);
    t->arms[t->n_arms] = strdup(it->text);
    if (!t->arms[t->n_arms])
      return conf__fail_nomem(p);
    t->n_arms++;
  }
  return 0;
}

static int
parse_study(struct parser *p, struct qrsd_conf *conf, const struct node *kn,
            const struct node *vn, const char *path)
{
  struct conf_study *t;
  size_t i;
  int r;

  if (conf->n_studies >= CONF_MAX_STUDIES)
    return conf__fail(p, kn->line, path, "more than %d studies",
                      CONF_MAX_STUDIES);
  if (!conf_name_ok(kn->text, CONF_MAX_STUDY_NAME, NULL))
    return conf__fail(p, kn->line, path, "invalid study name (1 to %d of "
                      "A-Z a-z 0-9 _ . -)", CONF_MAX_STUDY_NAME);
  if (vn->kind != NODE_MAPPING)
    return conf__fail_type(p, vn, path, "a mapping of the study's plan");
  t = realloc(conf->studies, (conf->n_studies + 1) * sizeof(*t));
  if (!t)
    return conf__fail_nomem(p);
  conf->studies = t;
  t = &conf->studies[conf->n_studies++];
  memset(t, 0, sizeof(*t));
  t->name = strdup(kn->text);
  if (!t->name)
    return conf__fail_nomem(p);
  t->line = kn->line;
  r = conf__parse_mapping(p, vn, path, study_keys, t);
  if (r < 0)
    return r;
  for (i = 0; required[i]; i++)
    if (!conf__key_line(vn, required[i], NULL))
      return conf__fail(p, vn->line, path, "missing key '%s' (a study's "
                        "plan is complete before it starts)", required[i]);
  return 0;
}

int
conf__parse_studies(struct parser *p, const struct node *v, const char *path,
                    struct qrsd_conf *conf)
{
  const struct node *kn, *vn;
  char sub[MAX_PATH];
  int r;

  conf__free_studies(conf);
  if (conf__is_null(v))
    return 0;
  if (v->kind != NODE_MAPPING)
    return conf__fail_type(p, v, path, "a mapping of studies by name");
  for (kn = v->children; kn; kn = vn->next) {
    vn = kn->next;
    r = conf__check_key(p, v, kn, path, sub, sizeof(sub));
    if (r < 0)
      return r;
    r = parse_study(p, conf, kn, vn, sub);
    if (r < 0)
      return r;
  }
  return 0;
}

int
conf__check_studies(struct parser *p, const struct qrsd_conf *conf,
                    const struct node *root)
{
  const struct conf_study *t;
  char path[MAX_PATH];
  size_t i, a;
  int line;

  for (i = 0; i < conf->n_studies; i++) {
    t = &conf->studies[i];
    line = conf__key_line(root, "studies", t->name);
    conf__join_path(path, sizeof(path), "studies", t->name);
    if (conf_find_source(conf, t->name))
      return conf__fail(p, line, path, "a source has this name too (a "
                        "client names a study where it names a source: "
                        "rename one)");
    if (!conf->journal_dir || !conf->journal_dir[0])
      return conf__fail(p, line, path, "a study needs the draw journal "
                        "(journal.dir): its commitments and draws are "
                        "recorded there");
    for (a = 0; a < t->n_arms; a++)
      if (!conf_find_source(conf, t->arms[a]))
        return conf__fail(p, line, path, "arm '%s' is not declared under "
                          "sources", t->arms[a]);
  }
  return 0;
}

void
conf__print_studies(FILE *f, const struct qrsd_conf *conf, int indent,
                    locale_t loc)
{
  const struct conf_study *t;
  const struct key *k;
  size_t i, a;

  for (i = 0; i < conf->n_studies; i++) {
    t = &conf->studies[i];
    fprintf(f, "%*s\"%s\": { arms: [", indent, "", t->name);
    for (a = 0; a < t->n_arms; a++)
      fprintf(f, "%s\"%s\"", a ? ", " : "", t->arms[a]);
    fputc(']', f);
    for (k = study_keys + 1; k->name; k++) {
      fprintf(f, ", %s: ", k->name);
      conf__print_scalar(f, k, t, loc);
    }
    fputs(" }\n", f);
  }
}

const struct conf_study *
conf_find_study(const struct qrsd_conf *conf, const char *name)
{
  size_t i;

  if (!conf || !name)
    return NULL;
  for (i = 0; i < conf->n_studies; i++)
    if (!strcmp(conf->studies[i].name, name))
      return &conf->studies[i];
  return NULL;
}

int
conf_study_same(const struct conf_study *a, const struct conf_study *b)
{
  size_t i;

  if (a->n_arms != b->n_arms || strcmp(a->unit, b->unit) ||
      a->planned_units != b->planned_units ||
      strcmp(a->statistic, b->statistic) ||
      memcmp(&a->alpha, &b->alpha, sizeof(double)) ||
      memcmp(&a->effect, &b->effect, sizeof(double)) ||
      strcmp(a->assignment_seed_file, b->assignment_seed_file))
    return 0;
  for (i = 0; i < a->n_arms; i++)
    if (strcmp(a->arms[i], b->arms[i]))
      return 0;
  return 1;
}
