/* qrs-generate: generate text with a GGUF model in llama.cpp, every token
   chosen by libqrs with a draw from qrsd.  usage() says it all. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <qrs/llama.h>
#include <qrs/qrs.h>

#include "cliparse.h"
#include "llamatool.h"
#include "qrs-config.h"
#include "sortcmp.h"

#define PROG "qrs-generate"
#define EXIT_FAIL 1                /* sampling or decoding failed */
#define EXIT_USAGE 2               /* usage, config, qrsd, model */
#define EXIT_INTERRUPTED 130

#define DEFAULT_N 64
#define MAX_N 1000000
#define MAX_SETS 64

struct tok_stat {
  llama_token token;
  double decode_ms;                /* the decode that made its row */
  double sample_ms;                /* sampling without the draw wait */
  double wait_ms;                  /* waiting for the draw */
  int hit;                         /* the draw was prefetched and ready */
  int fallback;
  char source[QRS_NAME_MAX];
};

struct opts {
  const char *model;
  const char *prompt;
  uint64_t n;
  const char *preset;
  const char *source;
  const char *socket;
  const char *records;
  const char *dump;             /* --logits-dump */
  uint8_t salt[256];
  size_t salt_len;
  const char *sets[MAX_SETS];
  size_t n_sets;
  uint64_t threads;
  uint64_t ctx_size;
  int no_prefetch;
  int timings;
  int quiet;
  int verbose;
};

static volatile sig_atomic_t interrupted;

static void
on_signal(int sig)
{
  interrupted = 1;
  /* The decode it aborts is no error worth llama.cpp's log lines. */
  lt_log_mute();
}

/* llama.cpp's abort callback: stop a decode in progress on Ctrl-C. */
static bool
abort_decode(void *data)
{
  return interrupted != 0;
}

static void
usage(FILE *f)
{
  fputs(
"Usage: " PROG " -m MODEL.gguf -p PROMPT [-n N] [--preset NAME]\n"
"                    [--source NAME] [--socket PATH] [--records FILE]\n"
"                    [--salt HEX] [-s FIELD=VALUE]... [OPTIONS]\n"
"\n"
"Generate text with a GGUF model in llama.cpp, choosing every token with\n"
"libqrs from a draw of qrsd, the qrs entropy daemon.  The prompt is\n"
"decoded, then each token is sampled (libqrs's temperature strategy,\n"
"truncation and CDF selection with the draw's u) and decoded in turn.\n"
"The draw for token N+1 is requested as soon as token N is chosen, so it\n"
"travels while llama.cpp decodes token N.  The text streams to standard\n"
"output; at the end a summary goes to standard error: tokens/s, and per\n"
"token the decode time, the sampling time (without the draw), the time\n"
"spent waiting for the draw, prefetch hits, fallbacks (tokens whose draw\n"
"the source's configured fallback served because the source failed) and\n"
"the sources that served the draws, each with its count.\n"
"\n"
"Every draw carries a commitment (a 16-byte salt, the step and the\n"
"previous token) from which qrsd derives the nonce it sends upstream;\n"
"--records writes each token's record with it.\n"
"\n", f);
  fputs(
"Options:\n"
"  -m, --model FILE     the GGUF model (required)\n"
"  -p, --prompt TEXT    the prompt (required); special tokens such as\n"
"                       <|im_start|> are recognised\n"
"  -n, --n-predict N    generate at most N tokens (default 64); stops\n"
"                       earlier at an end-of-generation token\n"
"      --preset NAME    a libqrs preset: creative_sampling, normal_t1,\n"
"                       chat_light, qthought, qthought_think,\n"
"                       qthought_voice, qthought_purity\n"
"  -s, --set FIELD=VALUE\n"
"                       set a libqrs sampler field (the reference\n"
"                       qr-sampler's names: temperature_strategy,\n"
"                       fixed_temperature, top_k, top_p, min_p_base,\n"
"                       stage_order, sample_count, ...); repeatable\n"
"      --source NAME    the qrsd entropy source of the draws (default:\n"
"                       qrsd's default source)\n"
"      --socket PATH    qrsd's socket (default: $QRS_SOCKET, else\n"
"                       " QRS_DEFAULT_SOCKET ")\n"
"      --records FILE   write one JSON line per token (libqrs's full\n"
"                       record: token, rank, u, CDF interval cdf_lo/\n"
"                       cdf_hi, source, fallback, nonce, timings, ...);\n"
"                       the file is replaced.  -s log_level=summary\n"
"                       writes the short form\n"
"      --logits-dump FILE  write each token's logits row for\n"
"                       qrs-audit --logits (594 KiB a token for a\n"
"                       151,936-entry vocabulary); the file is replaced\n"
"      --salt HEX       the commitment salt (1 to 256 bytes as hex;\n"
"                       default: 16 random bytes), for reproducible nonces\n"
"      --no-prefetch    request each draw only when its token is sampled\n"
"  -t, --threads N      llama.cpp threads (default: the CPUs, at most 4)\n"
"  -c, --ctx-size N     context length (default: prompt + N)\n"
"      --timings        also print one line per token: decode, sampling\n"
"                       and wait times, prefetch hit, fallback, source\n"
"  -q, --quiet          do not print the text, only the summary\n"
"  -v, --verbose        show llama.cpp's log\n"
"  -h, --help           show this help\n"
"  -V, --version        show the version\n"
"\n"
"Sampler fields may also come from the environment, as for every libqrs\n"
"program: QR_<FIELD>=VALUE (e.g. QR_TOP_P=0.9) and QR_PRESET; options\n"
"win over the environment.\n"
"\n"
"llama.cpp's CPU backend is loaded from the folder of the libllama in\n"
"use (the best variant for this CPU); GGML_BACKEND_DIR=DIR overrides it.\n"
"\n"
"Exit status:\n"
"  0    the text was generated (N tokens, or an end-of-generation token)\n"
"  1    sampling or decoding failed mid-way (e.g. qrsd stopped): no token\n"
"       was invented; the summary covers the tokens made until then\n"
"  2    bad usage or configuration, qrsd unreachable, model not loaded\n"
"  130  interrupted (Ctrl-C); the summary covers the tokens made\n"
"\n"
"Examples:\n"
"  " PROG " -m qwen2.5-0.5b-instruct-q4_k_m.gguf -p 'Once upon a time'\n"
"  " PROG " -m model.gguf -p 'Hello' -n 32 --preset qthought \\\n"
"      --records tokens.jsonl --salt 00112233445566778899aabbccddeeff\n"
"  " PROG " -m model.gguf -p 'Hi' -s temperature_strategy=edt "
"-s top_p=0.9\n", f);
}

