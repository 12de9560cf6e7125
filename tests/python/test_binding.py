"""The binding on the shared vectors and through a real qrsd."""

from __future__ import annotations

import grp
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

import qrs
from conftest import VECTORS, Daemon

SALT = bytes(range(16))


def _logits(case: dict) -> np.ndarray:
    vals = json.loads(case["logits"]) if isinstance(case["logits"], str) \
        else case["logits"]
    return np.array([float(v) for v in vals], dtype=np.float64)


def _select_cases() -> list[dict]:
    doc = json.loads((VECTORS / "select.json").read_text())
    return doc["cases"]


def _sampler_for(case: dict) -> qrs.Sampler:
    cfg = qrs.make_config({
        "fixed_temperature": case["temperature"], "top_k": case["top_k"],
        "top_p": case["top_p"], "min_p_base": case["min_p"],
        "truncate_first": case["truncate_first"]}, env=False)
    return qrs.Sampler(cfg, max(case["vocab_size"], 2))


def _u_ok(case: dict) -> bool:
    """Whether libqrs selects with the case's u: NaN or a u outside
    [0, 1] is URangeError, where the reference still picks a token."""
    return 0.0 <= float(case["u"]) <= 1.0


def _broken(row: np.ndarray) -> bool:
    """A row the reference picks from but libqrs refuses (NaN, +inf,
    all -inf: QRS_E_LOGITS, documented in qrs/sampler.h)."""
    return bool(np.isnan(row).any() or np.isposinf(row).any()
                or np.isneginf(row).all())


@pytest.mark.parametrize("case", _select_cases(), ids=lambda c: c["name"])
def test_select_vectors_f64_f32(case: dict) -> None:
    """The tokens test_select.c checks: the reference's token on every
    select vector, for f64 rows and for f32 rows where the values are
    exact in float32; broken rows are LogitsError, a NaN top_p is
    ConfigError, a u outside [0, 1] is URangeError (libqrs's documented
    deviations)."""
    row = _logits(case)
    want = case["expected"]
    if math.isnan(float(case["top_p"])):
        with pytest.raises(qrs.ConfigError, match="top_p"):
            _sampler_for(case)
        return
    if not _u_ok(case):
        with pytest.raises(qrs.URangeError):
            _sampler_for(case).select_u(row, float(case["u"]))
        return
    for dtype in ("f64", "f32"):
        r = row.astype(np.float32) if dtype == "f32" else row
        if dtype == "f32" and not np.array_equal(r.astype(np.float64), row,
                                                 equal_nan=True):
            continue
        s = _sampler_for(case)
        if _broken(row):
            with pytest.raises(qrs.LogitsError):
                s.select_u(r, float(case["u"]))
            continue
        assert case["robust"] and "error" not in want
        tok, rec = s.select_u(r, float(case["u"]), record=True)
        assert tok in want["acceptable_token_ids"], (dtype, tok)
        if not case.get("tie_sensitive"):
            assert tok == want["token_id"], dtype
        assert rec["num_candidates"] == want["num_candidates"]


@pytest.mark.parametrize("case", _select_cases(), ids=lambda c: c["name"])
def test_select_vectors_half_rows(case: dict) -> None:
    """f16 and bf16 rows (numpy f16, torch f16/bf16, bf16 bits with
    dtype='bf16') give the token libqrs picks on the same values as f32:
    the row is read in place, converted exactly."""
    row = _logits(case)
    if _broken(row) or math.isnan(float(case["top_p"])) or not _u_ok(case):
        return
    for tdt, name in ((torch.float16, "f16"), (torch.bfloat16, "bf16")):
        t = torch.tensor(row, dtype=tdt)
        widened = t.to(torch.float32).numpy()
        want = _sampler_for(case).select_u(widened, float(case["u"]))
        assert _sampler_for(case).select_u(t, float(case["u"])) == want, name
        bits = t.view(torch.int16).numpy()
        assert _sampler_for(case).select_u(bits, float(case["u"]), dtype=name) \
            == want, name
        if name == "f16":
            assert _sampler_for(case).select_u(
                widened.astype(np.float16), float(case["u"])) == want


