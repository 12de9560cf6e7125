#!/usr/bin/python3
"""Write a tiny Qwen2-architecture GGUF model with random weights and the
real Qwen2 tokenizer, for qrs's llama.cpp tests.

  make-test-model.py LLAMA_DIR OUT.gguf [EMBD LAYERS FFN]

LLAMA_DIR is what `./setup.sh llama` fetched: gguf-py/ (llama.cpp's GGUF
writer) and models/ggml-vocab-qwen2.gguf (a vocab-only model with the
151,936-token Qwen2 tokenizer).  The model: embedding 64, 2 layers, 4
attention heads over 2 KV heads, FFN 128, float32, the output tied to the
token embedding; seeded, so every run writes the same file.  Its logits
rows are real llama.cpp output, 151,936 wide; the embedding scale (0.5)
gives LM-like rows (entropy 2 to 6 nats; scale 1 gives nearly one-hot
rows, 0.05 nearly flat ones).  EMBD LAYERS FFN make a bigger model of the
same kind (the embedding scale shrinks as 1/sqrt(EMBD), so its rows stay
LM-like), e.g. 256 4 512 for benchmarks (`meson compile -C build
qrs-bench-model` writes that one, 171 MB, in about 30 s; qrs-llama-bench
-m build/tests/llama/qrs-bench-qwen2.gguf): its one-token decode (about
20 ms on one thread) is longer than qrsd's wake-up on a loaded machine,
which the test model's 2.5 ms decode is not."""
import os
import sys

if len(sys.argv) not in (3, 6):
    sys.exit(__doc__)
llama_dir, out = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(llama_dir, "gguf-py"))

import numpy as np  # noqa: E402
import gguf  # noqa: E402

N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, N_FF, N_CTX = 64, 2, 4, 2, 128, 512
if len(sys.argv) == 6:
    N_EMBD, N_LAYER, N_FF = (int(a) for a in sys.argv[3:6])
HEAD_DIM = N_EMBD // N_HEAD

vocab = gguf.GGUFReader(os.path.join(llama_dir, "models",
                                     "ggml-vocab-qwen2.gguf"))
tmp = out + ".tmp"
w = gguf.GGUFWriter(tmp, "qwen2")
w.add_name("qrs-test-qwen2")
w.add_context_length(N_CTX)
w.add_embedding_length(N_EMBD)
w.add_block_count(N_LAYER)
w.add_feed_forward_length(N_FF)
w.add_head_count(N_HEAD)
w.add_head_count_kv(N_HEAD_KV)
w.add_layer_norm_rms_eps(1e-6)
w.add_rope_freq_base(1000000.0)
w.add_file_type(gguf.LlamaFileType.ALL_F32)

n_vocab = None
for name, field in vocab.fields.items():
    if not name.startswith("tokenizer."):
        continue
    vtype = field.types[0]
    if vtype == gguf.GGUFValueType.ARRAY:
        val = field.contents()
        if name == "tokenizer.ggml.tokens":
            n_vocab = len(val)
        w.add_key_value(name, val, vtype, sub_type=field.types[-1])
    else:
        w.add_key_value(name, field.contents(), vtype)
if n_vocab is None:
    sys.exit("no tokenizer.ggml.tokens in the vocab file")

rng = np.random.default_rng(20260101)


def t(name, *shape, scale=0.05):
    w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))


# Logits are dot products over N_EMBD: scaling the (tied) embedding by
# 1/sqrt(N_EMBD) keeps bigger models' rows as LM-like as the 64-wide one's
# (0.5 exactly at 64, so the test model does not change).
t("token_embd.weight", n_vocab, N_EMBD, scale=0.5 * (64.0 / N_EMBD) ** 0.5)
w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
for i in range(N_LAYER):
    b = "blk.%d." % i
    w.add_tensor(b + "attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    t(b + "attn_q.weight", N_EMBD, N_EMBD, scale=0.2)
    t(b + "attn_q.bias", N_EMBD)
    t(b + "attn_k.weight", N_HEAD_KV * HEAD_DIM, N_EMBD, scale=0.2)
    t(b + "attn_k.bias", N_HEAD_KV * HEAD_DIM)
    t(b + "attn_v.weight", N_HEAD_KV * HEAD_DIM, N_EMBD, scale=0.2)
    t(b + "attn_v.bias", N_HEAD_KV * HEAD_DIM)
    t(b + "attn_output.weight", N_EMBD, N_EMBD, scale=0.2)
    w.add_tensor(b + "ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    t(b + "ffn_gate.weight", N_FF, N_EMBD, scale=0.2)
    t(b + "ffn_up.weight", N_FF, N_EMBD, scale=0.2)
    t(b + "ffn_down.weight", N_EMBD, N_FF, scale=0.2)

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
os.replace(tmp, out)
