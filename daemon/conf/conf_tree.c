/* The configuration's YAML tree and its errors (conf_int.h says what the
   other pieces of the loader are): libyaml's events into a tree of nodes
   that keep their line numbers (no anchors, aliases or tags, one
   document, bounded nesting), lookups of keys in it, and the one-line
   error messages every piece reports through.  Knows no key of the
   configuration. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "conf/conf_int.h"

#define MAX_DEPTH 32          /* nesting of YAML collections */

/* ---- Errors ------------------------------------------------------------ */

int
conf__vfail(struct parser *p, int line, const char *path, const char *fmt,
            va_list ap)
{
  size_t n;
  int w;

  if (!p->err || p->errlen == 0)
    return -EINVAL;

  if (line > 0)
    w = snprintf(p->err, p->errlen, "%s:%d: ", p->name, line);
  else
    w = snprintf(p->err, p->errlen, "%s: ", p->name);
  n = w < 0 ? 0 : (size_t)w;
  if (n < p->errlen && path && *path) {
    w = snprintf(p->err + n, p->errlen - n, "%s: ", path);
    n += w < 0 ? 0 : (size_t)w;
  }
  if (n < p->errlen)
    vsnprintf(p->err + n, p->errlen - n, fmt, ap);
  for (n = 0; p->err[n]; n++)
    if ((unsigned char)p->err[n] < 0x20 || p->err[n] == 0x7f)
      p->err[n] = '?';
  return -EINVAL;
}

int
conf__fail(struct parser *p, int line, const char *path, const char *fmt, ...)
{
  va_list ap;
  int r;

  va_start(ap, fmt);
  r = conf__vfail(p, line, path, fmt, ap);
  va_end(ap);
  return r;
}

int
conf__fail_nomem(struct parser *p)
{
  conf__fail(p, 0, NULL, "out of memory");
  return -ENOMEM;
}

int
conf__is_null(const struct node *n)
{
  if (n->kind != NODE_SCALAR || !n->plain)
    return 0;
  return !strcmp(n->text, "") || !strcmp(n->text, "~") ||
         !strcmp(n->text, "null") || !strcmp(n->text, "Null") ||
         !strcmp(n->text, "NULL");
}

int
conf__fail_type(struct parser *p, const struct node *n, const char *path,
                const char *what)
{
  if (n->kind == NODE_MAPPING)
    return conf__fail(p, n->line, path, "expected %s, got a mapping", what);
  if (n->kind == NODE_SEQUENCE)
    return conf__fail(p, n->line, path, "expected %s, got a sequence", what);
  if (conf__is_null(n))
    return conf__fail(p, n->line, path, "expected %s, got no value", what);
  return conf__fail(p, n->line, path, "expected %s, got '%.*s'%s", what, SHOW,
                    n->text, strlen(n->text) > SHOW ? "..." : "");
}

void
conf__join_path(char *buf, size_t len, const char *path, const char *key)
{
  if (snprintf(buf, len, "%s%s%s", path, *path && *key ? "." : "", key) < 0)
    buf[0] = '\0';
}

/* ---- Hints ------------------------------------------------------------- */

#define NEAR_MAX 64           /* longer words get no hint */

static int
lower(int c)
{
  return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

/* The edit distance of a and b: insertions, deletions, substitutions and
   swaps of neighbours, letters compared without case; NEAR_MAX + 1 when
   either is longer than NEAR_MAX. */
static size_t
edit_distance(const char *a, const char *b)
{
  size_t rows[3][NEAR_MAX + 1];
  size_t *prev2, *prev, *cur, *t;
  size_t la, lb, i, j, d;

  la = strlen(a);
  lb = strlen(b);
  if (la > NEAR_MAX || lb > NEAR_MAX)
    return NEAR_MAX + 1;
  prev2 = rows[0];
  prev = rows[1];
  cur = rows[2];
  for (j = 0; j <= lb; j++)
    prev[j] = j;
  for (i = 1; i <= la; i++) {
    cur[0] = i;
    for (j = 1; j <= lb; j++) {
      d = prev[j - 1] + (lower(a[i - 1]) != lower(b[j - 1]));
      if (prev[j] + 1 < d)
        d = prev[j] + 1;
      if (cur[j - 1] + 1 < d)
        d = cur[j - 1] + 1;
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) &&
          lower(a[i - 2]) == lower(b[j - 1]) && prev2[j - 2] + 1 < d)
        d = prev2[j - 2] + 1;
      cur[j] = d;
    }
    t = prev2;
    prev2 = prev;
    prev = cur;
    cur = t;
  }
  return prev[lb];
}

