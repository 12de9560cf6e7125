#!/bin/sh
# Usage: reload.sh QRSD QRSCTL
# RELOAD is privileged (issue 23), checked with a real qrsd and real
# peers of other uids (setpriv): with access.admin_group "" a peer that
# may use the socket (uid 65534 in access.group "daemon") is refused
# reload with PERMISSION_DENIED, qrsctl saying why and exiting non-zero,
# qrsd logging it and changing nothing; root is allowed; with
# admin_group "daemon" (set by a reload) the same peer may reload, and a
# peer outside it still may not; qrsctl reload prints the diff as
# "key: old -> new".  Needs root.
set -u
qrsd=$1 qrsctl=$2
[ "$(id -u)" = 0 ] || { echo "reload: must run as root (setpriv)" >&2; exit 1; }
T=$(mktemp -d) || exit 1
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
fail() { echo "reload: $*" >&2; sed 's/^/qrsd: /' "$T/log" >&2; exit 1; }
chmod 0755 "$T"
G=$(getent group daemon | cut -d: -f3)
[ -n "$G" ] || { echo "reload: no group 'daemon' on this system" >&2; exit 1; }
conf() {
  cat > "$T/c.yaml" <<YAML
socket: { path: $T/s.sock, mode: "0666", group: "" }
access: { group: daemon, admin_group: "$1" }
limits: { max_inflight_per_connection: $2 }
state_dir: $T
status_file: ""
sources: { system: { type: system } }
YAML
  chmod 0644 "$T/c.yaml"
}
as() { u=$1; shift; setpriv --reuid="$u" "$@"; }
conf "" 64
"$qrsd" -c "$T/c.yaml" > "$T/log" 2>&1 &
pid=$!
i=0
while [ ! -S "$T/s.sock" ]; do
  i=$((i + 1)); [ $i -lt 200 ] || fail "no socket"; sleep 0.05
done
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
i=0
until grep -q "uid 65534): RELOAD refused: uid 65534 is not root and not qrsd's user" "$T/log"; do
  i=$((i + 1)); [ $i -lt 100 ] || fail "no log line for the refused reload"
  sleep 0.02
done
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
kill -TERM "$pid"; wait "$pid"; pid=
echo "reload OK"
