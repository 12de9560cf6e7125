#!/bin/sh
# Usage: access-revoke.sh QRSD QRSCTL
# A reload that changes access.group revokes the open connections of
# peers it no longer allows: uid 65534 in group "daemon" keeps
# one connection drawing; a reload to access.group "audio" (not its
# group) ends that connection: its draws in flight are answered, then
# qrsctl fails saying it is not allowed, and qrsd logs access-revoked;
# root's connection drawing through the same reload never fails; a peer in
# the new group connects and draws.  Needs root (setpriv).
set -u
qrsd=$1 qrsctl=$2
. "$(dirname "$0")/lib.sh"
need_root setpriv
G=$(gid daemon) || exit 1
A=$(gid audio) || exit 1
access_conf daemon
start_qrsd
q="$qrsctl --socket $T/s.sock"
# two long runs of draws on one connection each (1 MB apiece: about a
# millisecond a draw), one as uid 65534 in "daemon", one as root
# shellcheck disable=SC2086
setpriv --reuid=65534 --regid=65534 --groups="$G" \
  $q draw -n 1000000 --samples 1000000 > "$T/nobody.out" 2> "$T/nobody.err" &
p1=$!
track "$p1"
# shellcheck disable=SC2086
$q draw -n 1000000 --samples 1000000 > "$T/root.out" 2> "$T/root.err" &
p2=$!
track "$p2"
drawing() {
  [ "$(wc -l < "$T/nobody.out")" -ge 20 ] && [ "$(wc -l < "$T/root.out")" -ge 20 ]
}
wait_for 200 0.05 "the two clients are not drawing" drawing

access_conf audio
$q reload > "$T/reload.out" 2>&1 || fail "reload failed: $(cat "$T/reload.out")"
grep -q "access.group: \"daemon\" -> \"audio\"" "$T/reload.out" ||
  fail "the reload does not show the change: $(cat "$T/reload.out")"
# the revoked client ends (non-zero) within 5 s, saying why
ended() { ! kill -0 "$1" 2>/dev/null; }
wait_for 100 0.05 "uid 65534's connection still draws after the reload" ended "$p1"
wait "$p1"; rc=$?; untrack "$p1"
[ "$rc" != 0 ] || fail "the revoked client exited 0"
case $(cat "$T/nobody.err") in
  *"Not allowed"*"audio"*) echo "revoked as expected: $(cat "$T/nobody.err")" ;;
  *) fail "the revoked client does not say why: $(cat "$T/nobody.err")" ;;
esac
# every draw it printed is a whole line (no torn output)
n1=$(wc -l < "$T/nobody.out")
[ "$n1" -ge 20 ] || fail "the revoked client drew $n1 draws"
wait_for 50 0.1 "no access-revoked log line" grep -q \
  "uid 65534): access revoked by the reload: uid 65534 is not root and not in group 'audio'" "$T/log"
# root's connection went on through the reload
r0=$(wc -l < "$T/root.out")
sleep 0.3
r1=$(wc -l < "$T/root.out")
[ "$r1" -gt "$r0" ] || fail "root's connection stopped drawing ($r0 -> $r1)"
kill -0 "$p2" 2>/dev/null || fail "root's client exited: $(cat "$T/root.err")"
kill "$p2"; wait "$p2" 2>/dev/null; untrack "$p2"
grep -q . "$T/root.err" && fail "root's client printed errors: $(cat "$T/root.err")"
# a member of the new group is served; the old group's member is refused
# shellcheck disable=SC2086
setpriv --reuid=65534 --regid=65534 --groups="$A" $q draw > /dev/null ||
  fail "a member of audio was refused after the reload"
# shellcheck disable=SC2086
if setpriv --reuid=65534 --regid=65534 --groups="$G" $q draw > /dev/null 2>&1; then
  fail "a member of daemon was served after the reload"
fi
stop_qrsd
echo "access-revoke: ok"
