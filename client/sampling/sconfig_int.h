/* What the pieces of the sampler configuration share (libqrs internal;
   the rest of libqrs uses sampling.h).

   sconfig.c         the configuration object: its layers (explicit,
                     preset, QR_* environment, defaults), the public
                     setters and getters, the resolution into values
   sconfig_tables.c  the data: the field table, the reference's field
                     order and infrastructure fields, the presets, and
                     the look-ups in them
   sconfig_value.c   a field's value as text: locale-independent
                     numbers, parsing into and printing from a struct
                     qrs__cfgvals, ranges, and the check of a whole
                     configuration
   sconfig_hash.c    the reference-compatible config hash */
#ifndef QRS_SCONFIG_INT_H
#define QRS_SCONFIG_INT_H

#include <stddef.h>

#include "sampling.h"

enum ftype {
  F_DBL,
  F_INT,
  F_BOOL,
  F_STR,
};

struct field {
  const char *name;
  enum ftype type;
  size_t off;
  size_t size;                    /* F_STR: buffer size */
  const char *def;                /* default, as text */
  double lo, hi;                  /* range; NAN: unbounded */
  unsigned char lo_open, hi_open; /* > instead of >=, < instead of <= */
  const char *const *choices;     /* F_STR: allowed values, NULL: any */
  unsigned char ext;              /* qrs extension (not a reference
                                     field); 2: one the config hash
                                     leaves out (it names the run, not
                                     the sampling) */
};

/* The field table's length (sconfig_tables.c checks it). */
#define QRS__NFIELDS 89
/* Reference fields in the reference's declaration order, then ours. */
extern const struct field qrs__cfg_fields[];

/* The reference's fields in its order for the hash: json its default
   JSON text for an infrastructure field (configure qrsd instead), NULL
   for a field of ours (taken from the table), "preset", and "*" (ours
   from zscore_calibration_samples to bypass, in table order). */
struct ref_field {
  const char *name;
  const char *json;
};
extern const struct ref_field qrs__cfg_ref_order[];
extern const size_t qrs__cfg_nref;

struct preset_value {
  const char *field;
  const char *value;
};

/* A built-in preset: its values, in parts that presets share (each part
   ends in { NULL, NULL }; no field is in two parts of one preset). */
#define QRS__PRESET_PARTS 5
struct preset {
  const char *name;
  const struct preset_value *parts[QRS__PRESET_PARTS];  /* NULL: no more */
};
#define QRS__NPRESETS 7
extern const struct preset qrs__cfg_presets[];

#define PRESET_MAX 32

struct qrs_sampler_config {
  struct qrs__cfgvals exp_v;      /* explicit layer values */
  struct qrs__cfgvals env_v;      /* environment layer values */
  unsigned char exp_set[QRS__NFIELDS];
  unsigned char env_set[QRS__NFIELDS];
  char preset[PRESET_MAX];        /* explicit preset, "" none */
  char env_preset[PRESET_MAX];    /* QR_PRESET, when has_env_preset */
  int has_env_preset;
  char err[256];
};

/* sconfig_tables.c: the index of a field / preset name, or -1; whether
   name is one of the reference's infrastructure fields. */
int qrs__cfg_field_index(const char *name);
int qrs__cfg_preset_index(const char *name);
int qrs__cfg_is_infra(const char *name);

/* The value preset pi gives field, or NULL. */
const char *qrs__cfg_preset_value(int pi, const char *field);

/* sconfig_value.c */

/* printf into err (len bytes; err NULL or len 0: nothing). */
void qrs__cfg_seterr(char *err, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Parse text for field f into v.  0 or QRS_E_CONFIG_VALUE (err set). */
int qrs__cfg_parse(const struct field *f, const char *text,
                   struct qrs__cfgvals *v, char *err, size_t errlen);

/* Field f of src into dst. */
void qrs__cfg_copy_field(const struct field *f, struct qrs__cfgvals *dst,
                         const struct qrs__cfgvals *src);

/* Field f of v as text (the form the reference prints). */
void qrs__cfg_field_text(const struct field *f, const struct qrs__cfgvals *v,
                         char *buf, size_t len);

/* Every field at its default. */
void qrs__cfg_defaults(struct qrs__cfgvals *v);

#endif