const char *
conf__nearest(const char *word, const char *const *names)
{
  const char *best;
  size_t d, best_d, len, name_len;

  best = NULL;
  best_d = NEAR_MAX + 1;
  len = strlen(word);
  for (; *names; names++) {
    d = edit_distance(word, *names);
    name_len = strlen(*names);
    /* A typo: at most two edits, and at most one in three letters of the
       longer word ("sytem" is 'system', "oops" is not 'mock'). */
    if (d > 2 || 3 * d > (len > name_len ? len : name_len) || d >= best_d)
      continue;
    best = *names;
    best_d = d;
  }
  return best;
}

void
conf__hint(char *buf, size_t len, const char *word, const char *const *names)
{
  const char *near;

  near = conf__nearest(word, names);
  if (!near || snprintf(buf, len, "; did you mean '%s'?", near) < 0)
    buf[0] = '\0';
}

void
conf__join_names(char *buf, size_t len, const char *const *names)
{
  size_t n;
  int w;

  buf[0] = '\0';
  for (n = 0; *names && n < len; names++) {
    w = snprintf(buf + n, len - n, "%s%s", n ? ", " : "", *names);
    if (w < 0)
      break;
    n += (size_t)w;
  }
}

/* ---- YAML into the tree ------------------------------------------------ */

void
conf__node_free(struct node *n)
{
  struct node *next;

  while (n) {
    next = n->next;
    conf__node_free(n->children);
    free(n->text);
    free(n);
    n = next;
  }
}

static int
fail_yaml(struct parser *p, yaml_parser_t *yp, const char *text, size_t len)
{
  size_t i;
  int line;

  if (yp->error == YAML_MEMORY_ERROR)
    return conf__fail_nomem(p);
  if (yp->error == YAML_READER_ERROR) {
    line = 1;
    for (i = 0; i < yp->problem_offset && i < len; i++)
      if (text[i] == '\n')
        line++;
    return conf__fail(p, line, NULL, "%s", yp->problem ? yp->problem :
                      "unreadable text");
  }
  if (yp->context)
    return conf__fail(p, (int)yp->problem_mark.line + 1, NULL,
                      "syntax error: %s (%s at line %d)", yp->problem,
                      yp->context, (int)yp->context_mark.line + 1);
  return conf__fail(p, (int)yp->problem_mark.line + 1, NULL, "syntax error: %s",
                    yp->problem ? yp->problem : "unknown");
}

struct reader {
  yaml_parser_t yp;
  const char *text;
  size_t len;
};

static int
next_event(struct parser *p, struct reader *rd, yaml_event_t *ev)
{
  if (!yaml_parser_parse(&rd->yp, ev))
    return fail_yaml(p, &rd->yp, rd->text, rd->len);
  return 0;
}

/* Read the next event and drop it. */
static int
skip_event(struct parser *p, struct reader *rd)
{
  yaml_event_t ev;
  int r;

  r = next_event(p, rd, &ev);
  if (r < 0)
    return r;
  yaml_event_delete(&ev);
  return 0;
}

/* Drop one event (the stream's start, a document's end) and the one
   after it: 1 when that one ends the stream, 0 when not (its line in
   *ret_line), or a negative errno. */
static int
skip_to_end(struct parser *p, struct reader *rd, int *ret_line)
{
  yaml_event_t ev;
  int r;

  r = skip_event(p, rd);
  if (r < 0)
    return r;
  r = next_event(p, rd, &ev);
  if (r < 0)
    return r;
  *ret_line = (int)ev.start_mark.line + 1;
  r = ev.type == YAML_STREAM_END_EVENT;
  yaml_event_delete(&ev);
  return r;
}

