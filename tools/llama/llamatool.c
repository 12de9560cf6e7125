/* Helpers shared by the llama.cpp tools (see llamatool.h). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include <qrs/llama.h>

#include "llamatool.h"
#include "timestamp.h"

static int log_verbose;
static volatile sig_atomic_t log_muted;

void
lt_log_mute(void)
{
  log_muted = 1;
}

double
lt_now_ms(void)
{
  return (double)mono_now_ns() / 1e6;
}

static void
on_llama_log(enum ggml_log_level level, const char *text, void *data)
{
  if (!log_muted && (log_verbose || level == GGML_LOG_LEVEL_ERROR))
    fputs(text, stderr);
}

struct llama_model *
lt_load_model(const char *prog, const char *path, int verbose)
{
  struct llama_model_params mp;
  struct llama_model *model;

  log_verbose = verbose;
  llama_log_set(on_llama_log, NULL);
  llama_backend_init();
  if (qrs_llama_load_backends(getenv("GGML_BACKEND_DIR")) < 0) {
    fprintf(stderr, "%s: no llama.cpp CPU backend could be loaded\n", prog);
    return NULL;
  }
  mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  model = llama_model_load_from_file(path, mp);
  if (!model)
    fprintf(stderr, "%s: %s: cannot load the model (not a GGUF file "
            "llama.cpp supports? -v shows llama.cpp's log)\n", prog, path);
  return model;
}
