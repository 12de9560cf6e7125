/* Source construction: config entry -> source implementation. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source.h"

static const struct source_ops *
ops_for(enum conf_source_type t)
{
  switch (t) {
  case CONF_SOURCE_SYSTEM:
    return &source_system_ops;
  case CONF_SOURCE_MOCK:
    return &source_mock_ops;
  case CONF_SOURCE_GRPC:
    return NULL;                /* needs the asynchronous source layer */
  }
  return NULL;
}

int
source_new(const struct conf_source *cs, struct source **ret_source,
           char *err, size_t errlen)
{
  struct source *s;
  int r;

  s = calloc(1, sizeof(*s));
  if (!s)
    return -ENOMEM;
  s->ops = ops_for(cs->type);
  s->name = strdup(cs->name);
  if (!s->ops || !s->name) {
    snprintf(err, errlen, "source '%s': cannot create", cs->name);
    r = s->ops ? -ENOMEM : -EINVAL;
    goto fail;
  }
  s->healthy = 1;
  r = s->ops->open(s, cs, err, errlen);
  if (r < 0)
    goto fail;
  *ret_source = s;
  return 0;

fail:
  free(s->name);
  free(s);
  return r;
}

void
source_free(struct source *s)
{
  if (!s)
    return;
  if (s->ops && s->ops->close)
    s->ops->close(s);
  free(s->name);
  free(s);
}

void
source_describe(const struct source *s, char *buf, size_t len)
{
  if (s->ops->describe)
    s->ops->describe(s, buf, len);
  else
    snprintf(buf, len, "%s", s->ops->type);
}
