"""qrs.vllm with vLLM 0.34.0's own V2 loader, SamplingParams and
parallel state (a two-rank tensor-parallel group on gloo: tp_rank.py),
and a scripted batch life cycle driving apply() with CPU tensors through
a real qrsd.  No GPU here: RequestState (which pins memory through CUDA) is
replaced by an object with the fields LogitsProcRequestState reads; the
CUDA path (pinned buffer, stream sync) is exercised only by
tools/vllm/vllm-gpu-smoke.sh."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from vllm import SamplingParams
from vllm.exceptions import VLLMValidationError
from vllm.v1.worker.gpu.sample.logits_processor import (
    LogitsContext, build_custom_logits_processors,
    build_custom_logits_processors_params_validator)

import qrs
import qrs.vllm
from conftest import Daemon, audit_dirs

FQCN = "qrs.vllm:QRSLogitsProcessor"
V = 1000
ROOT = Path(__file__).resolve().parents[2]


def req_states(max_reqs: int = 8, max_len: int = 64) -> SimpleNamespace:
    """The fields of vLLM's LogitsProcRequestState, as CPU tensors: the
    committed token ids and total_len (StagedWriteTensor: .gpu), the
    prompt and prefill lengths (UvaBackedTensor: .np and .gpu)."""
    def uva() -> SimpleNamespace:
        t = torch.zeros(max_reqs, dtype=torch.int32)
        return SimpleNamespace(cpu=t, np=t.numpy(), gpu=t)

    return SimpleNamespace(
        device=torch.device("cpu"), max_num_reqs=max_reqs, vocab_size=V,
        all_token_ids=SimpleNamespace(gpu=torch.zeros(
            (max_reqs, max_len), dtype=torch.int32)),
        prompt_len=uva(), prefill_len=uva(),
        total_len=SimpleNamespace(gpu=torch.zeros(max_reqs,
                                                  dtype=torch.int32)))


def ctx(slots: list[int], local: list[int]) -> LogitsContext:
    m = torch.tensor(slots, dtype=torch.int32)
    reqs = sorted(set(slots), key=slots.index)
    return LogitsContext(
        expanded_idx_mapping=m, idx_mapping=torch.tensor(reqs),
        idx_mapping_np=np.array(reqs),
        expanded_local_pos=torch.tensor(local, dtype=torch.int32),
        input_ids=torch.zeros(len(slots), dtype=torch.long),
        pos=torch.zeros(len(slots), dtype=torch.long),
        seq_lens_upper_bound_np=np.zeros(len(reqs), dtype=np.int32))


def rows(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn((n, V), generator=g) * 3


def sp(**qr) -> SamplingParams:
    return SamplingParams(max_tokens=8, extra_args=qr)


def check_row(out: torch.Tensor, rec: dict, before: torch.Tensor,
              cfg: dict) -> None:
    """out is one-hot at rec's token, and libqrs picks that token on the
    row as it was, with the record's u."""
    tok = rec["token_id"]
    assert out[tok] == 0 and torch.isneginf(out).sum() == V - 1
    s = qrs.Sampler(qrs.make_config(cfg), V)
    assert s.select_u(before.contiguous(), rec["u_value"]) == tok


def _draws(sock: str) -> int:
    c = qrs.Client(sock)
    try:
        return c.status()["draws"]
    finally:
        c.close()


def test_loader_opt_in_by_the_flag_and_once(qrsd: Daemon,
                                            monkeypatch) -> None:
    """The package registers no entry point, so vLLM's loader builds no
    qrs processor for a server that did not name the class (rows
    untouched, no draw); named twice, the second instance stands aside:
    one draw per row."""
    monkeypatch.setenv("QRS_SOCKET", qrsd.sock)
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "vllm.logits_processors" not in meta.get("entry-points", {})
    assert build_custom_logits_processors(None, req_states(), False, []) == []

    before = _draws(qrsd.sock)
    procs = build_custom_logits_processors(None, req_states(), False,
                                           [FQCN, FQCN])
    assert [type(p) for p in procs] == [qrs.vllm.QRSLogitsProcessor] * 2
    first, second = procs
    assert not first.standing_aside and second.standing_aside
    assert second.client is None and second.pool is None
    # as vLLM's sampler does: every processor sees every request and row
    for slot in range(3):
        assert [p.add_request(slot, sp()) for p in procs] == [True, False]
    x = rows(3, 30)
    before_rows = x.clone()
    c = ctx([2, 0, 1], [0, 0, 0])
    for p in procs:
        x = p.apply(x, c)
    for r, slot in enumerate([2, 0, 1]):
        (rec,) = first.records(slot)
        check_row(x[r], rec, before_rows[r], {})
        assert second.records(slot) == []
    # 3 prefetches in add_request and 3 after the tokens, at most
    assert 3 <= _draws(qrsd.sock) - before <= 6

    # a fresh model runner (its own request state) samples again
    (again,) = build_custom_logits_processors(None, req_states(), False,
                                              [FQCN])
    assert not again.standing_aside


