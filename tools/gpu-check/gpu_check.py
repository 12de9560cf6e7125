"""Selection on the device against libqrs, and its cost, on a GPU.

Run through tools/gpu-check.sh (which sets the paths).  Three parts:

(a) tokens: the Triton kernels on ROWS x VOCAB LM-like rows (f32 and
    bf16) with a mix of the device's configurations; every row's token
    is compared with libqrs's (Sampler.select_u on the same row and u);
    uncertified rows are counted and resolved by libqrs.
(b) timing, one run, CUDA events (median of REPS): the device path, the
    host path as qrs.vllm does it today (rows to a pinned buffer, one
    libqrs batch call, the tokens back and a one-hot scatter), torch's
    softmax + multinomial, a Gumbel-max pass (softmax, an exponential
    draw, argmax: vLLM's sampler) and one read of the rows (amax(1): the
    floor); the ratios and the device's name.
(c) transformers generate with a random-weight Qwen2 (two layers, the
    real vocabulary): do_sample=True against greedy decoding through a
    logits processor selecting on the device (u from a local generator:
    qrsd does not run there, so this is the selection's cost only).

--dry-run: the same code on CPU tensors with the kernels under
TRITON_INTERPRET=1, few rows, time.perf_counter instead of events."""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

import qrs
from qrs import device

CONFIGS = (device.RowParams(1.0), device.RowParams(1.0, top_p=0.95),
           device.RowParams(0.8, top_k=50, top_p=0.9),
           device.RowParams(1.0, min_p=0.05))


