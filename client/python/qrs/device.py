"""Token selection on the device: libqrs's tokens without copying rows.

    from qrs.device import row_params, select_rows
    params = [row_params(cfg) for cfg in configs]   # None: the host's
    sel = select_rows(logits, u, params, resolve=host_select)
    sel.token            # int64 on logits.device: libqrs's token, always

The rows stay where they are (a CUDA device; CPU tensors work too, which
is how the tests run).  Per row, in the reference's order (top-k,
temperature, softmax, min-p, top-p, the CDF search in descending
probability, ties higher token id first), a float32 pass computes the
weights ``e = exp((x - max) / T)`` with a proven bound on their error, a
histogram of them by ``d = (x - max) / T`` in buckets of 1/16 (finer,
by powers of two, for rows whose logits span less than 128 T; float64
bucket sums), and the crossings (the top-p cut at ``top_p Z``, then the
CDF at ``u Z_nucleus``) are placed in a bucket by those sums; the
crossing's bucket is then put in order (its first GATHER elements by
(logit, token id), descending) with float64 weights.  A crossing is
certified when the element found is the same at both ends of the
target's uncertainty; only then is the token the device's.  Every other
row (``u`` or a cut within the bound of a prefix sum, a min-p threshold
within the bound of a weight, a NaN / +inf / all -inf row, a crossing in
the histogram's tail or past the gathered elements, near-equal weights
of different logits next to the choice, and every configuration the
device does not cover) is *uncertified* and its token comes from libqrs
on the host, from that one row's copy (``resolve``).

The bound.  Against the exact ``exp(-(max - x) / T)``, a float32 weight
has a relative error of at most ``C0 + C1 |d|``: ``d`` carries the
roundings of ``max - x``, of ``1 / T`` to float and of the product (and
``exp`` through ``exp2`` one more of ``d log2 e``), at most ``4 u |d|``
(``u = 2^-24``), which ``exp`` turns into a relative error of about the
same size; C1 is twice that.  C0 = 2^-19 covers the exponential itself
(CUDA's ``ex2.approx`` is within about 2^-22, glibc's and torch's
within a few ulps) eight times over.  Weights below ``d = -87`` are
flushed (each below 1.2e-38: ``n * 2e-38`` is added).  A bucket holding
``-(k+1)/s < d <= -k/s`` (s: the row's buckets per unit, 16 or a
finer power of two) is therefore within ``S (C0 + C1 (k+1)/s)`` of its
exact sum; the tail (below the last bucket) within ``S (C0 + 88 C1)``.  The
float64 sums of those weights (any order) and libqrs's own double sums
(its fast path allows 4e-11 Z a side) are covered by SLACK = 1e-10 Z on
every mass.  The elements of a crossing's bucket get float64 weights.
A crossing at element j is certified when ``prefix(j-1) + E < target_lo``
and ``prefix(j) - E > target_hi`` (E: the bound of the mass before j's
bucket plus SLACK; target_lo/hi: the target with the bound of its own
total): every value within the bounds, libqrs's included, picks j.

Kernels.  Two Triton kernels make the passes over the rows (the max and
the non-finite check; the weights, histogram, counts and the T = 1
entropy moments); ``backend="torch"`` runs the same arithmetic as plain
torch (the readable reference, and the CPU path).  Under
``TRITON_INTERPRET=1`` the kernels run on CPU tensors.  The top-k
threshold (torch.topk on an exact (logit, id) key) and the crossing's
bucket (the same key, one topk per crossing) are torch on both."""

from __future__ import annotations

import errno
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .errors import ConfigError, QrsError

NB = 2048                   # head buckets of 1/16 in d over (-128, 0]
MAX_FINE = 16               # buckets down to 2^-16 / 16 for flat rows
C0 = 2.0 ** -19
C1 = 8.0 * 2.0 ** -24
SLACK = 1e-10               # double sums (ours and libqrs's), relative to Z
FLUSH = 2e-38               # a flushed weight, per element
GATHER = 1024               # elements of a crossing's bucket put in order
MINP_MARGIN = 1e-5          # min-p band in d, times (1 + |ln min_p|)
UNDER_LO, UNDER_HI = 700.0, 750.0   # d band where p may underflow to 0
MAX_TOPK = 4096             # larger top-k goes to the host
T_MIN, T_MAX = 0.01, 100.0
CHUNK = 1 << 22             # elements per torch chunk (memory bound)

#: Where each temperature strategy runs (docs/python.md has the table).
DEVICE_STRATEGIES = frozenset({"fixed"})


@dataclass(frozen=True)
class RowParams:
    """One row's selection settings (the reference order only)."""
    temperature: float
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0


def row_params(cfg: Any) -> RowParams | None:
    """The device settings of a qrs.Config, or None when the row must go
    to the host path (a strategy whose temperature depends on the row or
    on the draw, another stage order, truncate_first, bypass)."""
    g = cfg.get
    if g("temperature_strategy") not in DEVICE_STRATEGIES:
        return None
    if g("stage_order") != "reference" or g("truncate_first") == "true" \
            or g("bypass") == "true":
        return None
    return RowParams(float(g("fixed_temperature")), int(g("top_k")),
                     float(g("top_p")), float(g("min_p_base")))


