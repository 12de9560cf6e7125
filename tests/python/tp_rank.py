"""One rank of a two-rank tensor-parallel group, set up the way vLLM sets
up its groups (vLLM's own parallel_state over gloo on the CPU), driving
qrs.vllm's processor through a scripted batch: every rank gets the same
logits, as the ranks of vLLM's last pipeline stage do.

    python tp_rank.py RANK PORT OUT.json   (QRS_SOCKET: the qrsd)

Writes what the rank saw: its role, whether it holds connections to
qrsd, the token of each sampled row per step (the one-hot's position),
the untouched rows, its records and the timings of its apply calls."""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from vllm import SamplingParams  # noqa: E402
from vllm.config import VllmConfig  # noqa: E402
from vllm.v1.worker.gpu.sample.logits_processor import (  # noqa: E402
    LogitsContext)

import qrs.vllm  # noqa: E402
from qrsdev import qrs_processor, tp_group  # noqa: E402

V = 1000
SLOTS = 6
STEPS = 4


def main() -> None:
    rank, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    with tp_group(rank, port) as config:
        run(rank, config, out)


def run(rank: int, config: VllmConfig, out: str) -> None:
    p = qrs_processor(config, SLOTS, V)
    for slot in range(SLOTS):
        args = {"qr_bypass": True} if slot == 3 else {"qr_top_k": 50}
        p.add_request(slot, SamplingParams(max_tokens=8, extra_args=args))
    p.apply_staged_writes()
    slots = [5, 4, 3, 2, 1, 0]
    tokens, untouched, secs = [], [], []
    for step in range(STEPS):
        g = torch.Generator().manual_seed(100 + step)
        x = torch.randn((len(slots), V), generator=g) * 3
        before = x.clone()
        reqs = np.array(slots)
        ctx = LogitsContext(
            expanded_idx_mapping=torch.tensor(slots, dtype=torch.int32),
            idx_mapping=torch.tensor(slots), idx_mapping_np=reqs,
            expanded_local_pos=torch.zeros(len(slots), dtype=torch.int32),
            input_ids=torch.zeros(len(slots), dtype=torch.long),
            pos=torch.zeros(len(slots), dtype=torch.long),
            seq_lens_upper_bound_np=np.zeros(len(slots), dtype=np.int32))
        t = time.perf_counter()
        p.apply(x, ctx)
        secs.append(time.perf_counter() - t)
        tokens.append([int(torch.argmax(x[r])) if slots[r] != 3 else None
                       for r in range(len(slots))])
        untouched.append(bool(torch.equal(x[slots.index(3)],
                                          before[slots.index(3)])))
    json.dump({"rank": rank, "samples": p.samples,
               "group": p.group is not None,
               "connected": p.client is not None or bool(p._clients),
               "tokens": tokens, "untouched": untouched,
               "records": {s: p.records(s) for s in range(SLOTS)},
               "selections": dict(getattr(p, "selections", {})),
               "apply_s": secs}, open(out, "w"))


if __name__ == "__main__":
    main()
