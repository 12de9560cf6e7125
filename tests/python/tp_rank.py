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
from vllm.config import VllmConfig, set_current_vllm_config  # noqa: E402
from vllm.distributed import parallel_state as ps  # noqa: E402
from vllm.platforms.cpu import CpuPlatform  # noqa: E402
from vllm.v1.worker.gpu.sample.logits_processor import (  # noqa: E402
    LogitsContext, build_custom_logits_processors)

import qrs.vllm  # noqa: E402

V = 1000
SLOTS = 6
STEPS = 4


def main() -> None:
    rank, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    # vLLM's CPU platform asks for triton-cpu here; its groups need none
    CpuPlatform.check_and_update_config = classmethod(lambda cls, c: None)
    config = VllmConfig()
    with set_current_vllm_config(config):
        ps.init_distributed_environment(
            world_size=2, rank=rank, local_rank=rank, backend="gloo",
            distributed_init_method=f"tcp://127.0.0.1:{port}")
        ps.initialize_model_parallel(tensor_model_parallel_size=2)
        run(rank, config, out)
        ps.destroy_model_parallel()
        ps.destroy_distributed_environment()


def run(rank: int, config: VllmConfig, out: str) -> None:
    from types import SimpleNamespace
    states = SimpleNamespace(device=torch.device("cpu"), max_num_reqs=SLOTS,
                             vocab_size=V, all_token_ids=None,
                             prompt_len=None, prefill_len=None,
                             total_len=None)
    (p,) = build_custom_logits_processors(config, states, False,
                                          ["qrs.vllm:QRSLogitsProcessor"])
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
               "apply_s": secs}, open(out, "w"))


if __name__ == "__main__":
    main()