/* -s FIELD=VALUE, repeatable (field: the struct opts). */
static int
add_set(const struct cli_opt *opt, const char *name, const char *arg)
{
  struct opts *o = opt->field;

  (void)name;
  if (!strchr(arg, '=')) {
    fprintf(stderr, PROG ": -s: want FIELD=VALUE, not '%s'\n", arg);
    return -1;
  }
  if (o->n_sets == MAX_SETS) {
    fprintf(stderr, PROG ": -s: at most %d fields\n", MAX_SETS);
    return -1;
  }
  o->sets[o->n_sets++] = arg;
  return 0;
}

/* --salt HEX, at least one byte (field: the struct opts). */
static int
set_salt(const struct cli_opt *opt, const char *name, const char *arg)
{
  struct opts *o = opt->field;

  if (cli_parse_hex(PROG, name, arg, o->salt, sizeof(o->salt),
                    &o->salt_len) < 0)
    return -1;
  if (o->salt_len == 0) {
    fprintf(stderr, PROG ": --salt: at least one byte\n");
    return -1;
  }
  return 0;
}

static int
version(const struct cli_opt *opt, const char *name, const char *arg)
{
  (void)opt;
  (void)name;
  (void)arg;
  printf(PROG " %s (libqrs %s)\n", QRS_VERSION, qrs_version());
  return 0;
}

/* getopt's complaint, in our words (':' leads the short options). */
static void
bad_option(const struct cli *cli, int c, char **argv)
{
  (void)cli;
  if (c == ':')
    fprintf(stderr, PROG ": %s needs a value\n", argv[optind - 1]);
  else
    fprintf(stderr, PROG ": unknown option '%s'\n", argv[optind - 1]);
}

