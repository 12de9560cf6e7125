#!/bin/sh
# Usage: reload.sh QRSD QRSCTL
# RELOAD is privileged, checked with a real qrsd and real
# peers of other uids (setpriv): with access.admin_group "" a peer that
# may use the socket (uid 65534 in access.group "daemon") is refused
# reload with PERMISSION_DENIED, qrsctl saying why and exiting non-zero,
# qrsd logging it and changing nothing; root is allowed; with
# admin_group "daemon" (set by a reload) the same peer may reload, and a
# peer outside it still may not; qrsctl reload prints the diff as
# "key: old -> new".  Needs root.
set -u
qrsd=$1 qrsctl=$2
. "$(dirname "$0")/lib.sh"
need_root setpriv
G=$(gid daemon) || exit 1
conf() {
  write_conf <<YAML
access: { group: daemon, admin_group: "$1" }
limits: { max_inflight_per_connection: $2 }
sources: { system: { type: system } }
YAML
  chmod 0644 "$T/c.yaml"
}
as() { u=$1; shift; setpriv --reuid="$u" "$@"; }
conf "" 64
start_qrsd
q="$qrsctl --socket $T/s.sock"
# A member of access.group may draw, but not reload.
# shellcheck disable=SC2086
as 65534 --regid=65534 --groups="$G" $q draw > /dev/null ||
  fail "member of access.group cannot draw"
conf "" 32
# shellcheck disable=SC2086
if out=$(as 65534 --regid=65534 --groups="$G" $q reload 2>&1 >/dev/null); then
  fail "uid 65534 reloaded without being an admin"
fi
case $out in
  *"Not allowed"*"access.admin_group"*"privileged"*) echo "refused as expected: $out" ;;
  *) fail "qrsctl did not say why reload was refused: $out" ;;
esac
# qrsd may log the refusal just after its reply reached qrsctl: wait for it
wait_for 100 0.02 "no log line for the refused reload" grep -q \
  "uid 65534): RELOAD refused: uid 65534 is not root and not qrsd's user" "$T/log"
grep -q "reload of" "$T/log" && fail "a refused peer started a reload"
# Root may; the diff names the key, old -> new.
# shellcheck disable=SC2086
out=$($q reload) || fail "root could not reload"
echo "$out"
case $out in
  *"limits.max_inflight_per_connection: 64 -> 32"*) ;;
  *) fail "qrsctl reload did not print the diff: $out" ;;
esac
# A reload sets admin_group: its members may reload, others still not.
conf daemon 16
# shellcheck disable=SC2086
$q reload > /dev/null || fail "root could not reload (admin_group)"
conf daemon 8
# shellcheck disable=SC2086
if as 65534 --regid=65534 --clear-groups $q reload > /dev/null 2>&1; then
  fail "a peer outside access.group and admin_group reloaded"
fi
# shellcheck disable=SC2086
out=$(as 65534 --regid=65534 --groups="$G" $q reload) ||
  fail "member of access.admin_group could not reload"
case $out in
  *"limits.max_inflight_per_connection: 16 -> 8"*) ;;
  *) fail "admin's reload did not apply the change: $out" ;;
esac
# An admin group that does not exist: refused, naming the key.
conf no-such-group-qrs 4
# shellcheck disable=SC2086
if out=$($q reload 2>&1); then fail "reload with a missing admin_group applied"; fi
case $out in
  *"access.admin_group: no group 'no-such-group-qrs'"*) ;;
  *) fail "the refusal does not name access.admin_group: $out" ;;
esac
# shellcheck disable=SC2086
$q draw > /dev/null || fail "qrsd stopped serving"
stop_qrsd
echo "reload OK"
