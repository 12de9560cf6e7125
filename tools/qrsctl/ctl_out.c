/* qrsctl's output: strings from qrsd made safe for a terminal, lines
   flushed as they are written (a reader that leaves ends qrsctl
   quietly), JSON lines, and the engine of the field tables that give a
   reply both as text and as JSON (ctl.h; the tables are in ctl_reply.c).
   Not thread-safe: stdout only, from main's thread. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

/* The longest text of one field (qrsd's longest string is 256 bytes). */
#define TEXT_MAX 512
/* The most fields one table may show as columns. */
#define COLUMNS_MAX 16

const char *
out_safe(char *dst, size_t dstsize, const char *src, size_t srcsize)
{
  size_t i, n;

  n = strnlen(src, srcsize);
  if (n >= dstsize)
    n = dstsize - 1;
  for (i = 0; i < n; i++)
    dst[i] = iscntrl((unsigned char)src[i]) ? '?' : src[i];
  dst[n] = '\0';
  return dst;
}

int
out_flush(void)
{
  if (fflush(stdout) == 0 && !ferror(stdout))
    return 0;
  if (errno == EPIPE)
    return 1;
  fprintf(stderr, "qrsctl: cannot write output: %s\n", strerror(errno));
  return -1;
}

int
out_done(int status)
{
  int r;

  r = out_flush();
  if (r < 0)
    return EXIT_ERROR;
  return status;
}

int
out_json(int r, struct json_object *obj)
{
  const char *s;

  if (r < 0 || !obj) {
    fprintf(stderr, "qrsctl: cannot build JSON: %s\n",
            strerror(r < 0 ? -r : ENOMEM));
    return -1;
  }
  s = json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN |
                                     JSON_C_TO_STRING_NOSLASHESCAPE);
  if (!s) {
    json_object_put(obj);
    fprintf(stderr, "qrsctl: cannot build JSON: %s\n", strerror(ENOMEM));
    return -1;
  }
  puts(s);
  json_object_put(obj);
  return out_flush();
}

/* A double as f says: prec digits, %f or %g, with or without a sign. */
static void
double_text(const struct ctl_field *f, double d, char *buf, size_t size)
{
  if (f->flags & CTL_G)
    snprintf(buf, size, "%.*g", f->prec, d);
  else if (f->flags & CTL_PLUS)
    snprintf(buf, size, "%+.*f", f->prec, d);
  else
    snprintf(buf, size, "%.*f", f->prec, d);
}

/* The text of f's value in row, in buf (or a constant); *unset says
   whether the value is 0, "" or false.  NULL: no text. */
static const char *
value_text(const struct ctl_field *f, const void *row, char *buf,
           size_t size, int *unset)
{
  const char *p;
  uint64_t u;
  int64_t i;
  uint32_t u32;
  double d;
  int b;

  *unset = 0;
  if (f->text)
    return f->text(buf, size, row);
  p = (const char *)row + f->json.offset;
  switch (f->json.type) {
  case JSONFIELD_STR:
    *unset = !p[0];
    return out_safe(buf, size, p, f->json.size);
  case JSONFIELD_BOOL:
    memcpy(&b, p, sizeof(b));
    *unset = !b;
    return b ? f->on : NULL;
  case JSONFIELD_NAME:
    memcpy(&b, p, sizeof(b));
    return f->json.name(b);
  case JSONFIELD_INT:
    memcpy(&b, p, sizeof(b));
    *unset = !b;
    snprintf(buf, size, "%d", b);
    return buf;
  case JSONFIELD_U32:
    memcpy(&u32, p, sizeof(u32));
    *unset = !u32;
    snprintf(buf, size, "%" PRIu32, u32);
    return buf;
  case JSONFIELD_I64:
    memcpy(&i, p, sizeof(i));
    *unset = !i;
    snprintf(buf, size, "%" PRId64, i);
    return buf;
  case JSONFIELD_U64:
  case JSONFIELD_HEX64:
    memcpy(&u, p, sizeof(u));
    *unset = !u;
    if (f->json.type == JSONFIELD_HEX64)
      snprintf(buf, size, "%016" PRIx64, u);
    else
      snprintf(buf, size, "%" PRIu64, u);
    return buf;
  case JSONFIELD_DOUBLE:
  case JSONFIELD_SHORTEST:
    memcpy(&d, p, sizeof(d));
    *unset = d == 0;
    double_text(f, d, buf, size);
    return buf;
  default:
    return NULL;                  /* a custom field shows text only by
                                     its text function */
  }
}