def _lm_row(n: int, t: int, dtype=np.float32) -> np.ndarray:
    """A language-model-like row: logits falling with rank, shuffled by
    step; values exact in bf16 (multiples of 1/8 below 16)."""
    rng = np.random.default_rng(1000 + t)
    base = -np.round(np.arange(n) * 8 * 13 / n) / 8
    return rng.permutation(base).astype(dtype)


def _generate(client: qrs.Client, rows: list, **row_kw) -> list:
    s = qrs.Sampler(qrs.make_config({"top_k": 50}, env=False), 1000)
    s.set_salt(SALT)
    s.prefetch(client)
    out = []
    for r in rows:
        out.append(s.sample_token(client, r, record=True, **row_kw))
    return out


def test_tokens_through_qrsd_all_dtypes(qrsd: Daemon) -> None:
    """Mock source + fixed salt: the same tokens for f32, f16, bf16 rows
    holding the same values, on a fresh qrsd each time (same seed, same
    bytes); each record's u is the daemon's draw for the commitment, and
    replaying u with select_u picks the same token."""
    rows32 = [_lm_row(1000, t) for t in range(16)]
    c = qrs.Client(qrsd.sock)
    ref = _generate(c, rows32)
    toks = [t for t, _ in ref]
    assert len(set(toks)) > 3, "the draws vary"
    for t, rec in ref:
        assert rec["entropy_source_used"] == "mock"
        assert rec["entropy_production"] is False
        assert rec["cdf_lo"] <= rec["u_value"] <= rec["cdf_hi"] + 1e-12
    c.close()
    variants = [
        ("f16 numpy", [r.astype(np.float16) for r in rows32], {}),
        ("bf16 torch", [torch.from_numpy(r).to(torch.bfloat16)
                        for r in rows32], {}),
        ("f16 torch", [torch.from_numpy(r).to(torch.float16)
                       for r in rows32], {}),
        ("bf16 bits", [torch.from_numpy(r).to(torch.bfloat16)
                       .view(torch.int16).numpy() for r in rows32],
         {"dtype": "bf16"}),
    ]
    for name, rows, kw in variants:
        qrsd.stop()
        qrsd.start()
        c = qrs.Client(qrsd.sock)
        got = _generate(c, rows, **kw)
        assert [t for t, _ in got] == toks, name
        assert [r["u_value"] for _, r in got] == \
            [r["u_value"] for _, r in ref], name
        c.close()
    # replay with u alone
    s = qrs.Sampler(qrs.make_config({"top_k": 50}, env=False), 1000)
    for (tok, rec), row in zip(ref, rows32):
        assert s.select_u(row, rec["u_value"]) == tok


def test_nonce_is_the_commitments(client: qrs.Client) -> None:
    s = qrs.Sampler(qrs.make_config(env=False), 1000)
    s.set_salt(SALT)
    cm = s.next_commitment()
    assert cm == {"salt": SALT, "step": 0, "prev_token": -1}
    tok, rec = s.sample_token(client, _lm_row(1000, 0), record=True)
    d = client.draw(salt=SALT, step=0, prev_token=-1)
    assert d["nonce"] == rec["entropy_nonce"] != 0
    assert s.next_commitment()["prev_token"] == tok


