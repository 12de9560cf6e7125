/* What the documents' C examples call for the engine's own work (the
   model's forward pass, its token list): docblocks.py compiles every C
   block that is not a whole program with -include of this file. */
#ifndef QRS_DOCS_ENGINE_H
#define QRS_DOCS_ENGINE_H

#include <stdint.h>

const float *engine_forward(void);
uint32_t engine_eos(void);
void engine_append(uint32_t token);

#endif
