#!/bin/sh
# Usage: audit-records.sh QRS_AUDIT
# qrs-audit --records against hostile record lines: a step or token_id
# out of the range of what holds it (1e300, -1, 1.5: malformed-record,
# not a cast out of range), and on a pipe a 200 MB line, refused as it
# streams past (qrs-audit's peak memory stays far below the line's size)
# with the records around it still checked.
set -u
audit=$1
. "$(dirname "$0")/lib.sh"
on_fail() { cat "$T/out" 2>/dev/null; }

rec() {  # rec STEP TOKEN: one full record line
  printf '{"u_value":0.5,"cdf_lo":0.4,"cdf_hi":0.6,"greedy":false,'
  printf '"entropy_is_fallback":false,"entropy_source_used":"system",'
  printf '"journal_seq":null,"draw_received_ns":1,"draw_generated_ns":2,'
  printf '"draw_sent_ns":3,"entropy_nonce":null,"step":%s,"token_id":%s,' "$1" "$2"
  printf '"timestamp_ns":1,"z_score":0.1,"sample_mean":0.5,'
  printf '"config_hash":"0123456789abcdef"}\n'
}
rec 0 5 > "$T/good"
"$audit" --records "$T/good" > "$T/out" 2>&1 || fail "a good record failed"
grep -q "records: 1 read, 0 failures" "$T/out" || fail "good record: $(cat "$T/out")"
for bad in "1e300 5:step" "-1 5:step" "1.5 5:step" "1.8446744073709552e19 5:step" \
           "0 1e300:token_id" "0 -1e19:token_id" "0 2.5:token_id"; do
  st=${bad%%:*} what=${bad#*:}
  rec $st > "$T/bad"
  "$audit" --records "$T/bad" > "$T/out" 2>&1
  [ $? = 1 ] || fail "$st: not a failure"
  grep -q "malformed-record: not a libqrs record: no $what" "$T/out" ||
    fail "$st: $what not named"
done

# a 200 MB line between two good ones, on a pipe
python3 - "$audit" "$T/good" > "$T/out" 2>&1 <<'PY' || fail "the 200 MB line on a pipe"
import resource, subprocess, sys
audit, good = sys.argv[1], open(sys.argv[2], "rb").read()
p = subprocess.Popen([audit, "--records", "/dev/stdin"],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
p.stdin.write(good)
chunk = b"x" * (1 << 20)
for _ in range(200):
    p.stdin.write(chunk)
p.stdin.write(b"\n" + good)
p.stdin.close()
out = p.stdout.read().decode()
rc = p.wait()
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
print(out, "exit", rc, "peak MiB", peak)
assert rc == 1, rc
assert "/dev/stdin:2: malformed-record: line of 209715200 bytes" in out, out
assert "records: 3 read, 1 failures" in out, out
assert peak < 100, peak
PY
exit 0