def test_batch_equals_single_rows(client: qrs.Client, qrsd: Daemon) -> None:
    """Pool.sample: one call for every row, the same tokens as one
    sampler call per row."""
    block = np.stack([_lm_row(1000, t) for t in range(8)])
    pool = qrs.Pool(2)
    us = [0.05 + 0.11 * i for i in range(8)]
    samplers = [qrs.Sampler(None, 1000) for _ in range(8)]
    toks, stats, recs = pool.sample(block, samplers, u=us, records=True)
    assert stats == [0] * 8
    single = [qrs.Sampler(None, 1000).select_u(block[i], us[i])
              for i in range(8)]
    assert toks == single
    assert [r["token_id"] for r in recs] == toks
    # through qrsd
    samplers = [qrs.Sampler(None, 1000) for _ in range(8)]
    toks, stats, _ = pool.sample(torch.from_numpy(block), samplers,
                                 client=client)
    assert stats == [0] * 8 and all(0 <= t < 1000 for t in toks)
    # a client per row (engines with more requests than a connection's
    # in-flight draws): each row's draw on its own connection
    other = qrs.Client(qrsd.sock)
    per_row = [client if i % 2 else other for i in range(8)]
    toks, stats, recs = pool.sample(block, samplers, client=per_row,
                                    records=True)
    assert stats == [0] * 8
    # the call before prefetched every row on client: the rows moved to
    # the other connection drew after the logits (not prefetched)
    assert [r.get("entropy_prefetch_hit", False) for r in recs] == \
        [bool(i % 2) for i in range(8)]
    toks, stats, recs = pool.sample(block, samplers, client=per_row,
                                    records=True)
    assert stats == [0] * 8
    assert all(r["entropy_prefetch_hit"] for r in recs), "prefetched by " \
        "the call before, on the same connections"
    with pytest.raises(ValueError, match="differ in length"):
        pool.sample(block, samplers, client=per_row[:7])
    with pytest.raises(TypeError, match=r"client\[3\]"):
        pool.sample(block, samplers, client=per_row[:3] + [None] * 5)
    other.close()


def test_config_layers_and_env() -> None:
    cfg = qrs.make_config({"top_k": 7}, env={"QR_TOP_P": "0.5",
                                             "QR_TOP_K": "9"})
    assert cfg.get("top_k") == "7" and cfg.layer("top_k") == "explicit"
    assert cfg.get("top_p") == "0.5" and cfg.layer("top_p") == "env"
    cfg = qrs.make_config(preset=qrs.preset_names()[0], env=False)
    assert cfg.preset == qrs.preset_names()[0]
    cfg = qrs.make_config(qr_args={"qr_top_k": 3, "other": 1}, env=False)
    assert cfg.get("top_k") == "3"
    assert "top_k" in qrs.field_names()
    with pytest.raises(qrs.ConfigError, match="top_k"):
        qrs.make_config({"top_k": "many"}, env=False)
    with pytest.raises(qrs.ConfigError):
        qrs.make_config({"no_such_field": 1}, env=False)
    with pytest.raises(qrs.ConfigError, match="QR_TOP_P"):
        qrs.make_config(env={"QR_TOP_P": "x"})


def test_bad_input_is_a_typed_error(qrsd: Daemon) -> None:
    c = qrs.Client(qrsd.sock, timeout_ms=2000, no_reconnect=True)
    s = qrs.Sampler(None, 100)
    with pytest.raises(TypeError, match="format 'i'"):
        s.select_u(np.zeros(100, dtype=np.int32), 0.5)
    with pytest.raises(TypeError, match="DLPack"):
        s.select_u(torch.zeros(100, dtype=torch.int64), 0.5)
    with pytest.raises(ValueError, match="contiguous"):
        s.select_u(np.zeros(200, dtype=np.float32)[::2], 0.5)
    with pytest.raises(ValueError, match="contiguous"):
        s.select_u(torch.zeros(200)[::2], 0.5)
    with pytest.raises(ValueError, match="vocabulary"):
        s.select_u(np.zeros(101, dtype=np.float32), 0.5)
    with pytest.raises(qrs.LogitsError):
        s.select_u(np.full(100, np.nan, dtype=np.float32), 0.5)
    with pytest.raises(qrs.LogitsError):
        s.sample_token(c, np.full(100, -np.inf, dtype=np.float32))
    bad = qrs.Sampler(qrs.make_config({"entropy_source_type": "nope"},
                                      env=False), 100)
    with pytest.raises(qrs.EntropyError, match="nope"):
        bad.sample_token(c, np.zeros(100, dtype=np.float32))
    qrsd.stop()
    with pytest.raises(qrs.DaemonUnavailable):
        s.sample_token(c, np.zeros(100, dtype=np.float32))
    with pytest.raises(qrs.DaemonUnavailable, match="qrsd.sock"):
        qrs.Client(qrsd.sock)


def test_status_health(client: qrs.Client) -> None:
    st = client.status()
    assert st["default_source"] == "mock"
    assert any(x["name"] == "mock" for x in st["sources"])
    h = client.health()
    assert h["state"] in ("healthy", "degraded")
    assert client.server_info()["default_source_type"] == "mock"
    assert client.socket_path.endswith("qrsd.sock")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16,
                                   torch.bfloat16, torch.float64])