def lm_rows(r: int, n: int, dev: torch.device, seed: int) -> torch.Tensor:
    """LM-like rows: a Gaussian body and a few tokens well above it."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(r, n, generator=g) * 2.0
    head = torch.randint(0, n, (r, 24), generator=g)
    x = x.scatter_add(1, head, torch.rand(r, 24, generator=g) * 8.0)
    return x.to(dev)


def libqrs_config(p: device.RowParams) -> qrs.Config:
    return qrs.make_config({"fixed_temperature": p.temperature,
                            "top_k": p.top_k, "top_p": p.top_p,
                            "min_p_base": p.min_p}, env=False)


def resolver(cfgs: list[qrs.Config], n: int):
    def resolve(i: int, row: torch.Tensor, u: float):
        return qrs.Sampler(cfgs[i], n).select_u(row, u, record=True)
    return resolve


def check_tokens(rows: int, n: int, dev: torch.device) -> bool:
    ok = True
    params = [CONFIGS[i % len(CONFIGS)] for i in range(rows)]
    cfgs = [libqrs_config(p) for p in params]
    for dtype in (torch.float32, torch.bfloat16):
        x = lm_rows(rows, n, dev, seed=1).to(dtype)
        u = torch.rand(rows, dtype=torch.float64,
                       generator=torch.Generator().manual_seed(2))
        t0 = time.perf_counter()
        sel = device.select_rows(x, u, params, resolve=resolver(cfgs, n))
        t1 = time.perf_counter()
        host = x.cpu()
        bad = 0
        for i in range(rows):
            want = qrs.Sampler(cfgs[i], n).select_u(host[i], float(u[i]))
            if int(sel.token[i]) != want:
                bad += 1
                print(f"  MISMATCH row {i} {params[i]} u={float(u[i])!r}: "
                      f"device {int(sel.token[i])}, libqrs {want}")
        unc = int((~sel.certified).sum())
        print(f"(a) {dtype}: {rows} x {n}: {bad} tokens differ from "
              f"libqrs, {unc} uncertified (resolved by libqrs), first "
              f"call {1e3 * (t1 - t0):.0f} ms")
        ok &= bad == 0
    return ok


class Timer:
    """Median milliseconds of fn over reps: CUDA events on a GPU."""

    def __init__(self, dev: torch.device, reps: int) -> None:
        self.cuda = dev.type == "cuda"
        self.reps = reps

    def __call__(self, fn) -> float:
        fn()                                    # warm-up (and compile)
        out = []
        for _ in range(self.reps):
            if self.cuda:
                a = torch.cuda.Event(enable_timing=True)
                b = torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                out.append(a.elapsed_time(b))
            else:
                t = time.perf_counter()
                fn()
                out.append(1e3 * (time.perf_counter() - t))
        return statistics.median(out)


def timings(rows: int, n: int, dev: torch.device, reps: int) -> None:
    x = lm_rows(rows, n, dev, seed=3)
    params = [device.RowParams(1.0, top_p=0.95)] * rows
    cfgs = [libqrs_config(p) for p in params]
    samplers = [qrs.Sampler(c, n) for c in cfgs]
    u = torch.rand(rows, dtype=torch.float64,
                   generator=torch.Generator().manual_seed(4))
    ul = u.tolist()
    pool = qrs.Pool(8)
    pinned = torch.empty(rows, n, dtype=torch.float32,
                         pin_memory=dev.type == "cuda")
    timer = Timer(dev, reps)
    res = resolver(cfgs, n)

    def dev_path():
        sel = device.select_rows(x, u, params, resolve=res)
        device.write_one_hot(x.clone(), sel.token)

    def host_path():
        pinned.copy_(x, non_blocking=False)
        toks = pool.sample(pinned, samplers, u=ul)[0]
        t = torch.tensor(toks, device=dev)
        device.write_one_hot(x.clone(), t)

    def multinomial():
        torch.multinomial(torch.softmax(x, -1), 1)

    def gumbel():
        p = torch.softmax(x, -1)
        p.div_(torch.empty_like(p).exponential_()).argmax(-1)

    def floor():
        x.amax(1)

    def clone_only():
        x.clone()

    t = {name: timer(fn) for name, fn in (
        ("floor", floor), ("device", dev_path), ("host", host_path),
        ("multinomial", multinomial), ("gumbel", gumbel),
        ("one-hot clone", clone_only))}
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU"
    print(f"(b) {rows} x {n} f32 on {name}, median of {reps}:")
    for k, v in t.items():
        print(f"    {k:14s} {v:9.3f} ms")
    print(f"    device / floor       {t['device'] / t['floor']:.1f}x "
          f"(target <= 4)")
    print(f"    host / device        {t['host'] / t['device']:.1f}x "
          f"(target >= 20)")
    print(f"    device / multinomial {t['device'] / t['multinomial']:.1f}x "
          f"(target <= 2)")
    print(f"    device / gumbel      {t['device'] / t['gumbel']:.1f}x")


class DeviceProcessor:
    """A transformers logits processor selecting on the device with a
    local u (the selection's cost, without qrsd)."""

    def __init__(self, params: device.RowParams) -> None:
        self.params = params
        self.gen = torch.Generator().manual_seed(5)
        self.uncertified = 0

    def __call__(self, input_ids, scores):
        r = scores.shape[0]
        u = torch.rand(r, dtype=torch.float64, generator=self.gen)
        cfg = libqrs_config(self.params)
        sel = device.select_rows(
            scores.float(), u, [self.params] * r,
            resolve=resolver([cfg] * r, scores.shape[1]))
        self.uncertified += int((~sel.certified).sum())
        out = scores.clone()
        device.write_one_hot(out, sel.token)
        return out


def generate(dev: torch.device, steps: int, batch: int) -> None:
    from transformers import LogitsProcessorList, Qwen2Config, \
        Qwen2ForCausalLM
    torch.manual_seed(6)
    cfg = Qwen2Config(vocab_size=151936, hidden_size=256,
                      intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
    model = Qwen2ForCausalLM(cfg).to(dev).eval()
    ids = torch.randint(0, 151936, (batch, 8), device=dev)
    proc = DeviceProcessor(device.RowParams(1.0, top_p=0.95))

    def run(**kw) -> float:
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.no_grad():
            model.generate(ids, max_new_tokens=steps, min_new_tokens=steps,
                           pad_token_id=0, **kw)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return 1e3 * (time.perf_counter() - t) / steps

    run(do_sample=True)                                 # warm-up
    base = run(do_sample=True, top_p=0.95, top_k=0)
    ours = run(do_sample=False, logits_processor=LogitsProcessorList([proc]))
    print(f"(c) generate, random-weight Qwen2 (2 layers), batch {batch}, "
          f"{steps} tokens: do_sample=True {base:.2f} ms/token, device "
          f"selection {ours:.2f} ms/token ({ours - base:+.2f}); "
          f"{proc.uncertified} uncertified rows")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--rows", type=int)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--reps", type=int)
    ap.add_argument("--skip-generate", action="store_true")
    a = ap.parse_args()
    if a.dry_run:
        dev = torch.device("cpu")
        rows, reps, steps, batch = a.rows or 4, a.reps or 1, 2, 1
    else:
        if not torch.cuda.is_available():
            print("gpu_check: no CUDA device", file=sys.stderr)
            return 2
        dev = torch.device("cuda")
        rows, reps, steps, batch = a.rows or 256, a.reps or 10, 32, 8
    print(f"torch {torch.__version__}, libqrs {qrs.libqrs_version}, "
          f"device {dev}")
    ok = check_tokens(rows, a.vocab, dev)
    timings(rows, a.vocab, dev, reps)
    if not a.skip_generate:
        generate(dev, steps, batch)
    print("gpu_check:", "every token matched libqrs" if ok
          else "TOKENS DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
