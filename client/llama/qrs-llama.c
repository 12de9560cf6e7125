/* libqrs-llama: a llama.cpp sampler that selects with libqrs (see
   qrs/llama.h). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <ggml-backend.h>

#include <qrs/llama.h>

struct qs {
  struct qrs_sampler *s;
  struct qrs_client *c;           /* borrowed */
  size_t n_vocab;
  float *row;                     /* n_vocab logits handed to libqrs */
  llama_token *ids;               /* the candidates written into row by
                                     the last scatter, allocated on first
                                     use */
  size_t n_ids;
  int row_full;                   /* row holds more than ids[] (a whole
                                     copy, or not initialised) */
  llama_token_data *cand;         /* qrs_llama_sample()'s candidates,
                                     allocated on first use */
  uint8_t salt[256];
  size_t salt_len;                /* 0: random salt per request */
  int status;                     /* of the last apply */
  int have_record;
  struct qrs_token_record rec;
};

static struct llama_sampler_i qs_iface;

static struct qs *
qs_of(const struct llama_sampler *smpl)
{
  struct llama_sampler *m;
  struct qs *q;
  int i, n;

  if (!smpl)
    return NULL;
  if (smpl->iface == &qs_iface)
    return smpl->ctx;
  /* llama_sampler_chain_get(x, -1) is x itself for a chain, else NULL. */
  if (!llama_sampler_chain_get((struct llama_sampler *)smpl, -1))
    return NULL;
  n = llama_sampler_chain_n(smpl);
  for (i = 0; i < n; i++) {
    m = llama_sampler_chain_get((struct llama_sampler *)smpl, i);
    q = qs_of(m);
    if (q)
      return q;
  }
  return NULL;
}

static void
qs_destroy(struct qs *q)
{
  if (!q)
    return;
  qrs_sampler_free(q->s);
  free(q->row);
  free(q->ids);
  free(q->cand);
  free(q);
}

static int
qs_create(const struct qrs_sampler_config *cfg, size_t n_vocab,
          struct qrs_client *c, struct qs **ret)
{
  struct qs *q;
  int r;

  q = calloc(1, sizeof(*q));
  if (!q)
    return -ENOMEM;
  q->c = c;
  q->n_vocab = n_vocab;
  q->row = malloc(n_vocab * sizeof(*q->row));
  q->row_full = 1;
  if (!q->row) {
    r = -ENOMEM;
    goto fail;
  }
  r = qrs_sampler_new(cfg, n_vocab, &q->s);
  if (r < 0)
    goto fail;
  *ret = q;
  return 0;

fail:
  qs_destroy(q);
  return r;
}

static const char *
qs_name(const struct llama_sampler *smpl)
{
  return QRS_LLAMA_SAMPLER_NAME;
}

/* The selected token was recorded as the previous token of the next
   commitment when it was selected; tokens of the prompt, or a token
   another sampler chose after a bypass, do not enter the chain. */
static void
qs_accept(struct llama_sampler *smpl, llama_token token)
{
}

/* cur_p -> q->row.  Returns 1 when the candidates are the whole vocabulary
   in id order (cur_p->data[i].id == i), 0 when they were scattered over a
   -inf row, -EINVAL for an id outside the vocabulary, -ENOMEM.  A scatter
   remembers the ids it wrote, so that the next one resets only those
   instead of the whole row (after llama.cpp's top-k: 40 writes, not
   151,936). */
static int
fill_row(struct qs *q, const llama_token_data_array *cur_p)
{
  size_t i, n;

  n = cur_p->size;
  if (n == q->n_vocab) {
    for (i = 0; i < n; i++) {
      if (cur_p->data[i].id != (llama_token)i)
        break;
      q->row[i] = cur_p->data[i].logit;
    }
    if (i > 0)
      q->row_full = 1;
    if (i == n)
      return 1;
  }
  for (i = 0; i < n; i++)
    if (cur_p->data[i].id < 0 || (size_t)cur_p->data[i].id >= q->n_vocab)
      return -EINVAL;
  if (!q->ids) {
    q->ids = malloc(q->n_vocab * sizeof(*q->ids));
    if (!q->ids)
      return -ENOMEM;
  }
  if (q->row_full) {
    for (i = 0; i < q->n_vocab; i++)
      q->row[i] = -INFINITY;
    q->row_full = 0;
  } else {
    for (i = 0; i < q->n_ids; i++)
      q->row[q->ids[i]] = -INFINITY;
  }
  q->n_ids = 0;
  if (n > q->n_vocab)             /* repeated ids: reset all next time */
    q->row_full = 1;
  for (i = 0; i < n; i++) {
    q->row[cur_p->data[i].id] = cur_p->data[i].logit;
    if (!q->row_full)
      q->ids[q->n_ids++] = cur_p->data[i].id;
  }
  return 0;
}

