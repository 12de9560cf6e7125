"""CDF-based token selector.

Implements the full token selection pipeline: temperature scaling -> top-k ->
softmax -> top-p -> descending sort -> CDF -> binary search with the uniform
value u from signal amplification.

Semantic interpretation of u:
    u near 0.0: selects the most probable token (conservative)
    u near 1.0: selects the least probable surviving token (creative)
"""

from __future__ import annotations

import numpy as np

from qr_sampler.exceptions import TokenSelectionError
from qr_sampler.selection.types import SelectionResult

# iter-55: CDF fast-path head size. The selection CDF concentrates its
# mass in the head of the descending-probability order, so sorting the
# top-_CDF_FAST_HEAD candidates (found via O(n) argpartition) almost
# always suffices to locate the selected token — replacing the full
# O(n log n) argsort over the whole vocabulary (~152k for Qwen3.6) that
# previously ran on EVERY token. When ``u`` falls beyond the head's
# nonzero cumulative mass the selector escalates to the original
# full-sort path. Equivalence contract: for distributions with no
# EXACTLY-equal float probabilities straddling the head boundary, the
# fast path returns the identical (token, rank) to the full sort — the
# head is the same descending prefix with the same partial sums. Ties
# at the boundary may resolve to a different equal-probability token;
# tie order was already unspecified (np.argsort's default quicksort is
# not stable), so this widens no documented guarantee.
_CDF_FAST_HEAD = 512

# Only engage the fast path when it meaningfully beats the full sort.
_CDF_FAST_MIN_VOCAB = _CDF_FAST_HEAD * 4