def covered(p: RowParams | None, n: int) -> bool:
    """Whether the device path takes a row of n logits with p."""
    if p is None:
        return False
    t, k, tp, mp = p.temperature, p.top_k, p.top_p, p.min_p
    if not (math.isfinite(t) and math.isfinite(tp) and math.isfinite(mp)):
        return False
    if t > 0.0 and not T_MIN <= t <= T_MAX:
        return False
    return 0.0 <= mp <= 1.0 and (k <= 0 or k >= n or k <= MAX_TOPK)


@dataclass
class Selection:
    """Per-row results (tensors on the rows' device).  ``certified``:
    the device decided; other rows were resolved by libqrs (``host``:
    their records, by row; ``errors``: the rows libqrs refused, with its
    error, token -1)."""
    token: torch.Tensor
    rank: torch.Tensor
    prob: torch.Tensor
    cdf_lo: torch.Tensor
    cdf_hi: torch.Tensor
    entropy: torch.Tensor
    temperature: torch.Tensor
    num_candidates: torch.Tensor
    eff_top_k: torch.Tensor
    eff_top_p: torch.Tensor
    eff_min_p: torch.Tensor
    certified: torch.Tensor
    host: dict[int, Any] = field(default_factory=dict)
    errors: dict[int, Exception] = field(default_factory=dict)

    def record(self, i: int) -> dict[str, Any]:
        """Row i's record fields (a host row: libqrs's record)."""
        if i in self.host:
            return self.host[i]
        f = {k: getattr(self, k)[i].item() for k in (
            "token", "rank", "prob", "cdf_lo", "cdf_hi", "entropy",
            "temperature", "num_candidates", "eff_top_k", "eff_top_p",
            "eff_min_p")}
        return {"token_id": f["token"], "token_rank": f["rank"],
                "token_prob": f["prob"], "cdf_lo": f["cdf_lo"],
                "cdf_hi": f["cdf_hi"], "shannon_entropy": f["entropy"],
                "temperature_used": f["temperature"],
                "num_candidates": f["num_candidates"],
                "effective_top_k": f["eff_top_k"],
                "effective_top_p_candidates": f["eff_top_p"],
                "effective_min_p_candidates": f["eff_min_p"],
                "device_certified": True}


# ---- the exact (logit, id) order ----

def _order_key(x: torch.Tensor, idx: torch.Tensor | None = None
               ) -> torch.Tensor:
    """int64 keys in the selection order: logit, then the higher id
    (idx: the ids, default the positions in the last dimension; -0.0
    and 0.0 are one logit)."""
    bits = (x.float() + 0.0).view(torch.int32).to(torch.int64)
    ordered = torch.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
    if idx is None:
        idx = torch.arange(x.shape[-1], device=x.device, dtype=torch.int64)
    return ordered * (1 << 32) + idx


def _key_logit(key: torch.Tensor) -> torch.Tensor:
    ordered = torch.div(key, 1 << 32, rounding_mode="floor")
    bits = torch.where(ordered >= 0, ordered, ordered ^ 0x7FFFFFFF)
    return bits.to(torch.int32).view(torch.float32)


# ---- per-row tensors ----

@dataclass
class _Rows:
    invt: torch.Tensor      # f32 1/T (1 on greedy / host rows)
    lmin: torch.Tensor      # f32 -ln(min_p) (inf: no min-p)
    margin: torch.Tensor    # f32 half-width of the min-p band
    kt: torch.Tensor        # f32 top-k threshold logit (-inf: none)
    kidx: torch.Tensor      # int64 lowest id kept at the threshold logit
    top_p: torch.Tensor     # f64
    temp: torch.Tensor      # f64 T
    greedy: torch.Tensor    # bool
    dev: torch.Tensor       # bool: covered
    k: torch.Tensor         # int64 top-k in effect (0: none)
    any_nuc: bool           # some covered row has top_p < 1
    all_nuc: bool           # every covered row has top_p < 1
    scale: torch.Tensor | None = None   # f32 buckets per unit of d


def _prepare(x: torch.Tensor, params: Sequence[RowParams | None]) -> _Rows:
    n = x.shape[1]
    dev = x.device
    ok = [covered(p, n) for p in params]
    ps = [p if o else RowParams(1.0) for p, o in zip(params, ok)]
    temp = [p.temperature for p in ps]
    invt = [1.0 / t if t > 0 else 1.0 for t in temp]
    lmin = [-math.log(p.min_p) if p.min_p > 0 else math.inf for p in ps]
    ks = [p.top_k if 0 < p.top_k < n and p.temperature > 0 else 0
          for p in ps]
    # the top-k thresholds stay on the device (no sync)
    kt = torch.full((len(ps),), -math.inf, dtype=torch.float32, device=dev)
    kidx = torch.zeros(len(ps), dtype=torch.int64, device=dev)
    rows = [i for i, k in enumerate(ks) if k]
    if rows:
        sel = torch.tensor(rows, device=dev)
        keys = torch.topk(_order_key(x[sel]), max(ks[i] for i in rows),
                          dim=1).values
        kth = keys.gather(1, torch.tensor([[ks[i] - 1] for i in rows],
                                          device=dev)).squeeze(1)
        kt[sel] = _key_logit(kth).to(torch.float32)
        kidx[sel] = kth & 0xFFFFFFFF
    f32 = dict(dtype=torch.float32)
    return _Rows(
        invt=torch.tensor(invt, **f32).to(dev),
        lmin=torch.tensor(lmin, **f32).to(dev),
        margin=torch.tensor([MINP_MARGIN * (1 + (v if math.isfinite(v)
                                                 else 0)) for v in lmin],
                            **f32).to(dev),
        kt=kt, kidx=kidx,
        top_p=torch.tensor([p.top_p for p in ps], dtype=torch.float64,
                           device=dev),
        temp=torch.tensor(temp, dtype=torch.float64, device=dev),
        greedy=torch.tensor([t <= 0 for t in temp], device=dev),
        dev=torch.tensor(ok, device=dev),
        k=torch.tensor(ks, dtype=torch.int64, device=dev),
        any_nuc=any(o and p.top_p < 1.0 for p, o in zip(ps, ok)),
        all_nuc=all(p.top_p < 1.0 for p, o in zip(ps, ok) if o))


