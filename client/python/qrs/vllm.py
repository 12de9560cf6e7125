"""A vLLM Model Runner V2 logits processor that samples through libqrs.

    vllm serve MODEL --logits-processors qrs.vllm:QRSLogitsProcessor

The flag is the one way a server opts in: the package registers no
entry point, so installing it changes nothing for a server that did not
name the class.  Per-request configuration comes from
``SamplingParams.extra_args`` with the reference's ``qr_*`` names
(``{"qr_top_k": 40, "qr_temperature_strategy": "edt"}``), on top of the
QR_* environment of the worker.  qrsd is reached at $QRS_SOCKET (else
/run/qrsd/qrsd.sock), as the C client.  The rows of a step are sampled on
$QRS_THREADS threads (default: the CPUs this process may run on, at most
8; 1 samples on vLLM's own thread).  Slots are spread over as many
connections to qrsd as its in-flight limit per connection needs
(max_inflight_per_connection, 64 by default: 4 connections for vLLM's
256 sequences), so every slot's next draw can be prefetched.

One draw per token on any parallel layout.  vLLM builds the processor on
every rank, but only the last pipeline stage samples; under tensor
parallelism every rank of that stage samples the whole batch and feeds
its token back into its own next step, so the ranks must agree.  Rank 0
of the tensor-parallel group draws and selects; the chosen ids travel to
the other ranks over vLLM's own TP group (one small tensor per step: its
device communicator on a GPU, gloo on the CPU), and every rank writes
the same one-hot.  The other ranks never connect to qrsd.  With
batch-sharded sampling each rank samples only its own rows and draws for
them itself.  A second processor built for the same model runner (the
class named twice) stands aside with one log line: never two draws for
one row.

Each step, ``apply`` finds the rows of the requests it owns from the
host-side batch layout (``idx_mapping_np``: no device sync; only under
speculative decoding is the device-side row layout copied to the host,
once), gathers those rows (one device-to-host copy into a reused pinned
buffer), samples them in one libqrs batch call per speculative position
(one call without speculative decoding), and writes each sampled row
back as -inf except 0 at the chosen id.  Rows on a CUDA device whose
configuration the device covers (qrs.device; $QRS_DEVICE_SELECT) are
not copied: each row's draw is taken from qrsd, the device selects
libqrs's token (a row it cannot certify is copied and selected by
libqrs), and only the per-row results come down; ``selections`` counts
rows by the way their token went.  Rows of declined (bypass)
requests are untouched.  Each request has a fresh libqrs sampler state
and salt; its first draw is begun in ``add_request`` and each next draw
right after the token, so draws overlap the forward pass.  Records:
``records(req_idx)`` (on the rank that samples), and with
$QRS_RECORDS_DIR a file per request there (``qr_run_id`` names it; see
qrs.records), written off the step by a thread of its own, which
``qrs-audit --records FILE --journal DIR`` verifies against qrsd's
journal.

Emitted or not.  vLLM does not always emit the token ``apply`` chose:
speculative decoding rejects a request's draft rows after the first
mismatch, and thinking-budget forcing (after ``apply``) puts the end
marker in place of a token.  The rows where that can happen (a request's
speculative rows, every row of a request with a thinking budget) wait
for their verdict: at the next step, once the row copy has waited for
the stream, one read of what vLLM committed (``req_states.total_len``,
``all_token_ids``) labels each record ``emitted`` true, false with
``emitted_token`` (overridden) or false (a rejected draft), and the
request's sampler resumes from its last emitted token: its state as
saved after that row, with the forced token as the previous one.  A slot
taken by a new request first reads its last request's verdicts on the
device.  Every other row is emitted as selected, and its record says so
at once.  Rows of a request still in chunked prefill are not sampled:
vLLM emits no token for them.

Import-light like vLLM's interface module: torch is imported only by the
worker-side methods; ``validate_params`` (the frontend) needs only the
libqrs extension and qrsd's source list."""

from __future__ import annotations

import errno
import json
import logging
import threading
import time
import weakref
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from vllm.v1.worker.gpu.sample.logits_processor.interface import (
    LogitsContext, LogitsProcessor, LogitsProcRequestState)

