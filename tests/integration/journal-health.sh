#!/bin/sh
# Usage: journal-health.sh QRSD QRSCTL
# A failing draw journal is visible: its directory on a tiny tmpfs (in a
# private mount namespace) that fills up, so that the writer fails
# (ENOSPC).  Under journal.on_error stop: qrsctl health exits 2 (failed)
# naming the journal, status (text and --json) shows its state, error
# and head, metrics qrsd_journal_ok 0; draws are refused.  Under label:
# health exits 1 (degraded), draws are served and qrsctl draw prints
# them unjournalled (text and --json), a journalled one journal=SEQ.
# Needs root (unshare, mount).
set -u
qrsd=$1 qrsctl=$2
if [ -z "${QRS_JHEALTH_NS:-}" ]; then
  unshare --mount --propagation private true 2>/dev/null ||
    { echo "journal-health: no mount namespace here" >&2; exit 77; }
  QRS_JHEALTH_NS=1 exec unshare --mount --propagation private "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"
need_root "mount"
q() { "$qrsctl" --socket "$T/s.sock" "$@"; }

# run POLICY: qrsd with its journal on a 64 KiB tmpfs, a first draw
# journalled, then the tmpfs filled and draws made until the journal
# fails (the first refused or unjournalled one)
run() {
  mkdir -p "$T/$1"
  mount -t tmpfs -o size=64k,mode=0700 tmpfs "$T/$1" ||
    fail "cannot mount a tmpfs"
  write_conf <<YAML
sources: { system: { type: system } }
journal: { dir: $T/$1, on_error: $1, flush_ms: 0 }
YAML
  start_qrsd "$T/log-$1"
  q draw -n 1 > "$T/draw1" || fail "$1: the first draw failed"
  grep -q "journal=1\b" "$T/draw1" || fail "$1: no journal=1 in: $(cat "$T/draw1")"
  q --json draw -n 1 > "$T/draw2" || fail "$1: the second draw failed"
  grep -q '"journal_seq":2' "$T/draw2" && grep -q '"unjournalled":false' "$T/draw2" ||
    fail "$1: draw --json lacks journal_seq 2, unjournalled false: $(cat "$T/draw2")"
  q health > "$T/h0"; [ $? = 0 ] || fail "$1: unhealthy before: $(cat "$T/h0")"
  dd if=/dev/zero of="$T/$1/fill" bs=4k 2>/dev/null
  i=0
  while [ $i -lt 100 ]; do
    q draw -n 20 > "$T/drawn" 2>&1 || break
    grep -q unjournalled "$T/drawn" && break
    i=$((i + 1))
  done
  [ $i -lt 100 ] || fail "$1: the journal never failed"
}

run stop
q health > "$T/h"; rc=$?
[ $rc = 2 ] || fail "stop: health exit $rc, not 2 (failed): $(cat "$T/h")"
grep -q "failed" "$T/h" && grep -q "draw journal write-error No space left on device: draws refused" "$T/h" ||
  fail "stop: health does not name the journal: $(cat "$T/h")"
q status > "$T/st" || fail "status failed"
grep -q "^Journal *: write-error: No space left on device (on_error stop: draws refused)" "$T/st" ||
  fail "stop: status text: $(cat "$T/st")"
grep -q "^Journal head *: [1-9][0-9]*:[0-9a-f]\{64\}$" "$T/st" || fail "stop: no head: $(cat "$T/st")"
q --json status > "$T/stj" || fail "status --json failed"
python3 - "$T/stj" <<'PY' || fail "stop: status --json: $(cat "$T/stj")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["journal_state"] == "write-error", s
assert s["journal_error"] == "No space left on device", s
assert s["journal_on_error"] == "stop", s
assert s["journal_seq"] >= 2 and len(s["journal_head"]) == 64, s
PY
q metrics > "$T/m" || fail "metrics failed"
grep -q '^qrsd_journal_ok 0$' "$T/m" || fail "stop: qrsd_journal_ok not 0"
grep -q '^qrsd_journal_info{state="write-error",on_error="stop",seq="[0-9]*",head="[0-9a-f]\{64\}"} 1$' "$T/m" ||
  fail "stop: no qrsd_journal_info: $(grep journal "$T/m")"
q draw -n 1 > /dev/null 2>&1 && fail "stop: a draw was served"
stop_qrsd

run label
q health > "$T/h"; rc=$?
[ $rc = 1 ] || fail "label: health exit $rc, not 1 (degraded): $(cat "$T/h")"
grep -q "draws served unjournalled (journal.on_error label)" "$T/h" ||
  fail "label: health does not name the journal: $(cat "$T/h")"
q draw -n 2 > "$T/d" || fail "label: a draw was refused"
[ "$(grep -c unjournalled "$T/d")" = 2 ] || fail "label: draw text: $(cat "$T/d")"
q --json draw -n 1 > "$T/dj" || fail "label: draw --json failed"
grep -q '"journal_seq":null' "$T/dj" && grep -q '"unjournalled":true' "$T/dj" ||
  fail "label: draw --json: $(cat "$T/dj")"
q metrics > "$T/m" && grep -q "^qrsd_journal_ok 0$" "$T/m" || fail "label: qrsd_journal_ok not 0"
stop_qrsd
echo "journal-health OK"
