#!/bin/sh
# Usage: audit-study.sh QRS_AUDIT STUDY_FIXTURE
# qrs-audit --study on studies written by study_fixture (the journal,
# records and reveal.json of a two-arm study, as qrsd and libqrs write
# them): blinded without reveal.json (counts per label only), revealed
# with every check passed and the pre-registered statistic reported (for
# each of the three statistics), a shift in the quantum arm detected,
# three arms; then one tamper each, the chain kept intact, named by its
# check with the file and line: a changed commitment, a swapped
# assignment, a control draw's bytes, a counter reused, a record moved
# between arms.
set -u
audit=$1 fixture=$2
. "$(dirname "$0")/lib.sh"
on_fail() { cat "$T/out" 2>/dev/null; }

# expect STATUS TEXT DIR [ARGS]: qrs-audit --study DIR exits STATUS and
# says TEXT
expect() {
  want=$1 text=$2 d=$3
  shift 3
  "$audit" --study "$d" "$@" > "$T/out" 2>&1
  got=$?
  [ "$got" = "$want" ] || fail "qrs-audit --study $d: exit $got, not $want"
  grep -q -- "$text" "$T/out" || fail "qrs-audit --study $d: no '$text'"
}
# gen NAME ARGS: a fixture in $T/NAME; what a tamper names in $T/NAME.at
gen() {
  n=$1
  shift
  "$fixture" "$T/$n" "$@" > "$T/$n.at" || fail "study_fixture $n $*"
}
at() { sed -n 's/^tampered //p' "$T/$1.at"; }

# valid, revealed: every check passes, the statistic is reported
gen ok --units 400
expect 0 "pre-registered statistic: mean_probit_diff" "$T/ok"
expect 0 "revealed: commitments, label order, the assignment of 400 units" \
  "$T/ok"
expect 0 "units: 400 of 400 planned: complete" "$T/ok"
expect 0 "exploratory (not pre-registered): ks_u" "$T/ok"
expect 0 "exploratory (not pre-registered): mean_surprisal" "$T/ok"
expect 0 "records: 1 files, 800 records of the study's draws" "$T/ok"
expect 0 '"verdict":"intact"' "$T/ok" --json
expect 0 '"primary":{"statistic":"mean_probit_diff","computed":true' \
  "$T/ok" --json
grep -q "no difference between the arms) is not rejected" "$T/out" ||
  "$audit" --study "$T/ok" | grep -q "is not rejected" ||
  fail "a null study rejected at alpha 0.05 (seeded: should not be)"

# qrs-audit --journal walks the study records: chained, no sequence of
# their own; a checkpoint at sequence 1 may hold entry 1's hash or the
# study record's after it (qrsd logs the head it wrote last)
j=$T/ok/journal
h1=$(sed -n 2p "$j/journal-000001.log" | awk -F '\t' '{ print $NF }')
hs=$(sed -n 3p "$j/journal-000001.log" | awk -F '\t' '{ print $NF }')
"$audit" --journal "$j" --checkpoint "1:$h1" > "$T/out" 2>&1 ||
  fail "checkpoint at entry 1's hash"
"$audit" --journal "$j" --checkpoint "1:$hs" > "$T/out" 2>&1 ||
  fail "checkpoint at the study record's hash"
grep -q "journal intact: 801 entries" "$T/out" || fail "entries walked"
"$audit" --journal "$j" --checkpoint "2:$hs" > "$T/out" 2>&1
[ $? = 1 ] && grep -q "journal-000001.log:4: the hash after sequence 2" \
  "$T/out" || fail "a checkpoint no record matches: not named"

# --report: the plots of the draws by arm
expect 0 "plots" "$T/ok" --report "$T/plots"
[ -s "$T/plots/latency.dat" ] && grep -q "# A control" "$T/plots/latency.dat" ||
  fail "--report drew no latency per arm"