/* The value's text as the field shows it (without pre and post), in buf
   or a constant: NULL to leave the field out. */
static const char *
field_text(const struct ctl_field *f, const void *row, char *buf,
           size_t size)
{
  const char *s;
  int unset;

  s = value_text(f, row, buf, size, &unset);
  if (unset) {
    if (f->flags & CTL_OMIT)
      return NULL;
    if (f->unset)
      return f->unset;
  }
  return s;
}

void
table_line(const struct ctl_table *t, const void *row)
{
  char buf[TEXT_MAX];
  const char *s;
  size_t i;
  int col, last;

  last = 0;
  for (i = 0; i < t->n; i++)
    if (t->fields[i].col > last)
      last = t->fields[i].col;
  for (col = 1; col <= last; col++)
    for (i = 0; i < t->n; i++) {
      if (t->fields[i].col != col)
        continue;
      s = field_text(&t->fields[i], row, buf, sizeof(buf));
      if (s)
        printf("%s%s%s", t->fields[i].pre ? t->fields[i].pre : "", s,
               t->fields[i].post ? t->fields[i].post : "");
    }
}

/* The fields that show as columns, in their order: their count. */
static size_t
columns(const struct ctl_table *t, const struct ctl_field **cols)
{
  const struct ctl_field *f;
  size_t i, j, n;

  n = 0;
  for (i = 0; i < t->n && n < COLUMNS_MAX; i++) {
    f = &t->fields[i];
    if (!f->col)
      continue;
    for (j = n; j > 0 && cols[j - 1]->col > f->col; j--)
      cols[j] = cols[j - 1];
    cols[j] = f;
    n++;
  }
  return n;
}

/* The text of column k of row. */
static const char *
cell_text(const struct ctl_table *t, const struct ctl_field *f, size_t k,
          const void *row, char *buf, size_t size)
{
  const char *s;

  if (k > 0 && t->blank && t->blank(row))
    return "-";
  s = field_text(f, row, buf, size);
  return s ? s : "";
}

static void
print_row(const struct ctl_table *t, const struct ctl_field **cols,
          size_t n, const int *width, const void *row)
{
  char buf[TEXT_MAX];
  const char *s;
  size_t k;

  fputs(t->indent ? t->indent : "", stdout);
  for (k = 0; k < n; k++) {
    if (k > 0)
      fputs(cols[k]->sep ? cols[k]->sep : t->sep, stdout);
    s = row ? cell_text(t, cols[k], k, row, buf, sizeof(buf)) :
      cols[k]->head;
    printf(cols[k]->width < 0 ? "%-*s" : "%*s", width[k], s);
  }
  putchar('\n');
}

void
table_columns(const struct ctl_table *t, const void *rows, size_t n,
              size_t stride)
{
  const struct ctl_field *cols[COLUMNS_MAX];
  int width[COLUMNS_MAX];
  char buf[TEXT_MAX];
  size_t i, k, ncols;
  int w;

  ncols = columns(t, cols);
  for (k = 0; k < ncols; k++) {
    width[k] = abs(cols[k]->width);
    if (!(cols[k]->flags & CTL_FIT))
      continue;
    w = (int)strlen(cols[k]->head);
    if (w > width[k])
      width[k] = w;
    for (i = 0; i < n; i++) {
      w = (int)strlen(cell_text(t, cols[k], k, (const char *)rows +
                                i * stride, buf, sizeof(buf)));
      if (w > width[k])
        width[k] = w;
    }
  }
  print_row(t, cols, ncols, width, NULL);
  for (i = 0; i < n; i++)
    print_row(t, cols, ncols, width, (const char *)rows + i * stride);
}
