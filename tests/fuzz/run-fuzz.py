#!/usr/bin/env python3
"""Run one libFuzzer harness of tests/fuzz on its seed corpus.

The seeds are built fresh for every run: the golden frames of tests/wire
(hex -> bytes) for the wire harnesses, the config tests of tests/conf and
conf/qrsd.yaml for the config harness, and the inputs kept under
tests/fuzz/corpus/<name>/ (regression inputs of fixed crashes, hand-made
streams).  New inputs the fuzzer finds go to the work directory (a
temporary one unless --workdir is given), crashes to <workdir>/crash-*.

  run-fuzz.py --fuzzer build-fuzz/tests/fuzz/fuzz_frame --name frame \\
              --seconds 4                        # the fuzz-smoke test
  run-fuzz.py --fuzzer ... --name conf --seconds 14400 --workdir /var/tmp/f
                                                 # hours (docs/fuzzing.md)
Exit status: the fuzzer's (0: no crash)."""

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
TOP = HERE.parent.parent
WIRE = {"frame", "client", "server"}


def seed(name, dest):
    dest.mkdir(parents=True, exist_ok=True)
    n = 0
    if name in WIRE:
        for hexfile in sorted((TOP / "tests" / "wire").glob("*/*.hex")):
            lines = [l for l in hexfile.read_text().splitlines()
                     if l.strip() and not l.startswith("#")]
            (dest / ("wire-" + hexfile.stem)).write_bytes(
                bytes.fromhex("".join(lines)))
            n += 1
    if name == "conf":
        for y in sorted((TOP / "tests" / "conf").glob("*.yaml")):
            shutil.copy(y, dest / ("conf-" + y.name))
            n += 1
        shutil.copy(TOP / "conf" / "qrsd.yaml", dest / "conf-qrsd.yaml")
        n += 1
    kept = HERE / "corpus" / name
    if kept.is_dir():
        for f in sorted(kept.iterdir()):
            if f.is_file():
                shutil.copy(f, dest / ("kept-" + f.name))
                n += 1
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fuzzer", required=True, help="harness executable")
    ap.add_argument("--name", required=True,
                    help="frame, conf, client or server (selects the seeds)")
    ap.add_argument("--seconds", type=int, default=4,
                    help="run time (libFuzzer -max_total_time)")
    ap.add_argument("--workdir", help="keep the corpus and crashes here")
    ap.add_argument("extra", nargs="*",
                    help="more libFuzzer options, after --")
    a = ap.parse_args()

    tmp = None
    if a.workdir:
        work = pathlib.Path(a.workdir)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="qrs-fuzz-")
        work = pathlib.Path(tmp.name)
    corpus = work / "corpus"
    seeds = work / "seeds"
    corpus.mkdir(parents=True, exist_ok=True)
    if seeds.exists():
        shutil.rmtree(seeds)
    n = seed(a.name, seeds)
    print(f"run-fuzz: {a.name}: {n} seed inputs, {a.seconds} s", flush=True)
    cmd = [a.fuzzer, f"-max_total_time={a.seconds}", "-timeout=20",
           "-rss_limit_mb=2048", "-print_final_stats=1",
           f"-artifact_prefix={work}/", *a.extra, str(corpus), str(seeds)]
    print("run-fuzz:", " ".join(cmd), flush=True)
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "abort_on_error=1:detect_leaks=1")
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    rc = subprocess.call(cmd, env=env)
    if rc != 0:
        print(f"run-fuzz: {a.name}: fuzzer exit status {rc}; crash inputs "
              f"in {work}", file=sys.stderr)
        if tmp:
            tmp.cleanup = lambda: None     # keep them for the report
    return rc


if __name__ == "__main__":
    sys.exit(main())
