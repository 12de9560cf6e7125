#!/bin/sh
# Usage: audit-journal.sh QRS_AUDIT
# qrs-audit --journal against a journal cut or rewritten where the chain
# alone cannot tell: a 4-file journal (3 entries a file, written here in
# the format of persist/journal.h) with a file deleted from the middle or
# the end, entries cut from the tail, the chain rewritten with every hash
# recomputed (caught only against a checkpoint: --checkpoint SEQ:HEAD, or
# read from a system-journal export, -o export and -o json), and a
# journal whose first file was pruned (--pruned, anchored by the
# checkpoint before its first entry).  Each fault named, with the file.
set -u
audit=$1
. "$(dirname "$0")/lib.sh"
on_fail() { cat "$T/out" 2>/dev/null; }

# gen DIR [EDIT_SEQ]: the journal; with EDIT_SEQ that entry's u changed
# and the chain recomputed from it (a rewrite that keeps it consistent).
# Prints each entry's hash, one "SEQ HASH" a line, to DIR.hashes.
gen() {
  python3 - "$@" <<'PY'
import hashlib, os, sys
d = sys.argv[1]
edit = int(sys.argv[2]) if len(sys.argv) > 2 else 0
os.makedirs(d)
prev, seq, out = "0" * 64, 0, []
for f in range(1, 5):
    lines = ["# qrs-journal 1 file=%d prev=%s\n" % (f, prev)]
    for _ in range(3):
        seq += 1
        u = "0.%d" % (seq * 7 if seq != edit else 999)
        body = "\t".join([str(seq), "100", "0", "system", "none", "", "%016x" % seq,
                          "1", "1.000000000", "1.000000001", "1.000000002",
                          hashlib.sha256(b"%d" % seq).hexdigest(), u, "",
                          prev]) + "\t"
        h = hashlib.sha256(body.encode()).hexdigest()
        lines.append(body + h + "\n")
        out.append("%d %s\n" % (seq, h))
        prev = h
    open(os.path.join(d, "journal-%06d.log" % f), "w").writelines(lines)
open(d + ".hashes", "w").writelines(out)
PY
}
hash_of() { awk -v s="$2" '$1 == s { print $2 }' "$1.hashes"; }
# expect STATUS TEXT ARGS...: qrs-audit ARGS exits STATUS and says TEXT
expect() {
  want=$1 text=$2
  shift 2
  "$audit" "$@" > "$T/out" 2>&1
  got=$?
  [ "$got" = "$want" ] || fail "qrs-audit $*: exit $got, not $want"
  grep -q -- "$text" "$T/out" || fail "qrs-audit $*: no '$text'"
}

gen "$T/ok"
h12=$(hash_of "$T/ok" 12) h3=$(hash_of "$T/ok" 3) h8=$(hash_of "$T/ok" 8)
expect 0 "journal intact: 12 entries, head $h12" --journal "$T/ok"
expect 0 "2 checkpoints passed" --journal "$T/ok" --checkpoint "3:$h3" \
  --checkpoint "12:$h12"

# a file deleted from the middle: named, whatever comes after it
cp -r "$T/ok" "$T/mid"
rm "$T/mid/journal-000002.log"
expect 1 "file-missing: $T/mid/journal-000002.log: missing" --journal "$T/mid"

# the last file deleted, the tail cut: consistent, but short of the
# checkpoint qrsd logged at 12
cp -r "$T/ok" "$T/last"
rm "$T/last/journal-000004.log"
expect 1 "journal-truncated: .*journal-000003.log: the journal ends at sequence 9, before checkpoint 12" \
  --journal "$T/last" --checkpoint "12:$h12"
cp -r "$T/ok" "$T/cut"
head -n 2 "$T/ok/journal-000004.log" > "$T/cut/journal-000004.log"
expect 1 "journal-truncated: .*ends at sequence 10, before checkpoint 12" \
  --journal "$T/cut" --checkpoint "12:$h12"
