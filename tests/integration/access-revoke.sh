#!/bin/sh
# Usage: access-revoke.sh QRSD QRSCTL
# A reload that changes access.group revokes the open connections of
# peers it no longer allows (issue 23): uid 65534 in group "daemon" keeps
# one connection drawing; a reload to access.group "audio" (not its
# group) ends that connection: its draws in flight are answered, then
# qrsctl fails saying it is not allowed, and qrsd logs access-revoked;
# root's connection drawing through the same reload never fails; a peer in
# the new group connects and draws.  Needs root (setpriv).
set -u
qrsd=$1 qrsctl=$2
[ "$(id -u)" = 0 ] || { echo "access-revoke: must run as root" >&2; exit 1; }
T=$(mktemp -d) || exit 1
pid= p1= p2=
cleanup() {
  for p in $p1 $p2 $pid; do kill "$p" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "access-revoke: $*" >&2; sed 's/^/qrsd: /' "$T/log" >&2; exit 1; }
chmod 0755 "$T"
G=$(getent group daemon | cut -d: -f3)
A=$(getent group audio | cut -d: -f3)
[ -n "$G" ] && [ -n "$A" ] || { echo "access-revoke: no group daemon or audio" >&2; exit 1; }
conf() {
  cat > "$T/c.yaml" <<YAML
socket: { path: $T/s.sock, mode: "0666", group: "" }
access: { group: $1 }
state_dir: $T
status_file: ""
sources: { system: { type: system } }
YAML
}
conf daemon
"$qrsd" -c "$T/c.yaml" > "$T/log" 2>&1 &
pid=$!
i=0
while [ ! -S "$T/s.sock" ]; do
  i=$((i + 1)); [ $i -lt 200 ] || fail "no socket"; sleep 0.05
done
q="$qrsctl --socket $T/s.sock"
# two long runs of draws on one connection each (1 MB apiece: about a
# millisecond a draw), one as uid 65534 in "daemon", one as root
# shellcheck disable=SC2086
setpriv --reuid=65534 --regid=65534 --groups="$G" \
  $q draw -n 1000000 --samples 1000000 > "$T/nobody.out" 2> "$T/nobody.err" &
p1=$!
# shellcheck disable=SC2086
$q draw -n 1000000 --samples 1000000 > "$T/root.out" 2> "$T/root.err" &
p2=$!
i=0
until [ "$(wc -l < "$T/nobody.out")" -ge 20 ] && [ "$(wc -l < "$T/root.out")" -ge 20 ]; do
  i=$((i + 1)); [ $i -lt 200 ] || fail "the two clients are not drawing"
  sleep 0.05
done

conf audio
$q reload > "$T/reload.out" 2>&1 || fail "reload failed: $(cat "$T/reload.out")"
grep -q "access.group: \"daemon\" -> \"audio\"" "$T/reload.out" ||
  fail "the reload does not show the change: $(cat "$T/reload.out")"
# the revoked client ends (non-zero) within 5 s, saying why
i=0
while kill -0 "$p1" 2>/dev/null; do
  i=$((i + 1)); [ $i -lt 100 ] || fail "uid 65534's connection still draws after the reload"
  sleep 0.05
done
wait "$p1"; rc=$?; p1=
[ "$rc" != 0 ] || fail "the revoked client exited 0"
case $(cat "$T/nobody.err") in
  *"Not allowed"*"audio"*) echo "revoked as expected: $(cat "$T/nobody.err")" ;;
  *) fail "the revoked client does not say why: $(cat "$T/nobody.err")" ;;
esac
# every draw it printed is a whole line (no torn output)
n1=$(wc -l < "$T/nobody.out")
[ "$n1" -ge 20 ] || fail "the revoked client drew $n1 draws"
i=0
until grep -q "uid 65534): access revoked by the reload: uid 65534 is not root and not in group 'audio'" "$T/log"; do
  i=$((i + 1)); [ $i -lt 50 ] || fail "no access-revoked log line"; sleep 0.1
done
# root's connection went on through the reload
r0=$(wc -l < "$T/root.out")
sleep 0.3
r1=$(wc -l < "$T/root.out")
[ "$r1" -gt "$r0" ] || fail "root's connection stopped drawing ($r0 -> $r1)"
kill -0 "$p2" 2>/dev/null || fail "root's client exited: $(cat "$T/root.err")"
kill "$p2"; wait "$p2" 2>/dev/null; p2=
grep -q . "$T/root.err" && fail "root's client printed errors: $(cat "$T/root.err")"
# a member of the new group is served; the old group's member is refused
# shellcheck disable=SC2086
setpriv --reuid=65534 --regid=65534 --groups="$A" $q draw > /dev/null ||
  fail "a member of audio was refused after the reload"
# shellcheck disable=SC2086
if setpriv --reuid=65534 --regid=65534 --groups="$G" $q draw > /dev/null 2>&1; then
  fail "a member of daemon was served after the reload"
fi
kill "$pid"; wait "$pid"; rc=$?; pid=
[ $rc = 0 ] || fail "qrsd exited $rc on SIGTERM"
echo "access-revoke: ok"