static int
parse_args(int argc, char **argv, struct opts *o)
{
  const struct cli_opt opts[] = {
    { .name = "model", .key = 'm', .type = CLI_OPT_STRING,
      .field = &o->model },
    { .name = "prompt", .key = 'p', .type = CLI_OPT_STRING,
      .field = &o->prompt },
    { .name = "n-predict", .key = 'n', .type = CLI_OPT_U64, .field = &o->n,
      .min = 1, .max = MAX_N, .label = "-n" },
    { .name = "preset", .type = CLI_OPT_STRING, .field = &o->preset },
    { .name = "set", .key = 's', .type = CLI_OPT_CALL, .field = o,
      .call = add_set },
    { .name = "source", .type = CLI_OPT_STRING, .field = &o->source },
    { .name = "socket", .type = CLI_OPT_STRING, .field = &o->socket },
    { .name = "records", .type = CLI_OPT_STRING, .field = &o->records },
    { .name = "logits-dump", .type = CLI_OPT_STRING, .field = &o->dump },
    { .name = "salt", .type = CLI_OPT_CALL, .field = o, .call = set_salt },
    { .name = "no-prefetch", .type = CLI_OPT_SET, .field = &o->no_prefetch,
      .val = 1 },
    { .name = "threads", .key = 't', .type = CLI_OPT_U64,
      .field = &o->threads, .min = 1, .max = 512 },
    { .name = "ctx-size", .key = 'c', .type = CLI_OPT_U64,
      .field = &o->ctx_size, .min = 1, .max = 1 << 24 },
    { .name = "timings", .type = CLI_OPT_SET, .field = &o->timings,
      .val = 1 },
    { .name = "quiet", .key = 'q', .type = CLI_OPT_SET, .field = &o->quiet,
      .val = 1 },
    { .name = "verbose", .key = 'v', .type = CLI_OPT_SET,
      .field = &o->verbose, .val = 1 },
    { .name = "help", .key = 'h', .type = CLI_OPT_HELP },
    { .name = "version", .key = 'V', .type = CLI_OPT_DONE, .call = version },
    { 0 },
  };
  const struct cli cli = {
    .prog = PROG, .flags = CLI_QUIET, .opts = opts, .usage = usage,
    .bad = bad_option,
  };
  long ncpu;
  int r;

  memset(o, 0, sizeof(*o));
  o->n = DEFAULT_N;
  ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  o->threads = ncpu < 1 ? 1 : ncpu > 4 ? 4 : (uint64_t)ncpu;
  r = cli_opts_parse(&cli, argc, argv);
  if (r == 0)
    exit(0);                    /* after --help or --version */
  if (r > 0)
    return -1;
  if (optind < argc) {
    fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
    return -1;
  }
  if (!o->model || !o->prompt) {
    fprintf(stderr, PROG ": %s is required\n",
            !o->model ? "-m MODEL" : "-p PROMPT");
    return -1;
  }
  return 0;
}

/* The sampler configuration: environment, preset, -s fields, --source,
   --no-prefetch, and full records for --records unless log_level is set. */
static int
make_config(const struct opts *o, struct qrs_sampler_config **ret_cfg)
{
  struct qrs_sampler_config *cfg;
  char field[128];
  const char *eq;
  double bypass;
  size_t i, len;
  int r;

  r = qrs_sampler_config_new(&cfg);
  if (r < 0) {
    fprintf(stderr, PROG ": %s\n", qrs_strerror(r));
    return r;
  }
  r = qrs_sampler_config_load_env(cfg, NULL);
  if (r < 0)
    goto bad;
  if (o->preset) {
    r = qrs_sampler_config_set_preset(cfg, o->preset);
    if (r < 0) {
      fprintf(stderr, PROG ": --preset: no preset named '%s'\n", o->preset);
      goto fail;
    }
  }
  for (i = 0; i < o->n_sets; i++) {
    eq = strchr(o->sets[i], '=');
    len = (size_t)(eq - o->sets[i]);
    if (len >= sizeof(field)) {
      fprintf(stderr, PROG ": -s: field name too long\n");
      r = -EINVAL;
      goto fail;
    }
    memcpy(field, o->sets[i], len);
    field[len] = '\0';
    r = qrs_sampler_config_set(cfg, field, eq + 1);
    if (r < 0)
      goto bad;
  }
  if (o->source) {
    r = qrs_sampler_config_set(cfg, "entropy_source_type", o->source);
    if (r < 0)
      goto bad;
  }
  if (o->no_prefetch) {
    r = qrs_sampler_config_set_int(cfg, "entropy_prefetch", 0);
    if (r < 0)
      goto bad;
  }
  if (o->records &&
      qrs_sampler_config_layer(cfg, "log_level") == QRS_LAYER_DEFAULT) {
    r = qrs_sampler_config_set(cfg, "log_level", "full");
    if (r < 0)
      goto bad;
  }
  r = qrs_sampler_config_validate(cfg);
  if (r < 0)
    goto bad;
  r = qrs_sampler_config_get_double(cfg, "bypass", &bypass);
  if (r == 0 && bypass != 0) {
    fprintf(stderr, PROG ": the sampler configuration says bypass; "
            PROG " has no other sampler to fall back on\n");
    r = -EINVAL;
    goto fail;
  }
  *ret_cfg = cfg;
  return 0;

bad:
  fprintf(stderr, PROG ": sampler configuration: %s\n",
          qrs_sampler_config_error(cfg)[0] ? qrs_sampler_config_error(cfg) :
          qrs_strerror(r));
fail:
  qrs_sampler_config_free(cfg);
  return r;
}

