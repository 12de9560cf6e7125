"""The engines' device path against their host path, through a real qrsd:
libqrs's split step (take_draw, then finish_pick with a token selected
elsewhere or finish_row with the row), and qrs.transformers selecting on
the rows' device ($QRS_DEVICE_SELECT=on runs it on CPU tensors, the
readable torch formulation of the kernels)."""

from __future__ import annotations

import pytest
import torch

import qrs
from conftest import Daemon, audit_dirs
from qrs import device
from qrs.transformers import QRSLogitsProcessor
from test_transformers import model, tokenizer, _generate  # noqa: F401

CFG = {"top_k": 50, "top_p": 0.95}
V = 4096


def _rows(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, V, generator=g) * 3.0


def _pick_args(rec: dict) -> tuple:
    return (rec["token_id"], rec["token_rank"], rec["num_candidates"],
            rec["token_prob"], rec["cdf_lo"], rec["cdf_hi"],
            float("nan"), rec["temperature_used"])


def test_split_step_equals_one_step(client) -> None:
    """take_draw + finish_pick (the token libqrs picks at that u) and
    take_draw + finish_row leave the sampler, the record and the chain
    exactly where one sample_token would."""
    cfg = qrs.make_config(CFG)
    a, twin = qrs.Sampler(cfg, V), qrs.Sampler(cfg, V)
    for s in (a, twin):
        s.set_salt(b"split step salt")
    rows = _rows(6, 1)
    for t in range(6):
        assert a.next_commitment() == twin.next_commitment()
        u = a.take_draw(client)
        assert a.take_draw(client) == u      # held: the same draw again
        tok, want = twin.select_u(rows[t], u, record=True)
        if t % 2 == 0:
            got_tok, rec = a.finish_pick(client, *_pick_args(want),
                                         record=True)
            assert rec["device_selection"] == "certified"
        else:
            got_tok, rec = a.finish_row(client, rows[t], record=True)
            assert rec["device_selection"] == "uncertified"
        assert got_tok == tok
        for k in ("token_id", "token_rank", "num_candidates", "step",
                  "u_value", "temperature_used", "cdf_lo", "cdf_hi"):
            assert rec[k] == want[k], k
        assert rec["entropy_source_used"] == "mock"
        assert rec["entropy_nonce"] != 0
    assert a.next_commitment() == twin.next_commitment()
    # its JSON line names the way too
    a.take_draw(client)
    _, want = twin.select_u(rows[0], 0.5, record=True)
    u = a.take_draw(client)
    tok, want = twin.select_u(rows[0], u, record=True)
    _, line = a.finish_pick(None, *_pick_args(want), record="json")
    assert '"device_selection":"certified"' in line


def test_split_step_refuses_what_it_cannot_label(client) -> None:
    s = qrs.Sampler(qrs.make_config(CFG), V)
    row = _rows(1, 2)[0]
    with pytest.raises(qrs.QrsError, match="no draw taken"):
        s.finish_row(client, row)
    u = s.take_draw(client)
    twin = qrs.Sampler(qrs.make_config(CFG), V)
    _, want = twin.select_u(row, u, record=True)
    args = list(_pick_args(want))
    # a u outside the pick's CDF interval, another temperature, a token
    # outside the row: no record is made, the draw stays held
    bad = [args[:4] + [want["cdf_hi"] + 0.25, 1.0] + args[6:],
           args[:7] + [0.5],
           [V + 1] + args[1:]]
    for b in bad:
        with pytest.raises(qrs.QrsError):
            s.finish_pick(client, *b)
    tok, rec = s.finish_pick(client, *args, record=True)
    assert tok == want["token_id"] and rec["step"] == 0
    # a strategy that reads the row (edt) needs the row
    e = qrs.Sampler(qrs.make_config({"temperature_strategy": "edt"}), V)
    e.take_draw(client)
    with pytest.raises(qrs.QrsError, match="needs the row"):
        e.finish_pick(client, *args)
    tok2, rec2 = e.finish_row(client, row, record=True)
    assert rec2["device_selection"] == "uncertified" and rec2["step"] == 0


def test_engine_helper_marks_and_resolves(client) -> None:
    """device.sample on rows with one row the device cannot certify (a
    NaN): libqrs refuses that row with its error, the others carry the
    device's pick; an all-but-one -inf row is certified."""
    cfg = qrs.make_config(CFG)
    x = _rows(3, 3)
    x[1, 7] = float("nan")
    x[2, :] = float("-inf")
    x[2, 11] = 1.0
    ss = [qrs.Sampler(cfg, V) for _ in range(3)]
    p = [device.row_params(cfg)] * 3
    got = device.sample(x, ss, [client] * 3, p, records=True)
    assert got.statuses[0] == 0 and got.statuses[2] == 0
    assert got.statuses[1] < 0 and got.uncertified == [1]
    assert got.tokens[2] == 11
    assert got.records[0]["device_selection"] == "certified"


def test_transformers_device_path_gives_the_host_tokens(
        model, tokenizer, qrsd: Daemon, monkeypatch) -> None:  # noqa: F811
    """The same generate() through the host path and the device path
    (a fresh qrsd with the same mock seed, the same salt): the same
    tokens, draws and commitments; the device path certified its rows."""
    salt = b"device path salt"
    monkeypatch.setenv("QRS_DEVICE_SELECT", "off")
    gen, proc, _ = _generate(model, tokenizer, qrsd.sock, salt)
    assert proc.selections["host"] == gen.numel()
    qrsd.stop()
    qrsd.start()
    monkeypatch.setenv("QRS_DEVICE_SELECT", "on")
    gen2, proc2, _ = _generate(model, tokenizer, qrsd.sock, salt)
    assert torch.equal(gen, gen2)
    assert proc2.selections["certified"] + \
        proc2.selections["uncertified"] == gen.numel()
    assert proc2.selections["certified"] >= gen.numel() - 2
    for i in range(gen.shape[0]):
        for r1, r2 in zip(proc.records[i], proc2.records[i]):
            for k in ("token_id", "token_rank", "u_value", "entropy_nonce",
                      "step", "num_candidates"):
                assert r1[k] == r2[k], (i, k)
            assert "device_selection" not in r1
            assert r2["device_selection"] in ("certified", "uncertified")