from . import _qrs
from ._config import _text, connections, make_config, pool_threads
from .errors import QrsError, error_for
from .records import RecordsFile, RecordsWriter, check_run_id

if TYPE_CHECKING:
    import torch
    from vllm.config import VllmConfig
    from vllm.sampling_params import SamplingParams

log = logging.getLogger(__name__)

#: The longest unit tag of a study (a longer run id is not a unit).
UNIT_MAX = 64

#: How long validate_params trusts qrsd's source list.
SOURCES_TTL_S = 10.0

_sources_lock = threading.Lock()
_sources_cache: tuple[float, frozenset[str]] | None = None


def _served_sources() -> frozenset[str]:
    """Names qrsd serves (its declared sources and studies, and the
    built-in system and mock when it allows test sources), cached for
    SOURCES_TTL_S."""
    global _sources_cache
    with _sources_lock:
        now = time.monotonic()
        if _sources_cache and now - _sources_cache[0] < SOURCES_TTL_S:
            return _sources_cache[1]
        c = _qrs.Client(timeout_ms=2000)
        try:
            st = c.status()
            names = {s["name"] for s in st["sources"] + st["studies"]}
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


#: qr_* arguments of the processor itself, not sampler fields.
ENGINE_ARGS = frozenset({"qr_run_id"})


def request_config(base: _qrs.Config, args: Mapping[str, Any]) -> _qrs.Config:
    """base with a request's qr_* arguments; ValueError naming the key."""
    cfg = base.copy()
    for k, v in args.items():
        if k in ENGINE_ARGS:
            continue
        try:
            cfg.set_arg(k, _text(v))
        except QrsError as e:
            raise ValueError(f"{k}: {e}") from e
    try:
        cfg.validate()
    except QrsError as e:
        raise ValueError(f"qr_* arguments: {e}") from e
    return cfg


def _batch_sharded(vllm_config: Any) -> bool:
    """Whether vLLM samples this model batch-sharded across the TP ranks:
    the model runner's own test (enable_batch_sharded_sampling and a model
    class with compute_logits_local)."""
    par = getattr(vllm_config, "parallel_config", None)
    if not getattr(par, "enable_batch_sharded_sampling", False):
        return False
    from vllm.model_executor.model_loader.utils import get_model_cls
    return hasattr(get_model_cls(vllm_config.model_config),
                   "compute_logits_local")


def parallel_role(vllm_config: Any) -> tuple[bool, Any]:
    """(samples, group) of this process: whether it draws and selects,
    and the tensor-parallel group whose other ranks receive its tokens
    (None: no other rank needs them).

    Outside vLLM's parallel state (one process) it samples.  A pipeline
    stage other than the last never calls apply: it neither samples nor
    connects.  With batch-sharded sampling every TP rank samples its own
    rows.  Otherwise rank 0 of the TP group samples for the group."""
    from vllm.distributed import parallel_state as ps

    if not ps.model_parallel_is_initialized():
        return True, None
    if not ps.get_pp_group().is_last_rank:
        return False, None
    tp = ps.get_tp_group()
    if tp.world_size == 1 or _batch_sharded(vllm_config):
        return True, None
    return tp.rank_in_group == 0, tp


class _Entry:
    """A sampled row whose emission vLLM settles after apply: the index
    its token goes to in the request's token ids, the token, its record
    and the sampler's state after it."""

    __slots__ = ("q", "token", "rec", "state")

    def __init__(self, q: int, token: int, rec: Any, state: bytes) -> None:
        self.q = q
        self.token = token
        self.rec = rec
        self.state = state


def _label(rec: Any, emitted: bool | None, forced: int | None = None) -> Any:
    """rec with ``emitted``: true (its token is in the output), false
    (a rejected speculative draft, or ``emitted_token`` names the token
    forced in its place) or null (not known: vLLM's request state was not
    readable).  rec is a dict, or libqrs's JSON line for a file."""
    if isinstance(rec, str):
        extra = ', "emitted": ' + json.dumps(emitted)
        if forced is not None:
            extra += f', "emitted_token": {forced}'
        return rec[:rec.rindex("}")] + extra + "}"
    rec["emitted"] = emitted
    if forced is not None:
        rec["emitted_token"] = forced
    return rec


