/* What the pieces of the configuration loader share; private to them
   (everyone else includes conf.h).

   The loader is three files, one per stage:
   - conf_tree.c: YAML (libyaml) into a small tree of nodes that keep
     their line numbers, lookups in that tree, and the one-line errors
     ("file:line: path: what") that every stage reports through;
   - conf_keys.c: the tables of keys (a new setting is one line there) and
     the walker that fills struct qrsd_conf and struct conf_source from a
     tree against them, with the checks inside one source;
   - conf.c: loading (the embedded default, then the file), the checks
     that involve more than one key, conf_print() (which walks the same
     tables) and the public lookups.

   Functions named conf__*() are the pieces' calls into each other. */
#ifndef QRSD_CONF_INT_H
#define QRSD_CONF_INT_H

#include <locale.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "conf/conf.h"

#define MAX_PATH 256          /* dotted key path in messages */
#define SHOW 60               /* bytes of a value quoted in a message */

/* ---- The tree (conf_tree.c) -------------------------------------------- */

enum node_kind { NODE_SCALAR, NODE_MAPPING, NODE_SEQUENCE };

struct node {
  enum node_kind kind;
  int line;                 /* 1-based; a mapping value: its key's */
  int plain;                /* scalar written without quotes */
  char *text;               /* scalar, NUL-terminated (no NUL inside) */
  struct node *children;    /* mapping: key, value, key, value, ... */
  struct node *next;
};

struct parser {
  const char *name;         /* the file, for messages */
  char *err;
  size_t errlen;
  locale_t c_locale;
  int builtin;              /* applying the embedded default */
};

/* Write "name:line: path: message" into p->err (line 0: no line, path NULL
   or "": no path), with control characters made visible as '?' so that it
   stays one line.  Returns -EINVAL. */
int conf__fail(struct parser *p, int line, const char *path,
               const char *fmt, ...) __attribute__((format(printf, 4, 5)));
int conf__vfail(struct parser *p, int line, const char *path,
                const char *fmt, va_list ap)
  __attribute__((format(printf, 4, 0)));
/* "out of memory"; returns -ENOMEM. */
int conf__fail_nomem(struct parser *p);
/* "expected <what>, got <what n is>"; returns -EINVAL. */
int conf__fail_type(struct parser *p, const struct node *n, const char *path,
                    const char *what);
/* A plain scalar that YAML reads as null ("", ~, null). */
int conf__is_null(const struct node *n);
/* path.key into buf (just key at the top level, just path for key ""),
   cut to fit. */
void conf__join_path(char *buf, size_t len, const char *path,
                     const char *key);

/* The name in names (ended by NULL) that word is a typo of: the nearest
   by edit distance (letters compared without case), if few enough edits
   for its length; else NULL. */
const char *conf__nearest(const char *word, const char *const *names);
/* "; did you mean 'NAME'?" for conf__nearest()'s name, or "", into buf. */
void conf__hint(char *buf, size_t len, const char *word,
                const char *const *names);
/* names (ended by NULL) joined by ", " into buf, cut to fit. */
void conf__join_names(char *buf, size_t len, const char *const *names);

/* Read text into a tree; *ret_root is NULL for a text with no document.
   Free with conf__node_free(). */
int conf__read_tree(struct parser *p, const char *text, size_t len,
                    struct node **ret_root);
void conf__node_free(struct node *n);
/* The line of the key at a (b NULL) or a.b (b within a) in the mapping
   map, or 0 when there is none. */
int conf__key_line(const struct node *map, const char *a, const char *b);

/* ---- The tables of keys (conf_keys.c) ---------------------------------- */

enum key_kind {
  KEY_SECTION,              /* a mapping of the keys in sub */
  KEY_STRING,               /* char *, length umin..umax, maybe choices */
  KEY_MODE,                 /* unsigned, octal text, umin..umax */
  KEY_U32,                  /* uint32_t, decimal, umin..umax */
  KEY_U64,                  /* uint64_t, decimal, umin..umax */
  KEY_BOOL,                 /* int 0/1, YAML true/false */
  KEY_DOUBLE,               /* double, dmin..dmax, bounds open as flagged */
  KEY_SOURCES,              /* the sources mapping */
  KEY_SOURCE_TYPE,          /* "type" of a source: read before the rest */
  KEY_MECHANISMS,           /* a source's mechanisms: a list of names */
  KEY_STUDIES,              /* the studies mapping (conf_study.c) */
  KEY_ARMS,                 /* a study's arms: a list of source names */
};

#define OPEN_MIN 1u
#define OPEN_MAX 2u

struct key {
  const char *name;
  enum key_kind kind;
  size_t offset;            /* of the field in the struct being filled */
  const struct key *sub;    /* KEY_SECTION: keys, ended by a NULL name */
  uint64_t umin, umax;
  double dmin, dmax;
  unsigned open;            /* KEY_DOUBLE: OPEN_MIN | OPEN_MAX */
  const char *const *choices;  /* KEY_STRING: allowed values, or NULL */
  int live;                 /* a reload applies it (conf_apply_live() in
                               conf_diff.c); else it keeps its value
                               until a restart */
};

/* A source type and its keys (into struct conf_source). */
struct source_type {
  const char *name;
  enum conf_source_type type;
  const struct key *keys;
  int test_only;            /* needs allow_test_sources: true */
};

/* The top level, in the order conf_print() writes it. */
extern const struct key conf__top_keys[];

/* The entry of type t, or NULL. */
const struct source_type *conf__source_type(enum conf_source_type t);

/* Fill base (a struct qrsd_conf for conf__top_keys) from the mapping map
   at path against keys.  0 or a negative errno with p->err set. */
int conf__parse_mapping(struct parser *p, const struct node *map,
                        const char *path, const struct key *keys,
                        void *base);

/* Free conf's sources and everything they own. */
void conf__free_sources(struct qrsd_conf *conf);

/* kn, a key of map at path: a string, given once; its path into sub.
   0 or -EINVAL with p->err set. */
int conf__check_key(struct parser *p, const struct node *map,
                    const struct node *kn, const char *path, char *sub,
                    size_t sublen);

/* ---- Studies (conf_study.c) ------------------------------------------- */

/* The studies mapping at path: it replaces the studies so far. */
int conf__parse_studies(struct parser *p, const struct node *v,
                        const char *path, struct qrsd_conf *conf);
/* A study's arms (a list of names) into base (a struct conf_study). */
int conf__parse_arms(struct parser *p, const struct node *v,
                     const char *path, void *base);
/* The checks across keys: arms declared, no name shared with a source,
   the journal on.  0 or -EINVAL with p->err set. */
int conf__check_studies(struct parser *p, const struct qrsd_conf *conf,
                        const struct node *root);
void conf__free_studies(struct qrsd_conf *conf);
/* Every study, one flow-style line each, at indent. */
void conf__print_studies(FILE *f, const struct qrsd_conf *conf, int indent,
                         locale_t loc);

/* The value of scalar key k of base (a struct qrsd_conf or conf_source)
   as conf_print() writes it. */
void conf__print_scalar(FILE *f, const struct key *k, const void *base,
                        locale_t loc);

/* Shortest text that reads back as v, independent of the locale. */
void conf__format_double(double v, locale_t loc, char *buf, size_t len);

#endif