def test_no_device_sync_without_speculative_rows(qrsd: Daemon,
                                                 monkeypatch) -> None:
    """One row per request: ownership and order come from the host-side
    idx_mapping_np; the device-side tensors are never read."""
    monkeypatch.setenv("QRS_SOCKET", qrsd.sock)
    (p,) = build_custom_logits_processors(None, req_states(), False, [FQCN])
    for slot in range(3):
        p.add_request(slot, sp())
    x = rows(3, 31)
    before = x.clone()
    c = ctx([1, 2, 0], [0, 0, 0])
    # device tensors that fail when read: apply must not touch them
    poisoned = LogitsContext(
        expanded_idx_mapping=torch.empty(0), idx_mapping=torch.empty(0),
        idx_mapping_np=c.idx_mapping_np, expanded_local_pos=torch.empty(0),
        input_ids=c.input_ids, pos=c.pos,
        seq_lens_upper_bound_np=c.seq_lens_upper_bound_np)
    p.apply(x, poisoned)
    for r, slot in enumerate([1, 2, 0]):
        check_row(x[r], p.records(slot)[0], before[r], {})


@pytest.mark.parametrize("device", ["off", "on"])
def test_tensor_parallel_one_draw_per_token(qrsd: Daemon, tmp_path: Path,
                                            device: str) -> None:
    """Two ranks of a TP group (vLLM's parallel_state on gloo), the same
    logits on both: rank 0 draws and selects, rank 1 never connects to
    qrsd and writes rank 0's tokens; qrsd serves one draw per token.  The
    same with the selection on the rows' device (QRS_DEVICE_SELECT=on:
    the CPU tensors take the device path)."""
    import json
    import os
    import socket
    import subprocess
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "QRS_SOCKET": qrsd.sock, "QRS_THREADS": "1",
           "QRS_DEVICE_SELECT": device}
    before = _draws(qrsd.sock)
    procs = [subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("tp_rank.py")),
         str(r), str(port), str(tmp_path / f"rank{r}.json")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for r in (0, 1)]
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, out[-4000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text())
              for r in (0, 1))
    assert (r0["samples"], r0["group"], r0["connected"]) == (True, True, True)
    assert (r1["samples"], r1["group"], r1["connected"]) == \
        (False, True, False), "rank 1 holds no connection to qrsd"
    assert r0["tokens"] == r1["tokens"], "the ranks agree on every token"
    assert all(r0["untouched"]) and all(r1["untouched"]), "bypass rows"
    steps, owned = len(r0["tokens"]), 5
    if device == "on":
        assert r0["selections"].get("host", 0) == 0, r0["selections"]
        assert r0["selections"]["certified"] + \
            r0["selections"].get("uncertified", 0) == steps * owned
    else:
        assert r0["selections"] == {"host": steps * owned}
    assert r1["selections"] == {}, "rank 1 selects nothing"
    served = _draws(qrsd.sock) - before
    # one draw per token, plus each slot's prefetch of its next token
    assert steps * owned <= served <= (steps + 1) * owned, served
    assert all(r == [] for r in r1["records"].values())
    slots = [5, 4, 3, 2, 1, 0]
    for step in range(steps):
        g = torch.Generator().manual_seed(100 + step)
        x = torch.randn((len(slots), V), generator=g) * 3
        for r, slot in enumerate(slots):
            if slot == 3:
                continue
            rec = r0["records"][str(slot)][step]
            assert rec["token_id"] == r0["tokens"][step][r]
            s = qrs.Sampler(qrs.make_config({"top_k": 50}), V)
            assert s.select_u(x[r].contiguous(), rec["u_value"]) == \
                rec["token_id"]