def _verdicts(entries: list[_Entry], v: tuple[list[int], list[int]] | None,
              emit: Any) -> int:
    """Label entries (one request's rows of one step, in order) from v:
    each row's (total_len, committed token at its index), and pass each
    record to emit.  A row whose index vLLM committed was emitted, or
    overridden when another token stands there; a row past total_len was
    a rejected draft.  Returns the last committed row's position (-1:
    none)."""
    last = -1
    for j, e in enumerate(entries):
        if v is None:
            verdict: tuple[bool | None, int | None] = (None, None)
        elif e.q < v[0][j]:
            last = j
            verdict = ((True, None) if v[1][j] == e.token
                       else (False, v[1][j]))
        else:
            verdict = (False, None)
        if e.rec is not None:
            emit(_label(e.rec, *verdict))
    return last


def _wait_copy(fetched: Any) -> None:
    """Wait for _fetch_verdicts()'s asynchronous copy into pinned memory
    (no copy, or a CPU one, needs no wait)."""
    if fetched is not None and fetched[2] is not None and \
            fetched[2].is_pinned():
        import torch
        torch.cuda.current_stream().synchronize()


def _exit_records(writer: RecordsWriter, files: list[RecordsFile | None],
                  pend: list[list[_Entry]], orphans: list[Any]) -> None:
    """At a clean exit: the rows still waiting for their verdict go to
    their files labelled emitted: null (not known), then every file
    ends."""
    for f, entries in [*zip(files, pend), *((o[1], o[0]) for o in orphans)]:
        if f is not None:
            writer.append(f, [_label(e.rec, None) for e in entries
                              if isinstance(e.rec, str)])
    writer.close_all([*files, *(o[1] for o in orphans)])


