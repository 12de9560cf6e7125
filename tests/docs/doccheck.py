#!/usr/bin/env python3
"""Checks that the manuals and the dashboard say what the code does.
One subcommand per document; each prints every difference it finds and
exits 1 if there is any.

  doccheck.py conf DUMP PAGE
      qrsd.yaml(5) against the config loader's tables, as printed by
      DUMP (tests/unit/conf/conf_keys_dump.c): every key in both, and
      for each its kind, range or choices and default.
  doccheck.py api PAGE HEADER... [--cc COMPILER-COMMAND...]
      libqrs(3) against the public headers: every qrs_*() function
      declared there has its declaration in the page's SYNOPSIS and is
      described below it, the page shows no function the headers lack,
      and ERRORS lists exactly the QRS_E_* codes.  With --cc, the program
      under EXAMPLES is built with the command ({src}, {exe} replaced)
      and, when $QRSD_BIN is set, run against a real qrsd.
  doccheck.py api --synopsis HEADER...
      the SYNOPSIS lines of the headers' functions, to paste.
  doccheck.py help PAGE PROGRAM [ARG...]
      the options (and, for qrsctl, the commands) listed by
      "PROGRAM ARG... --help" against those in the man page PAGE, both
      ways.
  doccheck.py grafana DASHBOARD METRICS_C
      every metric name in the dashboard's PromQL expressions is a
      family (or a family's _bucket/_sum/_count series) in METRICS_C,
      the family table of "qrsctl metrics" (tools/qrsctl/ctl_metrics.c: a live
      output lists only the families the running config has); every
      panel reads the ${datasource} variable; panel ids are unique.
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


def macro_text(line):
    """What a font macro line prints: .B and .I join their arguments
    with spaces, the alternating ones (.BR, .BI, ...) without."""
    sep = " " if re.match(r"^\.[BI]\s", line) else ""
    return sep.join(macro_args(line))


def line_text(line):
    """What a man page line prints: a macro line's text, or the line
    unescaped."""
    return macro_text(line) if line.startswith(".") else unroff(line)


def add_command(pattern, text, commands, opts):
    """The command that text names (group 1 of pattern matched at its
    start), added to commands with no options yet; None when it names
    none."""
    m = re.match(pattern, text)
    if not m:
        return None
    commands.append(m.group(1))
    opts.setdefault(m.group(1), set())
    return m.group(1)


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
            key = macro_text(lines[i + 1])
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


# ---- api: libqrs(3) against the public headers -----------------------

def c_norm(proto):
    """A C declaration with its spacing normalised, for comparing."""
    proto = re.sub(r"\s+", " ", proto).strip()
    proto = re.sub(r" ?([*(),\[\]]) ?", r"\1", proto)
    return proto.rstrip(";")


def header_functions(headers):
    """{name: (declaration, header)} of every QRS_EXPORT qrs_*()
    function the headers declare."""
    funcs = {}
    for h in headers:
        with open(h, encoding="utf-8") as f:
            text = f.read()
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
        text = re.sub(r"^\s*#.*$", "", text, flags=re.M)
        for m in re.finditer(r"\bQRS_EXPORT\s+([^;{]*?\b(qrs_\w+)\s*"
                             r"\([^;]*\))\s*;", text, flags=re.S):
            decl = re.sub(r"\s+", " ", m.group(1)).replace("( ", "(")
            funcs[m.group(2)] = (re.sub(r"\* (qrs_)", r"*\1", decl), h)
    return funcs


def synopsis_line(decl):
    """The .BI line that shows decl in a SYNOPSIS (parameter names in
    italics)."""
    m = re.fullmatch(r"(.*?\()(.*)\)", decl)
    head, params = m.group(1), m.group(2)
    if params.strip() in ("", "void"):
        return f'.B "{head}{params.strip()});"'
    parts = [head]
    for i, p in enumerate(params.split(",")):
        p = p.strip()
        pm = re.fullmatch(r"(.*?)(\w+)(\[\d*\])?", p)
        typ, name, arr = pm.group(1), pm.group(2), pm.group(3) or ""
        parts[-1] += ("" if i == 0 else ", ") + typ
        parts += [name, arr]
    parts[-1] += ");"
    return ".BI " + " ".join(f'"{x}"' if (" " in x or not x) else x
                             for x in parts)


def sections(lines):
    """[(section title, line index, line)] for every line."""
    out = []
    title = ""
    for i, line in enumerate(lines):
        if line.startswith(".SH"):
            title = " ".join(macro_args(line))
        out.append((title, i, line))
    return out


def check_api(page, headers, example_cmd):
    funcs = header_functions(headers)
    lines = read_lines(page)
    shown = {}
    described = set()
    errs_page = set()
    for title, i, line in sections(lines):
        text = (macro_text(line) if line.startswith((".B", ".I"))
                else unroff(line))
        if title == "SYNOPSIS":
            m = re.search(r"\b(qrs_\w+)\s*\(", text)
            if m and line.startswith((".B ", ".BI ")):
                if m.group(1) in shown:
                    fail(f"{page}:{i + 1}: {m.group(1)} is in the "
                         f"synopsis twice")
                shown[m.group(1)] = (c_norm(text), i + 1)
        else:
            described.update(re.findall(r"\b(qrs_\w+)\b", text))
            if title == "ERRORS":
                errs_page.update(re.findall(r"\bQRS_E_\w+", text))
    for name, (decl, h) in sorted(funcs.items()):
        if name not in shown:
            fail(f"{name}() ({h}) is not in the page's SYNOPSIS; add:\n"
                 f"{synopsis_line(decl)}")
        elif shown[name][0] != c_norm(decl):
            fail(f"{page}:{shown[name][1]}: {name}: the page shows "
                 f"'{shown[name][0]}', {h} declares '{c_norm(decl)}'; "
                 f"write:\n{synopsis_line(decl)}")
        if name not in described:
            fail(f"{name}() is in no section of {page} but the SYNOPSIS")
    for name, (_, line) in sorted(shown.items()):
        if name not in funcs:
            fail(f"{page}:{line}: {name}() is declared by no public header")
    codes = set()
    for h in headers:
        with open(h, encoding="utf-8") as f:
            codes.update(re.findall(r"^\s*(QRS_E_\w+)\s*=", f.read(),
                                    flags=re.M))
    for code in sorted(codes - errs_page):
        fail(f"{code} is not listed under ERRORS in {page}")
    for code in sorted(errs_page - codes):
        fail(f"{page}: ERRORS lists {code}, which no public header defines")
    if example_cmd:
        check_example(lines, page, example_cmd)
    done("api")
    print(f"api: {len(funcs)} functions and {len(codes)} error codes of "
          f"the public headers agree with {page}")


def check_example(lines, page, cmd):
    """The program in EXAMPLES (between .EX and .EE), built with cmd
    (a compiler command line; {src} and {exe} are replaced) and, with
    $QRSD_BIN set, run against a real qrsd."""
    import os
    import tempfile
    src = []
    inside = False
    for title, _, line in sections(lines):
        if title != "EXAMPLES":
            continue
        if line == ".EX":
            inside = True
        elif line == ".EE":
            break
        elif inside:
            src.append(unroff(line))
    if not src:
        fail(f"{page}: no program between .EX and .EE under EXAMPLES")
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "example.c")
        exe = os.path.join(tmp, "example")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(src) + "\n")
        argv = [a.replace("{src}", path).replace("{exe}", exe) for a in cmd]
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"{page}: the EXAMPLES program does not build:\n"
                 f"{r.stdout}{r.stderr}")
            return
        qrsd = os.environ.get("QRSD_BIN")
        if qrsd:
            run_example(exe, qrsd, tmp, page)


def start_qrsd(qrsd, tmp, extra=""):
    """A real qrsd on a socket in tmp; returns (process, socket path)."""
    import os
    import time
    sock = os.path.join(tmp, "qrsd.sock")
    conf = os.path.join(tmp, "qrsd.yaml")
    with open(conf, "w", encoding="utf-8") as f:
        f.write(f'socket: {{ path: "{sock}", mode: "0600", group: "" }}\n'
                f'state_dir: "{tmp}"\nstatus_file: ""\n{extra}')
    log = open(os.path.join(tmp, "qrsd.log"), "w")
    proc = subprocess.Popen([qrsd, "-c", conf], stdout=log, stderr=log)
    for _ in range(200):
        if os.path.exists(sock) or proc.poll() is not None:
            break
        time.sleep(0.05)
    if not os.path.exists(sock):
        proc.kill()
        with open(os.path.join(tmp, "qrsd.log")) as f:
            sys.exit(f"qrsd did not start: {f.read()}")
    return proc, sock


def run_example(exe, qrsd, tmp, page):
    import os
    proc, sock = start_qrsd(qrsd, tmp)
    try:
        env = dict(os.environ, QRS_SOCKET=sock)
        r = subprocess.run([exe], capture_output=True, text=True, env=env,
                           timeout=60)
        if r.returncode != 0:
            fail(f"{page}: the EXAMPLES program exits {r.returncode} "
                 f"against a real qrsd:\n{r.stdout}{r.stderr}")
        else:
            print(r.stdout, end="")
    finally:
        proc.terminate()
        proc.wait()


# ---- help: --help against the man page --------------------------------

OPT_LINE = re.compile(r"^((?:--?[A-Za-z0-9][\w-]*(?: [A-Z][A-Z0-9_]*)?"
                      r"(?:, |/)?)+)(?:  |$)")


def option_tokens(text):
    """The options a definition line ("-n, --count N   what it does")
    starts with, or [] when the line is prose that starts with one."""
    m = OPT_LINE.match(text.strip())
    if not m:
        return []
    return re.findall(r"(?<![\w-])(--?[A-Za-z0-9][\w-]*)", m.group(1))


def help_lists(text):
    """{scope: set of options} and the commands of a --help text: scope
    "" for the options outside a "Commands:" section, else the command
    whose description they are in."""
    opts = {"": set()}
    commands = []
    in_commands = False
    scope = ""
    for line in text.splitlines():
        if re.match(r"^\S.*:$", line):          # a section header
            in_commands = line.startswith("Commands")
            scope = ""
            continue
        if not line.strip():
            continue
        if in_commands:
            name = add_command(r"^  ([a-z][\w-]*)\b", line, commands, opts)
            if name:
                scope = name
                continue
        opts[scope].update(option_tokens(line))
    return opts, commands


def man_lists(path):
    """The same lists from a man page: the tags of its .TP items in
    OPTIONS (global) and COMMANDS (a tag at the outer level names a
    command, the tags inside its .RS block are its options)."""
    lines = read_lines(path)
    opts = {"": set()}
    commands = []
    every = set()             # COMMANDS' preamble: what every one takes
    section = ""
    depth = 0
    scope = ""
    for i, line in enumerate(lines):
        if line.startswith(".SH"):
            section = " ".join(macro_args(line))
            depth = 0
            scope = ""
        elif section == "COMMANDS" and not commands and line != ".TP":
            text = line_text(line)
            every.update(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", text))
        elif line.startswith(".RS"):
            depth += 1
        elif line.startswith(".RE"):
            depth -= 1
        elif (line == ".TP" and section in ("OPTIONS", "COMMANDS")
              and i + 1 < len(lines)):
            tag = lines[i + 1]
            text = line_text(tag)
            if section == "COMMANDS" and depth == 0:
                scope = add_command(r"([a-z][\w-]*)\b", text, commands,
                                    opts) or scope
                continue
            opts[scope if section == "COMMANDS" else ""].update(
                option_tokens(text))
    return opts, commands, every


def check_help(page, argv):
    r = subprocess.run(argv + ["--help"], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{' '.join(argv)} --help exits {r.returncode}: {r.stderr}")
        done("help")
    name = " ".join([argv[0].rsplit("/", 1)[-1]] + argv[1:])
    hopts, hcmds = help_lists(r.stdout)
    mopts, mcmds, every = man_lists(page)
    for c in hcmds:
        if c not in mcmds:
            fail(f"command {c}: in '{name} --help', not in {page}")
    for c in mcmds:
        if c not in hcmds:
            fail(f"command {c}: in {page}, not in '{name} --help'")
    for scope in sorted(set(hopts) | set(mopts)):
        h, m = hopts.get(scope, set()), mopts.get(scope, set())
        where = f"{scope} " if scope else ""
        for o in sorted(h - m):
            fail(f"{where}option {o}: in '{name} --help', not in {page}")
        for o in sorted(m - h):
            fail(f"{where}option {o}: in {page}, not in '{name} --help'")
    # Each command's own --help: its options and those every command
    # takes (the man page's COMMANDS preamble).
    for c in hcmds:
        r = subprocess.run(argv + [c, "--help"], capture_output=True,
                           text=True)
        if r.returncode != 0:
            fail(f"'{name} {c} --help' exits {r.returncode}: {r.stderr}")
            continue
        h = help_lists(r.stdout)[0][""]
        m = mopts.get(c, set()) | every
        for o in sorted(h - m):
            fail(f"{c} option {o}: in '{name} {c} --help', not in {page}")
        for o in sorted(m - h):
            fail(f"{c} option {o}: in {page}, not in '{name} {c} --help'")
    if sum(len(v) for v in hopts.values()) == 0:
        fail(f"no option found in '{name} --help' (parser out of date?)")
    done(f"help {name}")
    n = sum(len(v) for v in hopts.values())
    print(f"help {name}: {n} options and {len(hcmds)} commands agree "
          f"with {page}")


# ---- the Grafana dashboard ---------------------------------------------

def check_dashboard(dash, metrics_c):
    """Every qrsd_* series the dashboard queries is a family qrsctl metrics
    exports (tools/qrsctl/ctl_metrics.c's table), every panel reads the
    dashboard's datasource variable, and panel ids are unique."""
    with open(dash) as f:
        d = json.load(f)
    with open(metrics_c) as f:
        exported = set(re.findall(r'"(qrsd_[a-z_]+)', f.read()))
    if not exported:
        fail(f"no qrsd_* families found in {metrics_c}")
    ids, used = set(), set()
    variables = {v.get("name") for v in d.get("templating", {}).get("list", [])}
    if "datasource" not in variables:
        fail("no 'datasource' template variable")
    panels = list(d.get("panels", []))
    for p in list(panels):
        panels.extend(p.get("panels", []))          # rows' children
    for p in panels:
        pid = p.get("id")
        if pid in ids:
            fail(f"panel id {pid} used twice")
        ids.add(pid)
        if p.get("type") == "row":
            continue
        ds = p.get("datasource") or {}
        if ds.get("uid") != "${datasource}":
            fail(f"panel {pid} ({p.get('title')}) does not read ${{datasource}}")
        for t in p.get("targets", []):
            for m in re.findall(r"qrsd_[a-z_]+", t.get("expr", "")):
                base = re.sub(r"_(bucket|sum|count)$", "", m)
                used.add(base)
                if base not in exported:
                    fail(f"panel {pid} ({p.get('title')}) queries {m}, "
                         f"which qrsctl metrics does not export")
    if not used:
        fail("the dashboard queries no qrsd_* series")
    done(dash)
    print(f"{dash}: {len(panels)} panels, {len(used)} qrsd_* families, all "
          f"exported by qrsctl metrics")


def main(argv):
    if len(argv) >= 3 and argv[0] == "conf":
        check_conf(argv[1], argv[2])
    elif len(argv) >= 3 and argv[0] == "api":
        rest = argv[2:]
        cmd = []
        if "--cc" in rest:
            cmd = rest[rest.index("--cc") + 1:]
            rest = rest[:rest.index("--cc")]
        if rest and rest[0] == "--synopsis":
            for decl, _ in header_functions(rest[1:]).values():
                print(synopsis_line(decl))
            return
        check_api(argv[1], rest, cmd)
    elif len(argv) >= 3 and argv[0] == "help":
        check_help(argv[1], argv[2:])
    elif len(argv) == 3 and argv[0] == "grafana":
        check_dashboard(argv[1], argv[2])
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