def test_validate_params(qrsd: Daemon, monkeypatch) -> None:
    monkeypatch.setenv("QRS_SOCKET", qrsd.sock)
    qrs.vllm._sources_cache = None
    check = build_custom_logits_processors_params_validator([FQCN])
    check(sp(qr_top_k=40, qr_temperature_strategy="edt", other_key=1))
    check(sp(qr_entropy_source_type="mock"))
    check(SamplingParams(max_tokens=4))
    for bad, key in ((dict(qr_top_k="lots"), "qr_top_k"),
                     (dict(qr_no_such_field=1), "qr_no_such_field"),
                     (dict(qr_temperature_strategy="hot"),
                      "qr_temperature_strategy"),
                     (dict(qr_top_p=2.0), "top_p"),
                     (dict(qr_entropy_source_type="nope"),
                      "qr_entropy_source_type")):
        with pytest.raises(VLLMValidationError, match=key):
            check(sp(**bad))
    # a dead qrsd: the source cannot be checked, the request fails
    qrsd.stop()
    qrs.vllm._sources_cache = None
    with pytest.raises(VLLMValidationError, match="cannot ask qrsd"):
        check(sp(qr_entropy_source_type="mock"))


def test_batch_life_cycle(qrsd: Daemon, monkeypatch) -> None:
    monkeypatch.setenv("QRS_SOCKET", qrsd.sock)
    (p,) = build_custom_logits_processors(None, req_states(), False, [FQCN])
    cfg_a = {"top_k": 20}
    assert p.add_request(0, sp(qr_top_k=20)) is True
    assert p.add_request(1, sp(qr_bypass=True)) is False
    assert p.add_request(2, sp()) is True
    p.apply_staged_writes()

    # step 1: rows reordered, a declined row in the middle
    x = rows(3, 1)
    before = x.clone()
    out = p.apply(x, ctx([2, 1, 0], [0, 0, 0]))
    assert out is x, "in place"
    assert torch.equal(out[1], before[1]), "declined row untouched"
    (ra,) = p.records(0)
    (rc,) = p.records(2)
    assert p.records(1) == []
    check_row(out[2], ra, before[2], cfg_a)
    check_row(out[0], rc, before[0], {})
    assert ra["step"] == 0 and ra["entropy_source_used"] == "mock"
    assert ra["entropy_prefetch_hit"] is True, "begun in add_request"

    # step 2: speculative rows of slot 0 (positions 0..2) interleaved
    x = rows(5, 2)
    before = x.clone()
    out = p.apply(x, ctx([0, 2, 0, 1, 0], [2, 0, 0, 0, 1]))
    assert len(p.records(0)) == 1, "speculative rows wait for a verdict"
    p.flush_records()     # (nothing committed: labelled rejected drafts)
    recs = p.records(0)[1:]
    assert [r["step"] for r in recs] == [1, 2, 3], "local_pos order"
    for r, row in zip(recs, (2, 4, 0)):
        check_row(out[row], r, before[row], cfg_a)
    check_row(out[1], p.records(2)[1], before[1], {})
    assert torch.equal(out[3], before[3])
    assert all(r["entropy_prefetch_hit"] for r in recs[:1])

    # step 3: request A leaves; slot 0 is recycled with another config
    nonce_a0 = ra["entropy_nonce"]
    assert p.add_request(0, sp(qr_top_k=5, qr_top_p=0.9)) is True
    assert p.records(0) == []
    x = rows(2, 3)
    before = x.clone()
    out = p.apply(x, ctx([0, 2], [0, 0]))
    (rd,) = p.records(0)
    assert rd["step"] == 0 and rd["entropy_nonce"] != nonce_a0
    check_row(out[0], rd, before[0], {"top_k": 5, "top_p": 0.9})
    # slot 2 recycled with the same config: reset, not reused state
    assert p.add_request(2, sp()) is True
    out = p.apply(rows(1, 4), ctx([2], [0]))
    assert p.records(2)[0]["step"] == 0
    # slot 1 (declined) now takes a sampled request
    assert p.add_request(1, sp(qr_top_k=3)) is True
    x = rows(1, 5)
    before = x.clone()
    p.apply(x, ctx([1], [0]))
    check_row(x[0], p.records(1)[0], before[0], {"top_k": 3})


