#!/bin/sh
# Usage: journald.sh QRSD QRSCTL JOURNALD_PY QRS_AUDIT
# qrsd's structured journal entries: with stderr on a journal
# stream (JOURNAL_STREAM, as systemd sets it) and a journald listening,
# qrsd writes its log through sd_journal_send, with the fields an operator
# filters on.  The journald here is journald.py, bound to the real
# /run/systemd/journal/socket inside a private mount namespace (a tmpfs
# over /run), so the real libsystemd path is what is tested.  Checked:
# QRS_EVENT=start and =stop; a refused peer (uid 65534, setpriv) as
# QRS_EVENT=access-denied with CLIENT_PID= and CLIENT_UID=; a dead
# upstream as QRS_EVENT=source-degraded with SOURCE=; with -v, each served
# draw as QRS_EVENT=draw with SOURCE=, CLIENT_UID= and DRAW_SEQ= (the
# journal is on); PRIORITY= the level; nothing left on stderr; no
# entry carries the upstream's api key; the draw journal's checkpoints
# (QRS_EVENT=journal-checkpoint with QRS_JOURNAL_SEQ= and
# QRS_JOURNAL_HEAD=, at rotations and at stop), against which qrs-audit
# --checkpoints passes the journal, and finds it cut when its last entry
# is gone.  Needs root (unshare, setpriv).
set -u
qrsd=$1 qrsctl=$2 journald=$3 audit=$4
# In a private mount namespace when the kernel lets us make one; else
# (a container without CAP_SYS_ADMIN) on the host's path, which must then
# be free: no journald runs there.
if [ -z "${QRS_JOURNALD_NS:-}" ]; then
  if unshare --mount --propagation private true 2>/dev/null; then
    QRS_JOURNALD_NS=1 exec unshare --mount --propagation private "$0" "$@"
  fi
  QRS_JOURNALD_NS=host
fi
. "$(dirname "$0")/lib.sh"
need_root unshare
made=
on_exit() { [ -z "$made" ] || rm -f /run/systemd/journal/socket; }
on_fail() { cat "$T/entries" 2>/dev/null; }
if [ "$QRS_JOURNALD_NS" = host ]; then
  [ ! -e /run/systemd/journal/socket ] ||
    fail "no mount namespace here and /run/systemd/journal/socket is taken"
  made=1
else
  mount -t tmpfs -o mode=0755 tmpfs /run || fail "cannot mount a tmpfs on /run"
fi
mkdir -p /run/systemd/journal
python3 "$journald" /run/systemd/journal/socket "$T/entries" &
jpid=$!
track "$jpid"
wait_for 100 0.05 "journald.py did not start" test -S /run/systemd/journal/socket
echo "sekrit-api-key-1234" > "$T/key"
chmod 0600 "$T/key"   # a secret: qrsd refuses one that others may read
mkdir "$T/journal"
write_conf <<YAML
access: { group: daemon }
journal: { dir: $T/journal, max_bytes: 4096 }
sources:
  system: { type: system }
  up: { type: grpc, target: "unix:$T/none.sock", fallback: system,
        retry_count: 0, api_key_file: $T/key }
YAML
# qrsd's stderr is the journal stream: its start line goes to the journal
: > "$T/stderr"
JOURNAL_STREAM=$(stat -c %d:%i "$T/stderr") \
  "$qrsd" -v -c "$T/c.yaml" 2>> "$T/stderr" &
pid=$!
track "$pid"
ready "$pid" qrsd grep -q '"QRS_EVENT": "start"' "$T/entries"
q() { "$qrsctl" --socket "$T/s.sock" "$@"; }
q draw -n 3 --source system > /dev/null || fail "draw from system failed"
q draw -n 2 --source up > /dev/null || fail "draw from up (fallback) failed"
# past a few rotations of 4 KiB files: a checkpoint at each
for i in 1 2 3 4; do
  q draw -n 10 --source system > /dev/null || fail "draws failed"
