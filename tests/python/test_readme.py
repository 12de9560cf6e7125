"""The README's "Python" section and docs/python.md, verbatim: every
```python block runs as written (a child Python, qrsd at $QRS_SOCKET on a
mock source, $MODEL naming a random-weight tiny Qwen2 saved with the real
Qwen2 tokenizer, since the machine is offline); the curl request body goes
through vLLM's own OpenAI request class into SamplingParams and
validate_params; the `vllm serve` line names a class vLLM's loader
resolves.  `pip install .` is run by test_install.py (offline flags)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

from conftest import Daemon

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.M | re.S)


def _blocks(path: Path, lang: str) -> list[str]:
    return [m.group(2) for m in FENCE.finditer(path.read_text())
            if m.group(1) == lang]


def _python_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Python: vLLM and transformers")
    end = text.index("\n## ", start + 3)
    return text[start:end]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    gguf = Path(os.environ.get("QRS_VOCAB_GGUF", ""))
    if not gguf.is_file():
        pytest.fail(f"QRS_VOCAB_GGUF ({gguf}) missing: ./setup.sh llama "
                    "fetches it")
    d = tmp_path_factory.mktemp("tiny-qwen2")
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.save_pretrained(d)
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=151936, hidden_size=64,
                      intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=256, tie_word_embeddings=True)
    Qwen2ForCausalLM(cfg).save_pretrained(d)
    return d


def _run(code: str, qrsd: Daemon, model: Path) -> str:
    env = {**os.environ, "QRS_SOCKET": qrsd.sock, "MODEL": str(model),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", code], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"block failed:\n{code}\n{r.stderr[-3000:]}"
    return r.stdout


def test_readme_has_the_examples() -> None:
    sec = _python_section()
    assert _blocks(ROOT / "README.md", "sh")  # the file has sh blocks
    sh = [b for b in FENCE.findall(sec) if b[0] == "sh"]
    assert any(b[1].strip() == "pip install ." for b in sh)
    assert len([b for b in FENCE.findall(sec) if b[0] == "python"]) == 2


def test_python_blocks_run_verbatim(qrsd: Daemon, model_dir: Path) -> None:
    sec = _python_section()
    readme = [b for lang, b in FENCE.findall(sec) if lang == "python"]
    docs = _blocks(ROOT / "docs" / "python.md", "python")
    assert readme and docs
    outs = {}
    for i, code in enumerate(readme + docs):
        outs[i] = _run(code, qrsd, model_dir)
    # README transformers: the first record, drawn from qrsd's mock source
    tok_id, u, src = outs[0].strip().splitlines()[-1].split()
    assert 0 <= int(tok_id) < 151936 and 0.0 < float(u) < 1.0
    assert src == "mock"
    # README vLLM: the bad value is refused naming the key
    assert "qr_temperature_strategy" in outs[1]
    # docs/python.md transformers: a record of the second sequence
    tok_id, u = outs[2].strip().splitlines()[-1].split()
    assert 0 <= int(tok_id) < 151936 and 0.0 < float(u) < 1.0


def test_vllm_serve_and_request_verbatim(qrsd: Daemon,
                                         monkeypatch) -> None:
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    from qrs.vllm import QRSLogitsProcessor

    sh = "\n".join(b for lang, b in FENCE.findall(_python_section())
                   if lang == "sh")
    serve = re.search(r"^vllm serve (\S+) --logits-processors (\S+)$", sh,
                      re.M)
    assert serve, sh
    mod, _, cls = serve.group(2).partition(":")
    assert getattr(__import__(mod, fromlist=[cls]), cls) is QRSLogitsProcessor
    body = re.search(r"-d '(\{.*\})'$", sh, re.M)
    assert body, sh
    req = json.loads(body.group(1))
    assert req["model"] == serve.group(1)
    monkeypatch.setenv("QRS_SOCKET", qrsd.sock)
    params = CompletionRequest(**req).to_sampling_params(
        max_tokens=req["max_tokens"])
    assert params.extra_args == req["vllm_xargs"]
    QRSLogitsProcessor.validate_params(params)
    bad = CompletionRequest(**{**req, "vllm_xargs": {"qr_top_k": "many"}})
    with pytest.raises(ValueError, match="qr_top_k"):
        QRSLogitsProcessor.validate_params(
            bad.to_sampling_params(max_tokens=req["max_tokens"]))