def test_bad_input(qrsd: Daemon, monkeypatch) -> None:
    monkeypatch.setenv("QRS_SOCKET", qrsd.sock)
    (p,) = build_custom_logits_processors(None, req_states(), False, [FQCN])
    with pytest.raises(ValueError, match="qr_top_k"):
        p.add_request(0, sp(qr_top_k=-3.5))
    p.add_request(0, sp())
    with pytest.raises(ValueError, match="vocabulary"):
        p.apply(torch.zeros((1, V + 1)), ctx([0], [0]))
    x = rows(1, 6)
    x[0, 7] = float("nan")
    with pytest.raises(qrs.LogitsError, match="slot 0"):
        p.apply(x, ctx([0], [0]))
    qrsd.stop()
    p.client.close()
    p.client = qrs.Client.__new__(qrs.Client)
    with pytest.raises(ValueError, match="closed"):
        p.apply(rows(1, 7), ctx([0], [0]))
    with pytest.raises(qrs.DaemonUnavailable):
        build_custom_logits_processors(None, req_states(), False, [FQCN])
    assert "torch" in sys.modules


def test_threads(qrsd: Daemon, monkeypatch) -> None:
    """The step's rows are sampled on QRS_THREADS threads (default: the
    CPUs the process may use, at most 8); every row is still its own
    libqrs step, the token its record's u selects."""
    import os
    monkeypatch.setenv("QRS_SOCKET", qrsd.sock)
    monkeypatch.delenv("QRS_THREADS", raising=False)
    (p,) = build_custom_logits_processors(None, req_states(), False, [FQCN])
    assert p.pool.threads == max(1, min(len(os.sched_getaffinity(0)), 8))
    monkeypatch.setenv("QRS_THREADS", "3")
    (p,) = build_custom_logits_processors(None, req_states(), False, [FQCN])
    assert p.pool.threads == 3
    for i in range(6):
        assert p.add_request(i, sp(qr_top_k=50) if i % 2 else sp())
    p.apply_staged_writes()
    for step in range(3):
        x = rows(6, 10 + step)
        before = x.clone()
        p.apply(x, ctx([5, 4, 3, 2, 1, 0], [0] * 6))
        for r in range(6):
            slot = 5 - r
            check_row(x[r], p.records(slot)[step], before[r],
                      {"top_k": 50} if slot % 2 else {})
    for bad in ("0", "257", "two"):
        monkeypatch.setenv("QRS_THREADS", bad)
        with pytest.raises(qrs.ConfigError, match="QRS_THREADS"):
            build_custom_logits_processors(None, req_states(), False, [FQCN])


def test_more_slots_than_one_connection_holds(qrsd: Daemon,
                                              monkeypatch) -> None:
    """150 slots, qrsd's 64 open draws per connection: the processor
    spreads the slots over 3 connections, so every slot's draw is
    prefetched (one connection would leave 86 slots drawing serially)."""
    monkeypatch.setenv("QRS_SOCKET", qrsd.sock)
    n = 150
    (p,) = build_custom_logits_processors(None, req_states(n), False, [FQCN])
    assert p.client.server_info()["max_inflight"] == 64
    assert len(p._clients) == 3
    for i in range(n):
        assert p.add_request(i, sp())
    p.apply_staged_writes()
    slots = list(range(n - 1, -1, -1))
    for step in range(2):
        x = rows(n, 20 + step)
        before = x.clone()
        p.apply(x, ctx(slots, [0] * n))
        for r in (0, 1, 70, 149):
            check_row(x[r], p.records(slots[r])[step], before[r], {})
    assert all(p.records(i)[1]["entropy_prefetch_hit"] for i in range(n))
    assert all(p.records(i)[0]["entropy_prefetch_hit"] for i in range(n)), \
        "begun in add_request, on the slot's connection"