# ---- the passes, as plain torch ----

def _support(x: torch.Tensor, rows: _Rows, r0: int, r1: int,
             c0: int) -> torch.Tensor:
    idx = torch.arange(c0, c0 + x.shape[1], device=x.device)
    kt = rows.kt[r0:r1, None]
    return (x > kt) | ((x == kt) & (idx >= rows.kidx[r0:r1, None]))


def _weights(x: torch.Tensor, m: torch.Tensor, invt: torch.Tensor,
             scale: torch.Tensor):
    """d (f32, >= 0: distance below the max in units of T), the float
    weight exp(-d) and the bucket of each logit (scale: a power of two,
    so d * scale is exact)."""
    dd = (m[:, None] - x) * invt[:, None]
    e = torch.exp(-dd)
    b = torch.clamp(torch.floor(dd * scale[:, None]), min=0.0,
                    max=float(NB))
    b = torch.nan_to_num(b, nan=float(NB)).to(torch.int64)
    return dd, e, b


def _kept(x, dd, rows, r0, r1, c0):
    return _support(x, rows, r0, r1, c0) & (dd <= rows.lmin[r0:r1, None])


def _stats_torch(x: torch.Tensor):
    """Max and min of the finite logits (0 where none) and whether the
    row is one libqrs refuses."""
    bad = torch.isnan(x).any(1) | torch.isposinf(x).any(1)
    m = torch.where(torch.isnan(x), -math.inf, x).amax(1)
    bad |= m == -math.inf
    lo = torch.where(torch.isfinite(x), x, math.inf).amin(1)
    return torch.where(torch.isinf(m), 0.0, m), \
        torch.where(torch.isinf(lo), 0.0, lo), bad


def _scale(m: torch.Tensor, lo: torch.Tensor, invt: torch.Tensor):
    """Buckets per unit of d: 16, times the power of two (at most
    2^MAX_FINE) that spreads a row spanning less than NB / 16 units of
    T over the histogram."""
    span = ((m - lo) * invt).double().clamp(min=2.0 ** -30)
    k = torch.floor(torch.log2(NB / 16.0 / span)).clamp(0, MAX_FINE)
    return (16.0 * torch.exp2(k)).float()


