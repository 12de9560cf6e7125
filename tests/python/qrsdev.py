"""What the Python tests and tools/qrs-bench/pybench.py share: waiting
for a qrsd they started, and one rank of a two-rank tensor-parallel group
of vLLM's own parallel_state on the CPU, with qrs.vllm's processor."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def wait_listening(proc: subprocess.Popen[bytes], sock: str, log: Path,
                   seconds: float = 10) -> str | None:
    """Wait until the qrsd proc accepts a client on sock: None, or why it
    did not (with its log, the file log, when it exited)."""
    deadline = time.monotonic() + seconds
    while True:
        if proc.poll() is not None:
            return "qrsd exited: " + log.read_text()
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(sock)
            return None
        except OSError:
            if time.monotonic() > deadline:
                return f"qrsd did not listen within {seconds:g} s"
            time.sleep(0.02)


@contextmanager
def tp_group(rank: int, port: int) -> Iterator[Any]:
    """This process as rank 0 or 1 of a two-rank tensor-parallel group set
    up the way vLLM sets up its groups (its parallel_state over gloo, on
    127.0.0.1:port); yields vLLM's config, current within."""
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state as ps
    from vllm.platforms.cpu import CpuPlatform

    # vLLM's CPU platform asks for triton-cpu here; its groups need none
    CpuPlatform.check_and_update_config = classmethod(lambda cls, c: None)
    config = VllmConfig()
    with set_current_vllm_config(config):
        ps.init_distributed_environment(
            world_size=2, rank=rank, local_rank=rank, backend="gloo",
            distributed_init_method=f"tcp://127.0.0.1:{port}")
        ps.initialize_model_parallel(tensor_model_parallel_size=2)
        yield config
        ps.destroy_model_parallel()
        ps.destroy_distributed_environment()


def qrs_processor(config: Any, slots: int, vocab: int) -> Any:
    """qrs.vllm's logits processor as vLLM builds it from config, for
    slots requests of vocab logits on the CPU."""
    from types import SimpleNamespace

    import torch
    from vllm.v1.worker.gpu.sample.logits_processor import (
        build_custom_logits_processors)

    states = SimpleNamespace(device=torch.device("cpu"), max_num_reqs=slots,
                             vocab_size=vocab, all_token_ids=None,
                             prompt_len=None, prefill_len=None,
                             total_len=None)
    (p,) = build_custom_logits_processors(config, states, False,
                                          ["qrs.vllm:QRSLogitsProcessor"])
    return p
