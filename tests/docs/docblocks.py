#!/usr/bin/env python3
"""Every code block the documents show (README.md and docs/*.md) must
still work.  This script checks the C and YAML blocks; the Python blocks
need the venv and run in tests/python/test_docs.py, which takes the
blocks from blocks() below.

  docblocks.py --root SRC --qrsd QRSD [--run] [--llama-cflag F ...]
               [--link ARG ...] [--llama-link ARG ...] --cc CC [FLAG...]

  ```c     A block with main() is a whole program: built with CC and the
           flags, linked with the --link arguments (libqrs; a program
           that includes <qrs/llama.h> also with --llama-link), and with
           --run run against a real qrsd on the system source (exit 0).
           Without --link (a sanitizer build, whose libqrs a program
           without the sanitizer's runtime cannot link) it is only
           compiled.  Any other block is a translation unit of whole definitions
           (a function of the engine's, say), compiled with -c and
           -include engine.h, which declares the engine_*() functions
           the examples call for the model's own work.  Blocks that
           include <qrs/llama.h> need --llama-cflag (llama.cpp found);
           without it they are counted as skipped, saying why.
  ```yaml  A qrsd configuration, checked with "qrsd -n -c FILE"; so is
           every YAML heredoc (<<'YAML' ... YAML) of a ```sh block.

Every relative link of the documents ([text](path) or
[text](path#anchor)) must name a file that exists and, with an anchor,
a heading of that file; README.md must link every docs/*.md.

A block that cannot be checked as written says why in an HTML comment on
the line before it:

  <!-- not run: REASON -->                   (a Python block)
  <!-- not a qrsd configuration: REASON -->  (a YAML block)

Such blocks are counted and listed.  The exit status is 1 if any block
fails (each failure printed with its file and line), 0 otherwise.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

FENCE = re.compile(r"^```(\S*)\s*$")
MARKER = re.compile(r"^<!--\s*(not run|not a qrsd configuration):\s*(.+?)"
                    r"\s*-->$")
HEREDOC = re.compile(r"<<\s*'YAML'\n(.*?)^YAML$", re.M | re.S)


class Block:
    def __init__(self, path, line, lang, text, skip):
        self.path = path        # the document
        self.line = line        # line of the opening fence, 1-based
        self.lang = lang
        self.text = text
        self.skip = skip        # (marker kind, reason) or None

    def where(self):
        return f"{self.path}:{self.line}"


def documents(root):
    """README.md and every docs/*.md, in a stable order."""
    docs = os.path.join(root, "docs")
    return [os.path.join(root, "README.md")] + sorted(
        os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))


def blocks(root, lang=None):
    """Every fenced block of the documents (of language lang), with the
    marker on the line before it, if any."""
    out = []
    for path in documents(root):
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        rel = os.path.relpath(path, root)
        i = 0
        while i < len(lines):
            m = FENCE.match(lines[i])
            if not m:
                i += 1
                continue
            start = i
            j = i + 1
            while j < len(lines) and lines[j] != "```":
                j += 1
            if j == len(lines):
                sys.exit(f"{rel}:{start + 1}: a block that is never closed")
            prev = start - 1
            while prev >= 0 and not lines[prev].strip():
                prev -= 1
            mk = MARKER.match(lines[prev].strip()) if prev >= 0 else None
            b = Block(rel, start + 1, m.group(1),
                      "\n".join(lines[start + 1:j]) + "\n",
                      (mk.group(1), mk.group(2)) if mk else None)
            if lang is None or b.lang == lang:
                out.append(b)
            i = j + 1
    return out


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def prose(path):
    """The lines of a document outside its fenced blocks."""
    out = []
    inside = False
    with open(path, encoding="utf-8") as f:
        for line in f.read().split("\n"):
            if FENCE.match(line) or line == "```":
                inside = not inside
            elif not inside:
                out.append(line)
    return out


def anchor(heading):
    """GitHub's anchor of a heading."""
    h = heading.strip().lower()
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def bad_links(root):
    """(document, message) for every relative link that names no file, or
    no heading of it."""
    bad = []
    n = 0
    for path in documents(root):
        rel = os.path.relpath(path, root)
        for line in prose(path):
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue
                n += 1
                file, _, frag = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(path),
                                                     file)) if file else path
                if not os.path.exists(dest):
                    bad.append(f"{rel}: link to {target}: no such file")
                elif frag and dest.endswith(".md"):
                    heads = [anchor(re.sub(r"^#+\s*", "", h))
                             for h in prose(dest) if re.match(r"^#+\s", h)]
                    if frag not in heads:
                        bad.append(f"{rel}: link to {target}: no such "
                                   f"heading in {os.path.relpath(dest, root)}")
    readme = os.path.join(root, "README.md")
    linked = {os.path.normpath(os.path.join(root, t.partition("#")[0]))
              for line in prose(readme) for t in LINK.findall(line)}
    for path in documents(root)[1:]:
        if os.path.normpath(path) not in linked:
            bad.append(f"README.md: no link to {os.path.relpath(path, root)}"
                       f" in its Documentation list")
    return bad, n


def wrong_markers(bs):
    """Markers on blocks of the wrong language."""
    bad = []
    for b in bs:
        if b.skip and (b.skip[0] == "not run") != (b.lang == "python"):
            bad.append(f"{b.where()}: '{b.skip[0]}' on a ```{b.lang} block")
    return bad


def is_program(text):
    return re.search(r"^main\s*\(", text, re.M) is not None


class Checker:
    def __init__(self, args):
        self.a = args
        self.failures = []
        self.counts = {}
        self.skipped = []
        self.tmp = tempfile.mkdtemp(prefix="qrs-docblocks-")
        self.qrsd = None
        self.sock = None

    def count(self, what):
        self.counts[what] = self.counts.get(what, 0) + 1

    def fail(self, b, msg):
        self.failures.append(f"{b.where()}: {msg}")

    def run(self, argv, **kw):
        return subprocess.run(argv, capture_output=True, text=True,
                              timeout=kw.pop("timeout", 120), **kw)

    # ---- C ------------------------------------------------------------

    def check_c(self, b, n):
        llama = "<qrs/llama.h>" in b.text
        if llama and not self.a.llama_cflag:
            self.skipped.append(f"{b.where()}: c: llama.cpp was not found "
                                f"by meson: not compiled")
            return
        src = os.path.join(self.tmp, f"block{n}.c")
        with open(src, "w", encoding="utf-8") as f:
            f.write(b.text)
        cflags = list(self.a.cc) + (self.a.llama_cflag if llama else [])
        if is_program(b.text) and self.a.link:
            exe = os.path.join(self.tmp, f"block{n}")
            link = list(self.a.link) + (self.a.llama_link if llama else [])
            r = self.run(cflags + ["-o", exe, src] + link)
            if r.returncode != 0:
                self.fail(b, f"the program does not build:\n{r.stderr}")
                return
            if not self.a.run:
                self.count("c programs built")
                return
            r = self.run([exe], env=dict(os.environ, QRS_SOCKET=self.socket()),
                         timeout=60)
            if r.returncode != 0:
                self.fail(b, f"the program exits {r.returncode} against a "
                          f"real qrsd:\n{r.stdout}{r.stderr}")
                return
            print(f"{b.where()}: {r.stdout.strip()}")
            self.count("c programs built and run")
        else:
            obj = os.path.join(self.tmp, f"block{n}.o")
            r = self.run(cflags + ["-include", self.a.engine_h, "-c", "-o",
                                   obj, src])
            if r.returncode != 0:
                self.fail(b, f"the block does not compile:\n{r.stderr}")
                return
            self.count("c blocks compiled")

    def socket(self):
        if self.qrsd is None:
            self.sock = os.path.join(self.tmp, "qrsd.sock")
            conf = os.path.join(self.tmp, "qrsd-run.yaml")
            with open(conf, "w", encoding="utf-8") as f:
                f.write(f'socket: {{ path: "{self.sock}", mode: "0600", '
                        f'group: "" }}\nstate_dir: "{self.tmp}"\n'
                        f'status_file: ""\n')
            self.log = open(os.path.join(self.tmp, "qrsd.log"), "w")
            self.qrsd = subprocess.Popen([self.a.qrsd, "-c", conf],
                                         stdout=self.log, stderr=self.log)
            for _ in range(200):
                if os.path.exists(self.sock) or self.qrsd.poll() is not None:
                    break
                time.sleep(0.05)
            if not os.path.exists(self.sock):
                self.qrsd.kill()
                with open(os.path.join(self.tmp, "qrsd.log")) as f:
                    sys.exit(f"qrsd did not start: {f.read()}")
        return self.sock

    # ---- YAML ---------------------------------------------------------

    def check_yaml(self, b, text, n, what):
        path = os.path.join(self.tmp, f"conf{n}.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        r = self.run([self.a.qrsd, "-n", "-c", path], timeout=30)
        if r.returncode != 0:
            self.fail(b, f"{what} is not a valid qrsd configuration:\n"
                      f"{r.stdout}{r.stderr}")
            return
        self.count(what + "s validated")

    # ---- all ----------------------------------------------------------

    def check(self):
        bs = blocks(self.a.root)
        self.failures += wrong_markers(bs)
        bad, n = bad_links(self.a.root)
        self.failures += bad
        self.counts["relative links checked"] = n
        for n, b in enumerate(bs):
            if b.lang == "c":
                self.check_c(b, n)
            elif b.lang == "yaml":
                if b.skip:
                    self.skipped.append(f"{b.where()}: yaml: {b.skip[1]}")
                    continue
                self.check_yaml(b, b.text, n, "yaml block")
            elif b.lang == "sh":
                for k, m in enumerate(HEREDOC.finditer(b.text)):
                    self.check_yaml(b, m.group(1), f"{n}-{k}",
                                    "sh heredoc configuration")
            elif b.lang == "python":
                self.count("python blocks (run by tests/python/test_docs.py)")
        if self.qrsd is not None:
            self.qrsd.terminate()
            self.qrsd.wait()
        for what, k in sorted(self.counts.items()):
            print(f"{k} {what}")
        for s in self.skipped:
            print(f"skipped {s}")
        if self.failures:
            for f in self.failures:
                print(f, file=sys.stderr)
            print(f"{len(self.failures)} failure(s)", file=sys.stderr)
            return 1
        if not self.counts.get("c blocks compiled") and not any(
                k.startswith("c programs") for k in self.counts):
            print("no C block found (fence parser out of date?)",
                  file=sys.stderr)
            return 1
        return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", required=True)
    p.add_argument("--qrsd", required=True)
    p.add_argument("--run", action="store_true")
    p.add_argument("--link", action="append", default=[])
    p.add_argument("--llama-cflag", action="append", default=[])
    p.add_argument("--llama-link", action="append", default=[])
    p.add_argument("--engine-h", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "engine.h"))
    p.add_argument("--cc", nargs=argparse.REMAINDER, required=True)
    args = p.parse_args()
    c = Checker(args)
    try:
        return c.check()
    finally:
        if c.qrsd is not None and c.qrsd.poll() is None:
            c.qrsd.kill()
            c.qrsd.wait()
        shutil.rmtree(c.tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
