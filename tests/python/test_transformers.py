"""qrs.transformers end to end: a random-weight tiny Qwen2 with the real
151,936-entry vocabulary, the real Qwen2 tokenizer (llama.cpp's
ggml-vocab-qwen2.gguf, read by transformers through gguf), generate()
through a real qrsd on a mock source with a fixed salt."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import (AutoTokenizer, LogitsProcessor,
                          LogitsProcessorList, Qwen2Config,
                          Qwen2ForCausalLM)

import qrs
from conftest import MOCK_YAML, Daemon
from qrs.transformers import QRSLogitsProcessor, row_salt

PROMPTS = ["The quantum random number", "Hello, world", "Entropy is",
           "Once upon a time"]
NEW = 32


@pytest.fixture(scope="module")
def tokenizer():
    gguf = Path(os.environ.get("QRS_VOCAB_GGUF", ""))
    if not gguf.is_file():
        pytest.fail(f"QRS_VOCAB_GGUF ({gguf}) missing: ./setup.sh llama "
                    "fetches it")
    tok = AutoTokenizer.from_pretrained(str(gguf.parent),
                                        gguf_file=gguf.name)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=151936, hidden_size=64,
                      intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=256, tie_word_embeddings=True)
    m = Qwen2ForCausalLM(cfg).eval()
    return m


class Capture(LogitsProcessor):
    """Keeps a copy of the rows the next processor sees."""

    def __init__(self) -> None:
        self.rows: list[torch.Tensor] = []

    def __call__(self, input_ids, scores):
        self.rows.append(scores.detach().clone())
        return scores


def _generate(model, tokenizer, sock: str, salt: bytes):
    client = qrs.Client(sock)
    proc = QRSLogitsProcessor({"top_k": 50, "top_p": 0.95},
                              client=client, salt=salt)
    cap = Capture()
    enc = tokenizer(PROMPTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**enc, do_sample=False, max_new_tokens=NEW,
                             min_new_tokens=NEW,
                             logits_processor=LogitsProcessorList([cap,
                                                                   proc]),
                             pad_token_id=tokenizer.pad_token_id)
    gen = out[:, enc["input_ids"].shape[1]:]
    return gen, proc, cap


def test_generate_through_qrsd(model, tokenizer, qrsd: Daemon) -> None:
    salt = b"qrs transformers test salt"
    gen, proc, cap = _generate(model, tokenizer, qrsd.sock, salt)
    assert gen.shape == (len(PROMPTS), NEW)
    assert len(cap.rows) == NEW and cap.rows[0].shape == (4, 151936)
    # the records' tokens are the generated tokens
    for i in range(len(PROMPTS)):
        recs = proc.records[i]
        assert [r["token_id"] for r in recs] == gen[i].tolist()
        assert all(r["entropy_source_used"] == "mock" for r in recs)
        assert [r["step"] for r in recs] == list(range(NEW))
    assert len({t for row in gen.tolist() for t in row}) > 8, \
        "random-weight model, quantum-ish draws: varied tokens"
    text = tokenizer.batch_decode(gen)
    assert all(isinstance(t, str) and t for t in text)
    # each token is what libqrs (C) picks on the same row with the same u
    for i in range(len(PROMPTS)):
        s = qrs.Sampler(qrs.make_config({"top_k": 50, "top_p": 0.95}),
                        151936)
        s.set_salt(row_salt(salt, i))
        for t, rec in enumerate(proc.records[i]):
            row = cap.rows[t][i].contiguous()
            assert s.select_u(row, rec["u_value"]) == rec["token_id"], \
                (i, t)
    # deterministic: a fresh qrsd with the same seed and the same salt
    qrsd.stop()
    qrsd.start()
    gen2, _, _ = _generate(model, tokenizer, qrsd.sock, salt)
    assert torch.equal(gen, gen2)
    # another salt: other commitments (the mock source's bytes do not
    # depend on them); another mock seed: other tokens
    qrsd.stop()
    qrsd.start()
    _, proc3, _ = _generate(model, tokenizer, qrsd.sock, b"another salt")
    assert proc3.records[0][0]["entropy_nonce"] != \
        proc.records[0][0]["entropy_nonce"]
    qrsd.stop()
    qrsd.conf.write_text(MOCK_YAML.format(seed=8))
    qrsd.start()
    gen4, _, _ = _generate(model, tokenizer, qrsd.sock, salt)
    assert not torch.equal(gen, gen4)


def test_audit_replays_every_token(model, tokenizer, qrsd: Daemon,
                                   tmp_path: Path) -> None:
    """audit=: each sequence's full records and logits dump; qrs-audit
    re-selects every token from its row and u (and finds a changed
    token)."""
    import json
    import subprocess

    audit = os.environ.get("QRS_AUDIT_BIN", "")
    assert os.access(audit, os.X_OK), f"QRS_AUDIT_BIN ({audit})"
    with pytest.raises(ValueError, match="row"):
        QRSLogitsProcessor(client=qrs.Client(qrsd.sock),
                           audit=str(tmp_path / "x"))
    proc = QRSLogitsProcessor({"top_k": 50}, client=qrs.Client(qrsd.sock),
                              salt=b"audit", audit=str(tmp_path / "s{row}"))
    enc = tokenizer(PROMPTS[:2], return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**enc, do_sample=False, max_new_tokens=8,
                             min_new_tokens=8, logits_processor=[proc],
                             pad_token_id=tokenizer.pad_token_id)
    gen = out[:, enc["input_ids"].shape[1]:]
    proc.reset()                  # closes the records and dumps
    import gc
    gc.collect()
    for i in range(2):
        recs = tmp_path / f"s{i}.jsonl"
        lines = recs.read_text().splitlines()
        assert [json.loads(x)["token_id"] for x in lines] == gen[i].tolist()
        r = subprocess.run([audit, "--json", "--records", str(recs),
                            "--logits", str(tmp_path / f"s{i}.logits"),
                            "--salt", row_salt(b"audit", i).hex()],
                           capture_output=True, text=True, check=False)
        v = json.loads(r.stdout)
        assert r.returncode == 0, r.stdout + r.stderr
        assert v["verdict"] == "intact" and v["logits_rows"] == 8, v
    # one token changed in the records: named
    d = json.loads(lines[3])
    d["token_id"] = (d["token_id"] + 1) % 151936
    lines[3] = json.dumps(d)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    r = subprocess.run([audit, "--json", "--records", str(bad), "--logits",
                        str(tmp_path / "s1.logits")],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 1 and "token-mismatch" in r.stdout, r.stdout


def test_errors_are_typed(qrsd: Daemon) -> None:
    client = qrs.Client(qrsd.sock, no_reconnect=True)
    with pytest.raises(qrs.ConfigError, match="top_k"):
        QRSLogitsProcessor({"top_k": "x"}, client=client)
    with pytest.raises(qrs.ConfigError):
        QRSLogitsProcessor({"qr_no_such": 1}, client=client)
    proc = QRSLogitsProcessor(client=client)
    ids = torch.zeros((2, 3), dtype=torch.long)
    with pytest.raises(qrs.LogitsError, match="sequence 1"):
        proc(ids, torch.tensor([[0.0, 1.0, 2.0], [float("nan"), 0, 0]]))
    proc.reset()
    qrsd.stop()
    with pytest.raises(qrs.DaemonUnavailable):
        proc(ids, torch.zeros((2, 3)))
    assert np.isfinite(0.0)


def test_batch_wider_than_one_connection(qrsd: Daemon) -> None:
    """100 sequences, 64 open draws per connection: the processor opens a
    second connection, so every sequence's next draw is prefetched; the
    one-hot of each row is its record's token."""
    proc = QRSLogitsProcessor({}, client=qrs.Client(qrsd.sock), salt=b"w")
    ids = torch.zeros((100, 1), dtype=torch.long)
    g = torch.Generator().manual_seed(3)
    for step in range(2):
        scores = torch.randn((100, 1000), generator=g) * 3
        out = proc(ids, scores)
        toks = out.argmax(dim=1).tolist()
        assert [r[step]["token_id"] for r in proc.records] == toks
    assert len(proc._clients) == 2
    assert all(r[1]["entropy_prefetch_hit"] for r in proc.records)


