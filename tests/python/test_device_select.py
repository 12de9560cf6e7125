"""Selection on the device (qrs.device) against libqrs, without a GPU:
the torch formulation on CPU tensors and the Triton kernels under
Triton's interpreter (TRITON_INTERPRET=1, set here before triton is
imported).  Every row the device certifies must give libqrs's token
(Sampler.select_u on the same row and u); every other row must be marked
and get libqrs's token (or its error) through the host resolution."""

from __future__ import annotations

import json
import math
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import qrs  # noqa: E402
from qrs import device  # noqa: E402
from conftest import VECTORS  # noqa: E402

ORDERS = ({"stage_order": "reference"},
          {"stage_order": "reference", "truncate_first": True},
          {"stage_order": "hf"}, {"stage_order": "llama"})
CUTS = ({}, {"top_k": 50}, {"top_p": 0.9}, {"min_p_base": 0.05},
        {"top_k": 1000, "top_p": 0.95, "min_p_base": 0.02},
        {"fixed_temperature": 0.7, "top_p": 0.8},
        {"fixed_temperature": 1.3, "top_k": 200},
        {"fixed_temperature": 0.0})
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _config(fields: dict) -> qrs.Config:
    return qrs.make_config(fields, env=False)


def _resolver(cfgs: list[qrs.Config], n: int):
    def resolve(i: int, row: torch.Tensor, u: float):
        return qrs.Sampler(cfgs[i], max(n, 2)).select_u(row, u, record=True)
    return resolve


def _check(x: torch.Tensor, us: list[float], cfgs: list[qrs.Config],
           backend: str) -> device.Selection:
    """Select x's rows on the device path and compare every row with
    libqrs on the same row and u; returns the selection."""
    n = x.shape[1]
    params = [device.row_params(c) for c in cfgs]
    sel = device.select_rows(x, us, params, backend=backend,
                             resolve=_resolver(cfgs, n))
    for i, cfg in enumerate(cfgs):
        s = qrs.Sampler(cfg, max(n, 2))
        try:
            want, rec = s.select_u(x[i], us[i], record=True)
        except qrs.LogitsError:
            assert not sel.certified[i], i
            assert isinstance(sel.errors[i], qrs.LogitsError), i
            continue
        got = int(sel.token[i])
        assert got == want, (i, params[i], us[i], got, want)
        if not sel.certified[i]:
            assert sel.host[i]["token_id"] == want
            continue
        assert params[i] is not None
        r = sel.record(i)
        assert r["token_rank"] == rec["token_rank"], (i, params[i])
        assert r["num_candidates"] == rec["num_candidates"], (i, params[i])
        assert abs(r["cdf_lo"] - rec["cdf_lo"]) < 1e-6
        assert abs(r["cdf_hi"] - rec["cdf_hi"]) < 1e-6
        assert r["cdf_lo"] < us[i] <= r["cdf_hi"] or \
            params[i].temperature <= 0 or us[i] == 0.0
        assert abs(r["token_prob"] - rec["token_prob"]) < 1e-6
    return sel


# ---- the shared vectors ----

def _vector_cases() -> list[dict]:
    doc = json.loads((VECTORS / "select.json").read_text())
    out = []
    for c in doc["cases"]:
        if math.isnan(float(c["top_p"])) or not 0.0 <= float(c["u"]) <= 1.0:
            continue        # refused by the config / u check (test_binding)
        out.append(c)
    return out


def _vector_row(c: dict) -> torch.Tensor:
    vals = json.loads(c["logits"]) if isinstance(c["logits"], str) \
        else c["logits"]
    return torch.tensor([float(v) for v in vals], dtype=torch.float64)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_shared_vectors(backend: str) -> None:
    """Every select vector whose values are exact in float32, as f32
    rows: libqrs's token (the reference's, as test_binding checks) on
    every row, certified or resolved."""
    certified = 0
    for c in _vector_cases():
        row = _vector_row(c)
        x32 = row.to(torch.float32)
        if not torch.equal(x32.double(), row) and \
                not row.isnan().any():
            continue
        cfg = _config({"fixed_temperature": c["temperature"],
                       "top_k": c["top_k"], "top_p": c["top_p"],
                       "min_p_base": c["min_p"],
                       "truncate_first": c["truncate_first"]})
        sel = _check(x32[None, :], [float(c["u"])], [cfg], backend)
        if sel.certified[0]:
            certified += 1
            assert int(sel.token[0]) in c["expected"]["acceptable_token_ids"]
    assert certified >= 30


# ---- large rows: every stage order and truncation, three dtypes ----

