#!/bin/sh
# Usage: audit-study-null.sh QRS_AUDIT STUDY_FIXTURE
# qrs-audit --study's pre-registered statistic (mean_probit_diff) over
# simulated studies written by study_fixture, end to end through the
# audit: over 200 null studies of 2,000 units (one draw each) its
# p-value is uniform (one-sample KS, p > 0.001); over 200 studies of
# 1,000 units with a shift of 0.1 s.d. injected in the quantum arm, the
# fraction with p <= alpha is the power the reports predicted (their
# mean, for the plan's effect 0.1) within 3 binomial standard errors.
# Seeded: the same studies every run.
set -u
audit=$1 fixture=$2
. "$(dirname "$0")/lib.sh"
on_fail() { tail -3 "$T/json" 2>/dev/null; }

run() {  # run TAG UNITS SHIFT: 200 studies, their --json in $T/TAG
  i=1
  while [ $i -le 200 ]; do
    rm -rf "$T/s"
    "$fixture" "$T/s" --units "$2" --draws 1 --shift "$3" --effect 0.1 \
      --seed "$i$1" > /dev/null || fail "study_fixture seed $i"
    "$audit" --study "$T/s" --json >> "$T/$1" ||
      fail "qrs-audit --study: exit $? on study $i ($1)"
    i=$((i + 1))
  done
}
run null 2000 0
run shift 1000 0.1
python3 - "$T/null" "$T/shift" <<'PY' || fail "the statistic's p-values"
import json, math, sys

def ks_p(p):
    p = sorted(p)
    n = len(p)
    d = max(max((i + 1) / n - x, x - i / n) for i, x in enumerate(p))
    lam = (math.sqrt(n) + 0.12 + 0.11 / math.sqrt(n)) * d
    return d, max(0.0, min(1.0, 2 * sum((-1) ** (k - 1) *
                  math.exp(-2 * k * k * lam * lam) for k in range(1, 101))))

null = [json.loads(l)["primary"] for l in open(sys.argv[1])]
d, p = ks_p([x["p"] for x in null])
print("null: %d studies, KS of p: D %.4f, p %.4f" % (len(null), d, p))
if len(null) != 200 or p <= 0.001:
    sys.exit("the null p-values are not uniform")
shift = [json.loads(l)["primary"] for l in open(sys.argv[2])]
hit = sum(x["p"] <= 0.05 for x in shift) / len(shift)
pred = sum(x["power"] for x in shift) / len(shift)
se = math.sqrt(pred * (1 - pred) / len(shift))
print("shift 0.1: detected %.3f, predicted power %.3f (s.e. %.3f)" %
      (hit, pred, se))
if abs(hit - pred) > 3 * se:
    sys.exit("detections are not the power predicted")
PY
echo "audit-study-null: ok"
