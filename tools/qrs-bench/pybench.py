#!/usr/bin/env python3
"""pybench: what the qrs Python package adds on top of libqrs.

Usage: pybench.py [--build DIR] [--socket PATH] [-n VOCAB] [-t TOKENS]
                  [-r REPS] [-b BATCH] [-s STEPS] [--tp]

Every figure is printed next to its C baseline measured in the same run
on the same rows, sampler configuration and process, and their ratio:

  per token   Sampler.select_u(row, u) from Python vs qrs_sampler_select_u()
              called from C (the call `qrs-bench select` times, case a:
              fixed T=1), and Sampler.sample_token(client, row) vs
              qrs_sampler_sample_token() from C (the draw from qrsd
              prefetched by the step before, as a C engine does it).
              Target: Python <= 1.05 x C + 3 us.
  vLLM apply  qrs.vllm.QRSLogitsProcessor.apply() on BATCH rows (default 64:
              gather, one device-to-host copy, one libqrs batch call on
              the processor's pool (QRS_THREADS, default the CPUs this
              process may use, at most 8: printed), the scatter back;
              records kept) vs BATCH C calls of qrs_sampler_sample_token()
              on the same rows, one after another on one thread.  Printed
              twice: the processor on one thread (what the binding adds to
              the C calls; target <= 1.2 x) and on its pool (target
              <= 1.0 x).
  TP = 2      with --tp: two processes as one tensor-parallel group of
              vLLM's own parallel_state over gloo, each applying the
              processor to the same BATCH rows; rank 0 draws and selects
              and sends the ids to rank 1.  Printed: rank 0's apply, and
              the broadcast of a step's ids alone vs that apply.  Target
              <= 5 %.
  qr-sampler  the reference's own Python pipeline (qr-sampler's
              SamplingPipeline.sample_token(), vendored in
              third_party/qr-sampler) on the same BATCH rows each
              step, vs apply.  Target >= 30 x.

The C baseline is qrs._qrs._bench_c(): a loop of the libqrs calls, timed
in C with the GIL released.  Python and C alternate call by call (per
token; per step for vLLM), who goes first alternating, so load from other
processes hits both alike; medians of the per-call ratios are printed.
The vLLM line is followed by the time of a separate -inf fill of the same
rows (index_fill_), for scale: apply on CPU tensors no longer does it
(libqrs writes each row's one-hot in place right after selecting it,
qrs_sample_batch_one_hot(), while the row is in cache); on a GPU apply
fills on the device.  Rows are LM-like (12 - 1.5 ln r + 0.3 N(0,1) over
ranks shuffled across the ids, as qrs-bench select's lm row), float32, of
151,936 entries (Qwen2) by default.

--build DIR: the meson build with the extension and qrsd (default:
./build beside tools/); without --socket a qrsd is started from it on a
mock source in a temporary directory and stopped at the end.  Needs numpy,
and torch + vllm for the vLLM line (it is skipped, saying so, without
them).  Exit status 0 when every figure was measured (targets missed are
reported, not failures), 1 on an error.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
sys.path.insert(0, str(ROOT / "tests" / "python"))

from qrsdev import qrs_processor, tp_group, wait_listening  # noqa: E402


def _import_qrs(build: Path):
    try:
        import qrs  # an installed package
        return qrs
    except ImportError:
        pass
    ext = build / "client" / "python"
    if not any(ext.glob("_qrs*.so")):
        sys.exit(f"pybench: no qrs package installed and no extension in "
                 f"{ext} (build with -Dpython_exe=this Python, or pip "
                 f"install the repository)")
    os.environ["QRS_PYTHON_EXT_DIR"] = str(ext)
    sys.path.insert(0, str(ROOT / "client" / "python"))
    import qrs
    return qrs


class Qrsd:
    """A qrsd of the build on a mock source, in a temporary directory."""

    def __init__(self, binary: Path) -> None:
        if not binary.is_file():
            sys.exit(f"pybench: no qrsd at {binary} (--build, or --socket)")
        self.dir = Path(tempfile.mkdtemp(prefix="qrs-pybench-"))
        self.sock = str(self.dir / "qrsd.sock")
        conf = self.dir / "qrsd.yaml"
        conf.write_text("allow_test_sources: true\ndefault_source: mock\n"
                        "status_file: \"\"\nstate_dir: " + str(self.dir) +
                        "\nsources:\n  mock: { type: mock, seed: 7 }\n"
                        # the C baseline's one client holds every row's
                        # prefetched draw (-b up to 1024)
                        "limits: { max_inflight_per_connection: 1024 }\n")
        self.log = open(self.dir / "qrsd.log", "wb")
        self.proc = subprocess.Popen(
            [str(binary), "--socket", self.sock, "-c", str(conf)],
            stdout=self.log, stderr=self.log)
        why = wait_listening(self.proc, self.sock, self.dir / "qrsd.log")
        if why:
            self.stop()
            sys.exit("pybench: " + why)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def lm_rows(np, n_rows: int, vocab: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    r = np.arange(1, vocab + 1, dtype=np.float64)
    out = np.empty((n_rows, vocab), dtype=np.float32)
    for i in range(n_rows):
        row = 12.0 - 1.5 * np.log(r) + 0.3 * rng.standard_normal(vocab)
        out[i] = rng.permutation(row)
    return out


def _line(name: str, py: float, c: float, ratio: float, target: str,
          ok: bool) -> None:
    print(f"{name:<44} {py:9.1f} {c:9.1f} {py - c:+8.2f} {ratio:7.3f}  "
          f"{target:<16} {'ok' if ok else 'MISSED'}")


def per_token(qrs, np, client, rows, reps: int, tokens: int) -> None:
    """Python and C alternate token by token (who goes first alternating)
    on the same row, so load from other processes hits both alike; the
    medians are over every token of every repetition."""
    vocab = rows.shape[1]
    cfg = qrs.make_config({"fixed_temperature": 1.0}, env=False)
    bench_c = qrs._qrs._bench_c
    one = [rows[k:k + 1] for k in range(len(rows))]  # 1-row views
    lines = []
    s = qrs.Sampler(cfg, vocab)
    sc = [s]
    pairs = []
    for rep in range(reps + 1):
        for i in range(tokens):
            k = i % len(rows)
            row, u = rows[k], (i + 0.5) / tokens
            for turn in ((0, 1) if (rep + i) % 2 else (1, 0)):
                if turn:
                    tc = bench_c(one[k], sc, u=[u])
                else:
                    t0 = time.perf_counter()
                    s.select_u(row, u)
                    tp = time.perf_counter() - t0
            if rep:  # the first is a warm-up
                pairs.append((tp * 1e6, tc * 1e6))
    lines.append(("select_u (no draw), per token", pairs))
    # through qrsd: a sampler per side (each its own chain and prefetch).
    # Who goes first alternates per repetition, not per token: each call
    # prefetches its side's next draw, and two calls of one side back to
    # back (C P | P C) would make the second wait for a draw just asked
    # for, one side in every pair.
    sp = qrs.Sampler(cfg, vocab)
    sc = [qrs.Sampler(cfg, vocab)]
    pairs = []
    for rep in range(reps + 1):
        for i in range(tokens):
            k = i % len(rows)
            row = rows[k]
            for turn in ((0, 1) if rep % 2 else (1, 0)):
                if turn:
                    tc = bench_c(one[k], sc, client=client)
                else:
                    t0 = time.perf_counter()
                    sp.sample_token(client, row)
                    tp = time.perf_counter() - t0
            if rep:
                pairs.append((tp * 1e6, tc * 1e6))
    lines.append(("sample_token (qrsd draw), per token", pairs))
    for name, res in lines:
        py = statistics.median(p for p, _ in res)
        c = statistics.median(c for _, c in res)
        ratio = statistics.median(p / c for p, c in res)
        over = statistics.median(p - 1.05 * c for p, c in res)
        _line(name, py, c, ratio, "<= 1.05x + 3 us", over <= 3.0)


def batch_ctx(batch: int):
    """vLLM's layout of a step of batch requests, one row each, slot i in
    row i."""
    import numpy as np
    import torch
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext

    idx = list(range(batch))
    return LogitsContext(
        expanded_idx_mapping=torch.tensor(idx, dtype=torch.int32),
        idx_mapping=torch.tensor(idx), idx_mapping_np=np.array(idx),
        expanded_local_pos=torch.zeros(batch, dtype=torch.int32),
        input_ids=torch.zeros(batch, dtype=torch.long),
        pos=torch.zeros(batch, dtype=torch.long),
        seq_lens_upper_bound_np=np.zeros(batch, dtype=np.int32))


def vllm_apply(qrs, np, client, sock: str, rows, batch: int,
               steps: int) -> bool:
    try:
        import torch
        from vllm import SamplingParams
    except ImportError as e:
        print(f"vLLM apply: not measured (no torch/vllm here: {e})")
        return False
    vocab = rows.shape[1]
    os.environ["QRS_SOCKET"] = sock
    p = qrs_processor(None, batch, vocab)
    # the same processor on one thread: the binding's own cost
    saved = os.environ.get("QRS_THREADS")
    os.environ["QRS_THREADS"] = "1"
    try:
        p1 = qrs_processor(None, batch, vocab)
    finally:
        if saved is None:
            del os.environ["QRS_THREADS"]
        else:
            os.environ["QRS_THREADS"] = saved
    for q in (p, p1):
        for i in range(batch):
            assert q.add_request(i, SamplingParams(max_tokens=steps + 2))
        q.apply_staged_writes()
    ctx = batch_ctx(batch)
    src = np.ascontiguousarray(rows[np.arange(batch) % len(rows)])
    template = torch.from_numpy(src.copy())
    base = type(p)._default()
    samplers = [qrs.Sampler(base, vocab) for _ in range(batch)]
    for s in samplers:
        s.prefetch(client)
    ref = _qr_sampler_pipeline(vocab)
    refs = []
    res = []
    fills = []
    fill_idx = torch.arange(batch)
    res1 = []
    for step in range(steps + 1):
        x = template.clone()

        def py_run() -> float:
            t0 = time.perf_counter()
            p.apply(x, ctx)
            return time.perf_counter() - t0

        x1 = template.clone()
        t0 = time.perf_counter()
        p1.apply(x1, ctx)
        t1 = time.perf_counter() - t0
        del x1

        def c_run() -> float:
            return qrs._qrs._bench_c(src, samplers, client=client)

        if step % 2:
            tc = c_run()
            tp = py_run()
        else:
            tp = py_run()
            tc = c_run()
        y = template.clone()
        t0 = time.perf_counter()
        y.index_fill_(0, fill_idx, float("-inf"))  # the scatter's floor
        tf = time.perf_counter() - t0
        tr = 0.0
        if ref is not None:       # the same rows through qr-sampler
            t0 = time.perf_counter()
            for i in range(batch):
                ref.sample_token(src[i])
            tr = time.perf_counter() - t0
        if step:
            res.append((tp * 1e6, tc * 1e6))
            res1.append((t1 * 1e6, tc * 1e6))
            fills.append(tf * 1e6)
            refs.append((tr * 1e6, tp * 1e6))
        # what vLLM does between steps: the forward pass (the prefetched
        # draws arrive meanwhile); here a pause of the same order
        time.sleep(0.002)
    assert len(p.records(0)) == steps + 1
    # one thread: what the binding adds to the C calls; the pool: what a
    # server sees, which must not be slower than the C calls in a row
    for q, r, target in ((p1, res1, 1.2), (p, res, 1.0)):
        a = statistics.median(v for v, _ in r)
        c = statistics.median(w for _, w in r)
        ratio = statistics.median(v / w for v, w in r)
        _line(f"vLLM apply, {batch} rows, {q.pool.threads} thr (vs {batch} "
              "C calls)", a, c, ratio, f"<= {target}x", ratio <= target)
    py = statistics.median(v for v, _ in res)
    c = statistics.median(w for _, w in res)
    f = statistics.median(fills)
    print(f"{'  a separate -inf fill of the rows (scale)':<44} {f:9.1f} "
          f"{'':>9} {'':>8} {f / c:7.3f}  (x the C calls; apply writes the "
          f"one-hot in place instead)")
    if ref is None:
        return False
    q = statistics.median(a for a, _ in refs)
    ratio = statistics.median(a / b for a, b in refs)
    print(f"{f'qr-sampler pipeline, {batch} rows (vs apply)':<44} {q:9.1f} "
          f"{py:9.1f} {q - py:+8.0f} {ratio:7.2f}x {'>= 30x':<15} "
          f"{'ok' if ratio >= 30 else 'MISSED'}")
    print(f"  (qr-sampler {_qr_sampler_version()}: SamplingPipeline."
          "sample_token() per row, the same defaults, entropy from "
          "os.urandom in-process;\n   apply's draws come from qrsd over "
          "its socket)")
    return True


def tp_rank(rank: int, port: int, vocab: int, batch: int,
            steps: int) -> None:
    """One rank of the --tp figure (run by tp_broadcast() in a process of
    its own): prints its apply and broadcast times as JSON."""
    import json

    import numpy as np
    import torch
    from vllm import SamplingParams
    from vllm.distributed import parallel_state as ps

    with tp_group(rank, port) as config:
        p = qrs_processor(config, batch, vocab)
        for i in range(batch):
            p.add_request(i, SamplingParams(max_tokens=steps + 2))
        ctx = batch_ctx(batch)
        template = torch.from_numpy(np.ascontiguousarray(
            lm_rows(np, batch, vocab)))
        group = ps.get_tp_group()
        apply_s, bcast_s = [], []
        for step in range(steps + 1):
            x = template.clone()
            group.barrier()
            t0 = time.perf_counter()
            p.apply(x, ctx)
            t1 = time.perf_counter()
            ids = torch.zeros(batch, dtype=torch.long)
            group.barrier()
            t2 = time.perf_counter()
            group.broadcast(ids, src=0)
            t3 = time.perf_counter()
            if step:
                apply_s.append(t1 - t0)
                bcast_s.append(t3 - t2)
            time.sleep(0.002)     # the forward pass
        print(json.dumps({"rank": rank, "samples": p.samples,
                          "apply": apply_s, "broadcast": bcast_s}))


def tp_broadcast(build: Path, sock: str, vocab: int, batch: int,
                 steps: int) -> bool:
    """--tp: the broadcast's added cost per step, vs one apply."""
    import json

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "QRS_SOCKET": sock, "VLLM_TARGET_DEVICE": "cpu"}
    procs = [subprocess.Popen(
        [sys.executable, __file__, "--build", str(build), "--tp-rank",
         f"{r}:{port}", "-n", str(vocab), "-b", str(batch), "-s",
         str(steps)], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    out = []
    for p in procs:
        o, e = p.communicate(timeout=1800)
        if p.returncode != 0:
            print(f"TP = 2: not measured (rank exited {p.returncode}: "
                  f"{e.strip().splitlines()[-1:]})")
            return False
        out.append(json.loads(o.strip().splitlines()[-1]))
    r0 = out[0]
    a = statistics.median(r0["apply"]) * 1e6
    b = statistics.median(r0["broadcast"]) * 1e6
    ratio = statistics.median(x / y for x, y in zip(r0["broadcast"],
                                                    r0["apply"]))
    print(f"{f'TP = 2 (gloo): apply on rank 0, {batch} rows':<44} {a:9.1f}")
    print(f"{'  the ids broadcast alone (vs that apply)':<44} {b:9.1f} "
          f"{'':>9} {'':>8} {ratio:7.3f}  {'<= 0.05':<15} "
          f"{'ok' if ratio <= 0.05 else 'MISSED'}")
    r1 = statistics.median(out[1]["apply"]) * 1e6
    print(f"{'  apply on rank 1 (writes rank 0 ids)':<44} {r1:9.1f}")
    return True


def _qr_sampler_version() -> str:
    import qr_sampler
    return qr_sampler.__version__


def _qr_sampler_pipeline(vocab: int):
    """qr-sampler's own Python pipeline (the reference; vendored in
    third_party/qr-sampler, installed by ./setup.sh python) with its
    defaults, which are libqrs's, and its in-process system entropy."""
    try:
        from qr_sampler import QRSamplerConfig, build_pipeline
    except ImportError as e:
        print(f"qr-sampler: not measured ({e}; ./setup.sh python installs "
              "the vendored copy)")
        return None
    cfg = QRSamplerConfig(entropy_source_type="system",
                          fallback_mode="error")
    return build_pipeline(cfg, vocab)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[2:]))
    ap.add_argument("--build", type=Path, default=ROOT / "build",
                    help="the meson build (default: %(default)s)")
    ap.add_argument("--socket", help="an existing qrsd's socket (default: "
                    "start the build's qrsd on a mock source)")
    ap.add_argument("-n", "--vocab", type=int, default=151936,
                    help="logits per row (default %(default)s)")
    ap.add_argument("-t", "--tokens", type=int, default=40,
                    help="tokens per repetition (default %(default)s)")
    ap.add_argument("-r", "--reps", type=int, default=9,
                    help="repetitions; medians (default %(default)s)")
    ap.add_argument("-b", "--batch", type=int, default=64,
                    help="rows per vLLM apply (default %(default)s)")
    ap.add_argument("-s", "--steps", type=int, default=15,
                    help="vLLM steps; medians (default %(default)s)")
    ap.add_argument("--tp", action="store_true",
                    help="also the TP = 2 broadcast figure (two processes)")
    ap.add_argument("--tp-rank", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.tp_rank:                 # one rank of --tp, in its own process
        _import_qrs(a.build)
        rank, port = (int(v) for v in a.tp_rank.split(":"))
        tp_rank(rank, port, a.vocab, a.batch, a.steps)
        return 0
    if min(a.vocab, a.tokens, a.reps, a.batch, a.steps) < 1:
        ap.error("-n, -t, -r, -b and -s must be positive")
    try:
        import numpy as np
    except ImportError:
        sys.exit("pybench: needs numpy")
    qrs = _import_qrs(a.build)
    daemon = None if a.socket else Qrsd(a.build / "daemon" / "qrsd")
    sock = a.socket or daemon.sock
    try:
        client = qrs.Client(sock)
        rows = lm_rows(np, 4, a.vocab)
        print(f"pybench: {a.vocab} logits per row (float32, LM-like), "
              f"{a.tokens} tokens x {a.reps} repetitions, vLLM {a.batch} "
              f"rows x {a.steps} steps; medians; qrsd at {sock}")
        print(f"{'':<44} {'Python':>9} {'C':>9} {'+us':>8} {'ratio':>7}  "
              f"{'target':<16}")
        print(f"{'(us)':<44}")
        per_token(qrs, np, client, rows, a.reps, a.tokens)
        measured = vllm_apply(qrs, np, client, sock, rows, a.batch, a.steps)
        if a.tp:
            measured = tp_broadcast(a.build, sock, a.vocab, a.batch,
                                    a.steps) and measured
        print("C: qrs._qrs._bench_c(), one libqrs call per row timed in C "
              "(GIL released); Python: the\npackage's call timed with "
              "perf_counter around it; ratio: median of the "
              "per-call ratios.")
        client.close()
        return 0 if measured else 1
    except qrs.QrsError as e:
        print(f"pybench: {e}", file=sys.stderr)
        return 1
    finally:
        if daemon:
            daemon.stop()


if __name__ == "__main__":
    sys.exit(main())