def _lm_rows(r: int, n: int, seed: int) -> torch.Tensor:
    """LM-like rows: a Gaussian body with a heavy head (a few tokens
    several nats above the rest)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(r, n, generator=g) * 2.0
    head = torch.randint(0, n, (r, 24), generator=g)
    boost = torch.rand(r, 24, generator=g) * 8.0
    return x.scatter_add(1, head, boost)


def _grid_configs() -> list[qrs.Config]:
    return [_config({**o, **c}) for o in ORDERS for c in CUTS]


@pytest.mark.parametrize("n", [151936, 49152])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_large_rows_torch(n: int, dtype: torch.dtype) -> None:
    """Rows of Qwen2's and SmolLM2's vocabulary sizes, every stage
    order and truncation: the reference order runs on the device (rows
    of the other orders are marked and resolved), and most of its rows
    are certified."""
    cfgs = _grid_configs()
    x = _lm_rows(len(cfgs), n, seed=n + len(str(dtype))).to(dtype)
    g = torch.Generator().manual_seed(n)
    us = torch.rand(len(cfgs), generator=g, dtype=torch.float64).tolist()
    sel = _check(x, us, cfgs, "torch")
    ref = [i for i, c in enumerate(cfgs) if device.row_params(c)]
    assert len(ref) == len(CUTS)
    assert int(sel.certified[ref].sum()) >= len(ref) - 1
    assert not sel.certified[[i for i in range(len(cfgs))
                              if i not in ref]].any()


@pytest.mark.parametrize("n,dtype", [(151936, torch.float32),
                                     (151936, torch.bfloat16),
                                     (49152, torch.float16)], ids=str)
def test_large_rows_triton(n: int, dtype: torch.dtype) -> None:
    """The Triton kernels under the interpreter on a few large rows of
    the reference order."""
    cfgs = [_config(c) for c in CUTS[:5]]
    x = _lm_rows(len(cfgs), n, seed=7).to(dtype)
    us = [0.05, 0.5, 0.93, 0.999, 0.3]
    sel = _check(x, us, cfgs, "triton")
    assert int(sel.certified.sum()) >= len(cfgs) - 1


def test_backends_agree() -> None:
    """The kernels and the torch formulation give the same tokens,
    certification and record fields on the same rows."""
    cfgs = [_config(c) for c in CUTS]
    x = _lm_rows(len(cfgs), 49152, seed=3)
    us = [0.1 * i + 0.05 for i in range(len(cfgs))]
    params = [device.row_params(c) for c in cfgs]
    a = device.select_rows(x, us, params, backend="torch")
    b = device.select_rows(x, us, params, backend="triton")
    assert torch.equal(a.certified, b.certified)
    assert torch.equal(a.token, b.token)
    assert torch.equal(a.rank, b.rank)
    assert torch.allclose(a.cdf_hi, b.cdf_hi, rtol=1e-6, atol=0)
    assert torch.allclose(a.entropy, b.entropy, rtol=1e-5)


# ---- adversarial rows ----

def test_u_on_a_prefix_sum_is_marked() -> None:
    """u exactly on libqrs's cdf_hi of a token, and a top-p target
    exactly on a tie group's prefix mass: the device may not decide."""
    n = 49152
    x = _lm_rows(1, n, seed=11)
    cfg = _config({"top_p": 0.9})   # the interval: libqrs's exact sums
    _, rec = qrs.Sampler(cfg, n).select_u(x[0], 0.4, record=True)
    for backend in ("torch", "triton"):
        sel = _check(x, [rec["cdf_hi"]], [cfg], backend)
        assert not sel.certified[0]
    # eight equal logits, the rest -inf: top_p 0.5 is a prefix sum
    ties = torch.full((1, n), -math.inf)
    ties[0, 100:108] = 3.0
    cfg = _config({"top_p": 0.5})
    for backend in ("torch", "triton"):
        sel = _check(ties, [0.7], [cfg], backend)
        assert not sel.certified[0]
        # u = 0.5 is the second tied token's prefix sum
        sel = _check(ties, [0.5], [_config({})], backend)
        assert not sel.certified[0]
    # ... and away from the cut they are ordered higher id first
    sel = _check(ties, [0.3], [_config({"top_p": 0.6})], "torch")
    assert sel.certified[0] and int(sel.token[0]) == 106


