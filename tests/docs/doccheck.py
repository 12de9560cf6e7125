#!/usr/bin/env python3
"""Checks that the manuals and the dashboard say what the code does
(issue 23).  One subcommand per document; each prints every difference
it finds and exits 1 if there is any.

  doccheck.py conf DUMP PAGE
      qrsd.yaml(5) against the config loader's tables, as printed by
      DUMP (tests/unit/conf/conf_keys_dump.c): every key in both, and
      for each its kind, range or choices and default.
  doccheck.py api PAGE HEADER...
      libqrs(3) against the public headers: every qrs_*() function
      declared there has a synopsis line in the page, and the page
      documents no function the headers lack.
  doccheck.py help PAGE PROGRAM [ARG...]
      the options (and, for qrsctl, the commands) listed by
      "PROGRAM ARG... --help" against those in the man page PAGE, both
      ways.
  doccheck.py grafana DASHBOARD METRICS
      every metric name in the dashboard's PromQL expressions is a
      family (or a family's _bucket/_sum/_count series) in METRICS, the
      output of a live "qrsctl metrics".
"""
import json
import re
import subprocess
import sys

errors = []


def fail(msg):
    errors.append(msg)


def done(what):
    if errors:
        for e in errors:
            print(f"{what}: {e}", file=sys.stderr)
        print(f"{what}: {len(errors)} difference(s)", file=sys.stderr)
        sys.exit(1)


# ---- roff ------------------------------------------------------------

ROFF_ESCAPES = [
    (re.compile(r"\\f(\[[A-Z]*\]|[BIRP])"), ""),   # font changes
    (re.compile(r"\\&"), ""),
    (re.compile(r"\\-"), "-"),
    (re.compile(r"\\\(dq"), '"'),
    (re.compile(r"\\\(em"), "--"),
    (re.compile(r"\\\(en"), "-"),
    (re.compile(r"\\e"), "\\\\"),
    (re.compile(r"\\ "), " "),
]


def unroff(text):
    """text of a roff line without its escapes."""
    for pat, rep in ROFF_ESCAPES:
        text = pat.sub(rep, text)
    return text


def macro_args(line):
    """The arguments of a macro line (.B "a b" c), unquoted and
    unescaped."""
    parts = re.findall(r'"((?:[^"]|"")*)"|(\S+)', line)
    return [unroff(q.replace('""', '"') if q else w) for q, w in parts][1:]


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")


# ---- conf: qrsd.yaml(5) against the loader's tables -------------------

SPEC = re.compile(r"^(?P<kind>[^,;]+)(?:, (?P<range>[^;]+))?; "
                  r"(?P<default>.+)\.$")


def page_keys(path):
    """{(scope, key path): (line number, kind, range, default)} of the
    page: each .TP whose tag is .B KEY in the KEYS and SOURCES sections,
    its next line "KIND, RANGE; DEFAULT.".  scope: "-" (top level), a
    source type (.SS "Type T") or "*" (.SS "Every source")."""
    lines = read_lines(path)
    keys = {}
    section = scope = None
    for i, line in enumerate(lines):
        if line.startswith(".SH"):
            section = " ".join(macro_args(line))
            scope = "-"
        elif line.startswith(".SS"):
            title = " ".join(macro_args(line))
            m = re.fullmatch(r"Type (\w+)", title)
            scope = m.group(1) if m else "*" if title == "Every source" \
                else "-"
        elif (line == ".TP" and section in ("KEYS", "SOURCES")
              and i + 2 < len(lines) and lines[i + 1].startswith(".B ")):
            key = "".join(macro_args(lines[i + 1]))
            spec = unroff(lines[i + 2])
            m = SPEC.match(spec)
            if not m:
                fail(f"{path}:{i + 3}: {key}: no line 'KIND, RANGE; "
                     f"default VALUE.' after the key (got {spec!r})")
                continue
            if (scope, key) in keys:
                fail(f"{path}:{i + 2}: {key} is described twice"
                     f"{'' if scope == '-' else ' for type ' + scope}")
            keys[(scope, key)] = (i + 2, m.group("kind"),
                                  m.group("range") or "",
                                  m.group("default"))
    return keys


def check_conf(dump, page):
    out = subprocess.run([dump], check=True, capture_output=True,
                         text=True).stdout
    table = {}
    types = set()
    for row in out.splitlines():
        scope, key, kind, rng, default = row.split("\t")
        table[(scope, key)] = (kind, rng, default)
        if scope != "-":
            types.add(scope)
    documented = page_keys(page)
    for (scope, key), want in table.items():
        where = "" if scope == "-" else f" (type {scope})"
        got = documented.get((scope, key))
        if got is None and scope != "-":
            got = documented.get(("*", key))
        if got is None:
            fail(f"{key}{where} is in the loader's table but not in "
                 f"{page}; add:\n.TP\n.B {key}\n{spec_line(*want)}")
            continue
        for what, g, w in zip(("kind", "range", "default"), got[1:], want):
            if g != w:
                fail(f"{page}:{got[0]}: {key}{where}: the page says {what} "
                     f"'{g}', the loader's table '{w}'")
    for (scope, key), (line, *_) in documented.items():
        if scope == "*":
            for t in sorted(types):
                if (t, key) not in table:
                    fail(f"{page}:{line}: {key} is described for every "
                         f"source, but type {t} has no such key")
        elif (scope, key) not in table:
            where = "" if scope == "-" else f" for type {scope}"
            fail(f"{page}:{line}: {key}{where} is not a key of the "
                 f"loader's table")
    done("conf")
    print(f"conf: {len(table)} keys of the loader's table agree with {page}")


def spec_line(kind, rng, default):
    return f"{kind}, {rng}; {default}." if rng else f"{kind}; {default}."


def main(argv):
    if len(argv) >= 3 and argv[0] == "conf":
        check_conf(argv[1], argv[2])
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