static void
qs_apply(struct llama_sampler *smpl, llama_token_data_array *cur_p)
{
  struct qs *q = smpl->ctx;
  uint32_t tok;
  size_t i;
  int r, identity;

  cur_p->selected = -1;
  if (cur_p->size == 0) {
    q->status = QRS_E_NO_CANDIDATES;
    return;
  }
  identity = fill_row(q, cur_p);
  if (identity < 0) {
    q->status = identity;
    return;
  }
  r = qrs_sampler_sample_token(q->s, q->c, q->row, QRS_DTYPE_F32,
                               q->n_vocab, &tok, &q->rec);
  q->status = r;
  if (r != 0)
    return;
  q->have_record = 1;
  if (identity) {
    cur_p->selected = tok;
    return;
  }
  for (i = 0; i < cur_p->size; i++)
    if (cur_p->data[i].id == (llama_token)tok)
      break;
  cur_p->selected = i;
}

static void
qs_reset(struct llama_sampler *smpl)
{
  struct qs *q = smpl->ctx;

  qrs_sampler_reset(q->s);
  if (q->salt_len)
    qrs_sampler_set_salt(q->s, q->salt, q->salt_len);
  q->status = 0;
  q->have_record = 0;
}

static struct llama_sampler *
qs_clone(const struct llama_sampler *smpl)
{
  const struct qs *q = smpl->ctx;
  struct qrs_sampler_config *cfg;
  struct llama_sampler *copy;
  struct qs *n;
  int r;

  if (qrs_sampler_get_config(q->s, &cfg) < 0)
    return NULL;
  r = qs_create(cfg, q->n_vocab, q->c, &n);
  qrs_sampler_config_free(cfg);
  if (r < 0)
    return NULL;
  memcpy(n->salt, q->salt, q->salt_len);
  n->salt_len = q->salt_len;
  if (n->salt_len)
    qrs_sampler_set_salt(n->s, n->salt, n->salt_len);
  copy = llama_sampler_init(&qs_iface, n);
  if (!copy)
    qs_destroy(n);
  return copy;
}

static void
qs_free(struct llama_sampler *smpl)
{
  qs_destroy(smpl->ctx);
}

static struct llama_sampler_i qs_iface = {
  .name = qs_name,
  .accept = qs_accept,
  .apply = qs_apply,
  .reset = qs_reset,
  .clone = qs_clone,
  .free = qs_free,
};

int
qrs_llama_sampler_new(const struct llama_vocab *vocab,
                      const struct qrs_sampler_config *cfg,
                      struct qrs_client *c, struct llama_sampler **ret_smpl)
{
  struct llama_sampler *smpl;
  struct qs *q;
  int32_t n;
  int r;

  if (!vocab || !c || !ret_smpl)
    return -EINVAL;
  n = llama_vocab_n_tokens(vocab);
  if (n < 1)
    return -EINVAL;
  r = qs_create(cfg, (size_t)n, c, &q);
  if (r < 0)
    return r;
  smpl = llama_sampler_init(&qs_iface, q);
  if (!smpl) {
    qs_destroy(q);
    return -ENOMEM;
  }
  *ret_smpl = smpl;
  return 0;
}

struct qrs_sampler *
qrs_llama_sampler_get(struct llama_sampler *smpl)
{
  struct qs *q = qs_of(smpl);

  return q ? q->s : NULL;
}

