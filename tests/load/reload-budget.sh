#!/bin/sh
# Usage: reload-budget.sh QRSD QRSCTL [SOURCES] [RELOADS]
# The loop time of a live reload's apply step (its budget: <= 50 ms)
# with a real qrsd: SOURCES system sources (default 64), each with a
# monitor window of 100000 (the largest), and RELOADS reloads (default
# 40) that each change every live kind (limits, monitor.* on every
# source, log.level, access.admin_group and a fallback).  qrsd measures
# the apply step itself (ReloadReply.apply_ns, uv_hrtime around it); the
# parse, hash and diff run on a worker and are not loop time.  Prints
# the median and the largest, and the largest as a fraction of the
# budget.  A benchmark, not a test: it fails only if qrsd does.
set -u
qrsd=$1 qrsctl=$2 n=${3:-64} reloads=${4:-40}
T=$(mktemp -d) || exit 1
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
conf() {
  {
    echo "socket: { path: $T/s.sock, mode: \"0600\", group: \"\" }"
    echo "state_dir: $T"
    echo "status_file: $T/status.json"
    echo "default_source: s0"
    echo "log: { level: $1 }"
    echo "access: { admin_group: \"$2\" }"
    echo "limits: { max_inflight_per_connection: $3, memory_budget_bytes: $4 }"
    echo "monitor: { window: $5 }"
    echo "sources:"
    i=0
    while [ $i -lt "$n" ]; do
      if [ $i = 1 ]; then echo "  s1: { type: system, fallback: $6 }"
      else echo "  s$i: { type: system }"; fi
      i=$((i + 1))
    done
  } > "$T/c.yaml"
}
conf info "" 64 268435456 100000 error
"$qrsd" -c "$T/c.yaml" > "$T/log" 2>&1 &
pid=$!
i=0
while [ ! -S "$T/s.sock" ]; do
  i=$((i + 1))
  [ $i -lt 200 ] || { cat "$T/log"; echo "no socket" >&2; exit 1; }
  sleep 0.05
done
k=0
: > "$T/ns"
while [ $k -lt "$reloads" ]; do
  if [ $((k % 2)) = 0 ]; then conf warn root 32 134217728 99999 s0
  else conf info "" 64 268435456 100000 error; fi
  "$qrsctl" --socket "$T/s.sock" --json reload > "$T/out" ||
    { cat "$T/log"; exit 1; }
  sed 's/.*"apply_ns":\([0-9]*\).*/\1/' "$T/out" >> "$T/ns"
  k=$((k + 1))
done
sort -n "$T/ns" | awk -v n="$n" -v r="$reloads" '
  { v[NR] = $1 }
  END {
    med = v[int((NR + 1) / 2)] / 1e6; max = v[NR] / 1e6
    printf "reload apply, %d sources, %d reloads: median %.3f ms, " \
           "max %.3f ms of loop time; max / 50 ms budget = %.4f\n",
           n, r, med, max, max / 50
  }'
