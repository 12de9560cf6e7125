"""A vLLM Model Runner V2 logits processor that samples through libqrs.

    vllm serve MODEL --logits-processors qrs.vllm:QRSLogitsProcessor

(or installed: the entry point ``qrs`` of group ``vllm.logits_processors``
loads it for every model).  Per-request configuration comes from
``SamplingParams.extra_args`` with the reference's ``qr_*`` names
(``{"qr_top_k": 40, "qr_temperature_strategy": "edt"}``), on top of the
QR_* environment of the worker.  qrsd is reached at $QRS_SOCKET (else
/run/qrsd/qrsd.sock), as the C client.  The rows of a step are sampled on
$QRS_THREADS threads (default: the CPUs this process may run on, at most
8; 1 samples on vLLM's own thread).  Slots are spread over as many
connections to qrsd as its in-flight limit per connection needs
(max_inflight_per_connection, 64 by default: 4 connections for vLLM's
256 sequences), so every slot's next draw can be prefetched.

Each step, ``apply`` gathers the rows of the requests it owns (one
device-to-host copy into a reused pinned buffer), samples them in one
libqrs batch call per speculative position (one call without speculative
decoding), and writes each sampled row back as -inf except 0 at the chosen
id.  Rows of declined (bypass) requests are untouched.  Each request has a
fresh libqrs sampler state and salt; its first draw is begun in
``add_request`` and each next draw right after the token, so draws
overlap the forward pass.  Records: ``records(req_idx)``.

Import-light like vLLM's interface module: torch is imported only by the
worker-side methods; ``validate_params`` (the frontend) needs only the
libqrs extension and qrsd's source list."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from vllm.v1.worker.gpu.sample.logits_processor.interface import (
    LogitsContext, LogitsProcessor, LogitsProcRequestState)

from . import _qrs
from ._config import _text, connections, make_config, pool_threads
from .errors import QrsError, error_for

if TYPE_CHECKING:
    import torch
    from vllm.config import VllmConfig
    from vllm.sampling_params import SamplingParams

log = logging.getLogger(__name__)

#: How long validate_params trusts qrsd's source list.
SOURCES_TTL_S = 10.0

_sources_lock = threading.Lock()
_sources_cache: tuple[float, frozenset[str]] | None = None


def _served_sources() -> frozenset[str]:
    """Names qrsd serves (its declared sources and the built-in system and
    mock when it allows test sources), cached for SOURCES_TTL_S."""
    global _sources_cache
    with _sources_lock:
        now = time.monotonic()
        if _sources_cache and now - _sources_cache[0] < SOURCES_TTL_S:
            return _sources_cache[1]
        c = _qrs.Client(timeout_ms=2000)
        try:
            names = {s["name"] for s in c.status()["sources"]}
            names.add("system")
            if c.server_info()["test_sources_allowed"]:
                names.add("mock")
        finally:
            c.close()
        _sources_cache = (now, frozenset(names))
        return _sources_cache[1]


def qr_args(sampling_params: Any) -> dict[str, Any]:
    """The ``qr_*`` entries of a request's extra_args."""
    extra = getattr(sampling_params, "extra_args", None) or {}
    if not isinstance(extra, Mapping):
        raise ValueError("extra_args must be a mapping")
    return {k: v for k, v in extra.items()
            if isinstance(k, str) and k.startswith("qr_")}


def request_config(base: _qrs.Config, args: Mapping[str, Any]) -> _qrs.Config:
    """base with a request's qr_* arguments; ValueError naming the key."""
    cfg = base.copy()
    for k, v in args.items():
        try:
            cfg.set_arg(k, _text(v))
        except QrsError as e:
            raise ValueError(f"{k}: {e}") from e
    try:
        cfg.validate()
    except QrsError as e:
        raise ValueError(f"qr_* arguments: {e}") from e
    return cfg


