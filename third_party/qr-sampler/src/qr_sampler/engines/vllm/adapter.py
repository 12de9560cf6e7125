"""vLLM V1 LogitsProcessor adapter.

Implements the vLLM V1 LogitsProcessor contract:
    - ``__init__(vllm_config, device, is_pin_memory)``
    - ``apply(logits) -> logits``
    - ``update_state(batch_update) -> None``
    - ``validate_params(params) -> None``
    - ``is_argmax_invariant() -> bool``

Internally delegates all sampling to ``SamplingPipeline``.

Registered via entry point::

    [project.entry-points."vllm.logits_processors"]
    qr_sampler = "qr_sampler.engines.vllm:VLLMAdapter"

The processor applies globally to all requests in a vLLM instance. Deploy
separate instances for different sampling strategies.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from qr_sampler.amplification.registry import AmplifierRegistry
from qr_sampler.config import QRSamplerConfig, resolve_config, validate_extra_args
from qr_sampler.core.pipeline import (
    SamplingPipeline,
    build_pipeline,
    config_hash,
    derive_commit_nonce,
)
from qr_sampler.core.types import PrefetchContext
from qr_sampler.engines.base import EngineAdapter
from qr_sampler.engines.vllm.telemetry import _PerfAggregator
from qr_sampler.exceptions import ConfigValidationError
from qr_sampler.temperature.registry import TemperatureStrategyRegistry

# Formal V1 LogitsProcessor base.
# vLLM 0.17.0 entry-point discovery validates plugins via issubclass against
# vllm.v1.sample.logits_processor.LogitsProcessor. Duck-typing alone passes
# attribute checks but fails the isinstance/issubclass gate. In dev / test
# environments vLLM is not installed, so we fall back to ``object`` — the
# module must still import cleanly there because EngineAdapterRegistry's
# builtin table resolves this module on demand.
try:
    from vllm.v1.sample.logits_processor import (
        LogitsProcessor as _VLLMLogitsProcessorBase,
    )
except ImportError:  # pragma: no cover - exercised where vLLM is not installed
    # The ignore is only "used" when mypy runs in an env where vLLM IS
    # installed (LogitsProcessor then resolves to a real class instead of
    # Any); warn_unused_ignores is disabled for this module in pyproject.
    _VLLMLogitsProcessorBase = object  # type: ignore[assignment,misc]

if TYPE_CHECKING:
    from collections.abc import Iterable

    from qr_sampler.amplification.base import SignalAmplifier
    from qr_sampler.logging.logger import SamplingLogger
    from qr_sampler.temperature.base import TemperatureStrategy

logger = logging.getLogger("qr_sampler")

# Default vocabulary size when vllm_config does not provide one (testing).
_DEFAULT_VOCAB_SIZE = 32000

# Env var listing the entropy sources to pre-initialise at adapter startup.
# Comma-separated; whitespace tolerated. A per-request ``qr_entropy_source_type``
# override must name one of these — anything else is rejected at request
# validation (``validate_params``, API-server side) and again when the request
# is added to the batch (defense in depth).
_PREINIT_ENV_VAR = "QR_PREINIT_ENTROPY_SOURCES"
_DEFAULT_PREINIT = "quantum_grpc,system"

# Env var declaring named entropy-source instances (JSON dict). Read here only
# for the request-validation allowlist; the authoritative parse/validation
# lives on ``QRSamplerConfig.entropy_source_instances``.
_INSTANCES_ENV_VAR = "QR_ENTROPY_SOURCE_INSTANCES"


@lru_cache(maxsize=8)
def _allowed_source_names(
    preinit_raw: str, instances_raw: str, default_source: str
) -> frozenset[str]:
    """Allowlist of per-request ``qr_entropy_source_type`` values, from env.

    Mirrors ``VLLMAdapter._resolve_preinit_sources`` (union of the preinit
    list, declared instance names, and the process-default source) so the
    API-server process can reject unknown names at request validation instead
    of letting the raise happen inside the engine worker's ``update_state`` —
    an uncaught raise there kills the whole shared engine (EngineDeadError;
    see qr-llm-research LEARNINGS.md GL-01 / AUDIT.md A-1).

    Cached on the raw env values: they are fixed for a process lifetime in
    production, while tests that monkeypatch env still get fresh results.
    A malformed instances JSON contributes no names (the engine itself would
    have refused to start on it, so this path is never load-bearing).
    """
    names = [part.strip() for part in preinit_raw.split(",") if part.strip()]
    if instances_raw:
        with contextlib.suppress(ValueError, TypeError):
            parsed = json.loads(instances_raw)
            if isinstance(parsed, dict):
                names.extend(str(key) for key in parsed)
    names.append(default_source)
    return frozenset(names)


class _RequestState:
    """Per-request state tracked across engine steps.

    Attributes:
        pipeline: The pre-initialised pipeline whose entropy source matches
            this request's ``entropy_source_type``. All sampling for this
            request flows through this pipeline.
        config: Resolved per-request configuration.
        amplifier: Signal amplifier for this request.
        strategy: Temperature strategy for this request.
        config_hash_str: Short hash for logging.
        source: The entropy source this request resolved to. Exposed for
            test introspection; production code should treat the pipeline
            as opaque.
        tokens_generated: Counter incremented once per ``apply()`` call
            that processed this request. Used to populate the
            ``entropy.request.completed`` event so an operator can spot
            "Modal Succeeded but 0 tokens" failure modes (K-5) from the
            log stream alone.
        dominant_source_name: Snapshot of ``pipeline.entropy_source.name``
            at routing time. For the always-primary case this is the
            actual source used; if a future change switches sources
            mid-request, this becomes the routing-time hint and the
            completion event should record the observed dominant.
        prefetch_salt: Per-request random salt for commitment-nonce
            derivation (commit-then-fetch entropy pipelining).
        entropy_ticket: In-flight prefetch ticket for this request's next
            token, or ``None``. Fired at the previous token's selection
            (or at request-add time for the first token, which overlaps
            the entire prefill) and redeemed on the next ``apply()``.
    """

    __slots__ = (
        "amplifier",
        "config",
        "config_hash_str",
        "dominant_source_name",
        "entropy_ticket",
        "pipeline",
        "prefetch_salt",
        "source",
        "strategy",
        "tokens_generated",
    )

    def __init__(
        self,
        pipeline: SamplingPipeline,
        config: QRSamplerConfig,
        amplifier: SignalAmplifier,
        strategy: TemperatureStrategy,
        config_hash_str: str,
    ) -> None:
        self.pipeline = pipeline
        self.config = config
        self.amplifier = amplifier
        self.strategy = strategy
        self.config_hash_str = config_hash_str
        self.source = pipeline.entropy_source
        self.tokens_generated = 0
        self.dominant_source_name = pipeline.entropy_source.name
        self.prefetch_salt = os.urandom(16)
        self.entropy_ticket: Any | None = None


class _BypassState:
    """Per-request marker for ``qr_bypass=true`` requests (invariant 8's
    test-pinned exception): the row passes through ``apply()`` untouched and
    vLLM's native sampler applies. Duck-types the three attributes the
    removal loop reads so removals/moves/swaps need no special-casing."""

    __slots__ = ("dominant_source_name", "entropy_ticket", "tokens_generated")

    def __init__(self) -> None:
        self.tokens_generated = 0
        self.dominant_source_name = "native"
        self.entropy_ticket: Any | None = None


class VLLMAdapter(EngineAdapter, _VLLMLogitsProcessorBase):
    """vLLM V1 LogitsProcessor that replaces token sampling with
    external-entropy-driven selection.

    Formally subclasses ``vllm.v1.sample.logits_processor.LogitsProcessor``
    when vLLM is importable (the production serving path); falls back to a
    plain object base in dev/test environments where vLLM is unavailable.
    The dual base list keeps ``EngineAdapter``'s ABC contract first so
    its abstractmethod checks still apply.

    The adapter manages vLLM-specific concerns (batch state, tensor
    conversion, one-hot forcing) and delegates all sampling logic to
    the engine-agnostic ``SamplingPipeline``.

    Constructor signature matches vLLM V1's ``LogitsProcessor`` ABC::

        __init__(self, vllm_config, device, is_pin_memory)
    """

    def __init__(
        self,
        vllm_config: Any = None,
        device: Any = None,
        is_pin_memory: bool = False,
    ) -> None:
        """Initialize the adapter and all subsystems.

        Args:
            vllm_config: vLLM's ``VllmConfig`` object (provides vocab_size).
                ``None`` in test environments -- uses ``_DEFAULT_VOCAB_SIZE``.
            device: ``torch.device`` for tensor operations. ``None`` in tests.
            is_pin_memory: Whether to use pinned CPU memory for transfers.
        """
        # --- Extract vocab_size ---
        self._vocab_size = self._extract_vocab_size(vllm_config)
        self._device = device
        self._is_pin_memory = is_pin_memory

        # --- Load default configuration ---
        # Expand ``QR_PRESET`` (and any ``QR_*`` env) into the PROCESS-default
        # config, so a deployment selects its entire sampling profile with one
        # env var and no per-request ``extra_args``. This is how the "amplify
        # in Qbert" migrate is switched on for serving: ``QR_PRESET=qthought_purity``
        # makes every token one server-integrated draw (``signal_amplifier_type
        # =server`` + ``draw_block_bytes``), the amplification having moved
        # server-side — the client just draws. The ``preset`` field is then
        # cleared so the per-request ``resolve_config`` does not re-expand it.
        self._default_config = resolve_config(QRSamplerConfig(), None)
        if self._default_config.preset:
            self._default_config = self._default_config.model_copy(update={"preset": ""})

        # --- Pre-initialise one pipeline per allowed entropy source ---
        # The default source from QR_ENTROPY_SOURCE_TYPE is always included
        # so a request with no per-request override still resolves cleanly.
        self._preinit_sources = self._resolve_preinit_sources(
            self._default_config.entropy_source_type,
            self._default_config.entropy_source_instances,
        )
        self._pipelines: dict[str, SamplingPipeline] = {}
        for source_type in self._preinit_sources:
            self._pipelines[source_type] = self._build_pipeline_for_source(source_type)

        # --- Default pipeline (used when no per-request state exists) ---
        self._pipeline = self._pipelines[self._default_config.entropy_source_type]

        # iter-52d (2026-05-25): eagerly establish each entropy source's
        # connection NOW, so per-token ``get_random_bytes()`` calls land
        # on already-open, already-verified channels. The default
        # ``EntropySource.warmup()`` is a no-op; ``QuantumGrpcSource``
        # overrides it to open the gRPC channel + do a single tiny
        # verification fetch. Soft-fail by design: if QRNG is
        # unreachable at startup, ``FallbackEntropySource`` engages
        # transparently for subsequent fetches.
        for source_type, pipeline in self._pipelines.items():
            try:
                pipeline.entropy_source.warmup()
            except Exception as exc:
                logger.warning(
                    "Entropy-source warmup for %s raised (%s); fallback will engage",
                    source_type,
                    exc,
                    extra={
                        "event": "entropy.warmup.failed",
                        "source_type": source_type,
                    },
                )

        # Designate the DEFAULT pipeline's source as the owner of the
        # cross-process entropy-status file (telemetry IPC for
        # out-of-process health readers). Only the default pipeline
        # publishes: the pre-init loop also builds a system-primary
        # wrapper whose always-healthy state must not clobber the
        # quantum lane's file.
        try:
            enable = getattr(self._pipeline.entropy_source, "enable_status_publishing", None)
            if callable(enable):
                enable()
        except Exception:
            # Telemetry plumbing must never break the LogitsProcessor.
            pass

        # --- Pre-compute default state ---
        self._default_config_hash = config_hash(self._default_config)

        # --- Pre-allocate tensors ---
        self._onehot_template = self._create_onehot_template()
        # Pinned staging buffer for the batched GPU->CPU logits copy.
        # Allocated lazily on the first GPU batch (rows x vocab, grown as
        # the batch grows) — only when vLLM passed is_pin_memory=True.
        self._cpu_buffer: Any = None

        # --- Per-request state ---
        # Maps request index (batch position) to its state.
        self._request_states: dict[int, _RequestState | _BypassState] = {}

        # --- Per-row sampling worker pool (perf tranche 2026-07) ---
        # The apply() loop samples each batch row independently (per-request
        # state is row-exclusive; the heavy numpy stages release the GIL),
        # so concurrent requests no longer serialize behind one another.
        # ``apply_parallel_rows`` = 0 resolves to the machine's CPU count;
        # 1 restores the historical single-threaded loop. The executor is
        # created lazily on the first multi-row batch.
        cap = self._default_config.apply_parallel_rows
        self._row_worker_cap = cap if cap > 0 else (os.cpu_count() or 1)
        self._row_executor: ThreadPoolExecutor | None = None

        # --- iter-55: rolling per-stage perf telemetry ---
        self._perf = _PerfAggregator()

        _draw_mode = self._default_config.signal_amplifier_type == "server"
        logger.info(
            "VLLMAdapter initialized: vocab_size=%d, "
            "default_entropy_source=%s, preinit_sources=%s, "
            "amplifier=%s, draw_mode=%s, draw_block_bytes=%d, temperature=%s",
            self._vocab_size,
            self._pipeline.entropy_source.name,
            sorted(self._pipelines.keys()),
            self._default_config.signal_amplifier_type,
            _draw_mode,
            self._default_config.draw_block_bytes,
            self._default_config.temperature_strategy,
        )

    @staticmethod
    def _resolve_preinit_sources(
        default_source_type: str,
        instance_names: Iterable[str] = (),
    ) -> list[str]:
        """Parse the pre-init source list from env, deduped and ordered.

        The result is the UNION of the ``QR_PREINIT_ENTROPY_SOURCES``
        entries, every declared entropy-source instance name
        (``entropy_source_instances`` — declaring an instance means you
        intend to route to it, so it is always pre-initialised), and the
        default source (so the no-override path is always serviceable).
        Order is preserved (first occurrence wins) so operators can
        document a canonical order in their env config. With no declared
        instances the behavior is identical to the pre-instances adapter.
        """
        raw = os.environ.get(_PREINIT_ENV_VAR, _DEFAULT_PREINIT)
        parsed = [part.strip() for part in raw.split(",") if part.strip()]
        parsed.extend(name for name in instance_names if name not in parsed)
        if default_source_type not in parsed:
            parsed.append(default_source_type)
        seen: set[str] = set()
        ordered: list[str] = []
        for name in parsed:
            if name not in seen:
                seen.add(name)
                ordered.append(name)
        return ordered

    def _build_pipeline_for_source(self, source_type: str) -> SamplingPipeline:
        """Build a SamplingPipeline whose entropy source is ``source_type``.

        Mirrors ``self._default_config`` for every other field. Uses
        ``model_validate`` so type coercion runs without re-reading env.
        """
        cfg_dump = self._default_config.model_dump()
        cfg_dump["entropy_source_type"] = source_type
        cfg = QRSamplerConfig.model_validate(cfg_dump)
        return build_pipeline(cfg, self._vocab_size)

    def get_pipeline(self) -> SamplingPipeline:
        """Return the underlying SamplingPipeline.

        Returns:
            The engine-agnostic sampling pipeline used by this adapter.
        """
        return self._pipeline

    @staticmethod
    def _extract_vocab_size(vllm_config: Any) -> int:
        """Extract vocabulary size from vLLM config, with fallback.

        Args:
            vllm_config: vLLM config object, or ``None`` for tests.

        Returns:
            Vocabulary size as integer.
        """
        if vllm_config is None:
            return _DEFAULT_VOCAB_SIZE

        # vLLM V1: vllm_config.model_config.hf_text_config.vocab_size
        try:
            return int(vllm_config.model_config.hf_text_config.vocab_size)
        except AttributeError:
            pass

        # Try direct vocab_size attribute.
        try:
            return int(vllm_config.vocab_size)
        except AttributeError:
            pass

        logger.warning(
            "Could not extract vocab_size from vllm_config, using default %d",
            _DEFAULT_VOCAB_SIZE,
        )
        return _DEFAULT_VOCAB_SIZE

    def _create_onehot_template(self) -> Any:
        """Create the one-hot template tensor filled with -inf.

        Returns:
            A tensor of shape ``(vocab_size,)`` filled with ``-inf``,
            or a numpy array if torch is unavailable.
        """
        try:
            import torch

            return torch.full(
                (self._vocab_size,),
                float("-inf"),
                device=self._device,
                dtype=torch.float32,
            )
        except ImportError:
            return np.full(self._vocab_size, float("-inf"), dtype=np.float32)

    def _pinned_slice(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """Return a pinned staging view of ``shape`` for a GPU->CPU copy.

        Lazily allocates (and grows) the 2-D pinned buffer. Returns ``None``
        when pinned staging is unavailable or not applicable (no
        ``is_pin_memory``, torch missing, or a 1-D tensor — the 1-D shape
        only occurs in tests, where a plain ``.cpu()`` is fine).

        Args:
            shape: Shape of the incoming logits tensor.
            dtype: torch dtype of the incoming logits tensor.

        Returns:
            A pinned ``(rows, vocab)`` tensor view matching ``shape``, or
            ``None`` when the plain ``.cpu()`` path should be used.
        """
        if not self._is_pin_memory or len(shape) < 2:
            return None
        try:
            import torch
        except ImportError:
            return None
        rows, cols = int(shape[0]), int(shape[-1])
        buf = self._cpu_buffer
        if buf is None or buf.shape[0] < rows or buf.shape[1] != cols or buf.dtype != dtype:
            try:
                buf = torch.empty((rows, cols), dtype=dtype, pin_memory=True)
            except RuntimeError:
                # No pinned allocator on this host (CPU-only torch build).
                # Disable staging so the plain .cpu() path runs without
                # re-attempting the allocation every step.
                self._is_pin_memory = False
                return None
            self._cpu_buffer = buf
        return buf[:rows]

    def is_argmax_invariant(self) -> bool:
        """Return ``False`` -- this processor fundamentally changes token selection.

        This ensures the processor runs before penalties and temperature scaling
        in the vLLM pipeline, operating on raw logits.
        """
        return False

    @classmethod
    def validate_params(cls, params: Any) -> None:
        """Validate ``qr_*`` keys in ``params.extra_args``.

        Besides the generic key/preset validation, the explicit
        ``qr_entropy_source_type`` *value* is checked against the env-derived
        allowlist of pre-initialised sources (builtin types + declared
        instance names). This runs in the API-server process, so an unknown
        name becomes a clean per-request rejection instead of an engine-worker
        raise (AUDIT.md A-1). Preset-expanded source types are not re-checked
        here (builtin presets only ever set ``quantum_grpc``); the
        ``update_state`` lookup remains the authoritative guard.
        """
        extra_args = getattr(params, "extra_args", None) or {}
        if not extra_args:
            return
        validate_extra_args(extra_args)
        requested = extra_args.get("qr_entropy_source_type")
        if isinstance(requested, str):
            allowed = _allowed_source_names(
                os.environ.get(_PREINIT_ENV_VAR, _DEFAULT_PREINIT),
                os.environ.get(_INSTANCES_ENV_VAR, ""),
                os.environ.get(
                    "QR_ENTROPY_SOURCE_TYPE",
                    str(QRSamplerConfig.model_fields["entropy_source_type"].default),
                ),
            )
            if requested not in allowed:
                raise ConfigValidationError(
                    f"Entropy source {requested!r} is not pre-initialised for "
                    f"this deployment. Pre-initialised sources: "
                    f"{sorted(allowed)}. Set {_PREINIT_ENV_VAR} / "
                    f"{_INSTANCES_ENV_VAR} at process startup to include it."
                )

    def update_state(self, batch_update: Any | None) -> None:
        """Process batch composition changes.

        Must be called every engine step before ``apply()``. Processes
        changes in the required order: removed -> moved -> added.

        Args:
            batch_update: A ``BatchUpdate`` with ``removed``, ``moved``,
                and ``added`` sequences, or ``None`` if no changes.
        """
        self._update_state_impl(batch_update)

    @staticmethod
    def _added_index_and_params(added: Any) -> tuple[int | None, Any]:
        """Extract ``(batch_index, SamplingParams)`` from one ``BatchUpdate.added`` item.

        vLLM V1 passes ``AddedRequest`` as a TUPLE
        ``(index, params, prompt_tok_ids, output_tok_ids)`` (see
        ``vllm.v1.sample.logits_processor.interface``). Earlier/mocked shapes
        exposed ``.req_index`` / ``.sampling_params`` attributes. BOTH are
        supported so an ABI wobble degrades to "read the tuple" rather than
        silently dropping every per-request override — the failure mode where
        no per-request state is built and every token routes to the process
        default (per-request ``extra_args`` become dead).
        """
        if isinstance(added, (tuple, list)):
            idx = added[0] if len(added) > 0 else None
            params = added[1] if len(added) > 1 else None
            return idx, params
        return getattr(added, "req_index", None), getattr(added, "sampling_params", None)

    @staticmethod
    def _moved_indices(moved: Any) -> tuple[int | None, int | None, bool]:
        """Extract ``(src_index, dst_index, is_swap)`` from one ``BatchUpdate.moved`` item.

        vLLM V1 passes ``MovedRequest`` as ``(index1, index2, MoveDirectionality)``;
        a directionality whose name is ``SWAP`` exchanges the two batch slots
        (otherwise it is a one-way move). Mocked shapes exposed
        ``.src_index`` / ``.dst_index``.
        """
        if isinstance(moved, (tuple, list)):
            src = moved[0] if len(moved) > 0 else None
            dst = moved[1] if len(moved) > 1 else None
            direction = moved[2] if len(moved) > 2 else None
            return src, dst, getattr(direction, "name", "") == "SWAP"
        return getattr(moved, "src_index", None), getattr(moved, "dst_index", None), False

    def _update_state_impl(self, batch_update: Any | None) -> None:
        if batch_update is None:
            return

        # 1. Process removals.
        for removed in getattr(batch_update, "removed", []):
            req_idx = removed if isinstance(removed, int) else getattr(removed, "req_index", None)
            if req_idx is not None:
                state = self._request_states.pop(req_idx, None)
                if state is not None:
                    # The speculative prefetch for the never-sampled next
                    # token is abandoned — cancel best-effort so the
                    # background loop drops it on arrival.
                    if state.entropy_ticket is not None:
                        with contextlib.suppress(Exception):
                            state.entropy_ticket.cancel()
                        state.entropy_ticket = None
                    # Emit a request-boundary event so an operator can spot
                    # the K-5 failure mode (Modal-reported success with zero
                    # output) directly from the log stream.
                    logger.info(
                        "request %d completed: tokens=%d source=%s",
                        req_idx,
                        state.tokens_generated,
                        state.dominant_source_name,
                        extra={
                            "event": "entropy.request.completed",
                            "req_idx": req_idx,
                            "tokens_generated": state.tokens_generated,
                            "dominant_source": state.dominant_source_name,
                        },
                    )

        # 2. Process moves / swaps (index reassignments).
        for moved in getattr(batch_update, "moved", []):
            src_idx, dst_idx, is_swap = self._moved_indices(moved)
            if src_idx is None or dst_idx is None:
                continue
            src_state = self._request_states.pop(src_idx, None)
            if is_swap:
                dst_state = self._request_states.pop(dst_idx, None)
                if src_state is not None:
                    self._request_states[dst_idx] = src_state
                if dst_state is not None:
                    self._request_states[src_idx] = dst_state
            elif src_state is not None:
                self._request_states[dst_idx] = src_state

        # 3. Process additions.
        for added in getattr(batch_update, "added", []):
            req_idx, params = self._added_index_and_params(added)
            if req_idx is None:
                continue

            extra_args = getattr(params, "extra_args", None) or {}

            # Resolve per-request config.
            req_config = resolve_config(self._default_config, extra_args)

            # Bypass wins over everything else in extra_args: no pipeline
            # routing (so an un-preinit'd source name cannot raise in the
            # engine worker and kill the shared engine), no strategy or
            # amplifier construction, no entropy prefetch.
            if req_config.bypass:
                self._request_states[req_idx] = _BypassState()
                logger.info(
                    "request %d routed: bypass=True resolved=native",
                    req_idx,
                    extra={
                        "event": "entropy.request.routed",
                        "req_idx": req_idx,
                        "requested_source_type": extra_args.get("qr_entropy_source_type"),
                        "resolved_pipeline_source": "native",
                        "extra_args_keys": sorted(extra_args.keys()),
                        "qr_preset": extra_args.get("qr_preset"),
                        "bypass": True,
                    },
                )
                continue

            # Route to the pipeline matching the (possibly-overridden) source.
            target_source_type = req_config.entropy_source_type
            target_pipeline = self._pipelines.get(target_source_type)
            if target_pipeline is None:
                raise ConfigValidationError(
                    f"Entropy source {target_source_type!r} is not pre-initialised "
                    f"for this adapter. Pre-initialised sources: "
                    f"{sorted(self._pipelines.keys())}. "
                    f"Set {_PREINIT_ENV_VAR!s} at process startup to include it."
                )

            # Always build a fresh strategy. Stateful strategies (e.g.
            # hvh_drift) carry per-request EMA state on the instance, so
            # sharing the target pipeline's default would leak distributional
            # drift between concurrent requests (CLAUDE.md invariant 17).
            # The cost is one constructor call per addition.
            strategy = TemperatureStrategyRegistry.build(req_config, self._vocab_size)

            # Amplifier is safe to share when the resolved config matches
            # the target pipeline's defaults (it carries only calibration
            # state, which depends on config). Rebuild only when the config
            # differs. We compare model_dumps so a request that only overrode
            # the entropy source type still hits the fast path.
            if req_config is self._default_config or (
                req_config.model_dump() == target_pipeline.default_config.model_dump()
            ):
                amplifier = target_pipeline.amplifier
                hash_str = config_hash(target_pipeline.default_config)
            else:
                amplifier = AmplifierRegistry.build(req_config)
                # Calibrate per-request amplifier if it supports calibration.
                if hasattr(amplifier, "calibrate"):
                    amplifier.calibrate(target_pipeline.entropy_source, req_config)
                hash_str = config_hash(req_config)

            state = _RequestState(
                pipeline=target_pipeline,
                config=req_config,
                amplifier=amplifier,
                strategy=strategy,
                config_hash_str=hash_str,
            )
            self._request_states[req_idx] = state

            # Commit-then-fetch, step 0: fire the FIRST token's entropy
            # request now, at request-add time. There is no previous token
            # to wait for (the -1 sentinel commits to that fact), and the
            # round trip overlaps the entire prefill instead of stalling
            # the first sampling step. ``prefetch()`` never raises and
            # returns None for non-async sources (e.g. the system/PRNG
            # comparison lane), which keeps that path untouched.
            #
            # Skip it entirely in server-DRAW mode: the draw path fetches a
            # uniform via ``get_draw`` and never redeems these BYTE tickets, so
            # a byte prefetch here is dead work — and the async byte-prefetch
            # redeem path is where a ``_FetchReply`` shape mismatch surfaced and
            # killed the engine once per-request states began to be built.
            draw_mode = bool(getattr(amplifier, "requires_server_draw", False))
            if req_config.entropy_prefetch and not draw_mode:
                first_nonce = derive_commit_nonce(state.prefetch_salt, 0, -1)
                state.entropy_ticket = target_pipeline.entropy_source.prefetch(
                    req_config.sample_count, first_nonce
                )

            # Emit a single per-request routing event so an operator can
            # confirm the comparison pipe's per-column extra_args
            # ("qr_entropy_source_type": "quantum_grpc" vs "system")
            # actually landed on the matching pipeline. Without this,
            # K-2-style misconfigurations (Modal Secret silently
            # overriding the default to "system") silently route every
            # request to the wrong source.
            logger.info(
                "request %d routed: requested=%s resolved=%s preset=%s",
                req_idx,
                extra_args.get("qr_entropy_source_type"),
                target_pipeline.entropy_source.name,
                extra_args.get("qr_preset"),
                extra={
                    "event": "entropy.request.routed",
                    "req_idx": req_idx,
                    "requested_source_type": extra_args.get("qr_entropy_source_type"),
                    "resolved_pipeline_source": target_pipeline.entropy_source.name,
                    "extra_args_keys": sorted(extra_args.keys()),
                    "qr_preset": extra_args.get("qr_preset"),
                },
            )

    def apply(self, logits: Any) -> Any:
        """Run the full sampling pipeline on each row of the logit tensor.

        For each request in the batch:
            1. Convert logit row to numpy
            2. Delegate to ``pipeline.sample_token()``
            3. Write one-hot result back to engine tensor

        Args:
            logits: 2-D tensor of shape ``(num_requests, vocab_size)``.
                May be a ``torch.Tensor`` or a ``numpy.ndarray``.

        Returns:
            The modified logits tensor (in-place).
        """
        return self._apply_impl(logits)

    def _apply_impl(self, logits: Any) -> Any:
        # Determine batch size.
        if hasattr(logits, "shape"):
            num_requests = logits.shape[0] if len(logits.shape) > 1 else 1
        else:
            return logits

        if num_requests == 0:
            return logits

        is_numpy = isinstance(logits, np.ndarray)
        is_1d = len(logits.shape) == 1

        # --- Partition bypass rows from sampled rows ---
        # A row bypasses when its request opted in (qr_bypass=true) or when
        # it has no state and the process default bypasses (QR_BYPASS=true;
        # stateless rows only occur on an added-request ABI wobble).
        # Partitioning is a correctness requirement, not just perf: the
        # batched one-hot force fills the WHOLE tensor with -inf, which
        # would destroy bypass rows in a mixed batch.
        default_bypass = self._default_config.bypass
        sampled: list[int] = []
        for i in range(num_requests):
            state = self._request_states.get(i)
            if isinstance(state, _BypassState) or (state is None and default_bypass):
                if state is not None:
                    # Count steps so the completion event honestly reports
                    # ``tokens=N source=native`` (K-5 diagnostic preserved).
                    state.tokens_generated += 1
                continue
            sampled.append(i)

        if not sampled:
            # All-bypass step: zero GPU->CPU sync; vLLM's native sampler
            # applies the standard request params to every row.
            return logits

        num_sampled = len(sampled)
        all_sampled = num_sampled == num_requests

        # --- Extract the sampled rows as numpy in one transfer ---
        # Perf tranche 2026-07: the historical per-row ``logits[i].cpu()``
        # issued one device sync + copy per request per step; one batched
        # copy (into a pinned staging buffer when available) costs a single
        # sync regardless of batch size. A mixed batch gathers only the
        # sampled rows, so the copy is subset-sized.
        t_stage = time.perf_counter_ns()
        if is_1d:
            rows = [logits if is_numpy else self._to_numpy_batched(logits)]
        elif all_sampled:
            cpu_logits = logits if is_numpy else self._to_numpy_batched(logits)
            rows = [cpu_logits[i] for i in range(num_requests)]
        else:
            rows = self._gather_rows(logits, sampled, is_numpy)
        to_numpy_ms = (time.perf_counter_ns() - t_stage) / 1_000_000.0 / num_sampled

        # --- Per-row sampling (parallel across rows when configured) ---
        results = self._sample_rows(sampled, rows)

        # --- Force one-hot logits using engine tensor ---
        # Batched: one fill + one scatter for the whole step instead of a
        # template copy + scalar host->device write per row. Mixed batches
        # restrict both writes to the sampled rows.
        t_stage = time.perf_counter_ns()
        token_ids = [r.token_id for r in results]
        if is_1d:
            self._force_onehot(logits, token_ids[0], is_numpy)
        elif all_sampled:
            self._force_onehot_batch(logits, token_ids, is_numpy)
        else:
            self._force_onehot_rows(logits, sampled, token_ids, is_numpy)
        onehot_ms = (time.perf_counter_ns() - t_stage) / 1_000_000.0 / num_sampled

        # --- Telemetry (main thread only; _PerfAggregator is not locked) ---
        # to_numpy/onehot are batch-wide costs attributed evenly per SAMPLED
        # row (bypass rows cost neither stage and produce no records).
        for result in results:
            self._perf.note(result.record, to_numpy_ms, onehot_ms)

        return logits

    def _sample_rows(self, indices: list[int], rows: list[np.ndarray]) -> list[Any]:
        """Sample every batch row, in parallel when the pool allows it.

        Rows are independent: each has its own ``_RequestState`` (strategy
        EMA state, prefetch ticket, token counter), and the shared objects
        on the hot path (entropy sources, amplifiers, the sampling logger)
        are thread-safe — see the ``EntropySource`` ABC's thread-safety
        note. Results are returned in row order.

        Args:
            indices: ORIGINAL batch index of each row (keys
                ``_request_states``). On a mixed bypass batch the sampled
                rows are compacted, so positional enumeration would mis-key
                every row after the first bypass one.
            rows: One 1-D numpy logit row per sampled request, aligned
                with ``indices``.

        Returns:
            One ``SamplingResult`` per row, in the same order.
        """
        if len(rows) == 1 or self._row_worker_cap <= 1:
            return [self._sample_row(i, row) for i, row in zip(indices, rows, strict=True)]
        executor = self._row_executor
        if executor is None:
            executor = ThreadPoolExecutor(
                max_workers=self._row_worker_cap,
                thread_name_prefix="qr-sampler-row",
            )
            self._row_executor = executor
        return list(executor.map(self._sample_row, indices, rows))

    def _sample_row(self, i: int, row: np.ndarray) -> Any:
        """Run the sampling pipeline for one batch row.

        Args:
            i: Batch row index (keys ``_request_states``).
            row: 1-D numpy logit row for this request.

        Returns:
            The pipeline's ``SamplingResult`` for this row.
        """
        # Get per-request state or fall back to defaults. Bypass rows never
        # reach this method (the partition in ``_apply_impl`` excludes them);
        # the isinstance narrowing keeps the union-typed dict mypy-clean and
        # routes a hypothetical stray ``_BypassState`` to the default
        # pipeline instead of an AttributeError in the engine worker.
        raw_state = self._request_states.get(i)
        state = raw_state if isinstance(raw_state, _RequestState) else None
        prefetch_ctx: PrefetchContext | None = None
        if state is not None:
            pipeline = state.pipeline
            req_config: QRSamplerConfig | None = state.config
            amplifier: SignalAmplifier | None = state.amplifier
            strategy: TemperatureStrategy | None = state.strategy
            hash_str: str | None = state.config_hash_str
            # Step index BEFORE increment: 0-based token index, the
            # same convention derive_commit_nonce documents.
            prefetch_ctx = PrefetchContext(
                salt=state.prefetch_salt,
                step=state.tokens_generated,
                ticket=state.entropy_ticket,
            )
            state.entropy_ticket = None  # consumed below, one way or another
            state.tokens_generated += 1
        else:
            pipeline = self._pipeline
            req_config = None
            amplifier = None
            strategy = None
            hash_str = None

        # --- Delegate to pipeline (routed by entropy source) ---
        # build_onehot=False: the one-hot is forced directly on the
        # engine tensor by the caller, so the pipeline's vocab-size numpy
        # allocation + fill per token would be pure dead weight.
        result = pipeline.sample_token(
            row,
            config=req_config,
            amplifier=amplifier,
            strategy=strategy,
            config_hash_str=hash_str,
            prefetch_ctx=prefetch_ctx,
            build_onehot=False,
        )

        # Store the in-flight ticket for this request's NEXT token
        # (fired inside sample_token immediately after selection).
        if state is not None:
            state.entropy_ticket = result.next_ticket

        return result

    def _to_numpy_batched(self, tensor: Any) -> np.ndarray:
        """Convert the whole logits tensor to numpy with ONE device copy.

        CPU tensors convert zero-copy. GPU tensors pay a single batched
        device->host transfer (staged through the pinned buffer when vLLM
        constructed the adapter with ``is_pin_memory=True``), replacing the
        historical one-sync-per-row pattern.

        Args:
            tensor: A torch.Tensor (any device) or array-like.

        Returns:
            A 1-D or 2-D numpy array of the same shape.
        """
        try:
            is_cpu = tensor.is_cpu
        except AttributeError:
            return np.asarray(tensor)
        if is_cpu:
            result: np.ndarray = tensor.detach().numpy()
            return result
        staging = self._pinned_slice(tuple(tensor.shape), tensor.dtype)
        if staging is not None:
            staging.copy_(tensor, non_blocking=False)
            result = staging.numpy()
            return result
        result = tensor.detach().cpu().numpy()
        return result

    def _gather_rows(self, logits: Any, indices: list[int], is_numpy: bool) -> list[np.ndarray]:
        """Extract only the sampled rows of a mixed bypass batch as numpy.

        numpy inputs stay zero-copy row views. torch tensors gather the
        sampled rows with ONE ``index_select`` — on-device for GPU inputs,
        so the device->host transfer that follows is subset-sized instead
        of whole-batch (a research mixed batch is dominated by bypass
        rows) — then reuse the batched conversion (pinned staging included).

        Args:
            logits: 2-D logit array or tensor ``(num_requests, vocab)``.
            indices: Sampled batch rows to extract, ascending.
            is_numpy: Whether logits is a numpy array.

        Returns:
            One 1-D numpy row per index, in ``indices`` order.
        """
        if is_numpy:
            return [logits[i] for i in indices]
        try:
            import torch
        except ImportError:  # pragma: no cover - torch-less env, array-like input
            arr = np.asarray(logits)
            return [arr[i] for i in indices]
        idx = torch.as_tensor(indices, dtype=torch.long, device=logits.device)
        subset = self._to_numpy_batched(logits.index_select(0, idx))
        return [subset[i] for i in range(len(indices))]

    @staticmethod
    def _to_numpy(tensor: Any) -> np.ndarray:
        """Convert a tensor to a numpy array with zero-copy where possible.

        Args:
            tensor: A torch.Tensor or numpy array.

        Returns:
            Numpy array view (if CPU tensor) or copy.
        """
        if isinstance(tensor, np.ndarray):
            return tensor
        # torch.Tensor -- use .numpy() for zero-copy on CPU.
        try:
            if not tensor.is_cpu:
                result: np.ndarray = tensor.detach().cpu().numpy()
            else:
                result = tensor.detach().numpy()
            return result
        except AttributeError:
            return np.asarray(tensor)

    def _force_onehot(self, logits: Any, token_id: int, is_numpy: bool) -> None:
        """Force 1-D logits to one-hot: all -inf except token_id = 0.0.

        Args:
            logits: 1-D logit array or tensor.
            token_id: The selected token index.
            is_numpy: Whether logits is a numpy array.
        """
        if is_numpy:
            logits[:] = float("-inf")
            logits[token_id] = 0.0
        else:
            logits.copy_(self._onehot_template, non_blocking=True)
            logits[token_id] = 0.0

    def _force_onehot_batch(self, logits: Any, token_ids: list[int], is_numpy: bool) -> None:
        """Force every batch row to one-hot with two vectorised operations.

        Equivalent to calling ``_force_onehot_row`` for each row, but costs
        one fill + one scatter for the whole step — the historical per-row
        template copy plus scalar ``tensor[i, tok] = 0.0`` write issued two
        kernel launches (and one host->device transfer) per request.

        Args:
            logits: 2-D logit array or tensor ``(num_requests, vocab)``.
            token_ids: Selected token per row, in batch order.
            is_numpy: Whether logits is a numpy array.
        """
        if is_numpy:
            logits[:] = float("-inf")
            logits[np.arange(len(token_ids)), token_ids] = 0.0
        else:
            import torch

            logits.fill_(float("-inf"))
            idx = torch.as_tensor(token_ids, dtype=torch.long, device=logits.device)
            logits.scatter_(1, idx.unsqueeze(1), 0.0)

    def _force_onehot_rows(
        self,
        logits: Any,
        row_indices: list[int],
        token_ids: list[int],
        is_numpy: bool,
    ) -> None:
        """Force only ``row_indices`` to one-hot, leaving other rows alone.

        Mixed-batch variant of ``_force_onehot_batch``: bypass rows must
        keep their raw logits for the engine's native sampler, so the -inf
        fill and the scatter touch the sampled rows only.

        Args:
            logits: 2-D logit array or tensor ``(num_requests, vocab)``.
            row_indices: Batch rows to overwrite, aligned with ``token_ids``.
            token_ids: Selected token per row in ``row_indices``.
            is_numpy: Whether logits is a numpy array.
        """
        if is_numpy:
            rows = np.asarray(row_indices)
            logits[rows, :] = float("-inf")
            logits[rows, token_ids] = 0.0
        else:
            import torch

            idx = torch.as_tensor(row_indices, dtype=torch.long, device=logits.device)
            tok = torch.as_tensor(token_ids, dtype=torch.long, device=logits.device)
            logits.index_fill_(0, idx, float("-inf"))
            logits[idx, tok] = 0.0

    def _force_onehot_row(
        self,
        logits: Any,
        row_idx: int,
        token_id: int,
        is_numpy: bool,
    ) -> None:
        """Force a batch row to one-hot: all -inf except token_id = 0.0.

        Args:
            logits: 2-D logit array or tensor.
            row_idx: Batch row index.
            token_id: The selected token index.
            is_numpy: Whether logits is a numpy array.
        """
        if is_numpy:
            logits[row_idx, :] = float("-inf")
            logits[row_idx, token_id] = 0.0
        else:
            logits[row_idx].copy_(self._onehot_template, non_blocking=True)
            logits[row_idx, token_id] = 0.0

    @property
    def entropy_source(self) -> Any:
        """The active entropy source (may be a FallbackEntropySource wrapper)."""
        return self._pipeline.entropy_source

    @property
    def default_config(self) -> QRSamplerConfig:
        """The default configuration loaded from environment."""
        return self._default_config

    @property
    def sampling_logger(self) -> SamplingLogger:
        """The diagnostic logger for this processor."""
        return self._pipeline.sampling_logger

    def close(self) -> None:
        """Release all resources held by the adapter.

        Shuts down the row worker pool and closes every pre-initialised
        pipeline. Safe to call multiple times.
        """
        if self._row_executor is not None:
            self._row_executor.shutdown(wait=False)
            self._row_executor = None
        seen: set[int] = set()
        for pipeline in self._pipelines.values():
            if id(pipeline) in seen:
                continue
            seen.add(id(pipeline))
            pipeline.close()
