#!/bin/sh
# Usage: access.sh QRSD QRSCTL
# SO_PEERCRED access control (issue 23) with a real qrsd and real peers
# of other uids (setpriv): with access.group "daemon" and a socket
# anyone may open (0666), uid 65534 is refused with PERMISSION_DENIED,
# qrsctl saying so and exiting non-zero, and qrsd logging it; the same
# uid with "daemon" as primary or supplementary group is served, as is
# root; qrsd keeps serving after the refusals; a group that does not
# exist stops qrsd at start naming access.group.  Needs root.
set -u
qrsd=$1 qrsctl=$2
[ "$(id -u)" = 0 ] || { echo "access: must run as root (setpriv)" >&2; exit 1; }
T=$(mktemp -d) || exit 1
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
fail() { echo "access: $*" >&2; sed 's/^/qrsd: /' "$T/log" >&2; exit 1; }
chmod 0755 "$T"
G=$(getent group daemon | cut -d: -f3)
[ -n "$G" ] || { echo "access: no group 'daemon' on this system" >&2; exit 1; }
conf() {
  cat > "$T/c.yaml" <<YAML
socket: { path: $T/s.sock, mode: "0666", group: "" }
access: { group: $1 }
state_dir: $T
status_file: ""
sources: { system: { type: system } }
YAML
}
as() { u=$1; shift; setpriv --reuid="$u" "$@"; }
conf daemon
"$qrsd" -c "$T/c.yaml" > "$T/log" 2>&1 &
pid=$!
i=0
while [ ! -S "$T/s.sock" ]; do
  i=$((i + 1)); [ $i -lt 200 ] || fail "no socket"; sleep 0.05
done
q="$qrsctl --socket $T/s.sock bytes -n 8"
# shellcheck disable=SC2086
if out=$(as 65534 --regid=65534 --clear-groups $q 2>&1 >/dev/null); then
  fail "uid 65534 outside group daemon was served"
fi
case $out in
  *"Not allowed"*"access.group"*) echo "refused as expected: $out" ;;
  *) fail "qrsctl did not say why it was refused: $out" ;;
esac
# qrsd's log is written by its log thread: wait for the line up to 5 s.
i=0
until grep -q "uid 65534): access denied: uid 65534 is not root and not in group 'daemon'" "$T/log"; do
  i=$((i + 1)); [ $i -lt 50 ] || fail "no access-denied log line"; sleep 0.1
done
# shellcheck disable=SC2086
as 65534 --regid=65534 --groups="$G" $q > /dev/null ||
  fail "member of daemon (supplementary) refused"
# shellcheck disable=SC2086
as 65534 --regid="$G" --clear-groups $q > /dev/null ||
  fail "member of daemon (primary) refused"
# shellcheck disable=SC2086
$q > /dev/null || fail "root refused"
# A burst of refusals: qrsd still serves, and logs a bounded number.
n=0
while [ $n -lt 30 ]; do
  # shellcheck disable=SC2086
  as 65534 --regid=65534 --clear-groups $q > /dev/null 2>&1 && fail "served on retry"
  n=$((n + 1))
done
# shellcheck disable=SC2086
$q > /dev/null || fail "root refused after the burst"
kill -TERM "$pid"; wait "$pid"; pid=
# counted after the stop, when qrsd's log thread has written everything
lines=$(grep -c "access denied" "$T/log")
[ "$lines" -le 10 ] || fail "$lines access-denied lines for 31 refusals (not rate-limited)"
echo "access-denied log lines for 31 refusals: $lines"
# A group that does not exist: qrsd refuses to start, naming the key.
conf no-such-group-qrs
if "$qrsd" -c "$T/c.yaml" > "$T/log" 2>&1; then
  fail "qrsd started with a nonexistent access.group"
fi
grep -q "access.group: no group 'no-such-group-qrs'" "$T/log" ||
  fail "the start error does not name access.group"
echo "access OK"
