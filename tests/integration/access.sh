#!/bin/sh
# Usage: access.sh QRSD QRSCTL
# SO_PEERCRED access control with a real qrsd and real peers
# of other uids (setpriv): with access.group "daemon" and a socket
# anyone may open (0666), uid 65534 is refused with PERMISSION_DENIED,
# qrsctl saying so and exiting non-zero, and qrsd logging it; the same
# uid with "daemon" as primary or supplementary group is served, as is
# root; qrsd keeps serving after the refusals; a group that does not
# exist stops qrsd at start naming access.group.  Needs root.
set -u
qrsd=$1 qrsctl=$2
. "$(dirname "$0")/lib.sh"
need_root setpriv
G=$(gid daemon) || exit 1
as() { u=$1; shift; setpriv --reuid="$u" "$@"; }
access_conf daemon
start_qrsd
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
wait_for 50 0.1 "no access-denied log line" grep -q \
  "uid 65534): access denied: uid 65534 is not root and not in group 'daemon'" "$T/log"
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
stop_qrsd
# counted after the stop, when qrsd's log thread has written everything
lines=$(grep -c "access denied" "$T/log")
[ "$lines" -le 10 ] || fail "$lines access-denied lines for 31 refusals (not rate-limited)"
echo "access-denied log lines for 31 refusals: $lines"
# A group that does not exist: qrsd refuses to start, naming the key.
access_conf no-such-group-qrs
if "$qrsd" -c "$T/c.yaml" > "$T/log" 2>&1; then
  fail "qrsd started with a nonexistent access.group"
fi
grep -q "access.group: no group 'no-such-group-qrs'" "$T/log" ||
  fail "the start error does not name access.group"
echo "access OK"
