/* Helpers shared by the llama.cpp tools (qrs-generate, qrs-llama-bench). */
#ifndef QRS_LLAMATOOL_H
#define QRS_LLAMATOOL_H

#include <llama.h>

/* CLOCK_MONOTONIC in milliseconds. */
double lt_now_ms(void);

/* Set up llama.cpp quietly (only its errors reach stderr, everything with
   verbose), load its CPU backend (from $GGML_BACKEND_DIR, else libllama's
   folder) and the model from path, on the CPU.  Prints what went wrong
   as "prog: ..." and returns NULL on failure.  Free with
   llama_model_free(), then llama_backend_free(). */
struct llama_model *lt_load_model(const char *prog, const char *path,
                                  int verbose);

/* From now on llama.cpp's log is dropped, its errors too (e.g. the
   "failed to decode" lines of a decode aborted on purpose).
   Async-signal-safe. */
void lt_log_mute(void);

#endif