class TokenSelector:
    """Stateless CDF-based token selector.

    All methods are either static or depend only on the arguments passed.
    The selector has no mutable state, making it safe for concurrent use.
    """

    def select(
        self,
        logits: np.ndarray,
        temperature: float,
        top_k: int,
        top_p: float,
        u: float,
        min_p: float = 0.0,
        truncate_first: bool = False,
    ) -> SelectionResult:
        """Select one token from the logit distribution using CDF lookup.

        Pipeline (default order — AGENTS.md invariant 15):
            1. Temperature scaling: logits / T
            2. Top-k filtering: keep only k highest logits
            3. Softmax: convert to probabilities
            4. Min-p mask: keep tokens with prob >= min_p * max_prob
            5. Top-p (nucleus): keep minimal set with cumulative prob >= p
            6. Descending sort by probability
            7. Build CDF via cumulative sum
            8. Binary search with u to select token

        With ``truncate_first=True`` (EVDT-TT order) the min-p mask is
        applied to the RAW (temperature-free) distribution and temperature
        is applied to the kept support afterwards — see
        :meth:`_select_truncate_first`. The default ``False`` is a strict
        no-op: this method's behavior is byte-identical to the pre-flag
        selector.

        Args:
            logits: 1-D logit array (vocab_size,).
            temperature: Sampling temperature (must be > 0).
            top_k: Number of top tokens to keep (<=0 disables).
            top_p: Nucleus sampling threshold in (0, 1] (1.0 disables).
            u: Uniform random value from signal amplification, in (0, 1).
            min_p: Dynamic floor relative to peak probability. Keeps tokens with
                ``prob >= min_p * max_prob``. ``0.0`` (default) disables, making
                this a no-op so existing call sites are unaffected.
            truncate_first: When True, apply the min-p mask BEFORE
                temperature (truncate-first-then-temperature order).
                Default False preserves the pinned selector order.

        Returns:
            SelectionResult with the selected token and diagnostics.

        Raises:
            TokenSelectionError: If no candidate tokens survive filtering.
        """
        if truncate_first:
            return self._select_truncate_first(logits, temperature, top_k, top_p, u, min_p)

        if temperature <= 0:
            # Zero temperature -> greedy (pick max logit).
            max_idx = int(np.argmax(logits))
            return SelectionResult(
                token_id=max_idx,
                token_rank=0,
                token_prob=1.0,
                num_candidates=1,
                diagnostics={"greedy": True},
            )

        vocab_size = logits.size

        # Compaction fast path (perf tranche 2026-07): when top-k actually
        # truncates, every token outside the top-k support ends up with
        # probability exactly 0 (``exp(-inf)``), yet the historical flow
        # still ran softmax / min-p / top-p / CDF over the full vocabulary
        # — including a full-vocab argsort in ``_apply_top_p``. Gathering
        # the k surviving logits first (temperature scaling is monotone
        # for T > 0, so the support set is identical) turns all of those
        # stages into O(k) work, then the selected sub-index maps back to
        # vocabulary space. Probabilities on the support match the full
        # computation exactly up to summation-order rounding (last ulp) —
        # the same equivalence class as the ``_CDF_FAST_HEAD`` path.
        if 0 < top_k < vocab_size:
            return self._select_compact_top_k(logits, temperature, top_k, top_p, u, min_p)

        # 1. Temperature scaling. T == 1.0 is an exact no-op — skip the
        # full-vocab divide (softmax never mutates its input).
        scaled = logits if temperature == 1.0 else logits / temperature

        # 2. Top-k filtering (disabled here: handled by the compaction
        # path above whenever it would truncate).
        effective_k = vocab_size

        # 3. Softmax.
        probs = self._stable_softmax(scaled)

        # 4-5. Min-p mask and top-p (nucleus) filtering. When both are
        # disabled each helper would independently scan for ``probs > 0``;
        # count once instead (identical value, two fewer full-vocab passes).
        num_candidates: int | None
        if min_p <= 0.0 and top_p >= 1.0:
            nonzero = int(np.count_nonzero(probs > 0))
            effective_min_p_candidates = nonzero
            effective_n = nonzero
            num_candidates = nonzero
        else:
            probs, effective_min_p_candidates = self._apply_min_p(probs, min_p)
            probs, effective_n = self._apply_top_p(probs, top_p)
            num_candidates = None

        if effective_n == 0:
            raise TokenSelectionError("No candidate tokens survived top-k and top-p filtering")

        # 6-8. CDF selection.
        vocab_idx, rank, prob, num_candidates = self._cdf_select(
            probs, u, num_candidates=num_candidates
        )

        return SelectionResult(
            token_id=vocab_idx,
            token_rank=rank,
            token_prob=prob,
            num_candidates=num_candidates,
            diagnostics={
                "effective_top_k": effective_k,
                "effective_top_p_candidates": effective_n,
                "effective_min_p_candidates": effective_min_p_candidates,
                "min_p_used": min_p,
                "u": u,
            },
        )

    def _select_compact_top_k(
        self,
        logits: np.ndarray,
        temperature: float,
        top_k: int,
        top_p: float,
        u: float,
        min_p: float,
    ) -> SelectionResult:
        """Default-order selection compacted onto the top-k support.

        Semantically identical to the full-vocabulary flow (invariant 15
        order: top-k -> softmax -> min-p -> top-p -> CDF): tokens outside
        the top-k support carry probability exactly 0 in the historical
        computation, so removing them before softmax leaves every surviving
        probability, count, and diagnostic unchanged (up to last-ulp
        summation-order rounding). One O(vocab) argpartition + gather
        replaces the historical full-vocab softmax, mask, sort and CDF
        passes with O(top_k) work.

        Args:
            logits: 1-D logit array (vocab_size,).
            temperature: Sampling temperature (> 0; greedy handled by caller).
            top_k: Number of top tokens to keep (0 < top_k < vocab_size).
            top_p: Nucleus sampling threshold in (0, 1] (1.0 disables).
            u: Uniform random value from signal amplification, in (0, 1).
            min_p: Dynamic floor relative to peak probability (0.0 disables).

        Returns:
            SelectionResult with the selected token and diagnostics.

        Raises:
            TokenSelectionError: If no candidate tokens survive filtering.
        """
        vocab_size = logits.size

        # O(vocab) top-k support selection on the raw logits: dividing by a
        # positive temperature is strictly monotone, so the support set is
        # the same one `_apply_top_k` derives from the scaled logits (tie
        # order at the k-th place is unspecified in both, as documented).
        top_idx = np.argpartition(logits, vocab_size - top_k)[vocab_size - top_k :]
        sub_logits = logits[top_idx]

        scaled = sub_logits if temperature == 1.0 else sub_logits / temperature
        probs = self._stable_softmax(scaled)

        num_candidates: int | None
        if min_p <= 0.0 and top_p >= 1.0:
            nonzero = int(np.count_nonzero(probs > 0))
            effective_min_p_candidates = nonzero
            effective_n = nonzero
            num_candidates = nonzero
        else:
            probs, effective_min_p_candidates = self._apply_min_p(probs, min_p)
            probs, effective_n = self._apply_top_p(probs, top_p)
            num_candidates = None

        if effective_n == 0:
            raise TokenSelectionError("No candidate tokens survived top-k and top-p filtering")

        sub_idx, rank, prob, num_candidates = self._cdf_select(
            probs, u, num_candidates=num_candidates
        )

        return SelectionResult(
            token_id=int(top_idx[sub_idx]),
            token_rank=rank,
            token_prob=prob,
            num_candidates=num_candidates,
            diagnostics={
                "effective_top_k": top_k,
                "effective_top_p_candidates": effective_n,
                "effective_min_p_candidates": effective_min_p_candidates,
                "min_p_used": min_p,
                "u": u,
            },
        )

    def _select_truncate_first(
        self,
        logits: np.ndarray,
        temperature: float,
        top_k: int,
        top_p: float,
        u: float,
        min_p: float,
    ) -> SelectionResult:
        """Truncate-first-then-temperature selection (EVDT-TT order).

        Pipeline:
            1. Top-k filtering on raw logits (temperature-invariant, so its
               position relative to T is immaterial — kept first to reuse
               the logit-space implementation).
            2. Softmax of the RAW (temperature-free) logits.
            3. Min-p mask on the raw probabilities: keep tokens with
               ``p >= min_p * max(p)``.
            4. Temperature on the kept support: ``softmax(kept_logits / T)``
               — mathematically identical to ``softmax(log(p_kept) / T)``
               because renormalisation is a constant offset in log space.
            5. Top-p (nucleus) filtering.
            6-8. Descending sort -> CDF -> binary search with u.

        The kept SUPPORT is decided before temperature, so it depends on
        the raw distribution's shape — the support set is unreachable by
        any static scale-then-truncate ``(T, min_p)`` configuration.

        Args:
            logits: 1-D logit array (vocab_size,).
            temperature: Sampling temperature (<= 0 falls back to greedy,
                same contract as the default order).
            top_k: Number of top tokens to keep (<=0 disables).
            top_p: Nucleus sampling threshold in (0, 1] (1.0 disables).
            u: Uniform random value from signal amplification, in (0, 1).
            min_p: Dynamic floor relative to peak RAW probability.

        Returns:
            SelectionResult with the selected token and diagnostics
            (including ``"truncate_first": True``).

        Raises:
            TokenSelectionError: If no candidate tokens survive filtering.
        """
        if temperature <= 0:
            # Greedy: identical contract to the default-order path.
            max_idx = int(np.argmax(logits))
            return SelectionResult(
                token_id=max_idx,
                token_rank=0,
                token_prob=1.0,
                num_candidates=1,
                diagnostics={"greedy": True, "truncate_first": True},
            )

        # 1. Top-k on raw logits.
        filtered, effective_k = self._apply_top_k(logits, top_k)

        # 2. Softmax of the RAW distribution (no temperature).
        raw_probs = self._stable_softmax(filtered)

        # 3. Min-p mask on raw probabilities.
        kept_probs, effective_min_p_candidates = self._apply_min_p(raw_probs, min_p)
        kept_mask = kept_probs > 0

        # 4. Temperature on the kept support. Masking pruned logits to
        # -inf then dividing by T is equivalent to softmax(log(p_kept)/T):
        # log(p_kept) = logit - logZ on the kept support, and the constant
        # -logZ/T offset cancels in the softmax.
        scaled = np.where(kept_mask, filtered, -np.inf) / temperature
        probs = self._stable_softmax(scaled)

        # 5. Top-p (nucleus) filtering.
        probs, effective_n = self._apply_top_p(probs, top_p)

        if effective_n == 0:
            raise TokenSelectionError("No candidate tokens survived top-k and top-p filtering")

        # 6-8. CDF selection.
        vocab_idx, rank, prob, num_candidates = self._cdf_select(probs, u)

        return SelectionResult(
            token_id=vocab_idx,
            token_rank=rank,
            token_prob=prob,
            num_candidates=num_candidates,
            diagnostics={
                "effective_top_k": effective_k,
                "effective_top_p_candidates": effective_n,
                "effective_min_p_candidates": effective_min_p_candidates,
                "min_p_used": min_p,
                "u": u,
                "truncate_first": True,
            },
        )

    @staticmethod
    def _apply_min_p(probs: np.ndarray, min_p: float) -> tuple[np.ndarray, int]:
        """Dynamic floor mask: keep tokens with prob >= min_p * max_prob.

        Acts as a peak-relative cutoff that adapts to distribution shape: when
        the distribution is peaked, few tokens survive; when flat, many do. This
        is a numpy port of the V6 HVH-Drift reference (hvh_drift.py:157-163).

        Args:
            probs: Probability array (vocab_size,). Must already be normalized.
            min_p: Threshold scale in [0, 1]. ``0.0`` disables (no-op).

        Returns:
            Tuple of (renormalized probability array, number of surviving tokens).
            If ``min_p == 0.0``, returns the input unchanged with the count of
            non-zero entries.
        """
        if min_p <= 0.0:
            return probs, int(np.sum(probs > 0))

        top_prob = float(probs.max())
        mask = probs >= min_p * top_prob

        if not mask.any():
            # Pathological case: reserve argmax to avoid empty CDF.
            mask = np.zeros_like(probs, dtype=bool)
            mask[int(np.argmax(probs))] = True

        result = np.where(mask, probs, 0.0)
        total = float(result.sum())
        if total > 0.0:
            result = result / total

        return result, int(mask.sum())

    @staticmethod
    def _apply_top_k(logits: np.ndarray, k: int) -> tuple[np.ndarray, int]:
        """Keep only the top-k logits, setting the rest to -inf.

        Args:
            logits: 1-D logit array (may be modified in place).
            k: Number of top tokens to keep. <=0 disables filtering.

        Returns:
            Tuple of (filtered logits, effective k).
        """
        vocab_size = len(logits)
        if k <= 0 or k >= vocab_size:
            return logits, vocab_size

        # Use argpartition for O(n) selection of top-k indices.
        threshold_idx = vocab_size - k
        partitioned = np.argpartition(logits, threshold_idx)
        below_k = partitioned[:threshold_idx]

        result = logits.copy()
        result[below_k] = -np.inf
        return result, k

    @staticmethod
    def _stable_softmax(logits: np.ndarray) -> np.ndarray:
        """Numerically stable softmax via shift-by-max.

        Args:
            logits: 1-D logit array (may contain -inf for masked tokens).

        Returns:
            Probability array of the same shape, summing to 1.0.
        """
        # iter-55: the max over ALL logits equals the max over finite
        # logits whenever any finite value exists (-inf never wins), so
        # the boolean-mask fancy-index copy of the full vocab is only
        # needed on the all-masked degenerate branch.
        max_logit = np.max(logits)
        if not np.isfinite(max_logit):
            finite_mask = np.isfinite(logits)
            if not np.any(finite_mask):
                # All masked -- return uniform over all tokens (degenerate case).
                n = len(logits)
                return np.full(n, 1.0 / n)
            max_logit = np.max(logits[finite_mask])

        shifted = logits - max_logit
        # -inf - max_logit is still -inf, exp(-inf) = 0. The subtraction
        # above allocated a fresh float array we own, so exp (and the
        # final normalisation below) run in place — one allocation per
        # softmax instead of three (perf tranche 2026-07).
        exp_shifted = np.exp(shifted, out=shifted) if shifted.dtype.kind == "f" else np.exp(shifted)
        total = np.sum(exp_shifted)

        if total == 0.0:
            # Unreachable after shift-by-max (the max element contributes
            # exp(0)=1.0 whenever max_logit is finite) — kept as a
            # defensive backstop. Compute the mask locally: the fast path
            # above no longer materialises it (iter-55 review finding).
            backstop_mask = np.isfinite(logits)
            n = int(np.sum(backstop_mask))
            probs = np.zeros_like(logits, dtype=np.float64)
            probs[backstop_mask] = 1.0 / max(n, 1)
            return probs

        result: np.ndarray = np.divide(exp_shifted, total, out=exp_shifted)
        return result

    @staticmethod
    def _apply_top_p(probs: np.ndarray, top_p: float) -> tuple[np.ndarray, int]:
        """Nucleus sampling: keep smallest set of tokens with cumulative prob >= top_p.

        Tokens outside the nucleus are zeroed and probabilities are renormalized.

        Args:
            probs: Probability array (vocab_size,).
            top_p: Cumulative probability threshold in (0, 1]. 1.0 disables.

        Returns:
            Tuple of (renormalized probability array, number of surviving tokens).
        """
        if top_p >= 1.0:
            return probs, int(np.sum(probs > 0))

        # Sort in descending probability order.
        sorted_indices = np.argsort(probs)[::-1]
        sorted_probs = probs[sorted_indices]
        cumulative = np.cumsum(sorted_probs)

        # Find the cutoff: first index where cumulative >= top_p.
        # Include that token (so we always have at least one).
        cutoff_mask = cumulative >= top_p
        cutoff_idx = int(np.argmax(cutoff_mask)) if np.any(cutoff_mask) else len(sorted_probs) - 1

        # Zero out tokens beyond the cutoff.
        result = np.zeros_like(probs)
        surviving_indices = sorted_indices[: cutoff_idx + 1]
        result[surviving_indices] = probs[surviving_indices]

        # Renormalize.
        total = np.sum(result)
        if total > 0:
            result = result / total

        num_surviving = cutoff_idx + 1
        return result, num_surviving

    @staticmethod
    def _cdf_select(
        probs: np.ndarray, u: float, num_candidates: int | None = None
    ) -> tuple[int, int, float, int]:
        """Select a token via CDF binary search.

        Sorts tokens by descending probability, builds a CDF, and uses
        np.searchsorted to find the token corresponding to uniform value u.

        Args:
            probs: Probability array (vocab_size,). Must sum to ~1.0.
            u: Uniform random value in (0, 1).
            num_candidates: Pre-computed count of ``probs > 0`` entries, when
                the caller already scanned for it (avoids a redundant
                full-vocab pass). ``None`` computes it here.

        Returns:
            Tuple of (vocabulary index, rank, probability, num_candidates).

        Raises:
            TokenSelectionError: If no tokens have non-zero probability.
        """
        # Get non-zero probability tokens.
        if num_candidates is None:
            num_candidates = int(np.count_nonzero(probs > 0))
        if num_candidates == 0:
            raise TokenSelectionError("No tokens with non-zero probability for CDF selection")

        # iter-55 fast path: locate the selection inside the top-K head
        # (O(n) argpartition + O(K log K) sort) instead of full-sorting
        # the whole vocabulary. Escalates to the full sort whenever ``u``
        # is not strictly covered by the head's nonzero cumulative mass —
        # including the u-beyond-total-mass clamp case — so every
        # selection this path returns is identical to the full path's.
        n = probs.size
        if n >= _CDF_FAST_MIN_VOCAB:
            head_count = min(_CDF_FAST_HEAD, n)
            head_unsorted = np.argpartition(probs, n - head_count)[n - head_count :]
            head_order = np.argsort(probs[head_unsorted])[::-1]
            head_indices = head_unsorted[head_order]
            head_probs = probs[head_indices]
            head_nonzero = int(np.count_nonzero(head_probs > 0))
            if head_nonzero > 0:
                head_cdf = np.cumsum(head_probs[:head_nonzero])
                if u < float(head_cdf[-1]):
                    rank = int(np.searchsorted(head_cdf, u, side="left"))
                    rank = min(rank, head_nonzero - 1)
                    return (
                        int(head_indices[rank]),
                        rank,
                        float(head_probs[rank]),
                        num_candidates,
                    )
            # Fall through: selection lies beyond the head (rare tail
            # draw) — take the exact full-sort path below.

        # Sort by descending probability.
        sorted_indices = np.argsort(probs)[::-1]
        sorted_probs = probs[sorted_indices]

        # Trim to non-zero candidates.
        candidate_indices = sorted_indices[:num_candidates]
        candidate_probs = sorted_probs[:num_candidates]

        # Build CDF.
        cdf = np.cumsum(candidate_probs)

        # Binary search: find first CDF value >= u.
        rank = int(np.searchsorted(cdf, u, side="left"))

        # Clamp rank to valid range.
        rank = min(rank, num_candidates - 1)

        vocab_idx = int(candidate_indices[rank])
        prob = float(candidate_probs[rank])

        return vocab_idx, rank, prob, num_candidates
