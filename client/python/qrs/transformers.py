"""A Hugging Face transformers logits processor that samples through
libqrs and qrsd.

    from qrs.transformers import QRSLogitsProcessor
    proc = QRSLogitsProcessor({"top_k": 40})
    out = model.generate(**inputs, do_sample=False, max_new_tokens=32,
                         logits_processor=[proc])

Every row of the batch is sampled by its own libqrs sampler (one request's
strategy state and commitment salt per sequence) in one batch call; the
row is then forced to one-hot (0 at the chosen id, -inf elsewhere), so
greedy decoding (do_sample=False) emits exactly the chosen tokens.  The
per-token records are kept in ``proc.records[row]``.  Rows the
configuration bypasses are returned unchanged.

Scores on a CUDA device stay there when the device covers the
configuration (qrs.device: the fixed temperature in the reference's
stage order): each row's draw comes from qrsd as always, the device
selects libqrs's token (certified; a row it cannot certify is copied
and selected by libqrs), and only the per-row results come to the host.
$QRS_DEVICE_SELECT=off copies every row to libqrs instead; =on selects
CPU tensors the device's way too.  ``selections`` counts the rows by
where their token was chosen (certified / uncertified / host)."""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Mapping
from typing import Any

import torch

from . import _qrs, device
from ._config import connections, make_config, pool_threads
from .errors import error_for

try:  # transformers is what this module is for, but keep the base light
    from transformers import LogitsProcessor as _Base
except ImportError:  # pragma: no cover - exercised only without it
    _Base = object  # type: ignore[assignment,misc]

log = logging.getLogger(__name__)


def row_salt(salt: bytes, row: int) -> bytes:
    """The commitment salt of batch row ``row`` for a processor salt."""
    return hashlib.sha256(salt + row.to_bytes(4, "little")).digest()[:16]


class QRSLogitsProcessor(_Base):  # type: ignore[misc,valid-type]
    """Samples each row through libqrs; see the module docstring.

    config: a dict of sampler fields, reference-style ``qr_*`` keys, or
    a qrs.Config (QR_* environment and presets apply as in libqrs).
    client: a qrs.Client (default: a new one on $QRS_SOCKET).
    salt: bytes for reproducible commitments (row i uses
    ``row_salt(salt, i)``); None: a fresh random salt per sequence.
    threads: threads sampling the batch's rows (None: $QRS_THREADS, else
    the CPUs this process may run on, at most 8); the tokens do not
    depend on it.
    keep_records: keep every token's record in ``records``.
    audit: for qrs-audit, a path with ``{row}`` in it: sequence i appends
    its full records (log_level full) to ``audit.format(row=i) +
    ".jsonl"`` and dumps every selected row's logits to
    ``audit.format(row=i) + ".logits"``; then ``qrs-audit --records
    X.jsonl --logits X.logits`` re-selects every token from its row."""

    def __init__(self, config: Mapping[str, Any] | _qrs.Config | None = None,
                 *, client: _qrs.Client | None = None,
                 salt: bytes | None = None, threads: int | None = None,
                 keep_records: bool = True,
                 audit: str | None = None) -> None:
        self._mode = device.mode()
        if isinstance(config, _qrs.Config):
            self.config = config
        else:
            cfg = dict(config or {})
            qr = {k: v for k, v in cfg.items() if k.startswith("qr_")}
            fields = {k: v for k, v in cfg.items() if not k.startswith("qr_")}
            self.config = make_config(fields, qr_args=qr)
        if audit is not None:
            if "{row}" not in audit:
                raise ValueError("qrs: audit must contain {row} (one "
                                 "records file and dump per sequence)")
            self.config = self.config.copy()
            self.config.set("log_level", "full")
        self.audit = audit
        self.client = client if client is not None else _qrs.Client()
        self.salt = salt
        self.keep_records = keep_records
        self._pool = _qrs.Pool(pool_threads() if threads is None else threads)
        self._samplers: list[_qrs.Sampler] = []
        self.records: list[list[dict[str, Any]]] = []
        self._clients = [self.client]
        self._per_client = 0       # set by the first batch
        # the device's settings for this configuration (None: libqrs's);
        # the logits dump of ``audit`` needs the rows on the host
        self._params = None if audit is not None else \
            device.row_params(self.config)
        self.selections: Counter[str] = Counter()

    def reset(self) -> None:
        """Forget the sequences: the next call starts new requests."""
        self._samplers = []
        self.records = []

    def _start(self, batch: int, vocab: int) -> None:
        self._samplers = []
        if batch > len(self._clients) * self._per_client:
            # a prefetch open for every sequence
            self._clients, self._per_client = connections(self.client, batch)
        for i in range(batch):
            s = _qrs.Sampler(self.config, vocab)
            if self.salt is not None:
                s.set_salt(row_salt(self.salt, i))
            if self.audit is not None:
                base = self.audit.format(row=i)
                s.set_log_path(base + ".jsonl")
                s.set_logits_dump(base + ".logits")
            self._samplers.append(s)
        self.records = [[] for _ in range(batch)]
        log.debug("qrs: %d sequences, vocabulary %d", batch, vocab)

    def __call__(self, input_ids: torch.LongTensor,
                 scores: torch.FloatTensor) -> torch.FloatTensor:
        if scores.dim() != 2:
            raise ValueError(f"scores must be [batch, vocab], not "
                             f"{tuple(scores.shape)}")
        batch, vocab = scores.shape
        if len(self._samplers) != batch:
            if self._samplers:
                log.info("qrs: batch changed from %d to %d rows: new "
                         "requests", len(self._samplers), batch)
            self._start(batch, vocab)
        clients = [self._clients[i // self._per_client]
                   for i in range(batch)]
        params = [self._params] * batch
        if device.engaged(scores, params, self._mode):
            return self._on_device(scores, clients, params)
        # a CPU copy of the scores is sampled and made one-hot in place
        # by libqrs, row by row while each is in cache; otherwise (a GPU,
        # another dtype) the rows are written back here
        direct = (scores.device.type == "cpu" and scores.dtype in
                  (torch.float32, torch.float16, torch.bfloat16))
        if direct:
            host = out = scores.clone(memory_format=torch.contiguous_format)
        else:
            host = scores.cpu().float().contiguous()
            out = scores.clone()
        toks, stats, recs = self._pool.sample(
            host, self._samplers, client=clients,
            records=self.keep_records, one_hot=direct)
        for i, st in enumerate(stats):
            if st < 0:
                raise error_for(st, f"sequence {i}")
        for i, (tok, st) in enumerate(zip(toks, stats)):
            if st == 1:
                continue
            self.selections["host"] += 1
            if not direct:
                out[i].fill_(float("-inf"))
                out[i, tok] = 0.0
            if recs is not None:
                self.records[i].append(recs[i])
        return out

    def _on_device(self, scores: torch.Tensor, clients: list[_qrs.Client],
                   params: list[device.RowParams]) -> torch.Tensor:
        got = device.sample(scores, self._samplers, clients, params,
                            records=self.keep_records)
        for i, st in enumerate(got.statuses):
            if st < 0:
                raise error_for(st, f"sequence {i}")
        live = [i for i, st in enumerate(got.statuses) if st == 0]
        out = scores.clone()
        if live:
            mask = torch.zeros(len(got.tokens), dtype=torch.bool)
            mask[live] = True
            tok = torch.tensor([max(t, 0) for t in got.tokens])
            device.write_one_hot(out, tok, mask)
        got.tally(self.selections)
        if got.records is not None:
            for i in live:
                self.records[i].append(got.records[i])
        return out
