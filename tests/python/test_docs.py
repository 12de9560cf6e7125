"""Every ```python block of README.md and docs/*.md runs as written (a
child Python, qrsd at $QRS_SOCKET on a mock source, $MODEL naming a
random-weight tiny Qwen2 saved with the real Qwen2 tokenizer, since the
machine is offline), but those marked "<!-- not run: REASON -->" on the
line before, which are counted and listed; every `vllm serve` line of a
```sh block names a processor class vLLM's loader resolves, and the
request body of the `curl` beside it goes through vLLM's own OpenAI
request class into SamplingParams and validate_params.  The blocks are
found by tests/docs/docblocks.py, which checks the C and YAML blocks.
`pip install .` is run by test_install.py (offline flags)."""

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
sys.path.insert(0, str(ROOT / "tests" / "docs"))
import docblocks  # noqa: E402

VOCAB = 151936


def _python_blocks() -> list[docblocks.Block]:
    return docblocks.blocks(str(ROOT), "python")


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
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=64,
                      intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=256, tie_word_embeddings=True)
    Qwen2ForCausalLM(cfg).save_pretrained(d)
    return d


def _run(b: docblocks.Block, qrsd: Daemon, model: Path, cwd: Path) -> str:
    env = {**os.environ, "QRS_SOCKET": qrsd.sock, "MODEL": str(model),
           "QRS_MODEL_GGUF": os.environ.get("QRS_SMOLLM2_GGUF", ""),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", b.text], env=env, cwd=cwd,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, \
        f"{b.where()}: the block failed:\n{b.text}\n{r.stderr[-3000:]}"
    return r.stdout


def _check_output(b: docblocks.Block, out: str) -> None:
    """What a block prints, where the block says what it prints."""
    last = out.strip().splitlines()[-1] if out.strip() else ""
    if "entropy_source_used" in b.text:
        # token id, u and source of a record, drawn from qrsd's mock source
        tok_id, u, src = last.split()
        assert 0 <= int(tok_id) < VOCAB and 0.0 < float(u) < 1.0, b.where()
        assert src == "mock", b.where()
    elif '["u_value"]' in b.text:
        tok_id, u = last.split()
        assert 0 <= int(tok_id) < VOCAB and 0.0 < float(u) < 1.0, b.where()
    if "validate_params" in b.text and "except ValueError" in b.text:
        # the bad value is refused naming the key
        assert "qr_temperature_strategy" in out, b.where()


def test_documents_have_python_blocks() -> None:
    bs = _python_blocks()
    assert any(b.path == "README.md" for b in bs)
    assert any(b.path == "docs/python.md" for b in bs)
    bad = docblocks.wrong_markers(docblocks.blocks(str(ROOT)))
    assert not bad, bad
    sh = [b.text for b in docblocks.blocks(str(ROOT), "sh")
          if b.path == "docs/python.md"]
    assert any(t.strip() == "pip install ." for t in sh)


def test_python_blocks_run_verbatim(qrsd: Daemon, model_dir: Path,
                                    tmp_path: Path, capsys) -> None:
    ran, skipped = [], []
    for b in _python_blocks():
        if b.skip:
            skipped.append(f"{b.where()}: {b.skip[1]}")
            continue
        _check_output(b, _run(b, qrsd, model_dir, tmp_path))
        ran.append(b.where())
    with capsys.disabled():
        print(f"\n{len(ran)} python blocks run: {', '.join(ran)}")
        print(f"{len(skipped)} python blocks not run"
              + "".join(f"\n  {s}" for s in skipped))
    assert ran


def _serve_blocks() -> list[docblocks.Block]:
    return [b for b in docblocks.blocks(str(ROOT), "sh")
            if re.search(r"^vllm serve ", b.text, re.M)]


def test_vllm_serve_and_request_verbatim(qrsd: Daemon,
                                         monkeypatch) -> None:
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    from qrs.vllm import QRSLogitsProcessor

    monkeypatch.setenv("QRS_SOCKET", qrsd.sock)
    serves = _serve_blocks()
    assert serves
    for b in serves:
        serve = re.search(r"^vllm serve (\S+) --logits-processors (\S+)$",
                          b.text, re.M)
        assert serve, b.where()
        mod, _, cls = serve.group(2).partition(":")
        assert getattr(__import__(mod, fromlist=[cls]), cls) \
            is QRSLogitsProcessor, b.where()
        body = re.search(r"-d '(\{.*\})'$", b.text, re.M)
        if not body:
            continue
        req = json.loads(body.group(1))
        assert req["model"] == serve.group(1), b.where()
        params = CompletionRequest(**req).to_sampling_params(
            max_tokens=req["max_tokens"])
        assert params.extra_args == req["vllm_xargs"], b.where()
        QRSLogitsProcessor.validate_params(params)
        bad = CompletionRequest(**{**req, "vllm_xargs": {"qr_top_k": "many"}})
        with pytest.raises(ValueError, match="qr_top_k"):
            QRSLogitsProcessor.validate_params(
                bad.to_sampling_params(max_tokens=req["max_tokens"]))
    assert any(re.search(r"-d '\{", b.text) for b in serves)