def test_pool_one_hot_in_place(dtype) -> None:
    """Pool.sample(one_hot=True): the same tokens as without, and each
    sampled row written over in place: -inf but 0 at its token; a row of
    another sampler's bypass stays as it was."""
    block = torch.from_numpy(np.stack([_lm_row(1000, t) for t in range(6)]))
    block = block.to(dtype)
    us = [0.07 + 0.13 * i for i in range(6)]
    pool = qrs.Pool(2)
    want, stats, _ = pool.sample(block, [qrs.Sampler(None, 1000)
                                         for _ in range(6)], u=us)
    assert stats == [0] * 6
    x = block.clone()
    samplers = [qrs.Sampler(None, 1000) for _ in range(5)]
    samplers.append(qrs.Sampler(qrs.make_config({"bypass": True},
                                                env=False), 1000))
    toks, stats, _ = pool.sample(x, samplers, u=us, one_hot=True)
    assert toks[:5] == want[:5] and stats == [0] * 5 + [1]
    for i in range(5):
        assert float(x[i, toks[i]]) == 0.0
        rest = torch.cat([x[i, :toks[i]], x[i, toks[i] + 1:]]).double()
        assert bool(torch.isneginf(rest).all()), i
    assert torch.equal(x[5], block[5])
    ro = np.stack([_lm_row(1000, t) for t in range(2)]).astype(np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        pool.sample(ro, [qrs.Sampler(None, 1000) for _ in range(2)],
                    u=[0.5, 0.5], one_hot=True)


def test_force_one_hot() -> None:
    row = np.zeros(10, dtype=np.float32)
    qrs.force_one_hot(row, 3)
    assert row[3] == 0 and np.isneginf(np.delete(row, 3)).all()
    t = torch.zeros(10, dtype=torch.bfloat16)
    qrs.force_one_hot(t, 9)
    assert t[9] == 0 and math.isinf(float(t[0]))
    with pytest.raises(qrs.QrsError):
        qrs.force_one_hot(row, 10)


def _connect_as_nobody(sock: str, groups: list[int]) -> str:
    """Fork, drop to uid/gid 65534 with these supplementary groups, make
    a qrs.Client on sock and draw once; the child reports the exception's
    class names and message (or "served") through a pipe."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(r)
        out = "served"
        try:
            os.setgroups(groups)
            os.setgid(65534)
            os.setuid(65534)
            c = qrs.Client(sock, timeout_ms=2000, no_reconnect=True)
            c.draw()
        except BaseException as e:  # noqa: BLE001 (reported to the parent)
            out = " ".join(k.__name__ for k in type(e).__mro__) + "|" + str(e)
        os.write(w, out.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        got = f.read().decode()
    os.waitpid(pid, 0)
    return got


def test_access_refusal_is_permission_denied() -> None:
    """QRS_E_PERMISSION (qrsd's access.group refuses the peer's uid) is
    qrs.PermissionDenied, also a DaemonUnavailable and a PermissionError;
    a member of the group is served; qrsd keeps serving.  Needs root
    (like tests/integration/access.sh) to run a peer of another uid."""
    if os.geteuid() != 0:
        pytest.fail("must run as root (drops a child to uid 65534)")
    gid = grp.getgrnam("daemon").gr_gid
    tmp = Path(tempfile.mkdtemp(prefix="qrs-access-"))
    tmp.chmod(0o755)  # uid 65534 must reach the socket
    d = Daemon(tmp, extra_yaml='socket: { mode: "0666", group: "" }\n'
                               'access: { group: daemon }\n')
    try:
        d.start()
        got = _connect_as_nobody(d.sock, [])
        names, _, msg = got.partition("|")
        assert names.split()[0] == "PermissionDenied", got
        for base in ("DaemonUnavailable", "PermissionError", "QrsError"):
            assert base in names.split(), got
        assert "QRS_E_PERMISSION" in msg and "Not allowed" in msg, got
        assert "access.group" in msg and d.sock in msg, got
        assert _connect_as_nobody(d.sock, [gid]) == "served"
        c = qrs.Client(d.sock)  # root: still served
        assert 0.0 < c.draw()["u"] < 1.0
        c.close()
    finally:
        d.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    assert isinstance(qrs.errors.error_for(-1022), qrs.PermissionDenied)


def test_close_client_with_prefetch_outstanding(qrsd: Daemon) -> None:
    """Client.close() while a sampler's prefetched draw is on it, then
    the sampler freed: the closed client refuses new calls, and its
    qrs_client lives until the last sampler lets go (freed at close(),
    libqrs cancelled the ticket on freed memory: the release build of
    `pip install` crashed at exit, which test_install catches; this
    debug build did not trip on it even with MALLOC_PERTURB_).  In a
    child, so a crash fails this test rather than ending pytest."""
    code = (
        "import gc, sys, numpy as np, qrs\n"
        "c = qrs.Client(sys.argv[1])\n"
        "s = qrs.Sampler(None, 100)\n"
        "s2 = qrs.Sampler(None, 100)\n"
        "row = np.zeros(100, dtype=np.float32)\n"
        "s.sample_token(c, row); s2.sample_token(c, row)\n"
        "c.close()\n"
        "try:\n"
        "    s.sample_token(c, row)\n"
        "    sys.exit('sampled on a closed client')\n"
        "except ValueError as e:\n"
        "    assert 'closed' in str(e), e\n"
        "c2 = qrs.Client(sys.argv[1])\n"
        "s2.sample_token(c2, row)\n"  # lets go of c: s still holds it
        "del s; gc.collect()\n"  # the last user: c's qrs_client freed
        "s2.sample_token(c2, row)\n"
        "del c, s2; c2.close(); gc.collect()\n"
        "print('ok')\n")
    # freed memory filled with 0xa5: a use after free trips on it
    run = subprocess.run([sys.executable, "-c", code, qrsd.sock],
                         env={**os.environ, "MALLOC_PERTURB_": "165"},
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout == "ok\n", \
        (run.returncode, run.stdout, run.stderr[-2000:])


def test_draw_dicts_carry_the_labels_of_the_records(tmp_path: Path) -> None:
    """Client.draw(): echo, journal_seq, unjournalled and the three draw
    times, as the C records carry them.  A draw through a grpc source
    (qrsd's own compat endpoint) is echo verified, a local one "none";
    with a journal each draw names its entry (a number >= 1), and once the journal
    cannot be written (its directory removed, on_error: label) the draw
    says unjournalled and names none."""
    jdir = tmp_path / "journal"
    jdir.mkdir()
    d = Daemon(tmp_path, extra_yaml=(
        f"state_dir: {tmp_path}\n"
        f"journal: {{ dir: \"{jdir}\", max_bytes: 4096, on_error: label }}\n"
        f"grpc_compat: {{ listen: \"unix:{tmp_path}/compat.sock\", "
        "source: mock }\n"))
    d.conf.write_text(d.conf.read_text().replace(
        "  system: { type: system }\n",
        "  system: { type: system }\n"
        f"  up: {{ type: grpc, target: \"unix:{tmp_path}/compat.sock\", "
        "mode: unary }\n"))
    d.start()
    try:
        c = qrs.Client(d.sock)
        local = c.draw(salt=SALT, step=0, prev_token=-1)
        assert local["echo"] == "none"
        # >= 1: the grpc source's own calls to the endpoint are entries
        assert isinstance(local["journal_seq"], int)
        assert local["journal_seq"] >= 1
        assert local["unjournalled"] is False
        t = (local["received_ns"], local["generated_ns"], local["sent_ns"])
        assert all(isinstance(v, int) and v > 0 for v in t)
        assert t[0] <= t[1] <= t[2]
        up = c.draw(source="up", salt=SALT, step=1, prev_token=3)
        assert up["served_by"] == "up"
        assert up["echo"] == "verified"
        assert up["journal_seq"] > local["journal_seq"]
        shutil.rmtree(jdir)
        for _ in range(2000):
            r = c.draw()
            if r["unjournalled"]:
                break
            assert r["journal_seq"] > 0
        assert r["unjournalled"] is True
        assert r["journal_seq"] is None
        c.close()
    finally:
        d.stop()
