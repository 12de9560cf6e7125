#!/bin/sh
# Usage: metrics.sh QRSD QRSCTL
# `qrsctl metrics` against a real qrsd: the output passes
# Prometheus' own parser and linter (promtool check metrics, Debian's
# prometheus package) before and after draws, and its counters move by
# exactly what was served: 5 draws and 64 bytes from the system source,
# 3 draws from the timing source.
set -u
qrsd=$1 qrsctl=$2
. "$(dirname "$0")/lib.sh"
command -v promtool >/dev/null ||
  die "promtool not found (Debian package prometheus)"
write_conf 0600 <<YAML
sources:
  system: { type: system }
  jitter: { type: timing, conditioning: sha256 }
YAML
start_qrsd
q() { "$qrsctl" --socket "$T/s.sock" "$@"; }
check() {
  q metrics > "$T/$1.prom" || fail "qrsctl metrics failed"
  out=$(promtool check metrics < "$T/$1.prom" 2>&1) ||
    fail "promtool rejects the output: $out"
  [ -z "$out" ] || fail "promtool lint: $out"
}
value() {  # value FILE SAMPLE: the sample's value, exactly one line
  v=$(awk -v k="$2" '$1 == k { print $2; n++ } END { if (n != 1) exit 1 }' "$1") ||
    fail "no single sample $2 in $1"
  printf '%s\n' "$v"
}
check before
q draw -n 5 --source system > /dev/null || fail "draw failed"
q bytes -n 64 --source system > /dev/null || fail "bytes failed"
q draw -n 3 --source jitter > /dev/null || fail "draw from jitter failed"
check after
for k in 'qrsd_source_draws_total{source="system"} 6' \
         'qrsd_source_bytes_total{source="system"} 64' \
         'qrsd_source_draws_total{source="jitter"} 3' \
         'qrsd_draws_total 8'; do
  name=${k% *}; want=${k##* }
  b=$(value "$T/before.prom" "$name"); a=$(value "$T/after.prom" "$name")
  # bytes: the draws' own bytes count too, so only a lower bound there.
  case $name in
    *bytes*) [ $((a - b)) -ge "$want" ] || fail "$name moved $b -> $a, want >= +$want" ;;
    *) [ $((a - b)) -eq "$want" ] || fail "$name moved $b -> $a, want +$want" ;;
  esac
  echo "$name: $b -> $a"
done
# The latency histogram counts every draw once; the memory gauges carry
# the configured budget; the refusal counters exist from the start.
d=$(value "$T/after.prom" qrsd_draws_total)
h=$(value "$T/after.prom" qrsd_draw_duration_seconds_count)
inf=$(value "$T/after.prom" 'qrsd_draw_duration_seconds_bucket{le="+Inf"}')
[ "$h" -eq "$d" ] && [ "$inf" -eq "$d" ] ||
  fail "histogram count $h / +Inf bucket $inf, draws $d"
[ "$(value "$T/after.prom" qrsd_memory_budget_bytes)" -eq 268435456 ] ||
  fail "qrsd_memory_budget_bytes is not the default budget"
value "$T/after.prom" qrsd_connections_refused_total > /dev/null
value "$T/after.prom" qrsd_busy_replies_total > /dev/null
echo "qrsd_draw_duration_seconds_count: $h (= qrsd_draws_total)"
grep -q '^qrsd_source_state{source="jitter",state="ok"} 1$' "$T/after.prom" ||
  fail "jitter is not in state ok: $(grep qrsd_source_state "$T/after.prom")"
grep -q '^qrsd_local_health_tests_passing{source="jitter"} 1$' "$T/after.prom" ||
  fail "no health-test gauge for the timing source"
# The textfile collector's file: written whole (mode 0644, no temporary
# file left), rewritten at an interval as draws are served, and removed
# (exit status 2) once qrsd cannot be asked.
mkdir "$T/tf"
tf=$T/tf/qrsd.prom
q metrics --textfile "$tf" || fail "metrics --textfile failed"
[ "$(stat -c %a "$tf")" = 644 ] || fail "textfile mode $(stat -c %a "$tf")"
out=$(promtool check metrics < "$tf" 2>&1) && [ -z "$out" ] ||
  fail "promtool rejects the textfile: $out"
[ "$(ls "$T/tf")" = qrsd.prom ] || fail "left in the directory: $(ls "$T/tf")"
d0=$(value "$tf" qrsd_draws_total)
"$qrsctl" --socket "$T/s.sock" metrics --textfile "$tf" --interval 0.1 &
tfpid=$!  # qrsctl itself (a function would run in a subshell)
track "$tfpid"
q draw -n 4 --source system > /dev/null || fail "draw failed"
followed() { [ "$(value "$tf" qrsd_draws_total)" -eq $((d0 + 4)) ]; }
wait_for 50 0.1 "the textfile did not follow the draws" followed
kill "$tfpid"; wait "$tfpid" 2>/dev/null; untrack "$tfpid"
q metrics --interval 1 > /dev/null 2>&1 && fail "--interval without --textfile accepted"
stop_qrsd
q metrics --textfile "$tf" 2>/dev/null; rc=$?
[ $rc -eq 2 ] || fail "metrics --textfile with qrsd gone exited $rc, want 2"
[ ! -e "$tf" ] || fail "the textfile outlived qrsd"
echo "textfile OK: atomic, mode 0644, follows draws, removed when qrsd is gone"
echo "metrics OK: promtool accepts $(grep -c '^# TYPE' "$T/after.prom") families"
