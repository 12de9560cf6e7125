#!/bin/sh
# Usage: source-control.sh QRSD QRSCTL
# The privileged source verbs against a real qrsd: root
# disables a source, whose draws then go to its fallback labelled (or,
# without one, fail naming the operator's disable); sources --json and
# metrics show it; quota reset of a source without a quota is a clear
# error; an allowed peer that is not an admin (uid 65534 in the access
# group) is refused and changes nothing; enabling again restores the
# source.  Needs root (setpriv).
set -u
qrsd=$1 qrsctl=$2
. "$(dirname "$0")/lib.sh"
need_root setpriv
G=$(gid daemon) || exit 1
write_conf <<YAML
access: { group: daemon }
default_source: a
sources:
  a: { type: system, fallback: b }
  b: { type: system }
YAML
start_qrsd
q="$qrsctl --socket $T/s.sock"

$q source disable a > "$T/out" 2>&1 || fail "root could not disable a: $(cat "$T/out")"
d=$($q --json draw --source a) || fail "draw from disabled a (with a fallback) failed"
case $d in
  *'"served_by":"b"'*'"fallback":true'*|*'"fallback":true'*'"served_by":"b"'*) ;;
  *) fail "a disabled draw is not b's, labelled fallback: $d" ;;
esac
$q --json sources | grep -q '"name":"a"[^}]*"disabled":true' ||
  fail "sources --json does not say a is disabled: $($q --json sources)"
$q metrics | grep -q '^qrsd_source_disabled{source="a"} 1$' ||
  fail "metrics: no qrsd_source_disabled{source=\"a\"} 1"

# Disabled with a fallback serving its draws: no fault (health 0), but
# said: the HEALTH column and the message.
out=$($q health) || fail "health not 0 with a disabled (fallback) source: $out"
case $out in
  *"State"*"healthy"*"1 disabled by an operator (first: 'a')"*) ;;
  *) fail "health does not say a is disabled: $out" ;;
esac
printf '%s\n' "$out" | grep -q '^\* a .* disabled ' ||
  fail "the HEALTH column does not say disabled: $out"

$q source disable b > /dev/null || fail "root could not disable b"
if out=$($q draw --source b 2>&1); then
  fail "a draw from disabled b (no fallback) was served: $out"
fi
case $out in
  *"disabled by an operator"*) ;;
  *) fail "the refusal does not say b is disabled: $out" ;;
esac
# Disabled without a fallback: its draws fail, health is degraded (1).
out=$($q health); rc=$?
[ $rc -eq 1 ] || fail "health exit $rc (not 1) with b disabled and no fallback: $out"
case $out in
  *"source 'b' is disabled by an operator and has no fallback"*) ;;
  *) fail "degraded health does not name b: $out" ;;
esac
$q source enable b > /dev/null || fail "root could not enable b"

if out=$($q quota reset a 2>&1); then
  fail "quota reset of a system source succeeded: $out"
fi
case $out in
  *"no quota"*) ;;
  *) fail "quota reset does not say a has no quota: $out" ;;
esac
if out=$($q source disable nosuch 2>&1); then
  fail "disabling an unknown source succeeded"
fi
case $out in
  *nosuch*) ;;
  *) fail "the error does not name the unknown source: $out" ;;
esac

# An allowed peer that is no admin: refused, and a stays disabled.
# shellcheck disable=SC2086
if out=$(setpriv --reuid=65534 --regid=65534 --groups="$G" $q source enable a 2>&1); then
  fail "uid 65534 (not an admin) enabled a: $out"
fi
case $out in
  *"Not allowed"*|*"ermission"*) echo "refused as expected: $out" ;;
  *) fail "the non-admin's refusal does not say why: $out" ;;
esac
# shellcheck disable=SC2086
setpriv --reuid=65534 --regid=65534 --groups="$G" $q draw > /dev/null ||
  fail "the non-admin peer cannot draw"
$q --json sources | grep -q '"name":"a"[^}]*"disabled":true' ||
  fail "a non-admin's refused enable changed a"

$q source enable a > /dev/null || fail "root could not enable a"
d=$($q --json draw --source a) || fail "draw from enabled a failed"
case $d in
  *'"served_by":"a"'*) ;;
  *) fail "enabled a does not serve: $d" ;;
esac
stop_qrsd
echo "source-control: ok"