expect 0 "journal intact: 10 entries" --journal "$T/cut" \
  --checkpoint "8:$h8"

# the chain rewritten from entry 5 on, every hash recomputed: intact on
# its own, caught at the first checkpoint it should pass through
gen "$T/rw" 5
expect 0 "journal intact: 12 entries" --journal "$T/rw"
expect 1 "checkpoint-mismatch: $T/rw/journal-000003.log:3: the hash after sequence 8" \
  --journal "$T/rw" --checkpoint "3:$h3" --checkpoint "8:$h8"
expect 1 "checkpoint-mismatch" --journal "$T/rw" --json --checkpoint "12:$h12"
grep -q '"verdict":"checkpoint-mismatch"' "$T/out" || fail "--json verdict"

# the checkpoints read from the system journal's export (journalctl -o
# export: KEY=value, binary fields (one of 2 MiB, read past), a blank
# line between entries; and
# -o json, one object a line)
python3 - "$T/export" "$T/export.json" 12 "$h12" 3 "$h3" <<'PY'
import json, struct, sys
exp, js, cps = sys.argv[1], sys.argv[2], sys.argv[3:]
with open(exp, "wb") as f, open(js, "w") as g:
    f.write(b"__CURSOR=s=1\nMESSAGE=qrsd started\nPRIORITY=6\n\n")
    big = b"\0" * (2 << 20)            # a binary field past the line limit
    f.write(b"BLOB\n" + struct.pack("<Q", len(big)) + big + b"\n\n")
    g.write(json.dumps({"MESSAGE": "qrsd started"}) + "\n")
    for i in range(0, len(cps), 2):
        seq, head = cps[i], cps[i + 1]
        msg = b"journal checkpoint\nbinary"
        f.write(b"__CURSOR=s=%d\nMESSAGE\n" % (i + 2) +
                struct.pack("<Q", len(msg)) + msg + b"\n" +
                b"QRS_EVENT=journal-checkpoint\nQRS_JOURNAL_SEQ=%s\n"
                b"QRS_JOURNAL_HEAD=%s\n\n" % (seq.encode(), head.encode()))
        g.write(json.dumps({"MESSAGE": "journal checkpoint",
                            "QRS_JOURNAL_SEQ": seq,
                            "QRS_JOURNAL_HEAD": head}) + "\n")
PY
expect 0 "2 checkpoints passed" --journal "$T/ok" --checkpoints "$T/export"
expect 0 "2 checkpoints passed" --journal "$T/ok" --checkpoints "$T/export.json"
expect 1 "checkpoint-mismatch" --journal "$T/rw" --checkpoints "$T/export"
expect 1 "journal-truncated" --journal "$T/last" --checkpoints "$T/export.json"
printf 'QRS_JOURNAL_SEQ=12\nQRS_JOURNAL_HEAD=xyz\n\n' > "$T/bad-export"
expect 2 "QRS_JOURNAL_SEQ or QRS_JOURNAL_HEAD malformed" --journal "$T/ok" \
  --checkpoints "$T/bad-export"
expect 2 "is not SEQ:HEAD" --journal "$T/ok" --checkpoint "12:$h3"x

# retention deleted the first file: refused as a gap unless --pruned,
# then audited from the second, anchored by the checkpoint at 3
cp -r "$T/ok" "$T/pruned"
rm "$T/pruned/journal-000001.log"
expect 1 "file-missing: $T/pruned/journal-000001.log: missing" \
  --journal "$T/pruned"
expect 0 "journal intact: 9 entries, head $h12" --journal "$T/pruned" --pruned
expect 0 "1 checkpoints passed" --journal "$T/pruned" --pruned \
  --checkpoint "3:$h3"
cp -r "$T/rw" "$T/rwp"
rm "$T/rwp/journal-000001.log" "$T/rwp/journal-000002.log"
expect 1 "checkpoint-mismatch" --journal "$T/rwp" --pruned \
  --checkpoint "6:$(hash_of "$T/ok" 6)"
exit 0