def test_records_dir_a_file_per_request_that_qrs_audit_verifies(
        tmp_path: Path, monkeypatch) -> None:
    """$QRS_RECORDS_DIR: each request's records in a file of its own
    (named by qr_run_id), framed by a header and an end line written when
    the slot is taken by the next request; qrs-audit verifies the file
    against qrsd's journal, reports a file cut short as truncated, and
    names an edited record."""
    import json
    import os
    import subprocess

    audit = os.environ.get("QRS_AUDIT_BIN", "")
    assert os.access(audit, os.X_OK), f"QRS_AUDIT_BIN ({audit})"
    journal = tmp_path / "journal"
    journal.mkdir()
    d = Daemon(tmp_path, extra_yaml=f"journal: {{ dir: {journal} }}\n")
    d.start()
    try:
        recdir = tmp_path / "records"
        recdir.mkdir()
        monkeypatch.setenv("QRS_SOCKET", d.sock)
        monkeypatch.setenv("QRS_RECORDS_DIR", str(recdir))
        check = build_custom_logits_processors_params_validator([FQCN])
        check(sp(qr_run_id="exp-7.a"))
        for bad in ("../x", ".hidden", "", "a/b", 12):
            with pytest.raises(VLLMValidationError, match="qr_run_id"):
                check(sp(qr_run_id=bad))
        (p,) = build_custom_logits_processors(None, req_states(), False,
                                              [FQCN])
        assert p.add_request(0, sp(qr_run_id="exp-7.a", qr_top_k=20))
        assert p.add_request(1, sp())
        assert not p.add_request(2, sp(qr_bypass=True))
        for step in range(3):
            p.apply(rows(3, 40 + step), ctx([0, 1, 2], [0, 0, 0]))
        p.flush_records()         # the writer thread made the files
        first = p.records_file(0)
        assert first == str(recdir / "exp-7.a.jsonl")
        assert p.records_file(2) is None, "a declined request has none"
        # the slot's next request (the same run id): the first file ends
        assert p.add_request(0, sp(qr_run_id="exp-7.a"))
        p.apply(rows(3, 50), ctx([0, 1, 2], [0, 0, 0]))
        p.flush_records()
        assert p.records_file(0) == str(recdir / "exp-7.a.1.jsonl")
        d.stop()                  # the journal written out
        lines = Path(first).read_text().splitlines()
        head, *recs, end = (json.loads(x) for x in lines)
        assert head["qrs_records"] == 1 and head["run_id"] == "exp-7.a"
        assert end == {"qrs_records_end": 3, "lost": 0}
        assert [r["step"] for r in recs] == [0, 1, 2]
        assert all(r["journal_seq"] for r in recs), "journalled draws"

        def run_audit(path: Path) -> tuple[int, dict]:
            r = subprocess.run([audit, "--json", "--records", str(path),
                                "--journal", str(journal)],
                               capture_output=True, text=True, check=False)
            return r.returncode, json.loads(r.stdout)

        rc, v = run_audit(Path(first))
        assert rc == 0 and v["verdict"] == "intact", v
        # still open (the process would die now): truncated, not intact
        rc, v = run_audit(Path(p.records_file(1)))
        assert rc == 1 and "records-truncated" in json.dumps(v), v
        cut = tmp_path / "cut.jsonl"
        cut.write_text("\n".join(lines[:-2]) + "\n")
        rc, v = run_audit(cut)
        assert rc == 1 and "records-truncated" in json.dumps(v), v
        edited = [json.loads(x) for x in lines]
        edited[2]["u_value"] = 0.5 if edited[2]["u_value"] != 0.5 else 0.25
        bad = tmp_path / "edited.jsonl"
        bad.write_text("\n".join(json.dumps(x) for x in edited) + "\n")
        rc, v = run_audit(bad)
        assert rc == 1 and "u-" in json.dumps(v), v
        dropped = tmp_path / "dropped.jsonl"
        dropped.write_text("\n".join(lines[:2] + lines[3:]) + "\n")
        rc, v = run_audit(dropped)
        assert rc == 1 and "records-lost" in json.dumps(v), v
    finally:
        d.stop()


def spec_ctx(slots: list[int], local: list[int], pos: list[int],
             seq: list[int]) -> LogitsContext:
    """A step's layout with each row's position (speculative rows: a
    request's rows at consecutive positions) and each request's
    sequence length."""
    c = ctx(slots, local)
    return LogitsContext(
        expanded_idx_mapping=c.expanded_idx_mapping,
        idx_mapping=c.idx_mapping, idx_mapping_np=c.idx_mapping_np,
        expanded_local_pos=c.expanded_local_pos, input_ids=c.input_ids,
        pos=torch.tensor(pos, dtype=torch.long),
        seq_lens_upper_bound_np=np.array(seq, dtype=np.int32))


def commit(rs: SimpleNamespace, slot: int, tokens: list[int]) -> None:
    """What vLLM's post-step update does: the emitted tokens appended to
    the slot's token ids, total_len grown."""
    n = int(rs.total_len.gpu[slot])
    rs.all_token_ids.gpu[slot, n:n + len(tokens)] = torch.tensor(tokens)
    rs.total_len.gpu[slot] = n + len(tokens)