done
setpriv --reuid=65534 --regid=65534 --clear-groups "$qrsctl" \
  --socket "$T/s.sock" bytes -n 8 > /dev/null 2>&1 &&
  fail "uid 65534 was served despite access.group daemon"
stop_qrsd
sleep 0.2
kill "$jpid"; wait "$jpid" 2>/dev/null; untrack "$jpid"
[ ! -s "$T/stderr" ] || fail "qrsd wrote to stderr with a journal: $(cat "$T/stderr")"
python3 - "$T/entries" <<'PY' || fail "the entries lack what they should carry"
import json, sys
es = [json.loads(l) for l in open(sys.argv[1])]
q = [e for e in es if e.get("SYSLOG_IDENTIFIER") == "qrsd"]
bad = []
def one(what, **kv):
    m = [e for e in q if all(e.get(k) == v for k, v in kv.items())]
    if not m:
        bad.append(f"no entry with {kv} ({what})")
    return m
for e in q:
    if "sekrit" in json.dumps(e):
        bad.append(f"an entry carries the api key: {e}")
    if "MESSAGE" not in e or "PRIORITY" not in e:
        bad.append(f"an entry without MESSAGE or PRIORITY: {e}")
one("start", QRS_EVENT="start", PRIORITY="6")
one("stop", QRS_EVENT="stop")
for e in one("refused peer", QRS_EVENT="access-denied", CLIENT_UID="65534",
             PRIORITY="4"):
    if not e.get("CLIENT_PID", "").isdigit():
        bad.append(f"access-denied without a CLIENT_PID: {e}")
one("dead upstream", QRS_EVENT="source-degraded", SOURCE="up")
d = one("served draws", QRS_EVENT="draw", SOURCE="system", CLIENT_UID="0",
        PRIORITY="7")
seqs = sorted(int(e.get("DRAW_SEQ", "0")) for e in d)
if len(seqs) < 5 or seqs[0] < 1 or len(set(seqs)) != len(seqs):
    bad.append(f"draw entries' DRAW_SEQ: {seqs} (want >= 5 distinct, >= 1)")
c = one("journal checkpoint at stop", QRS_EVENT="journal-checkpoint")
if not [e for e in c if e.get("QRS_JOURNAL_SEQ", "").isdigit() and
        len(e.get("QRS_JOURNAL_HEAD", "")) == 64 and "close" in e["MESSAGE"]]:
    bad.append(f"no checkpoint at close with QRS_JOURNAL_SEQ= and "
               f"QRS_JOURNAL_HEAD=: {c}")
if not [e for e in c if "rotation" in e["MESSAGE"]]:
    bad.append(f"no checkpoint at a rotation: {c}")
if bad:
    print("\n".join(bad), file=sys.stderr)
    sys.exit(1)
ev = sorted({e["QRS_EVENT"] for e in q if "QRS_EVENT" in e})
print(f"journald: {len(q)} entries from qrsd; events {', '.join(ev)}")
PY
# the journal checked against the checkpoints in the system journal; its
# last entry cut, short of the checkpoint at stop
"$audit" --journal "$T/journal" --checkpoints "$T/entries" > "$T/audit" ||
  fail "qrs-audit against the checkpoints: $(cat "$T/audit")"
grep -q "journal intact: 4[5-9] entries" "$T/audit" && ls "$T/journal/journal-000002.log" > /dev/null &&
  grep -q "[2-9] checkpoints passed" "$T/audit" ||
  fail "not every checkpoint passed over 2 files: $(cat "$T/audit")"
f=$(ls "$T/journal"/journal-*.log | tail -n 1)
head -n -1 "$f" > "$T/cut" && cat "$T/cut" > "$f"
"$audit" --journal "$T/journal" --checkpoints "$T/entries" > "$T/audit"
[ $? = 1 ] && grep -q "journal-truncated" "$T/audit" ||
  fail "the cut journal passed the checkpoints: $(cat "$T/audit")"
echo "journald OK"