int
qrs_llama_sampler_set_salt(struct llama_sampler *smpl, const uint8_t *salt,
                           size_t len)
{
  struct qs *q = qs_of(smpl);
  int r;

  if (!q)
    return -ENOENT;
  if (!salt) {
    q->salt_len = 0;
    return 0;
  }
  if (len < 1 || len > sizeof(q->salt))
    return -EINVAL;
  r = qrs_sampler_set_salt(q->s, salt, len);
  if (r < 0)
    return r;
  memcpy(q->salt, salt, len);
  q->salt_len = len;
  return 0;
}

int
qrs_llama_sampler_status(const struct llama_sampler *smpl)
{
  struct qs *q = qs_of(smpl);

  return q ? q->status : -ENOENT;
}

int
qrs_llama_sampler_record(const struct llama_sampler *smpl,
                         struct qrs_token_record *ret)
{
  struct qs *q = qs_of(smpl);

  if (!q)
    return -ENOENT;
  if (!q->have_record)
    return -ENODATA;
  *ret = q->rec;
  return 0;
}

int
qrs_llama_sample_logits(struct llama_sampler *smpl, struct llama_context *ctx,
                        int32_t idx, llama_token *ret_token,
                        struct qrs_token_record *ret_record)
{
  const float *row;
  struct qs *q;
  uint32_t tok;
  int r;

  if (!smpl || smpl->iface != &qs_iface || !ctx || !ret_token)
    return -EINVAL;
  q = smpl->ctx;
  row = llama_get_logits_ith(ctx, idx);
  if (!row)
    return -EINVAL;
  r = qrs_sampler_sample_token(q->s, q->c, row, QRS_DTYPE_F32, q->n_vocab,
                               &tok, &q->rec);
  q->status = r;
  if (r != 0)
    return r;
  q->have_record = 1;
  if (ret_record)
    *ret_record = q->rec;
  *ret_token = (llama_token)tok;
  return 0;
}

int
qrs_llama_sample(struct llama_sampler *smpl, struct llama_context *ctx,
                 int32_t idx, llama_token *ret_token)
{
  llama_token_data_array cur_p;
  const float *row;
  llama_token tok;
  struct qs *q;
  size_t i;
  int r;

  if (!smpl || !ctx || !ret_token)
    return -EINVAL;
  if (smpl->iface == &qs_iface) {
    r = qrs_llama_sample_logits(smpl, ctx, idx, &tok, NULL);
    if (r == 1)
      return QRS_E_NO_CANDIDATES;
    if (r < 0)
      return r;
    *ret_token = tok;
    return 0;
  }
  q = qs_of(smpl);
  if (!q)
    return -ENOENT;
  row = llama_get_logits_ith(ctx, idx);
  if (!row)
    return -EINVAL;
  if (!q->cand) {
    q->cand = malloc(q->n_vocab * sizeof(*q->cand));
    if (!q->cand)
      return -ENOMEM;
  }
  for (i = 0; i < q->n_vocab; i++) {
    q->cand[i].id = (llama_token)i;
    q->cand[i].logit = row[i];
    q->cand[i].p = 0.0f;
  }
  cur_p.data = q->cand;
  cur_p.size = q->n_vocab;
  cur_p.selected = -1;
  cur_p.sorted = false;
  q->status = 0;
  llama_sampler_apply(smpl, &cur_p);
  if (cur_p.selected < 0 || (size_t)cur_p.selected >= cur_p.size)
    return q->status < 0 ? q->status : QRS_E_NO_CANDIDATES;
  tok = cur_p.data[cur_p.selected].id;
  llama_sampler_accept(smpl, tok);
  *ret_token = tok;
  return 0;
}

int
qrs_llama_load_backends(const char *dir)
{
  union {
    void (*fn)(void);
    void *addr;
  } sym;
  char path[PATH_MAX];
  Dl_info info;

  if (!dir) {
    sym.fn = llama_backend_init;
    if (!dladdr(sym.addr, &info) || !info.dli_fname ||
        strlen(info.dli_fname) >= sizeof(path))
      return -ENOENT;
    strcpy(path, info.dli_fname);
    dir = dirname(path);
  }
  ggml_backend_load_all_from_path(dir);
  return ggml_backend_dev_count() > 0 ? 0 : -ENOENT;
}