def test_rejected_drafts_and_forced_tokens_are_marked_and_undone(
        tmp_path: Path, monkeypatch) -> None:
    """A scripted life cycle as vLLM's model runner drives it: speculative
    rows with one rejected draft, a request whose token thinking-budget
    forcing overrides, a chunked-prefill row, a slot taken before its
    last rows' verdict.  The records file marks each record emitted,
    rejected or overridden; the sampler resumes exactly as a sampler that
    never saw the rejected draft; qrs-audit passes the file against the
    journal and the salt, and names the one edit in a tampered copy."""
    import json
    import subprocess

    audit, journal, recdir = audit_dirs(tmp_path)
    d = Daemon(tmp_path, extra_yaml=f"journal: {{ dir: {journal} }}\n")
    d.start()
    try:
        monkeypatch.setenv("QRS_SOCKET", d.sock)
        monkeypatch.setenv("QRS_RECORDS_DIR", str(recdir))
        rs = req_states()
        (p,) = build_custom_logits_processors(None, rs, False, [FQCN])
        cfg = {"temperature_strategy": "hvh_drift", "top_k": 50}
        qr = {"qr_temperature_strategy": "hvh_drift", "qr_top_k": 50}
        salt = bytes(range(1, 17))
        # slot 0: request A, prompt of 4; slot 1: request B, a thinking
        # budget, prompt of 3; slot 2: request C, a prompt of 9 prefilled
        # in chunks
        for slot, plen, params in ((0, 4, sp(qr_run_id="a", **qr)),
                                   (1, 3, SamplingParams(
                                       max_tokens=8, thinking_token_budget=2,
                                       extra_args={"qr_run_id": "b", **qr})),
                                   (2, 9, sp(qr_run_id="c", **qr))):
            rs.prefill_len.np[slot] = plen
            commit(rs, slot, list(range(100, 100 + plen)))
            assert p.add_request(slot, params)
            p._samplers[slot].set_salt(salt)   # for qrs-audit --salt
        # step 1: one row each; C's chunk (5 of 9 tokens) emits nothing
        x = rows(3, 60)
        before = [x.clone()]
        p.apply(x, spec_ctx([0, 1, 2], [0, 0, 0], [3, 2, 4], [4, 3, 5]))
        assert torch.equal(x[2], before[0][2]), "chunked prefill untouched"
        (a0,) = p.records(0)
        assert a0["emitted"] is True, "one row, no budget: emitted at once"
        b0_tok = int(x[1].argmax())
        assert p.records(1) == [], "B's verdict waits for the next step"
        assert p.records(2) == []
        commit(rs, 0, [a0["token_id"]])
        forced = (b0_tok + 1) % V        # the end marker, forced
        commit(rs, 1, [forced])

        # step 2: A verifies two drafts (rows at positions 4, 5, 6); B one
        # row; C's last chunk
        x = rows(5, 61)
        before.append(x.clone())
        p.apply(x, spec_ctx([0, 1, 0, 0, 2], [0, 0, 1, 2, 0],
                            [4, 3, 5, 6, 8], [7, 4, 9]))
        (b0,) = p.records(1)
        assert b0["emitted"] is False and b0["emitted_token"] == forced
        assert b0["token_id"] == b0_tok
        a_rows = [r for r in range(5) if [0, 1, 0, 0, 2][r] == 0]
        toks = [int(x[r].argmax()) for r in a_rows]
        # the first draft accepted (it was A's token), the second not:
        # A's token at position 6 is the correction, position 7 rejected
        commit(rs, 0, toks[:2])
        commit(rs, 1, [int(x[1].argmax())])
        commit(rs, 2, [int(x[4].argmax())])
        p.flush_records()                 # the verdicts of step 2
        a = p.records(0)
        assert [r["step"] for r in a] == [0, 1, 2, 3]
        assert [r["emitted"] for r in a] == [True, True, True, False]
        assert "emitted_token" not in a[3]

        # a sampler that never saw the rejected draft: the same rows and u
        ref = qrs.Sampler(qrs.make_config(cfg), V)
        ref.set_salt(salt)
        for rec, row in zip(a[:3], (before[0][0], before[1][0],
                                    before[1][2])):
            assert ref.select_u(row.contiguous(), rec["u_value"]) == \
                rec["token_id"]
        assert p._samplers[0].next_commitment() == ref.next_commitment()
        # B's next draw was committed to the forced token (qrs-audit
        # --salt checks it below)
        assert [r["step"] for r in p.records(1)] == [0, 1]

        # step 3: A one row at position 7, B one row, C one row
        x = rows(3, 62)
        before.append(x.clone())
        p.apply(x, spec_ctx([0, 1, 2], [0, 0, 0], [6, 4, 9], [7, 5, 10]))
        a3 = p.records(0)[4]
        assert a3["step"] == 3 and a3["emitted"] is True
        _, r3 = ref.select_u(before[2][0].contiguous(), a3["u_value"],
                             record=True)
        # hvh_drift's temperature is its EMAs' (the draft's row would
        # have moved them)
        for k in ("token_id", "temperature_used", "shannon_entropy",
                  "token_rank", "cdf_lo", "cdf_hi"):
            assert r3[k] == a3[k], k
        for slot in range(3):
            commit(rs, slot, [int(x[slot].argmax())])

        # step 4: A two speculative rows; then A's slot is taken by a new
        # request before the step that would tell their verdict
        x = rows(2, 63)
        p.apply(x, spec_ctx([0, 0], [0, 1], [7, 8], [9]))
        commit(rs, 0, [int(x[0].argmax())])   # the draft rejected
        # new requests take A's and B's slots (B's last row, with a
        # thinking budget, still waits for its verdict)
        for slot in (0, 1):
            assert p.add_request(slot, sp())
            rs.total_len.gpu[slot] = 0        # the new prompt's writes
            rs.all_token_ids.gpu[slot].zero_()
        p.flush_records()
        files = {f.name: f for f in recdir.iterdir()}
        assert {"a.jsonl", "b.jsonl", "c.jsonl"} <= set(files)
        lines = files["a.jsonl"].read_text().splitlines()
        head, *recs, end = (json.loads(x) for x in lines)
        assert end == {"qrs_records_end": 7, "lost": 0}, "A's file ended"
        assert [r["emitted"] for r in recs] == [True] * 3 + [False] + \
            [True, True, False]
        assert [r["step"] for r in recs] == [0, 1, 2, 3, 3, 4, 5]
        # the worker exits cleanly with rows still waiting for their
        # verdict: they reach the file labelled not known, and it ends
        rs.prefill_len.np[0] = 0
        p.apply(rows(2, 64), spec_ctx([0, 0], [0, 1], [0, 1], [2]))
        p._writer.flush()                 # the file made, rows unsettled
        last = Path(p.records_file(0))
        del p
        import gc
        gc.collect()
        *_, r1, r2, end = (json.loads(x) for x in
                           last.read_text().splitlines())
        assert r1["emitted"] is None and r2["emitted"] is None
        assert end["qrs_records_end"] >= 2 and end["lost"] == 0
        d.stop()                          # the journal written out

        def run_audit(path: Path) -> tuple[int, dict]:
            r = subprocess.run([audit, "--json", "--records", str(path),
                                "--journal", str(journal), "--salt",
                                salt.hex()],
                               capture_output=True, text=True, check=False)
            return r.returncode, json.loads(r.stdout)

        b = [json.loads(x) for x in files["b.jsonl"].read_text()
             .splitlines()[1:-1]]
        assert [r["emitted"] for r in b] == [False, True, True]
        for name, rejected, overridden in (("a.jsonl", 2, 0),
                                           ("b.jsonl", 0, 1)):
            rc, v = run_audit(files[name])
            assert rc == 0 and v["verdict"] == "intact", (name, v)
            assert (v["records_rejected"], v["records_overridden"]) == \
                (rejected, overridden), v
        # a rejected draft claimed as emitted (line 5), an emitted token
        # claimed rejected (line 3): the chain breaks on the next record
        for line, value, fails_at in ((5, True, 6), (3, False, 4)):
            edited = [json.loads(x) for x in lines]
            edited[line - 1]["emitted"] = value
            bad = tmp_path / "edited.jsonl"
            bad.write_text("\n".join(json.dumps(x) for x in edited) + "\n")
            rc, v = run_audit(bad)
            assert rc == 1 and v["failures"], v
            assert v["failures"][0]["check"] == "nonce-chain", v
            assert v["failures"][0]["line"] == fails_at, v

    finally:
        d.stop()