def _mass_torch(x: torch.Tensor, m: torch.Tensor, rows: _Rows):
    """The histogram pass (see _mass_kernel): hist [R, NB+1] f64, cnt
    [R, NB+1] int64, sc [R, 6] f64 (Z1, W1, min-p band, underflow band,
    positive kept, positive support)."""
    r, n = x.shape
    dev = x.device
    hist = torch.zeros(r, NB + 1, dtype=torch.float64, device=dev)
    cnt = torch.zeros(r, NB + 1, dtype=torch.int64, device=dev)
    sc = torch.zeros(r, 6, dtype=torch.float64, device=dev)
    step = max(1, CHUNK // max(n, 1))
    for r0 in range(0, r, step):
        r1 = min(r, r0 + step)
        xs = x[r0:r1].float()
        ms = m[r0:r1]
        dd, e, b = _weights(xs, ms, rows.invt[r0:r1], rows.scale[r0:r1])
        sup = _support(xs, rows, r0, r1, 0)
        kept = sup & (dd <= rows.lmin[r0:r1, None])
        hist[r0:r1].scatter_add_(1, b, torch.where(kept, e, 0.0).double())
        cnt[r0:r1].scatter_add_(1, b, kept.to(torch.int64))
        s1 = xs - ms[:, None]
        e1 = torch.exp(s1)
        fin = e1 > 0
        sc[r0:r1, 0] = e1.double().sum(1)
        sc[r0:r1, 1] = (e1 * torch.where(fin, s1, 0.0)).double().sum(1)
        band = sup & ((dd.clamp(max=1e30) - rows.lmin[r0:r1, None]).abs()
                      <= rows.margin[r0:r1, None])
        under = sup & (dd > UNDER_LO) & (dd <= UNDER_HI)
        sc[r0:r1, 2] = band.sum(1).double()
        sc[r0:r1, 3] = under.sum(1).double()
        sc[r0:r1, 4] = (kept & (dd <= UNDER_LO)).sum(1).double()
        sc[r0:r1, 5] = (sup & (dd <= UNDER_LO)).sum(1).double()
    return hist, cnt, sc


# ---- the same passes as Triton kernels ----

_kernels: dict[str, Any] = {}


def _triton_kernels() -> dict[str, Any]:
    if _kernels:
        return _kernels
    import triton
    import triton.language as tl

    @triton.jit
    def stats_kernel(x_ptr, m_ptr, lo_ptr, bad_ptr, n, stride,
                     BLOCK: tl.constexpr):
        row = tl.program_id(0)
        base = x_ptr + row.to(tl.int64) * stride
        mx = tl.full((BLOCK,), float("-inf"), tl.float32)
        mn = tl.full((BLOCK,), float("inf"), tl.float32)
        nbad = tl.zeros((BLOCK,), tl.int32)
        for s in range(0, n, BLOCK):
            o = s + tl.arange(0, BLOCK)
            x = tl.load(base + o, mask=o < n,
                        other=float("-inf")).to(tl.float32)
            nan = x != x
            nbad += (nan | (x == float("inf"))).to(tl.int32)
            mx = tl.maximum(mx, tl.where(nan, float("-inf"), x))
            fin = (x == x) & (tl.abs(x) < float("inf"))
            mn = tl.minimum(mn, tl.where(fin, x, float("inf")))
        m = tl.max(mx, axis=0)
        none = (m == float("-inf")) | (m == float("inf"))
        tl.store(m_ptr + row, tl.where(none, 0.0, m))
        lo = tl.min(mn, axis=0)
        tl.store(lo_ptr + row, tl.where(lo == float("inf"), 0.0, lo))
        tl.store(bad_ptr + row,
                 ((tl.sum(nbad, axis=0) > 0) | none).to(tl.int8))

    @triton.jit
    def mass_kernel(x_ptr, m_ptr, invt_ptr, scale_ptr, lmin_ptr,
                    margin_ptr, kt_ptr, kidx_ptr, hist_ptr, cnt_ptr, sc_ptr,
                    n, stride,
                    NBT: tl.constexpr, BLOCK: tl.constexpr,
                    UNDER_LO: tl.constexpr, UNDER_HI: tl.constexpr):
        row = tl.program_id(0)
        base = x_ptr + row.to(tl.int64) * stride
        m = tl.load(m_ptr + row)
        invt = tl.load(invt_ptr + row)
        scale = tl.load(scale_ptr + row)
        lmin = tl.load(lmin_ptr + row)
        margin = tl.load(margin_ptr + row)
        kt = tl.load(kt_ptr + row)
        kidx = tl.load(kidx_ptr + row)
        hrow = hist_ptr + row * NBT
        crow = cnt_ptr + row * NBT
        z1 = tl.zeros((), tl.float64)
        w1 = tl.zeros((), tl.float64)
        nband = tl.zeros((BLOCK,), tl.int32)
        nunder = tl.zeros((BLOCK,), tl.int32)
        npk = tl.zeros((BLOCK,), tl.int32)
        nps = tl.zeros((BLOCK,), tl.int32)
        for s in range(0, n, BLOCK):
            o = s + tl.arange(0, BLOCK)
            inb = o < n
            x = tl.load(base + o, mask=inb,
                        other=float("-inf")).to(tl.float32)
            dd = (m - x) * invt
            e = tl.exp(-dd)
            b = tl.maximum(tl.minimum(tl.floor(dd * scale), NBT - 1.0), 0.0)
            b = tl.where(b == b, b, NBT - 1.0).to(tl.int32)
            sup = inb & ((x > kt) | ((x == kt) & (o >= kidx)))
            kept = sup & (dd <= lmin)
            tl.atomic_add(hrow + b, tl.where(kept, e, 0.0).to(tl.float64),
                          mask=kept)
            tl.atomic_add(crow + b, kept.to(tl.int32), mask=kept)
            s1 = x - m
            e1 = tl.exp(s1)
            fin = e1 > 0
            # float partial sums of 16 terms, then float64
            p1 = tl.sum(tl.reshape(e1, (BLOCK // 16, 16)), axis=1)
            q1 = tl.sum(tl.reshape(e1 * tl.where(fin, s1, 0.0),
                                   (BLOCK // 16, 16)), axis=1)
            z1 += tl.sum(p1.to(tl.float64), axis=0)
            w1 += tl.sum(q1.to(tl.float64), axis=0)
            # (dd of a -inf logit is inf; no min-p is lmin = inf)
            nband += (sup & (tl.abs(tl.minimum(dd, 1e30) - lmin) <= margin)
                      ).to(tl.int32)
            nunder += (sup & (dd > UNDER_LO) & (dd <= UNDER_HI)).to(tl.int32)
            npk += (kept & (dd <= UNDER_LO)).to(tl.int32)
            nps += (sup & (dd <= UNDER_LO)).to(tl.int32)
        srow = sc_ptr + row * 6
        tl.store(srow, z1)
        tl.store(srow + 1, w1)
        tl.store(srow + 2, tl.sum(nband, axis=0).to(tl.float64))
        tl.store(srow + 3, tl.sum(nunder, axis=0).to(tl.float64))
        tl.store(srow + 4, tl.sum(npk, axis=0).to(tl.float64))
        tl.store(srow + 5, tl.sum(nps, axis=0).to(tl.float64))

    _kernels.update(stats=stats_kernel, mass=mass_kernel)
    return _kernels


def _block() -> int:
    # the interpreter pays per operation, a GPU per register
    return 16384 if os.environ.get("TRITON_INTERPRET") == "1" else 2048


def _stats_triton(x: torch.Tensor):
    k = _triton_kernels()
    r, n = x.shape
    m = torch.empty(r, dtype=torch.float32, device=x.device)
    bad = torch.empty(r, dtype=torch.int8, device=x.device)
    lo = torch.empty(r, dtype=torch.float32, device=x.device)
    k["stats"][(r,)](x, m, lo, bad, n, x.stride(0), BLOCK=_block())
    return m, lo, bad.bool()


def _mass_triton(x: torch.Tensor, m: torch.Tensor, rows: _Rows):
    k = _triton_kernels()
    r, n = x.shape
    dev = x.device
    hist = torch.zeros(r, NB + 1, dtype=torch.float64, device=dev)
    cnt = torch.zeros(r, NB + 1, dtype=torch.int32, device=dev)
    sc = torch.zeros(r, 6, dtype=torch.float64, device=dev)
    k["mass"][(r,)](x, m, rows.invt, rows.scale, rows.lmin, rows.margin,
                    rows.kt,
                    rows.kidx, hist, cnt, sc, n, x.stride(0), NBT=NB + 1,
                    BLOCK=_block(), UNDER_LO=UNDER_LO, UNDER_HI=UNDER_HI)
    return hist, cnt.to(torch.int64), sc


# ---- the crossings (torch, shared by both backends) ----

@dataclass
class _Pass:
    """The finishing pass's per-element tensors (bucket, kept), computed
    once for every crossing."""
    x: torch.Tensor
    m: torch.Tensor
    b: torch.Tensor
    kept: torch.Tensor


def _elements(x, m, rows) -> _Pass:
    dd, _, b = _weights(x, m, rows.invt, rows.scale)
    kept = _kept(x, dd, rows, 0, x.shape[0], 0)
    return _Pass(x, m, b.to(torch.int16), kept)


def _first_in_order(ri: torch.Tensor, ci: torch.Tensor, x: torch.Tensor,
                    r: int, c: int):
    """The elements (ri, ci) of each row put in the selection order, the
    first c of each row as [r, c] ids and a valid mask."""
    key = _order_key(x[ri, ci], ci)
    order = torch.argsort(key, descending=True, stable=True)
    order = order[torch.argsort(ri[order], stable=True)]
    rs, cs = ri[order], ci[order]
    counts = torch.bincount(rs, minlength=r)
    start = torch.cumsum(counts, 0) - counts
    pos = torch.arange(rs.numel(), device=x.device) - start[rs]
    keep = pos < c
    ids = torch.zeros(r, c, dtype=torch.int64, device=x.device)
    valid = torch.zeros(r, c, dtype=torch.bool, device=x.device)
    ids[rs[keep], pos[keep]] = cs[keep]
    valid[rs[keep], pos[keep]] = True
    return ids, valid


def _gather(ps: _Pass, rows, bucket, exact: bool = False):
    """Each row's crossing bucket in the selection order: the ids,
    logits and float64 weights of its first GATHER kept elements (and
    which are present), and the float64 masses of the kept elements
    before the bucket, in it and (exact) after it, and the count before
    it (this pass's own buckets: the histogram only places the crossing).
    Only the head up to the bucket gets float64 weights, unless exact."""
    x, m = ps.x, ps.m
    c = min(GATHER, x.shape[1])
    bk = bucket[:, None]
    head = ps.kept if exact else ps.kept & (ps.b <= bk)
    ri, ci = torch.nonzero(head, as_tuple=True)
    w = torch.exp((x[ri, ci].double() - m[ri].double()) / rows.temp[ri])
    bi = ps.b[ri, ci]
    z = torch.zeros(x.shape[0], dtype=torch.float64, device=x.device)
    pre = z.index_add(0, ri, torch.where(bi < bucket[ri], w, 0.0))
    npre = torch.zeros(x.shape[0], dtype=torch.int64, device=x.device) \
        .index_add(0, ri, (bi < bucket[ri]).to(torch.int64))
    mass = z.index_add(0, ri, torch.where(bi == bucket[ri], w, 0.0))
    post = z.index_add(0, ri, torch.where(bi > bucket[ri], w, 0.0))
    ri, ci = torch.nonzero(ps.kept & (ps.b == bk), as_tuple=True)
    ids, valid = _first_in_order(ri, ci, x, x.shape[0], c)
    xv = x.gather(1, ids)
    wv = torch.exp((xv.double() - m[:, None].double())
                   / rows.temp[:, None])
    return ids, xv, torch.where(valid, wv, 0.0), valid, pre, mass, post, \
        npre


def _spaced(xj: torch.Tensor, m: torch.Tensor, temp: torch.Tensor):
    """Whether the float step at logit xj (either side) is far above
    the double rounding of d = (x - max) / T."""
    a = xj.abs()
    step = torch.nextafter(a, torch.full_like(a, math.inf)) - a
    step = torch.where(a > 0, step / 2, step).double()
    scale = temp + a.double() + m.double().abs()
    return step > 1e-13 * scale


def _cross(hist, cnt, err, ps, rows, scale, zfix=None, efix=None,
           exact=False):
    """The element at the mass target ``scale * Z``: a dict of ok
    (certified for every value within the bounds), the token, the exact
    prefix mass before it and through it, its weight, its rank, and Z
    with its bound.  Z: zfix +- efix when given (the nucleus); else the
    float64 mass through the crossing's bucket plus the float buckets
    after it, with their bound (exact: their float64 mass)."""
    cum = hist.cumsum(1)
    zf = cum[:, -1] if zfix is None else zfix
    bk = (cum < (scale * zf)[:, None]).sum(1).clamp(max=NB)
    ok = bk < NB
    ids, xv, w, valid, pre, mass, post, n_pre = _gather(ps, rows, bk, exact)
    if zfix is None and exact:
        z = pre + mass + post
        ez = ps.x.shape[1] * FLUSH + SLACK * z
    elif zfix is None:
        rest = cum[:, -1] - cum.gather(1, bk[:, None]).squeeze(1)
        rerr = err.cumsum(1)
        rerr = rerr[:, -1] - rerr.gather(1, bk[:, None]).squeeze(1)
        z = pre + mass + rest.clamp(min=0.0)
        ez = rerr + ps.x.shape[1] * FLUSH + SLACK * z
    else:
        z, ez = zfix, efix
    tlo, thi = scale * (z - ez), scale * (z + ez)
    slack = SLACK * z
    nvalid = valid.sum(1)
    cb = cnt.gather(1, bk[:, None]).squeeze(1)
    ok &= nvalid == cb.clamp(max=w.shape[1])     # the passes agree
    pref = pre[:, None] + w.cumsum(1)
    j = ((pref < (scale * z)[:, None]) & valid).sum(1)
    ok &= j < nvalid
    jc = j.clamp(max=w.shape[1] - 1)[:, None]
    cur = pref.gather(1, jc).squeeze(1)
    wj = w.gather(1, jc).squeeze(1)
    prev = cur - wj
    first = (n_pre == 0) & (j == 0)
    ok &= first | (prev + slack < tlo)
    ok &= cur - slack > thi
    # libqrs may order different logits of equal double weight by id:
    # certified only when no other float lies so near the choice's logit
    # that their double weights could round to one value (the gap of one
    # float step against the double d's rounding, 1e-13 with margin)
    ok &= _spaced(xv.gather(1, jc).squeeze(1), ps.m, rows.temp)
    ok &= ~((j == nvalid - 1) & (cb > nvalid))
    return dict(ok=ok, tok=ids.gather(1, jc).squeeze(1), prev=prev,
                cur=cur, w=wj, rank=n_pre + j, z=z, ez=ez)


def _cross_retry(base, hist, cnt, err, ps, rows, scale):
    """_cross with the float rest; the rows it could not certify are
    tried once more with every kept weight in float64 (as libqrs's fast
    path retries with an exact tail)."""
    c = _cross(hist, cnt, err, ps, rows, scale)
    again = base & ~c["ok"]
    if bool(again.any()):
        e = _cross(hist, cnt, err, ps, rows, scale, exact=True)
        for k in c:
            c[k] = torch.where(again, e[k], c[k])
    return c


def _finish(x, m, bad, hist, cnt, sc, rows, u):
    r, n = x.shape
    dev = x.device
    hb = torch.arange(NB + 1, device=dev, dtype=torch.float64)
    rel = C0 + C1 * torch.where(hb[None, :] < NB,
                                (hb[None, :] + 1) / rows.scale[:, None], 88.0)
    err = hist * rel
    ok = rows.dev & ~bad & ~rows.greedy & (sc[:, 2] == 0) & (sc[:, 3] == 0)
    ok &= hist.sum(1) > 0
    nuc = rows.top_p < 1.0
    npos_k = sc[:, 4].to(torch.int64)
    ud = u.to(device=dev, dtype=torch.float64)
    ps = _elements(x, m, rows)
    if rows.any_nuc:
        # the top-p cut, then the CDF inside the nucleus (exact weights)
        cut = _cross_retry(ok & nuc, hist, cnt, err, ps, rows,
                           rows.top_p.clamp(min=0.0))
        ok &= ~nuc | cut["ok"]
        zn = torch.where(nuc, cut["cur"], 0.0)
        pick = _cross(hist, cnt, err, ps, rows, ud, zn, SLACK * zn)
        pick_all = _cross_retry(ok & ~nuc, hist, cnt, err, ps, rows, ud) \
            if not rows.all_nuc else pick
        for k in pick:
            pick[k] = torch.where(nuc, pick[k], pick_all[k])
        ok &= ~nuc | (pick["rank"] <= cut["rank"])
        eff_top_p = torch.where(nuc, cut["rank"] + 1, npos_k)
    else:
        pick = _cross_retry(ok, hist, cnt, err, ps, rows, ud)
        eff_top_p = npos_k
    ok &= pick["ok"]
    zn = pick["z"]
    greedy = rows.greedy & rows.dev & ~bad
    ok |= greedy
    one = torch.ones(r, dtype=torch.float64, device=dev)
    zero = torch.zeros_like(one)
    z1 = sc[:, 0]
    h = torch.clamp(torch.log(z1) - sc[:, 1] / z1, min=0.0)
    minp = torch.isfinite(rows.lmin)
    return Selection(
        token=torch.where(greedy, torch.argmax(x, 1), pick["tok"]),
        rank=torch.where(greedy, 0, pick["rank"]),
        prob=torch.where(greedy, one, pick["w"] / zn),
        cdf_lo=torch.where(greedy, zero, pick["prev"] / zn),
        cdf_hi=torch.where(greedy, one, pick["cur"] / zn),
        entropy=h, temperature=rows.temp,
        num_candidates=torch.where(greedy, 1, eff_top_p),
        eff_top_k=torch.where(rows.k > 0, rows.k, n), eff_top_p=eff_top_p,
        eff_min_p=torch.where(minp, sc[:, 4].to(torch.int64),
                              sc[:, 5].to(torch.int64)),
        certified=ok)


def select_rows(logits: torch.Tensor, u: Sequence[float] | torch.Tensor,
                params: Sequence[RowParams | None], *,
                resolve: Callable[[int, torch.Tensor, float], Any] | None
                = None, backend: str = "triton") -> Selection:
    """Select one token per row of ``logits`` ([rows, vocab]; f32, f16 or
    bf16, on any device) at ``u`` (one float64 per row) with ``params``
    (row_params(); None: the host path).  Certified rows are decided on
    the device; each other row is copied to the host and passed to
    ``resolve(i, cpu_row, u_i)``, which returns ``(token, record)`` from
    libqrs (e.g. a Sampler's ``select_u(row, u, record=True)``) and may
    raise (a row libqrs refuses).  Without ``resolve`` those rows keep
    certified False and an undefined token.  backend: "triton" (the
    kernels; CPU tensors need TRITON_INTERPRET=1) or "torch"."""
    if logits.dim() != 2:
        raise ValueError(f"logits must be [rows, vocab], not "
                         f"{tuple(logits.shape)}")
    if len(params) != logits.shape[0]:
        raise ValueError("one RowParams (or None) per row")
    if logits.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"logits must be f32, f16 or bf16, not "
                         f"{logits.dtype}")
    x = logits if logits.stride(1) == 1 else logits.contiguous()
    ut = torch.as_tensor(u, dtype=torch.float64)
    if ut.shape != (x.shape[0],):
        raise ValueError("one u per row")
    if backend not in ("triton", "torch"):
        raise ValueError(f"backend must be 'triton' or 'torch', not "
                         f"{backend!r}")
    n = x.shape[1]
    idx = [i for i, p in enumerate(params) if covered(p, n)]
    sel = _blank(x.shape[0], x.device)
    if idx:
        sub = x if len(idx) == x.shape[0] else x[idx]
        part = _select_covered(sub, [params[i] for i in idx],
                               ut[idx], backend)
        at = torch.tensor(idx, device=x.device)
        for f in _FIELDS:
            getattr(sel, f)[at] = getattr(part, f).to(getattr(sel, f).dtype)
    if resolve is not None:
        resolve_uncertified(sel, logits, ut, resolve)
    return sel


_FIELDS = ("token", "rank", "prob", "cdf_lo", "cdf_hi", "entropy",
           "temperature", "num_candidates", "eff_top_k", "eff_top_p",
           "eff_min_p", "certified")


def _blank(r: int, dev: torch.device) -> Selection:
    i64 = dict(dtype=torch.int64, device=dev)
    f64 = dict(dtype=torch.float64, device=dev)
    return Selection(
        token=torch.full((r,), -1, **i64), rank=torch.zeros(r, **i64),
        prob=torch.full((r,), math.nan, **f64),
        cdf_lo=torch.full((r,), math.nan, **f64),
        cdf_hi=torch.full((r,), math.nan, **f64),
        entropy=torch.full((r,), math.nan, **f64),
        temperature=torch.full((r,), math.nan, **f64),
        num_candidates=torch.zeros(r, **i64), eff_top_k=torch.zeros(r, **i64),
        eff_top_p=torch.zeros(r, **i64), eff_min_p=torch.zeros(r, **i64),
        certified=torch.zeros(r, dtype=torch.bool, device=dev))


def _select_covered(x: torch.Tensor, params: Sequence[RowParams],
                    u: torch.Tensor, backend: str) -> Selection:
    rows = _prepare(x, params)
    if backend == "triton":
        m, lo, bad = _stats_triton(x)
        rows.scale = _scale(m, lo, rows.invt)
        hist, cnt, sc = _mass_triton(x, m, rows)
    else:
        m, lo, bad = _stats_torch(x.float())
        rows.scale = _scale(m, lo, rows.invt)
        hist, cnt, sc = _mass_torch(x, m, rows)
    return _finish(x.float(), m, bad, hist, cnt, sc, rows, u)


def resolve_uncertified(sel: Selection, logits: torch.Tensor,
                        u: torch.Tensor,
                        resolve: Callable[[int, torch.Tensor, float], Any]
                        ) -> list[int]:
    """Give each uncertified row libqrs's token (one row copied to the
    host each); returns their indices."""
    todo = torch.nonzero(~sel.certified).flatten().tolist()
    uh = u.cpu()
    for i in todo:
        try:
            tok, rec = resolve(i, logits[i].cpu(), float(uh[i]))
        except QrsError as e:       # libqrs refused the row
            sel.errors[i] = e
            continue
        sel.token[i] = int(tok)
        sel.host[i] = rec
    return todo


def write_one_hot(logits: torch.Tensor, token: torch.Tensor,
                  rows: torch.Tensor | None = None) -> None:
    """Rows of logits (all, or the bool mask rows) become -inf except 0 at
    their token, in place on the device."""
    tok = token.to(device=logits.device, dtype=torch.int64)[:, None]
    hot = torch.full_like(logits, -math.inf).scatter_(1, tok, 0.0)
    if rows is None:
        logits.copy_(hot)
    else:
        logits.copy_(torch.where(rows.to(logits.device)[:, None], hot,
                                 logits))


# ---- the engines' path: libqrs's draws, the device's selection ----

#: $QRS_DEVICE_SELECT: "auto" (the default: rows on a CUDA device),
#: "on" (any device, CPU tensors too: how the tests run the engines'
#: device path), "off" (always copy the rows to libqrs).
MODES = ("auto", "on", "off")


def mode() -> str:
    """$QRS_DEVICE_SELECT, checked."""
    m = os.environ.get("QRS_DEVICE_SELECT", "auto").strip() or "auto"
    if m not in MODES:
        raise ConfigError(-errno.EINVAL, f"QRS_DEVICE_SELECT={m!r}: "
                          f"expected one of {', '.join(MODES)}")
    return m


def engaged(logits: torch.Tensor, params: Sequence[RowParams | None],
            how: str) -> bool:
    """Whether an engine selects these rows on their device: the mode
    allows it and the device covers every row's configuration (a batch
    with any other row goes to libqrs whole, as one batch call)."""
    if how == "off" or (how == "auto" and logits.device.type != "cuda"):
        return False
    if logits.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return False
    n = logits.shape[-1]
    return bool(params) and all(covered(p, n) for p in params)


def _backend(x: torch.Tensor) -> str:
    if x.device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        return "triton"
    return "torch"


@dataclass
class Sampled:
    """An engine's batch sampled on the device.  tokens: libqrs's tokens
    (-1 where status is not 0); statuses: 0, 1 (bypass: nothing drawn)
    or libqrs's negative error; records: per row (or None);
    uncertified: rows libqrs selected from their copied row."""
    tokens: list[int]
    statuses: list[int]
    records: list[Any] | None
    uncertified: list[int]

    def tally(self, counts: Any) -> None:
        """Add this batch's rows to an engine's ``selections`` counter."""
        n = sum(st == 0 for st in self.statuses)
        counts["uncertified"] += len(self.uncertified)
        counts["certified"] += n - len(self.uncertified)


def sample(logits: torch.Tensor, samplers: Sequence[Any],
           clients: Sequence[Any], params: Sequence[RowParams],
           records: bool | str = False) -> Sampled:
    """Draw for each row from qrsd (each sampler's held draw: the
    prefetched one), select on the rows' device, and end each sampler's
    step: a certified row with the device's pick (``finish_pick``), any
    other with libqrs's selection from that one row's copy
    (``finish_row``).  The tokens, records, commitment chain and strategy
    state are those the host path makes; each record's
    ``device_selection`` says which way its token went.  The rows are
    only read.  Host syncs: the copy of the per-row results (tens of
    bytes a row) and one row copy per uncertified row."""
    r = logits.shape[0]
    statuses = [0] * r
    u = [0.0] * r
    for i in range(r):
        got = samplers[i].take_draw(clients[i])
        if got is None:
            statuses[i] = 1
        else:
            u[i] = got
    live = [i for i in range(r) if statuses[i] == 0]
    tokens = [-1] * r
    recs: list[Any] | None = [None] * r if records else None
    uncert: list[int] = []
    if not live:
        return Sampled(tokens, statuses, recs, uncert)
    x = logits if len(live) == r else logits[live]
    sel = select_rows(x, [u[i] for i in live], [params[i] for i in live],
                      backend=_backend(x))
    # the one copy down: every field a record needs, float64 (ids and
    # counts below 2^32 are exact)
    down = torch.stack([sel.token.double(), sel.rank.double(),
                        sel.num_candidates.double(),
                        sel.certified.double(), sel.prob, sel.cdf_lo,
                        sel.cdf_hi, sel.entropy,
                        sel.temperature]).cpu().tolist()
    for k, i in enumerate(live):
        tok, rank, ncand, ok, prob, lo, hi, h, t = (c[k] for c in down)
        try:
            if ok:
                got = samplers[i].finish_pick(
                    clients[i], int(tok), int(rank), int(ncand), prob, lo,
                    hi, h, t, record=records)
            else:
                uncert.append(i)
                got = samplers[i].finish_row(clients[i], logits[i].cpu(),
                                             record=records)
        except QrsError as e:
            statuses[i] = e.code if e.code < 0 else -errno.EINVAL
            continue
        if records:
            tokens[i], recs[i] = got
        else:
            tokens[i] = got
    return Sampled(tokens, statuses, recs, uncert)
