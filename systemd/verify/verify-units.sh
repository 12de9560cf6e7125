#!/bin/sh
# Usage: verify-units.sh SERVICE SOCKET SYSUSERS METRICS_SERVICE METRICS_TIMER
# systemd-analyze verify exits 0 on warnings such as an unknown Type=; any
# complaint at all fails this test.  Then the service's sandbox is scored
# offline (as an operator would score the installed unit): above 2.0
# (--threshold counts tenths) fails, and the score is printed.  Then the
# sysusers.d file is parsed by systemd-sysusers itself.  The metrics
# service and timer (qrsctl metrics --textfile) are verified and scored
# the same way.
service=$1 socket=$2 sysusers=$3 mservice=$4 mtimer=$5
out=$(systemd-analyze verify --man=no "$service" "$socket" "$mservice" "$mtimer" 2>&1)
rc=$?
if [ $rc -ne 0 ] || [ -n "$out" ]; then
  printf '%s\n' "$out" >&2
  exit 1
fi
echo "units OK: $service $socket $mservice $mtimer"
for u in "$service" "$mservice"; do
  out=$(systemd-analyze security --offline=true --threshold=20 "$u" 2>&1)
  rc=$?
  printf '%s: %s\n' "${u##*/}" "$(printf '%s\n' "$out" | grep -F 'Overall exposure level')"
  if [ $rc -ne 0 ]; then
    printf '%s\n' "$out" >&2
    echo "${u##*/}: security exposure above 2.0" >&2
    exit 1
  fi
done
root=$(mktemp -d) || exit 1
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/etc"
: > "$root/etc/passwd"; : > "$root/etc/group"
if ! systemd-sysusers --root="$root" "$sysusers" >/dev/null 2>&1; then
  systemd-sysusers --root="$root" "$sysusers" >&2
  exit 1
fi
grep -q '^qrsd:' "$root/etc/passwd" && grep -q '^qrs:' "$root/etc/group" ||
  { echo "sysusers: no qrsd user or qrs group" >&2; exit 1; }
awk -F: '$1 == "qrsd" && $3 != 0 && $3 < 1000 { ok = 1 } END { exit !ok }' \
  "$root/etc/passwd" || { echo "sysusers: qrsd is not a system user" >&2; exit 1; }
echo "sysusers OK: $(grep '^qrsd:' "$root/etc/passwd")"