def test_broken_and_degenerate_rows() -> None:
    """NaN, +inf and all -inf rows are never certified (libqrs refuses
    them: LogitsError); one finite logit, subnormal-flat and exactly
    flat rows, -0.0 against 0.0, a greedy row."""
    n = 4096
    rows = torch.zeros(9, n)
    rows[0, 17] = math.nan
    rows[1, 5] = math.inf
    rows[2] = -math.inf
    rows[3] = -math.inf
    rows[3, 4000] = 1.5                          # all -inf but one
    g = torch.Generator().manual_seed(5)
    rows[4] = torch.rand(n, generator=g) * 1e-40  # subnormal-flat
    rows[5] = 0.0                                # exactly flat
    rows[6, ::2] = -0.0                          # signed zeros tie
    rows[7] = torch.randn(n, generator=g)
    rows[7, 123] = 1e-45                         # a subnormal max ...
    rows[7] = rows[7] - 50.0                     # ... far below the rest
    rows[8] = torch.randn(n, generator=g)        # greedy
    cfgs = [_config({})] * 8 + [_config({"fixed_temperature": 0.0})]
    us = [0.5, 0.5, 0.5, 0.7, 0.25, 0.6, 0.01, 0.5, 0.5]
    for backend in ("torch", "triton"):
        sel = _check(rows, us, cfgs, backend)
        assert not sel.certified[:3].any()
        assert sel.certified[3] and int(sel.token[3]) == 4000
        assert not sel.certified[4] and not sel.certified[5]
        assert sel.certified[8]
        assert set(sel.errors) == {0, 1, 2}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_vocabulary_of_one(dtype: torch.dtype) -> None:
    x = torch.tensor([[2.5]], dtype=dtype)
    for cfg in (_config({}), _config({"top_p": 0.5, "min_p_base": 0.1})):
        for backend in ("torch", "triton"):
            sel = _check(x, [0.9], [cfg], backend)
            assert sel.certified[0] and int(sel.token[0]) == 0


def test_host_strategies_stay_on_the_host() -> None:
    """Strategies whose temperature depends on the row or the draw, the
    presets that use them, and bypass get no device parameters."""
    for fields in ({"temperature_strategy": "edt"},
                   {"temperature_strategy": "hvh_drift"},
                   {"preset": "creative_sampling"},
                   {"preset": "qthought_think"},
                   {"preset": "qthought_purity"}, {"bypass": True}):
        assert device.row_params(_config(fields)) is None, fields
    for preset in ("normal_t1", "chat_light", "qthought"):
        p = device.row_params(_config({"preset": preset}))
        assert p == device.RowParams(1.0, 0, 1.0, 0.0), preset


def test_uncertified_fraction_on_lm_rows() -> None:
    """On LM-like rows with the presets' settings (no truncation, T = 1)
    and top-p 0.95, at most one row in 64 goes to the host."""
    n = 49152
    x = _lm_rows(64, n, seed=99).to(torch.bfloat16)
    g = torch.Generator().manual_seed(1)
    us = torch.rand(64, generator=g, dtype=torch.float64).tolist()
    params = [device.RowParams(1.0, top_p=0.95 if i % 2 else 1.0)
              for i in range(64)]
    sel = device.select_rows(x, us, params, backend="torch")
    assert int((~sel.certified).sum()) <= 1


def test_flat_rows_of_a_random_weight_model() -> None:
    """Rows as flat as a random-weight Qwen2's (logits of std 0.23 over
    151,936 tokens: thousands of tokens per 1/16 of d) get finer buckets
    and are still certified, with libqrs's tokens."""
    n = 151936
    g = torch.Generator().manual_seed(8)
    x = (torch.randn(6, n, generator=g) * 0.23).to(torch.bfloat16)
    cfgs = [_config({}), _config({"top_p": 0.95})] * 3
    us = torch.rand(6, generator=g, dtype=torch.float64).tolist()
    sel = _check(x, us, cfgs, "torch")
    assert int(sel.certified.sum()) >= 5


def test_one_hot_and_bad_input() -> None:
    x = torch.randn(3, 10)
    device.write_one_hot(x, torch.tensor([1, 2, 3]),
                         torch.tensor([True, False, True]))
    assert x[0, 1] == 0 and x[0].isinf().sum() == 9
    assert not x[1].isinf().any()
    assert x[2, 3] == 0 and x[2].isinf().sum() == 9
    with pytest.raises(ValueError, match="one u per row"):
        device.select_rows(x, [0.5], [None] * 3)
    with pytest.raises(ValueError, match="f32, f16 or bf16"):
        device.select_rows(x.double(), [0.5] * 3, [None] * 3)
    with pytest.raises(ValueError, match="backend"):
        device.select_rows(x, [0.5] * 3, [None] * 3, backend="cuda")
