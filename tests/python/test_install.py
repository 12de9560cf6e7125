"""`pip install <repo>` into a fresh venv: meson-python builds libqrs and
the extension (libqrs linked in: the installed _qrs needs no libqrs.so),
the package imports from the venv (not the build tree), registers no
vLLM entry point (installing it changes no server: one opts in with
--logits-processors), and samples through a real qrsd the same tokens as the
build's package.

Offline: pip runs with --no-index --no-build-isolation, the build
backend (meson-python, meson, pyproject-metadata, packaging) taken from
the Python running this test (the cached venv) through PYTHONPATH for the
pip step only; the fresh venv itself holds nothing but pip and qrs (the
rows are array.array: the package needs neither numpy nor torch)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import qrs
from conftest import Daemon

REPO = Path(__file__).resolve().parents[2]
BUILD_DEPS = ("mesonpy", "mesonbuild", "pyproject_metadata", "packaging")
VOCAB = 2000
STEPS = 12

# Run in the fresh venv: no numpy, no torch, no build tree.
CHILD = r"""
import array, importlib.metadata as md, json, random, sys
import qrs
sock, vocab, steps, salt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), bytes.fromhex(sys.argv[4])
c = qrs.Client(sock)
s = qrs.Sampler(qrs.make_config({"top_k": 50}, env=False), vocab)
s.set_salt(salt)
toks = []
for t in range(steps):
    rng = random.Random(t)
    row = array.array("f", [-(i % 97) / 8 for i in range(vocab)])
    rng.shuffle(row)
    tok, rec = s.sample_token(c, row, record=True)
    toks.append([tok, rec["u_value"]])
c.close()
print(json.dumps({
    "file": qrs.__file__,
    "ext": qrs._qrs.__file__,
    "version": qrs.libqrs_version,
    "tokens": toks,
    "heavy": sorted(m for m in ("numpy", "torch") if m in sys.modules),
    "entry_points": [e.value for e in md.entry_points(
        group="vllm.logits_processors")],
}))
"""


def _row(t: int) -> list[float]:
    """The child's row for step t (same shuffle: random.Random(t))."""
    import random
    row = [-(i % 97) / 8 for i in range(VOCAB)]
    random.Random(t).shuffle(row)
    return row


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "QRS_", "PIP_", "VIRTUAL_ENV"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def test_pip_install_fresh_venv(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    deps = tmp_path / "build-deps"
    deps.mkdir()
    for mod in BUILD_DEPS:
        spec = importlib.util.find_spec(mod)
        assert spec and spec.origin, f"{mod} (a build dependency) missing"
        (deps / mod).symlink_to(Path(spec.origin).parent)
    env = _clean_env()
    pip = subprocess.run(
        [str(py), "-m", "pip", "install", "--no-index",
         "--no-build-isolation", str(REPO)],
        env={**env, "PYTHONPATH": str(deps)}, cwd=tmp_path,
        capture_output=True, text=True)
    assert pip.returncode == 0, pip.stdout[-4000:] + pip.stderr[-4000:]
    assert "Successfully installed qrs-" in pip.stdout, pip.stdout[-2000:]

    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" \
        / "site-packages"
    ext = next((site / "qrs").glob("_qrs*.so"))
    ldd = subprocess.run(["ldd", str(ext)], capture_output=True, text=True,
                         check=True).stdout
    assert "libqrs" not in ldd, "the wheel's _qrs needs a system libqrs:\n" + ldd
    for f in ("py.typed", "vllm.py", "transformers.py", "errors.py"):
        assert (site / "qrs" / f).is_file(), f

    d = Daemon(tmp_path)
    d.start()
    try:
        salt = bytes(range(16))
        run = subprocess.run(
            [str(py), "-c", CHILD, d.sock, str(VOCAB), str(STEPS), salt.hex()],
            env=env, cwd=tmp_path, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr[-4000:]
        got = json.loads(run.stdout)
        assert got["file"].startswith(str(site)), got["file"]
        assert got["ext"].startswith(str(site)), got["ext"]
        assert got["version"] == qrs.libqrs_version
        assert got["heavy"] == []
        assert got["entry_points"] == [], "installed, qrs joins no vLLM"
        assert len({t for t, _ in got["tokens"]}) > 3, "the draws vary"

        # The build tree's package, on a fresh qrsd of the same seed:
        # the same u per step and the same tokens.
        d.stop()
        d.start()
        c = qrs.Client(d.sock)
        s = qrs.Sampler(qrs.make_config({"top_k": 50}, env=False), VOCAB)
        s.set_salt(salt)
        want = []
        for t in range(STEPS):
            tok, rec = s.sample_token(c, np.array(_row(t), dtype=np.float32),
                                      record=True)
            want.append([tok, rec["u_value"]])
        c.close()
        assert got["tokens"] == want
    finally:
        d.stop()