#: The sampling processor of each model runner (keyed by the id of the
#: request state vLLM hands every processor it builds in one runner).
_runners_lock = threading.Lock()
_runners: dict[int, weakref.ref[QRSLogitsProcessor]] = {}


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
        if "qr_run_id" in args:
            check_run_id(args["qr_run_id"])
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
        self.base = make_config()
        self.keep_records = True
        # per slot: whether a request there is sampled by qrs (on every
        # rank), its sampler and records (on the sampling rank only)
        self._owned = [False] * self.max_num_reqs
        self._samplers: list[_qrs.Sampler | None] = [None] * self.max_num_reqs
        self._hash: list[str | None] = [None] * self.max_num_reqs
        # each record: a dict, or libqrs's full JSON line when a records
        # file is written
        self._records: list[list[Any]] = [[] for _ in range(self.max_num_reqs)]
        # $QRS_RECORDS_DIR: a file per request (on the sampling rank)
        self._writer: RecordsWriter | None = None
        self._files: list[RecordsFile | None] = [None] * self.max_num_reqs
        # rows whose emission is not known yet (speculative rows, requests
        # with a thinking budget): per slot, and of requests whose slot was
        # taken before their verdict (see _Verdicts)
        self._budget = [False] * self.max_num_reqs
        self._pend: list[list[_Entry]] = [[] for _ in range(self.max_num_reqs)]
        self._before: list[bytes | None] = [None] * self.max_num_reqs
        self._waiting: set[int] = set()     # slots with rows in _pend
        self._orphans: list[tuple[list[_Entry], RecordsFile | None, Any]] = []
        self._prefill = getattr(getattr(req_states, "prefill_len", None),
                                "np", None)
        # per slot: the device's selection settings (None: libqrs's only);
        # rows are selected where the logits are (qrs.device) when every
        # owned row of a step is covered and $QRS_DEVICE_SELECT allows it
        from . import device
        self._params: list[Any] = [None] * self.max_num_reqs
        self._mode = device.mode()
        #: rows by where their token was chosen: certified / uncertified
        #: (on the device path), host (libqrs from the copied row)
        self.selections: Counter[str] = Counter()
        self.standing_aside = self._claim_runner(req_states)
        self.samples, self.group = parallel_role(vllm_config)
        self.client: _qrs.Client | None = None
        self._clients: list[_qrs.Client] = []
        self._per_client = 1
        self.pool: _qrs.Pool | None = None
        if self.standing_aside:
            return
        pin = torch.device(self.device).type == "cuda"
        self._host = torch.empty((0, self.vocab_size), dtype=torch.float32,
                                 pin_memory=pin)
        self._pin = pin
        if not self.samples:
            log.info("qrs: V2 logits processor on %s: %s", self.device,
                     "rank %d of the tensor-parallel group, which writes the"
                     " tokens of rank 0" % self.group.rank_in_group
                     if self.group is not None else
                     "a pipeline stage that does not sample")
            return
        self.client = _qrs.Client()
        # enough connections that every slot's draw can be prefetched
        self._clients, self._per_client = connections(self.client,
                                                      self.max_num_reqs)
        self.pool = _qrs.Pool(pool_threads())
        self._writer = RecordsWriter.from_env("qrs.vllm")
        if self._writer is not None:
            # a graceful exit ends every open file; a crash leaves them
            # without their end line (qrs-audit: records-truncated)
            weakref.finalize(self, _exit_records, self._writer, self._files,
                             self._pend, self._orphans)
        log.info("qrs: V2 logits processor on %s (vocabulary %d, %d slots,"
                 " %d sampling threads, %d connections to qrsd at %s%s)",
                 self.device, self.vocab_size, self.max_num_reqs,
                 self.pool.threads, len(self._clients),
                 self.client.socket_path,
                 "; tokens sent to %d tensor-parallel ranks"
                 % (self.group.world_size - 1) if self.group else "")
        if self._writer is not None:
            log.info("qrs: each request's records to %s", self._writer.directory)

    def _claim_runner(self, req_states: LogitsProcRequestState) -> bool:
        """True (and one log line) when another live qrs processor already
        samples for this model runner: vLLM builds one instance per name
        it is given, so the class named twice would draw twice per row."""
        key = id(req_states)
        with _runners_lock:
            for k in [k for k, r in _runners.items() if r() is None]:
                del _runners[k]       # processors gone: their runners too
            ref = _runners.get(key)
            other = ref() if ref is not None else None
            if other is not None and other._req_states is req_states:
                log.warning("qrs: a second QRSLogitsProcessor for the same "
                            "model runner stands aside (the class was named "
                            "more than once); the first one samples")
                return True
            self._req_states = req_states
            _runners[key] = weakref.ref(self)
            return False

    def add_request(self, req_idx: int,
                    sampling_params: SamplingParams) -> bool:
        if self.standing_aside:
            return False
        args = qr_args(sampling_params)
        cfg = request_config(self.base, args)
        run_id = args.get("qr_run_id")
        if isinstance(run_id, str) and len(run_id) <= UNIT_MAX and \
                not cfg.get("study_unit"):
            # a study's unit of assignment: the request's run id unless the
            # request names another (a unit tag is at most 64 characters)
            cfg.set("study_unit", run_id)
        self._orphan(req_idx)
        self._records[req_idx] = []
        if self._writer is not None and self._files[req_idx] is not None:
            self._writer.close(self._files[req_idx])  # the last request's
            self._files[req_idx] = None
        self._budget[req_idx] = getattr(
            sampling_params, "thinking_token_budget", None) is not None
        self._owned[req_idx] = cfg.get("bypass") != "true"
        self._params[req_idx] = None
        if not self._owned[req_idx]:
            self._samplers[req_idx] = None
            return False
        if not self.samples:
            return True
        # the hash leaves the study unit out: a sampler is reused only for
        # the same unit too
        h = cfg.hash() + "/" + cfg.get("study_unit")
        s = self._samplers[req_idx]
        if s is not None and self._hash[req_idx] == h:
            s.reset()             # fresh state and salt, prefetch cancelled
        else:
            s = _qrs.Sampler(cfg, self.vocab_size)
        self._samplers[req_idx] = s
        self._hash[req_idx] = h
        from . import device
        self._params[req_idx] = device.row_params(cfg)
        if self._writer is not None:
            self._files[req_idx] = self._writer.open(
                check_run_id(args["qr_run_id"]) if "qr_run_id" in args
                else None)
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
        reused; empty on a rank that does not sample), each with
        ``emitted`` (see _label); with $QRS_RECORDS_DIR each has every
        field libqrs records (journal_seq, the draw's times, the echo),
        as its file does.  Rows whose verdict is not known yet are not
        among them: the next step settles them, or flush_records()."""
        return [json.loads(r) if isinstance(r, str) else r
                for r in self._records[req_idx]]

    def flush_records(self) -> None:
        """Settle the rows that wait for their verdict, from what vLLM
        committed (call it between steps: a step's verdicts are known
        once vLLM has updated the request's tokens after it), and wait
        until the records queued so far are in their files."""
        fetched = self._fetch_verdicts()
        _wait_copy(fetched)
        self._settle(fetched)
        if self._writer is not None:
            self._writer.flush()

    def records_file(self, req_idx: int) -> str | None:
        """The path of the request's records file in $QRS_RECORDS_DIR
        (None until the writer made it: flush_records() waits), or
        None."""
        f = self._files[req_idx]
        return f.path if f is not None else None

    def _buffer(self, n: int) -> torch.Tensor:
        import torch

        if self._host.shape[0] < n:
            self._host = torch.empty((max(n, 2 * self._host.shape[0]),
                                      self.vocab_size), dtype=torch.float32,
                                     pin_memory=self._pin)
        return self._host[:n]

    def _owned_rows(self, logits: torch.Tensor,
                    ctx: LogitsContext) -> list[tuple[int, int, int, int]]:
        """(speculative position, row, slot, index) of each row this
        processor samples, by position, then row: the order of the draws.
        index: where the row's token goes in the request's token ids.
        Rows of a request still in chunked prefill (index inside the
        prompt) produce no token in vLLM: they are left untouched, and
        nothing is drawn for them."""
        import torch

        reqs = ctx.idx_mapping_np
        seq = ctx.seq_lens_upper_bound_np
        if logits.shape[0] == len(reqs):
            # one row per request, in batch order: the host-side mapping
            # and sequence lengths (exact here) say it all (no device sync)
            owned = [(0, r, int(s), int(seq[r]))
                     for r, s in enumerate(reqs.tolist()) if self._owned[s]]
        else:
            # speculative decoding: rows per request differ; the device-
            # side row layout and positions come to the host in one copy
            # (one sync)
            lay = torch.stack((ctx.expanded_idx_mapping.to(torch.int64),
                               ctx.expanded_local_pos.to(torch.int64),
                               ctx.pos.to(torch.int64))).cpu()
            slots, local, pos = lay.tolist()
            owned = sorted((local[r], r, slots[r], pos[r] + 1)
                           for r in range(len(slots))
                           if self._owned[slots[r]])
        if self._prefill is not None:
            owned = [o for o in owned if o[3] >= self._prefill[o[2]]]
        return owned

    def _sample(self, logits: torch.Tensor,
                owned: list[tuple[int, int, int, int]],
                idx: torch.Tensor, idx_dev: torch.Tensor) -> tuple[list[int],
                                                                   bool]:
        """Draw and select the owned rows; returns their tokens and
        whether the rows are already one-hot (sampled in place)."""
        import torch

        from . import device

        rows = [r for _, r, _, _ in owned]
        in_place = False          # host is logits' own rows
        params = [self._params[o[2]] for o in owned]
        on_device = device.engaged(logits, params, self._mode)
        # the last step's verdicts, copied behind the rows' copy
        fetched = self._fetch_verdicts()
        if on_device:
            host = None           # the rows stay where they are
            _wait_copy(fetched)
        elif logits.device.type != "cpu":
            host = self._buffer(len(rows))
            # the one device-to-host copy; it waits for the rows (and the
            # verdicts queued before it)
            host.copy_(logits.index_select(0, idx_dev))
        elif (rows == list(range(rows[0], rows[0] + len(rows)))
              and logits.is_contiguous() and logits.dtype == torch.float32):
            host = logits[rows[0]:rows[0] + len(rows)]  # in place, no copy
            in_place = True
        else:                     # gathered into the reused buffer
            host = self._buffer(len(rows))
            torch.index_select(logits.float(), 0, idx, out=host)
        # samplers resume from their last emitted token before they draw
        self._settle(fetched)
        # rows whose emission vLLM settles after apply: a request's
        # speculative rows, every row of a request with a thinking budget
        count = Counter(o[2] for o in owned)
        track = {s for s, n in count.items() if n > 1 or self._budget[s]}
        for s in track:
            self._before[s] = self._samplers[s].save_state()
        tokens: list[int] = []
        start = 0
        while start < len(owned):   # one batch per speculative position
            end = start
            while end < len(owned) and owned[end][0] == owned[start][0]:
                end += 1
            samplers = [self._samplers[o[2]] for o in owned[start:end]]
            clients = [self._client_of(o[2]) for o in owned[start:end]]
            # in place, each row becomes its one-hot right after its
            # selection, while it is in cache (no second pass)
            # the records file takes libqrs's full JSON line; in memory a
            # dict per row is cheaper to make on the step
            want = ("json" if self._writer is not None else True) \
                if self.keep_records else False
            if on_device:
                got = device.sample(logits.index_select(0, idx_dev[start:end]),
                                    samplers, clients, params[start:end],
                                    records=want)
                toks, stats, recs = got.tokens, got.statuses, got.records
                got.tally(self.selections)
            else:
                toks, stats, recs = self.pool.sample(
                    host[start:end], samplers, client=clients, records=want,
                    one_hot=in_place)
                self.selections["host"] += sum(st == 0 for st in stats)
            for k, st in enumerate(stats):
                if st < 0:
                    raise error_for(st, f"qrs: row {owned[start + k][1]} "
                                        f"(request slot {owned[start + k][2]})")
            for k, o in enumerate(owned[start:end]):
                slot = o[2]
                rec = recs[k] if recs is not None else None
                if slot in track:   # its verdict comes with the next step
                    self._waiting.add(slot)
                    self._pend[slot].append(_Entry(
                        o[3], toks[k], rec, self._samplers[slot].save_state()))
                elif rec is not None:
                    self._emit(slot, self._files[slot], _label(rec, True))
            tokens.extend(toks)
            start = end
        return tokens, in_place

    def _emit(self, slot: int | None, f: RecordsFile | None, rec: Any) -> None:
        """A labelled record to its request's records (slot None: the
        request is gone) and file."""
        if slot is not None:
            self._records[slot].append(rec)
        if f is not None:
            self._writer.append(f, (rec,))

    def _committed(self, pairs: list[tuple[int, int]]) -> Any:
        """For each (slot, index): the slot's total_len and its committed
        token at index, as a (2, n) int64 tensor on the model's device
        (not waited for), or None where vLLM's request state has neither
        (then no verdict can be known)."""
        import torch

        total = getattr(getattr(self._req_states, "total_len", None), "gpu",
                        None)
        ids = getattr(getattr(self._req_states, "all_token_ids", None), "gpu",
                      None)
        if total is None or ids is None:
            return None
        last = ids.shape[1] - 1
        s = torch.tensor([p[0] for p in pairs], dtype=torch.long).to(
            total.device, non_blocking=True)
        q = torch.tensor([min(p[1], last) for p in pairs],
                         dtype=torch.long).to(ids.device, non_blocking=True)
        return torch.stack((total.index_select(0, s).to(torch.int64),
                            ids[s, q].to(torch.int64)))

    def _orphan(self, req_idx: int) -> None:
        """A new request takes slot req_idx: the rows of the last one that
        still wait for their verdict keep what vLLM committed for them,
        read on the device now (before the new request's prompt
        overwrites it) and settled with the next step; its records file
        ends after them."""
        entries = self._pend[req_idx]
        if not entries:
            return
        self._pend[req_idx] = []
        self._before[req_idx] = None
        self._waiting.discard(req_idx)
        got = self._committed([(req_idx, e.q) for e in entries])
        self._orphans.append((entries, self._files[req_idx], got))
        self._files[req_idx] = None   # closed when its rows are settled

    def _fetch_verdicts(self) -> Any:
        """Begin reading what vLLM committed for every row that waits for
        its verdict: one device gather and one asynchronous copy into
        pinned memory, queued before the row copy (which waits for the
        stream, and so for it: no sync of its own).  Where speculative
        decoding runs, the step's row layout was copied before (one copy,
        see _owned_rows).  Returns what
        _settle() takes, or None when nothing waits."""
        import torch

        if not self._waiting and not self._orphans:
            return None
        live = sorted(self._waiting)
        self._waiting.clear()
        pend = [(s, self._pend[s]) for s in live]
        for s in live:
            self._pend[s] = []
        # emptied in place: the exit handler holds this list
        orphans = self._orphans[:]
        self._orphans.clear()
        pairs = [(s, e.q) for s, entries in pend for e in entries]
        parts = [self._committed(pairs)] if pairs else []
        parts += [o[2] for o in orphans]
        host = None
        if parts and all(p is not None for p in parts):
            dev = torch.cat(parts, dim=1)
            host = torch.empty(dev.shape, dtype=torch.int64,
                               pin_memory=dev.device.type == "cuda")
            host.copy_(dev, non_blocking=True)
        return pend, orphans, host

    def _settle(self, fetched: Any) -> None:
        """Label the rows _fetch_verdicts() read (their copy complete):
        emitted, overridden (another token forced in its place) or
        rejected (a speculative row past the first mismatch); rewind each
        live request's sampler to its last emitted token; end the files
        of requests whose slot was taken."""
        if fetched is None:
            return
        pend, orphans, host = fetched
        vals = host.tolist() if host is not None else None
        at = 0

        def take(n: int) -> tuple[list[int], list[int]] | None:
            nonlocal at
            at += n
            return (vals[0][at - n:at], vals[1][at - n:at]) if vals else None

        for s, entries in pend:
            v = take(len(entries))
            last = _verdicts(entries, v, lambda r, s=s: self._emit(
                s, self._files[s], r))
            self._resume(s, entries, last, v)
        for entries, f, _ in orphans:
            _verdicts(entries, take(len(entries)),
                      lambda r, f=f: self._emit(None, f, r))
            if f is not None:
                self._writer.close(f)

    def _resume(self, slot: int, entries: list[_Entry], last: int,
                v: tuple[list[int], list[int]] | None) -> None:
        """The sampler of slot after its verdicts: back to the state after
        entries[last] (before entries[0] when last is -1), with the forced
        token as the previous one where vLLM overrode it; untouched (its
        prefetch kept) when every row was emitted as selected."""
        before, self._before[slot] = self._before[slot], None
        if v is None:
            return
        sampler = self._samplers[slot]
        if last < 0:
            sampler.restore_state(before)
            return
        forced = v[1][last] != entries[last].token
        if last == len(entries) - 1 and not forced:
            return
        sampler.restore_state(entries[last].state)
        if forced:
            sampler.set_previous_token(v[1][last])

    def apply(self, logits: torch.Tensor, ctx: LogitsContext) -> torch.Tensor:
        import torch

        if self.standing_aside:
            return logits
        if logits.dim() != 2 or logits.shape[1] != self.vocab_size:
            raise ValueError(f"qrs: logits {tuple(logits.shape)} do not match"
                             f" the vocabulary {self.vocab_size}")
        owned = self._owned_rows(logits, ctx)
        if not owned or (not self.samples and self.group is None):
            return logits
        idx = torch.tensor([o[1] for o in owned], dtype=torch.long)
        idx_dev = idx.to(logits.device, non_blocking=True)
        in_place = False
        if self.samples:
            try:
                tokens, in_place = self._sample(logits, owned, idx, idx_dev)
            except Exception:
                if self.group is not None:  # the other ranks wait for ids
                    self.group.broadcast(torch.full(
                        (len(owned),), -1, dtype=torch.long,
                        device=logits.device), src=0)
                raise
            tok_dev = torch.tensor(tokens, dtype=torch.long).to(
                logits.device, non_blocking=True)
            if self.group is not None:
                self.group.broadcast(tok_dev, src=0)
        else:
            tok_dev = torch.empty(len(owned), dtype=torch.long,
                                  device=logits.device)
            self.group.broadcast(tok_dev, src=0)
            # ids of -1: rank 0 failed this step (and raised there)
            if tok_dev.device.type == "cpu":
                if bool((tok_dev < 0).any()):
                    raise QrsError(-errno.EIO, "qrs: rank 0 of the tensor-"
                                   "parallel group failed to sample this step",
                                   "EIO")
            else:                 # checked on the device: no host sync
                torch._assert_async(tok_dev.min() >= 0)
        if in_place:
            return logits
        logits.index_fill_(0, idx_dev, float("-inf"))
        logits[idx_dev, tok_dev] = 0.0   # the one scatter back
        return logits