/* Mean, median and maximum of n values (sorts v). */
static void
print_row(const char *name, double *v, size_t n)
{
  double sum;
  size_t i;

  if (n == 0)
    return;
  sum = 0;
  for (i = 0; i < n; i++)
    sum += v[i];
  qsort(v, n, sizeof(*v), sort_cmp_double);
  fprintf(stderr, "  %-12s %10.3f %10.3f %10.3f\n", name, sum / (double)n,
          v[n / 2], v[n - 1]);
}

static void
print_summary(const struct opts *o, const struct tok_stat *st, size_t n,
              size_t n_prompt, double prompt_ms, double gen_ms)
{
  size_t i, j, len, count, hits, fallbacks;
  char line[1024];
  double *v;

  fprintf(stderr, "\n" PROG ": %zu token%s in %.3f s: %.2f tokens/s "
          "(prompt: %zu tokens decoded in %.1f ms)\n", n, n == 1 ? "" : "s",
          gen_ms / 1e3, gen_ms > 0 ? (double)n * 1e3 / gen_ms : 0.0,
          n_prompt, prompt_ms);
  if (n == 0)
    return;
  if (o->timings) {
    fprintf(stderr, "  %5s %8s %10s %10s %10s %4s %4s  %s\n", "step",
            "token", "decode_ms", "sample_ms", "wait_ms", "hit", "fb",
            "source");
    for (i = 0; i < n; i++)
      fprintf(stderr, "  %5zu %8d %10.3f %10.3f %10.3f %4s %4s  %s\n", i,
              st[i].token, st[i].decode_ms, st[i].sample_ms, st[i].wait_ms,
              st[i].hit ? "yes" : "no", st[i].fallback ? "yes" : "no",
              st[i].source);
  }
  v = malloc(n * sizeof(*v));
  if (!v)
    return;
  fprintf(stderr, "  %-12s %10s %10s %10s\n", "per token, ms", "mean",
          "median", "max");
  /* Token 0's row came from the prompt's decode (reported above): the
     decode figures are the one-token decodes. */
  if (n > 1) {
    for (i = 1; i < n; i++)
      v[i - 1] = st[i].decode_ms;
    print_row("decode", v, n - 1);
  }
  for (i = 0; i < n; i++)
    v[i] = st[i].sample_ms;
  print_row("sampling", v, n);
  for (i = 0; i < n; i++)
    v[i] = st[i].wait_ms;
  print_row("draw wait", v, n);
  free(v);
  hits = fallbacks = 0;
  for (i = 0; i < n; i++) {
    hits += st[i].hit != 0;
    fallbacks += st[i].fallback != 0;
  }
  /* Each serving source once, in order of first use, with its count; one
     line in one write. */
  len = (size_t)snprintf(line, sizeof(line), "  prefetch hits %zu/%zu, "
                         "fallbacks %zu, source", hits, n, fallbacks);
  for (i = 0; i < n && len < sizeof(line); i++) {
    for (j = 0; j < i; j++)
      if (!strcmp(st[j].source, st[i].source))
        break;
    if (j < i)
      continue;
    for (count = 0, j = i; j < n; j++)
      count += !strcmp(st[j].source, st[i].source);
    if (count == n)
      len += (size_t)snprintf(line + len, sizeof(line) - len, " %s",
                              st[i].source);
    else
      len += (size_t)snprintf(line + len, sizeof(line) - len, "%s %s %zu",
                              i ? "," : "", st[i].source, count);
  }
  fprintf(stderr, "%s\n", line);
}