# blinded: counts per label, no arm named, no statistic
gen blind --units 300 --planned 500 --no-reveal
expect 0 "blinded (counts per label only)" "$T/blind"
expect 0 "units: stopped early at 300 of 500 planned" "$T/blind"
expect 0 "label A: " "$T/blind"
expect 0 "records: 1 files checked against the journal" "$T/blind"
if grep -q -e control -e quantum "$T/out"; then
  fail "the blinded report names an arm"
fi
if grep -q "pre-registered statistic" "$T/out"; then
  fail "the blinded report has a statistic"
fi

# a shift of 0.5 s.d. in the quantum arm over 400 units: detected
gen shift --units 400 --draws 1 --shift 0.5
expect 0 "is rejected" "$T/shift"
# each statistic as the pre-registered one
gen ks --units 300 --statistic ks_u
expect 0 "pre-registered statistic: ks_u" "$T/ks"
expect 0 "two-sample Kolmogorov-Smirnov of u over" "$T/ks"
expect 0 "at alpha 0.05: 0.[0-9]* (simulated)" "$T/ks"
gen sur --units 300 --statistic mean_surprisal
expect 0 "pre-registered statistic: mean_surprisal" "$T/sur"
expect 0 "mean surprisal per unit (nats)" "$T/sur"
# draw units, three arms
gen draw --units 100 --draws 3 --unit draw
expect 0 "units: 300 of 300 planned: complete" "$T/draw"
# qrsd restarted mid-study: a second study record, a new epoch, the
# counter from 0 again (not a reuse)
gen restart --units 300 --restart 120
expect 0 "study records: 2" "$T/restart"
expect 0 "units: 300 of 300 planned: complete" "$T/restart"
gen three --units 300 --arms 3
expect 0 "label A against label B: the first two labels" "$T/three"
expect 0 "label C (" "$T/three"

# the tampers: each named with its check, file and line; exit 1
for t in commitment:commitment-mismatch assignment:assignment-mismatch \
         control-bytes:bytes-mismatch ctr-reused:ctr-reused \
         records-moved:source-mismatch plan-changed:plan-changed; do
  what=${t%%:*} check=${t#*:}
  gen "t-$what" --units 200 --restart 100 --tamper "$what"
  where=$(at "t-$what")
  [ -n "$where" ] || fail "study_fixture --tamper $what named no line"
  expect 1 "^$T/t-$what/$where: $check: " "$T/t-$what"
  expect 1 "statistics withheld: a check failed" "$T/t-$what"
done
# the swapped assignment is caught by the assignment check alone: the
# chain is intact and every unit's draws share their (wrong) label
expect 1 "journal intact" "$T/t-assignment"
if grep -v -e assignment-mismatch -e "^journal" -e "^study" -e "^  " \
     -e "checks failed" -e "^records:" -e "withheld" "$T/out" | grep -q .; then
  fail "the swapped assignment raised more than assignment-mismatch"
fi

# a reveal that is not the committed one: the wrong assignment seed, a
# prng seed left out
gen rv --units 50
a64=$(printf '%064d' 0 | tr 0 a)
sed "s/\"assignment_seed\": \"[0-9a-f]*\"/\"assignment_seed\": \"$a64\"/" \
  "$T/rv/reveal.json" > "$T/rv.json"
cmp -s "$T/rv.json" "$T/rv/reveal.json" && fail "the reveal was not changed"
cp "$T/rv.json" "$T/rv/reveal.json"
expect 1 "journal-000001.log:3: commitment-mismatch: the assignment seed" \
  "$T/rv"
sed 's/, "seeds": {.*}}/}/' "$T/rv/reveal.json" > "$T/rv.json"
cp "$T/rv.json" "$T/rv/reveal.json"
expect 1 "journal-000001.log:3: seed-missing: arm control is prng" "$T/rv"

# bad usage and unreadable input: exit 2
echo '{"study": "pilot1"}' > "$T/ok/reveal.json"
expect 2 "assignment_seed" "$T/ok"
expect 2 "" "$T/missing"
"$audit" --study "$T/ok" --journal "$T/ok/journal" > "$T/out" 2>&1
[ $? = 2 ] || fail "--study with --journal: not a usage error"
echo "audit-study: ok"