class QRSLogitsProcessor(LogitsProcessor):
    """See the module docstring."""

    _default_cfg: _qrs.Config | None = None

    @classmethod
    def _default(cls) -> _qrs.Config:
        if cls._default_cfg is None:
            cls._default_cfg = make_config()
        return cls._default_cfg

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        args = qr_args(sampling_params)
        if not args:
            return
        try:
            base = cls._default()
        except QrsError as e:
            raise ValueError(f"the worker's QR_* environment: {e}") from e
        cfg = request_config(base, args)
        if "qr_entropy_source_type" in args:
            src = cfg.get("entropy_source_type")
            try:
                served = _served_sources()
            except QrsError as e:
                raise ValueError(f"qr_entropy_source_type: cannot ask qrsd "
                                 f"which sources it serves: {e}") from e
            if src not in served:
                raise ValueError(f"qr_entropy_source_type: qrsd serves no "
                                 f"source {src!r} (it serves "
                                 f"{', '.join(sorted(served))})")

    def __init__(self, vllm_config: VllmConfig,
                 req_states: LogitsProcRequestState) -> None:
        import torch

        self.vocab_size = int(req_states.vocab_size)
        self.device = req_states.device
        self.max_num_reqs = int(req_states.max_num_reqs)
        self.client = _qrs.Client()
        # enough connections that every slot's draw can be prefetched
        self._clients, self._per_client = connections(self.client,
                                                      self.max_num_reqs)
        self.base = make_config()
        self.pool = _qrs.Pool(pool_threads())
        self.keep_records = True
        # per slot: the sampler (None: declined or free) and records
        self._samplers: list[_qrs.Sampler | None] = [None] * self.max_num_reqs
        self._hash: list[str | None] = [None] * self.max_num_reqs
        self._records: list[list[dict[str, Any]]] = [
            [] for _ in range(self.max_num_reqs)]
        pin = torch.device(self.device).type == "cuda"
        self._host = torch.empty((0, self.vocab_size), dtype=torch.float32,
                                 pin_memory=pin)
        self._pin = pin
        log.info("qrs: V2 logits processor on %s (vocabulary %d, %d slots,"
                 " %d sampling threads, %d connections to qrsd at %s)",
                 self.device, self.vocab_size, self.max_num_reqs,
                 self.pool.threads, len(self._clients),
                 self.client.socket_path)

    def add_request(self, req_idx: int,
                    sampling_params: SamplingParams) -> bool:
        cfg = request_config(self.base, qr_args(sampling_params))
        self._records[req_idx] = []
        if cfg.get("bypass") == "true":
            self._samplers[req_idx] = None
            return False
        h = cfg.hash()
        s = self._samplers[req_idx]
        if s is not None and self._hash[req_idx] == h:
            s.reset()             # fresh state and salt, prefetch cancelled
        else:
            s = _qrs.Sampler(cfg, self.vocab_size)
        self._samplers[req_idx] = s
        self._hash[req_idx] = h
        try:
            s.prefetch(self._client_of(req_idx))
        except QrsError as e:   # the first token draws again, blocking
            log.warning("qrs: prefetch for slot %d failed: %s", req_idx, e)
        return True

    def _client_of(self, req_idx: int) -> _qrs.Client:
        """The connection of slot req_idx's draws."""
        return self._clients[req_idx // self._per_client]

    def records(self, req_idx: int) -> list[dict[str, Any]]:
        """The records of the request in slot req_idx (until it is
        reused)."""
        return self._records[req_idx]

    def _buffer(self, n: int) -> torch.Tensor:
        import torch

        if self._host.shape[0] < n:
            self._host = torch.empty((max(n, 2 * self._host.shape[0]),
                                      self.vocab_size), dtype=torch.float32,
                                     pin_memory=self._pin)
        return self._host[:n]

    def apply(self, logits: torch.Tensor, ctx: LogitsContext) -> torch.Tensor:
        import torch

        if logits.dim() != 2 or logits.shape[1] != self.vocab_size:
            raise ValueError(f"qrs: logits {tuple(logits.shape)} do not match"
                             f" the vocabulary {self.vocab_size}")
        slots = ctx.expanded_idx_mapping.tolist()
        local = ctx.expanded_local_pos.tolist()
        # owned rows by speculative position, then row order
        owned = [(local[r], r, slots[r]) for r in range(len(slots))
                 if self._samplers[slots[r]] is not None]
        if not owned:
            return logits
        owned.sort()
        rows = [r for _, r, _ in owned]
        idx = torch.tensor(rows, dtype=torch.long)
        idx_dev = idx.to(logits.device, non_blocking=True)
        in_place = False          # host is logits' own rows
        if logits.device.type != "cpu":
            host = self._buffer(len(rows))
            src = logits.index_select(0, idx_dev)
            host.copy_(src)       # the one device-to-host copy
            if logits.device.type == "cuda":
                torch.cuda.current_stream(logits.device).synchronize()
        elif (rows == list(range(rows[0], rows[0] + len(rows)))
              and logits.is_contiguous() and logits.dtype == torch.float32):
            host = logits[rows[0]:rows[0] + len(rows)]  # in place, no copy
            in_place = True
        else:                     # gathered into the reused buffer
            host = self._buffer(len(rows))
            torch.index_select(logits.float(), 0, idx, out=host)
        tokens: list[int] = []
        start = 0
        while start < len(owned):   # one batch per speculative position
            end = start
            while end < len(owned) and owned[end][0] == owned[start][0]:
                end += 1
            samplers = [self._samplers[s] for _, _, s in owned[start:end]]
            clients = [self._client_of(s) for _, _, s in owned[start:end]]
            # in place, each row becomes its one-hot right after its
            # selection, while it is in cache (no second pass)
            toks, stats, recs = self.pool.sample(
                host[start:end], samplers, client=clients,
                records=self.keep_records, one_hot=in_place)
            for k, st in enumerate(stats):
                if st < 0:
                    raise error_for(st, f"qrs: row {owned[start + k][1]} "
                                        f"(request slot {owned[start + k][2]})")
            if recs is not None:
                for k, rec in enumerate(recs):
                    self._records[owned[start + k][2]].append(rec)
            tokens.extend(toks)
            start = end
        if in_place:
            return logits
        tok_dev = torch.tensor(tokens, dtype=torch.long).to(
            logits.device, non_blocking=True)
        logits.index_fill_(0, idx_dev, float("-inf"))
        logits[idx_dev, tok_dev] = 0.0   # the one scatter back
        return logits
