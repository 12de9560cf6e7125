#!/bin/sh
# systemd-analyze verify exits 0 on warnings such as an unknown Type=; any
# complaint at all fails this test.
out=$(systemd-analyze verify --man=no "$@" 2>&1)
rc=$?
if [ $rc -ne 0 ] || [ -n "$out" ]; then
  printf '%s\n' "$out" >&2
  exit 1
fi
echo "units OK: $*"