/* Build the node at path that starts with event ev (which this deletes). */
static int
build_node(struct parser *p, struct reader *rd, yaml_event_t *ev, int depth,
           const char *path, struct node **ret)
{
  struct node *n, *child, *prev, **tail;
  yaml_event_type_t end;
  yaml_char_t *anchor, *tag;
  yaml_event_t cev;
  char sub[MAX_PATH];
  int count, r;

  n = NULL;
  anchor = NULL;
  tag = NULL;
  end = YAML_NO_EVENT;
  switch (ev->type) {
  case YAML_ALIAS_EVENT:
    anchor = ev->data.alias.anchor;
    break;
  case YAML_SCALAR_EVENT:
    anchor = ev->data.scalar.anchor;
    tag = ev->data.scalar.tag;
    break;
  case YAML_SEQUENCE_START_EVENT:
    anchor = ev->data.sequence_start.anchor;
    tag = ev->data.sequence_start.tag;
    end = YAML_SEQUENCE_END_EVENT;
    break;
  case YAML_MAPPING_START_EVENT:
    anchor = ev->data.mapping_start.anchor;
    tag = ev->data.mapping_start.tag;
    end = YAML_MAPPING_END_EVENT;
    break;
  default:
    r = conf__fail(p, (int)ev->start_mark.line + 1, path,
                   "unexpected YAML event");
    goto out;
  }
  if (anchor) {
    r = conf__fail(p, (int)ev->start_mark.line + 1, path,
                   "YAML anchors and aliases are not supported");
    goto out;
  }
  if (tag) {
    r = conf__fail(p, (int)ev->start_mark.line + 1, path,
                   "YAML tags are not supported");
    goto out;
  }
  if (depth > MAX_DEPTH) {
    r = conf__fail(p, (int)ev->start_mark.line + 1, path, "nested too deeply");
    goto out;
  }

  n = calloc(1, sizeof(*n));
  if (!n) {
    r = conf__fail_nomem(p);
    goto out;
  }
  n->line = (int)ev->start_mark.line + 1;

  if (ev->type == YAML_SCALAR_EVENT) {
    n->kind = NODE_SCALAR;
    n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    if (memchr(ev->data.scalar.value, '\0', ev->data.scalar.length)) {
      r = conf__fail(p, n->line, path, "contains a NUL character");
      goto out;
    }
    n->text = strndup((const char *)ev->data.scalar.value,
                      ev->data.scalar.length);
    if (!n->text) {
      r = conf__fail_nomem(p);
      goto out;
    }
    r = 0;
    goto out;
  }

  n->kind = end == YAML_MAPPING_END_EVENT ? NODE_MAPPING : NODE_SEQUENCE;
  tail = &n->children;
  prev = NULL;
  for (count = 0;; count++) {
    r = next_event(p, rd, &cev);
    if (r < 0)
      goto out;
    if (cev.type == end) {
      yaml_event_delete(&cev);
      break;
    }
    /* A value's path names its key. */
    if (n->kind == NODE_MAPPING && count % 2 == 1 &&
        prev->kind == NODE_SCALAR)
      conf__join_path(sub, sizeof(sub), path, prev->text);
    else
      conf__join_path(sub, sizeof(sub), path, "");
    r = build_node(p, rd, &cev, depth + 1, sub, &child);
    if (r < 0)
      goto out;
    /* A value is reported on its key's line (a block mapping would
       start on the line after, and "key:" with nothing after has no line
       of its own). */
    if (n->kind == NODE_MAPPING && count % 2 == 1)
      child->line = prev->line;
    *tail = child;
    tail = &child->next;
    prev = child;
  }
  r = 0;

out:
  yaml_event_delete(ev);
  if (r < 0) {
    conf__node_free(n);
    return r;
  }
  *ret = n;
  return 0;
}

int
conf__read_tree(struct parser *p, const char *text, size_t len,
                struct node **ret_root)
{
  struct reader rd;
  struct node *root;
  yaml_event_t ev;
  int r, line;

  root = NULL;
  if (!yaml_parser_initialize(&rd.yp))
    return conf__fail_nomem(p);
  rd.text = text;
  rd.len = len;
  yaml_parser_set_input_string(&rd.yp, (const unsigned char *)text, len);

  /* the stream start, then a document start (1: the stream's end,
     nothing but comments) */
  r = skip_to_end(p, &rd, &line);
  if (r != 0)
    goto out;

  r = next_event(p, &rd, &ev);
  if (r < 0)
    goto out;
  r = build_node(p, &rd, &ev, 0, "", &root);
  if (r < 0)
    goto out;

  /* the document end, then the stream's */
  r = skip_to_end(p, &rd, &line);
  if (r == 0)
    r = conf__fail(p, line, NULL, "more than one YAML document");

out:
  yaml_parser_delete(&rd.yp);
  if (r < 0) {
    conf__node_free(root);
    return r;
  }
  *ret_root = root;
  return 0;
}

int
conf__key_line(const struct node *root, const char *a, const char *b)
{
  const struct node *k;

  while (root && root->kind == NODE_MAPPING) {
    for (k = root->children; k; k = k->next->next)
      if (k->kind == NODE_SCALAR && !strcmp(k->text, a))
        break;
    if (!k)
      return 0;
    if (!b)
      return k->line;
    root = k->next;
    a = b;
    b = NULL;
  }
  return 0;
}

