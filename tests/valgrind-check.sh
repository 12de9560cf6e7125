#!/bin/sh
# Test wrapper for 'meson test --setup valgrind': runs the test under
# valgrind (following criterion's forked children) and fails when any
# process reported a memory error or a definite leak.  criterion itself
# ignores how its children exit, so the logs are what count.
logdir=$(mktemp -d /tmp/qrs-valgrind-XXXXXX) || exit 1
valgrind --quiet --trace-children=yes \
  --trace-children-skip='/usr/bin/*,/bin/*,/usr/sbin/*,/sbin/*' --leak-check=full \
  --errors-for-leak-kinds=definite --show-leak-kinds=definite \
  --log-file="$logdir/vg.%p" "$@"
rc=$?
if grep -lE 'definitely lost|Invalid (read|write)|uninitialised|Mismatched free|Invalid free' \
     "$logdir"/vg.* >/dev/null 2>&1; then
  cat "$logdir"/vg.* >&2
  rc=1
fi
rm -rf "$logdir"
exit $rc
