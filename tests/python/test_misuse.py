"""A caller's misuse of the binding gets a typed error, never a crash.
What could crash runs in a child, so that a crash fails its test instead
of ending pytest."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import qrs
from conftest import Daemon

BAD_U = [math.nan, math.inf, -math.inf, -0.5, 1.5]


def _child(code: str, *args: str) -> None:
    """Run code in a child Python that must print "ok" and exit 0; freed
    memory is filled with 0xa5 there, so a use after free trips on it."""
    run = subprocess.run([sys.executable, "-c", code, *args],
                         env={**os.environ, "MALLOC_PERTURB_": "165"},
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout == "ok\n", \
        (run.returncode, run.stdout[-2000:], run.stderr[-2000:])


def test_close_and_reinit_during_calls_on_other_threads(qrsd: Daemon) -> None:
    """Threads call every method that leaves the GIL with one Client
    (draw, Sampler.sample_token, Pool.sample; status and health in rounds
    of their own: libqrs reads a status reply after letting go of the
    client's lock, so a draw meanwhile on the same client overwrites it)
    while another closes it and another re-opens it with __init__(),
    round after round: each call either completes or raises the "closed"
    ValueError (the client was closed before it began)."""
    code = r"""
import random, sys, threading, time
import numpy as np, qrs

sock = sys.argv[1]
row = np.zeros(100, dtype=np.float32)
block = np.zeros((3, 100), dtype=np.float32)
failures = []

def calls(c, kind, stop):
    samplers = [qrs.Sampler(None, 100) for _ in range(3)]
    pool = qrs.Pool(2)
    while not stop.is_set():
        try:
            if kind == 0:
                c.draw()
            elif kind == 1:
                samplers[0].sample_token(c, row)
            elif kind == 2:
                _, stats, _ = pool.sample(block, samplers, client=c)
                assert stats == [0, 0, 0], stats
            elif kind == 3:
                _, stats, _ = pool.sample(block, samplers, client=[c] * 3)
                assert stats == [0, 0, 0], stats
            else:
                c.status()
                c.health()
        except ValueError as e:
            if str(e) != "the client is closed":
                failures.append(repr(e))
            time.sleep(0.0002)
        except BaseException as e:
            failures.append(repr(e))

def closer(c, stop):
    while not stop.is_set():
        time.sleep(random.random() * 0.005)
        c.close()

def reopener(c, stop):
    while not stop.is_set():
        time.sleep(random.random() * 0.001)
        try:
            c.__init__(sock)
        except BaseException as e:
            failures.append(repr(e))

for rnd in range(30):
    c = qrs.Client(sock)
    stop = threading.Event()
    ts = [threading.Thread(target=calls, args=(c, k, stop))
          for k in ([4] if rnd % 3 == 2 else range(4))]
    ts.append(threading.Thread(target=closer, args=(c, stop)))
    ts.append(threading.Thread(target=reopener, args=(c, stop)))
    for t in ts:
        t.start()
    time.sleep(0.1)
    stop.set()
    for t in ts:
        t.join()
    c.close()
    try:
        c.draw()
        failures.append("drew on a closed client")
    except ValueError as e:
        assert str(e) == "the client is closed", e
assert not failures, failures[:5]
print("ok")
"""
    _child(code, qrsd.sock)


def test_pool_shared_by_threads() -> None:
    """Threads sampling batches of changing sizes on one Pool: a call
    while another thread's is on the Pool raises RuntimeError (its row
    table is the Pool's), the others sample every row."""
    code = r"""
import threading
import numpy as np, qrs

pool = qrs.Pool(2)
failures = []
busy = []

def run(k):
    for it in range(1000):
        n = 1 + (it * 7 + k) % 16
        block = np.zeros((n, 1000), dtype=np.float32)
        samplers = [qrs.Sampler(None, 1000) for _ in range(n)]
        try:
            _, stats, _ = pool.sample(block, samplers, u=[0.5] * n)
            assert stats == [0] * n, stats
        except RuntimeError as e:
            if "another thread" not in str(e):
                failures.append(repr(e))
            busy.append(k)
        except BaseException as e:
            failures.append(repr(e))

ts = [threading.Thread(target=run, args=(k,)) for k in range(3)]
for t in ts:
    t.start()
for t in ts:
    t.join()
assert not failures, failures[:5]
print("ok")
"""
    _child(code)


def test_u_outside_0_1_is_a_typed_error() -> None:
    """select_u and Pool.sample refuse a u that is NaN, infinite or
    outside [0, 1] (URangeError, a ValueError), before the row is read:
    even a bypass sampler refuses it; 0 and 1 select a token."""
    row = np.linspace(0.0, -3.0, 100, dtype=np.float32)
    block = np.stack([row, row])
    s = qrs.Sampler(None, 100)
    bypass = qrs.Sampler(qrs.make_config({"bypass": True}, env=False), 100)
    pool = qrs.Pool(2)
    for u in BAD_U:
        for sampler in (s, bypass):
            with pytest.raises(qrs.URangeError) as ei:
                sampler.select_u(row, u)
            assert isinstance(ei.value, ValueError)
            assert ei.value.code == -1106 and ei.value.name == "QRS_E_U_RANGE"
        with pytest.raises(qrs.URangeError, match=r"u\[1\]"):
            pool.sample(block, [s, qrs.Sampler(None, 100)], u=[0.5, u])
        with pytest.raises(qrs.URangeError):
            pool.sample(block, [s, bypass], u=[u, 0.5], one_hot=True)
        with pytest.raises(qrs.URangeError):
            qrs._qrs._bench_c(block, [s, bypass], u=[0.5, u])
    assert np.array_equal(block[0], row)          # nothing written
    assert isinstance(qrs.errors.error_for(-1106), qrs.URangeError)
    lo, hi = s.select_u(row, 0.0), s.select_u(row, 1.0)
    assert 0 <= lo < hi < 100
    toks, stats, _ = pool.sample(block, [s, qrs.Sampler(None, 100)],
                                 u=[0.0, 1.0])
    assert toks == [lo, hi] and stats == [0, 0]


def test_one_hot_into_read_only_memory_is_refused(tmp_path: Path) -> None:
    """one_hot=True (and force_one_hot) on a torch tensor over a file
    mapped read-only (PROT_READ: a write would be SIGSEGV) is a
    ValueError naming the read-only rows; over a copy-on-write mapping
    (np.memmap mode "c") it is written, and the file is not."""
    code = r"""
import sys, warnings
import numpy as np, torch, qrs

path = sys.argv[1]
rows = np.stack([np.linspace(0.0, -3.0, 100, dtype=np.float32)] * 2)
rows.tofile(path)
ro = np.memmap(path, dtype=np.float32, mode="r", shape=(2, 100))
with warnings.catch_warnings():
    warnings.simplefilter("ignore")      # torch: "not writable"
    t = torch.from_numpy(ro)
pool = qrs.Pool(2)
samplers = [qrs.Sampler(None, 100) for _ in range(2)]
for call in (lambda: pool.sample(t, samplers, u=[0.5, 0.5], one_hot=True),
             lambda: qrs.force_one_hot(t[1], 3)):
    try:
        call()
        sys.exit("wrote into read-only rows")
    except ValueError as e:
        assert "read-only" in str(e), e
toks, stats, _ = pool.sample(t, samplers, u=[0.5, 0.5])   # reading is fine
assert stats == [0, 0], stats
cow = torch.from_numpy(np.memmap(path, dtype=np.float32, mode="c",
                                 shape=(2, 100)))
toks, stats, _ = pool.sample(cow, samplers, u=[0.5, 0.5], one_hot=True)
assert stats == [0, 0] and float(cow[0, toks[0]]) == 0.0, (toks, stats)
assert bool(torch.isneginf(cow[1, :toks[1]]).all())
assert np.array_equal(np.fromfile(path, dtype=np.float32).reshape(2, 100),
                      rows)
print("ok")
"""
    _child(code, str(tmp_path / "rows.f32"))


def test_read_only_dlpack_flag_is_refused() -> None:
    """A DLPack 1.0 producer that marks its tensor read-only
    (torch's __dlpack__(read_only=True)) gets no one-hot written."""

    class ReadOnly:
        def __init__(self, t: torch.Tensor) -> None:
            self.t = t

        def __dlpack__(self, **kw):
            return self.t.__dlpack__(read_only=True, **kw)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    t = torch.stack([torch.linspace(0.0, -3.0, 100)] * 2)
    before = t.clone()
    with pytest.raises(ValueError, match="read-only"):
        qrs.Pool(1).sample(ReadOnly(t), [qrs.Sampler(None, 100)] * 2,
                           u=[0.5, 0.5], one_hot=True)
    assert torch.equal(t, before)
    toks, stats, _ = qrs.Pool(1).sample(
        ReadOnly(t), [qrs.Sampler(None, 100) for _ in range(2)],
        u=[0.5, 0.5])
    assert stats == [0, 0]