def test_real_text_from_a_real_model(qrsd: Daemon) -> None:
    """SmolLM2-135M-Instruct (the GGUF ./setup.sh python fetches from
    PyPI), loaded by transformers from the GGUF, answers a question in
    English through qrs.transformers: each generated token is its record's
    token and the one libqrs picks on the row the model gave with the
    record's u."""
    from transformers import AutoModelForCausalLM

    gguf = Path(os.environ.get("QRS_SMOLLM2_GGUF", ""))
    if not gguf.is_file():
        pytest.fail(f"QRS_SMOLLM2_GGUF ({gguf}) missing: ./setup.sh python "
                    "fetches it")
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32).eval()
    prompt = ("<|im_start|>user\nWhat is a random number?<|im_end|>\n"
              "<|im_start|>assistant\n")
    proc = QRSLogitsProcessor({"top_k": 40, "top_p": 0.9},
                              client=qrs.Client(qrsd.sock), salt=b"smollm2")
    cap = Capture()
    enc = tok([prompt], return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**enc, do_sample=False, max_new_tokens=24,
                             logits_processor=LogitsProcessorList([cap,
                                                                   proc]),
                             pad_token_id=tok.eos_token_id)
    gen = out[0, enc["input_ids"].shape[1]:].tolist()
    text = tok.decode(gen, skip_special_tokens=True)
    words = [w.strip(".,;:!?'\"()").lower() for w in text.split()]
    common = {"a", "an", "the", "is", "of", "in", "to", "and", "that", "it",
              "for", "are", "as", "by"}
    assert sum(w.isalpha() for w in words) >= 8 and \
        sum(w in common for w in words) >= 3, f"not English text: {text!r}"
    recs = proc.records[0]
    assert [r["token_id"] for r in recs] == gen
    for step, r in enumerate(recs):
        s = qrs.Sampler(qrs.make_config({"top_k": 40, "top_p": 0.9}),
                        cap.rows[step].shape[1])
        assert s.select_u(cap.rows[step][0].contiguous(), r["u_value"]) == \
            r["token_id"], f"step {step}"
    print(f"SmolLM2 through qrs: {text!r}")