/* Print a token's text; special tokens (end markers) are not shown. */
static void
print_piece(const struct llama_vocab *vocab, llama_token tok)
{
  char buf[256];
  int32_t len;

  len = llama_token_to_piece(vocab, tok, buf, sizeof(buf), 0, false);
  if (len > 0) {
    fwrite(buf, 1, (size_t)len, stdout);
    fflush(stdout);
  }
}

int
main(int argc, char **argv)
{
  struct llama_context_params cparams;
  struct qrs_sampler_config *cfg = NULL;
  struct llama_sampler *smpl = NULL;
  struct llama_context *ctx = NULL;
  struct llama_model *model = NULL;
  const struct llama_vocab *vocab;
  struct qrs_token_record rec;
  struct tok_stat *st = NULL;
  struct qrs_client *client = NULL;
  struct qrs_sampler *qs;
  struct sigaction sa;
  llama_token *prompt = NULL, tok;
  FILE *records = NULL;
  double t0, t1, t_gen, prompt_ms, decode_ms;
  size_t n_gen;
  int32_t n_prompt;
  int r, rc;
  struct opts o;

  if (parse_args(argc, argv, &o) < 0) {
    fputs("Run '" PROG " --help' for more.\n", stderr);
    return EXIT_USAGE;
  }
  rc = EXIT_USAGE;
  n_gen = 0;
  prompt_ms = 0;
  t_gen = 0;
  n_prompt = 0;

  if (make_config(&o, &cfg) < 0)
    goto out;
  st = calloc(o.n, sizeof(*st));
  if (!st) {
    fprintf(stderr, PROG ": out of memory\n");
    goto out;
  }
  r = qrs_client_new(o.socket, NULL, &client);
  if (r < 0) {
    fprintf(stderr, PROG ": cannot reach qrsd at %s: %s\n",
            o.socket ? o.socket : getenv("QRS_SOCKET") ?
            getenv("QRS_SOCKET") : QRS_DEFAULT_SOCKET, qrs_strerror(r));
    goto out;
  }
  if (o.records) {
    records = fopen(o.records, "w");
    if (!records) {
      fprintf(stderr, PROG ": --records: %s: %s\n", o.records,
              strerror(errno));
      goto out;
    }
  }

  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  model = lt_load_model(PROG, o.model, o.verbose);
  if (!model)
    goto out;
  vocab = llama_model_get_vocab(model);

  n_prompt = -llama_tokenize(vocab, o.prompt, (int32_t)strlen(o.prompt),
                             NULL, 0, true, true);
  if (n_prompt <= 0) {
    fprintf(stderr, PROG ": the prompt gives no tokens\n");
    goto out;
  }
  prompt = malloc((size_t)n_prompt * sizeof(*prompt));
  if (!prompt ||
      llama_tokenize(vocab, o.prompt, (int32_t)strlen(o.prompt), prompt,
                     n_prompt, true, true) != n_prompt) {
    fprintf(stderr, PROG ": cannot tokenize the prompt\n");
    goto out;
  }

  cparams = llama_context_default_params();
  cparams.n_ctx = o.ctx_size ? (uint32_t)o.ctx_size :
                  (uint32_t)(n_prompt + o.n + 1);
  if (cparams.n_ctx < (uint32_t)n_prompt + 1) {
    fprintf(stderr, PROG ": --ctx-size %u is too small for the prompt's "
            "%d tokens\n", cparams.n_ctx, n_prompt);
    goto out;
  }
  cparams.n_batch = (uint32_t)n_prompt;
  cparams.n_threads = (int32_t)o.threads;
  cparams.n_threads_batch = (int32_t)o.threads;
  cparams.abort_callback = abort_decode;
  cparams.no_perf = true;
  ctx = llama_init_from_model(model, cparams);
  if (!ctx) {
    fprintf(stderr, PROG ": cannot create a llama.cpp context of %u "
            "tokens\n", cparams.n_ctx);
    goto out;
  }

  r = qrs_llama_sampler_new(vocab, cfg, client, &smpl);
  if (r < 0) {
    fprintf(stderr, PROG ": sampler: %s\n", qrs_strerror(r));
    goto out;
  }
  qs = qrs_llama_sampler_get(smpl);
  if (o.salt_len)
    qrs_llama_sampler_set_salt(smpl, o.salt, o.salt_len);
  if (records)
    qrs_sampler_set_log_file(qs, records);
  if (o.dump && (r = qrs_sampler_set_logits_dump(qs, o.dump)) < 0) {
    fprintf(stderr, PROG ": --logits-dump: %s: %s\n", o.dump,
            qrs_strerror(r));
    goto out;
  }

  if (!o.quiet) {
    fputs(o.prompt, stdout);
    fflush(stdout);
  }
  rc = EXIT_FAIL;
  /* The first draw travels while the prompt is decoded. */
  r = qrs_sampler_prefetch(qs, client);
  if (r < 0) {
    fprintf(stderr, "\n" PROG ": draw from qrsd: %s%s%s\n", qrs_strerror(r),
            qrs_client_errmsg(client)[0] ? ": " : "",
            qrs_client_errmsg(client));
    goto summary;
  }
  t0 = lt_now_ms();
  r = llama_decode(ctx, llama_batch_get_one(prompt, n_prompt));
  prompt_ms = lt_now_ms() - t0;
  decode_ms = prompt_ms;
  t_gen = lt_now_ms();
  while (r == 0 && n_gen < o.n && !interrupted) {
    t0 = lt_now_ms();
    r = qrs_llama_sample_logits(smpl, ctx, -1, &tok, &rec);
    t1 = lt_now_ms();
    if (r != 0) {
      fprintf(stderr, "\n" PROG ": token %zu: sampling failed, no token "
              "chosen: %s%s%s\n", n_gen, qrs_strerror(r),
              qrs_client_errmsg(client)[0] ? ": " : "",
              qrs_client_errmsg(client));
      goto summary;
    }
    st[n_gen].token = tok;
    st[n_gen].decode_ms = decode_ms;
    st[n_gen].wait_ms = rec.entropy_fetch_ms;
    st[n_gen].sample_ms = t1 - t0 - rec.entropy_fetch_ms;
    st[n_gen].hit = rec.entropy_prefetch_hit == 1;
    st[n_gen].fallback = rec.entropy_is_fallback;
    snprintf(st[n_gen].source, sizeof(st[n_gen].source), "%s",
             rec.entropy_source_used);
    n_gen++;
    if (llama_vocab_is_eog(vocab, tok))
      break;
    if (!o.quiet)
      print_piece(vocab, tok);
    if (n_gen == o.n)
      break;
    t0 = lt_now_ms();
    r = llama_decode(ctx, llama_batch_get_one(&tok, 1));
    decode_ms = lt_now_ms() - t0;
  }
  if (interrupted) {
    fprintf(stderr, "\n" PROG ": interrupted\n");
    rc = EXIT_INTERRUPTED;
  } else if (r != 0) {
    fprintf(stderr, "\n" PROG ": llama_decode failed (%d)%s\n", r,
            r == 1 ? ": the context is full (--ctx-size)" : "");
  } else {
    if (!o.quiet)
      fputc('\n', stdout);
    rc = 0;
  }
summary:
  fflush(stdout);
  print_summary(&o, st, n_gen, (size_t)n_prompt, prompt_ms,
                t_gen > 0 ? lt_now_ms() - t_gen : 0);
out:
  llama_sampler_free(smpl);       /* cancels a prefetch: before the client */
  if (records && fclose(records) != 0 && rc == 0) {
    fprintf(stderr, PROG ": --records: %s: %s\n", o.records,
            strerror(errno));
    rc = EXIT_FAIL;
  }
  llama_free(ctx);
  llama_model_free(model);
  free(prompt);
  free(st);
  qrs_client_free(client);
  qrs_sampler_config_free(cfg);
  llama_backend_free();
  return rc;
}