def test_mode_is_checked(monkeypatch) -> None:
    monkeypatch.setenv("QRS_DEVICE_SELECT", "sometimes")
    with pytest.raises(qrs.ConfigError, match="QRS_DEVICE_SELECT"):
        QRSLogitsProcessor(CFG, client=None)


def _vllm_run(sock: str, monkeypatch, mode: str):
    """A scripted vLLM batch (one row per request, then speculative rows)
    through qrs.vllm with $QRS_DEVICE_SELECT=mode; returns the one-hot
    outputs, the processor and each slot's records."""
    from test_vllm import FQCN, ctx, req_states, rows, sp
    from vllm.v1.worker.gpu.sample.logits_processor import \
        build_custom_logits_processors

    monkeypatch.setenv("QRS_SOCKET", sock)
    monkeypatch.setenv("QRS_DEVICE_SELECT", mode)
    (p,) = build_custom_logits_processors(None, req_states(), False, [FQCN])
    assert p.add_request(0, sp(qr_top_k=20)) is True
    assert p.add_request(1, sp(qr_top_p=0.8, qr_min_p_base=0.02)) is True
    assert p.add_request(2, sp(qr_temperature_strategy="edt")) is True
    p.apply_staged_writes()
    outs = [p.apply(rows(3, 1), ctx([2, 1, 0], [0, 0, 0])).clone(),
            p.apply(rows(2, 2), ctx([0, 1], [0, 0])).clone(),
            p.apply(rows(4, 3), ctx([0, 1, 0, 1], [0, 0, 1, 1])).clone()]
    p.flush_records()
    return outs, p, [p.records(s) for s in range(3)]


def test_vllm_device_path_gives_the_host_tokens(qrsd: Daemon,
                                                monkeypatch) -> None:
    """qrs.vllm: the same steps through the host path and (a fresh qrsd
    with the same mock seed) the device path write the same one-hot rows
    and records; a step with a row the device does not cover (edt) goes
    to libqrs whole, the others are selected on the device."""
    outs, p, recs = _vllm_run(qrsd.sock, monkeypatch, "off")
    assert p.selections == {"host": 3 + 2 + 4}
    qrsd.stop()
    qrsd.start()
    outs2, p2, recs2 = _vllm_run(qrsd.sock, monkeypatch, "on")
    for a, b in zip(outs, outs2):
        assert torch.equal(a, b)
    assert p2.selections["host"] == 3, "the step with the edt row"
    assert p2.selections["certified"] + p2.selections["uncertified"] == 6
    for s in range(3):
        assert len(recs[s]) == len(recs2[s]) > 0
        for r1, r2 in zip(recs[s], recs2[s]):
            for k in ("token_id", "u_value", "step", "token_rank",
                      "emitted"):
                assert r1[k] == r2[k], (s, k)
    assert recs2[0][1]["device_selection"] in ("certified", "uncertified")
    assert "device_selection" not in recs2[2][0]


def test_device_records_pass_qrs_audit(tmp_path, monkeypatch) -> None:
    """Records of tokens selected on the device (vLLM's records files)
    verify against qrsd's journal like any others: u inside the token's
    CDF interval, the journal's draw, the commitment chain; qrs-audit
    counts them by device_selection."""
    import json
    import subprocess

    from test_vllm import FQCN, ctx, req_states, rows, sp
    from vllm.v1.worker.gpu.sample.logits_processor import \
        build_custom_logits_processors

    audit, journal, recdir = audit_dirs(tmp_path)
    d = Daemon(tmp_path, extra_yaml=f"journal: {{ dir: {journal} }}\n")
    d.start()
    try:
        monkeypatch.setenv("QRS_SOCKET", d.sock)
        monkeypatch.setenv("QRS_RECORDS_DIR", str(recdir))
        monkeypatch.setenv("QRS_DEVICE_SELECT", "on")
        (p,) = build_custom_logits_processors(None, req_states(), False,
                                              [FQCN])
        assert p.add_request(0, sp(qr_run_id="dev-0", qr_top_p=0.9))
        assert p.add_request(1, sp(qr_run_id="dev-1", qr_top_k=30))
        for step in range(12):
            p.apply(rows(2, 60 + step), ctx([0, 1], [0, 0]))
        p.flush_records()
        paths = [p.records_file(0), p.records_file(1)]
        # the slots' next requests end both files
        assert p.add_request(0, sp()) and p.add_request(1, sp())
        p.apply(rows(2, 99), ctx([0, 1], [0, 0]))
        p.flush_records()
    finally:
        d.stop()
    certified = 0
    for path in paths:
        r = subprocess.run([audit, "--json", "--records", path,
                            "--journal", str(journal)],
                           capture_output=True, text=True, check=False)
        v = json.loads(r.stdout)
        assert r.returncode == 0 and v["verdict"] == "intact", v
        assert v["records_device_certified"] + \
            v["records_device_uncertified"] == 12, v
        certified += v["records_device_certified"]
    assert certified >= 22
