#!/bin/sh
# Usage: smollm2.sh QRSD QRS_GENERATE MODEL.gguf
# Real text from a real model through qrs: qrs-generate runs
# SmolLM2-135M-Instruct (the GGUF ./setup.sh python fetches from PyPI)
# with every token sampled through a real qrsd (a mock source, so that
# the run is repeatable), and answers a question in English: at least 8
# words, the run's records one per generated token, every draw from the
# mock source.
set -u
qrsd=$1 generate=$2 model=$3
. "$(dirname "$0")/../integration/lib.sh"
[ -s "$model" ] || die "$model missing: ./setup.sh python fetches it"
write_conf <<YAML
allow_test_sources: true
default_source: mock
sources:
  mock: { type: mock, seed: 11 }
YAML
start_qrsd
prompt=$(printf '<|im_start|>user\nWhat is a random number?<|im_end|>\n<|im_start|>assistant\n')
"$generate" -m "$model" -p "$prompt" -n 40 -t 2 --socket "$T/s.sock" \
  --records "$T/records.jsonl" > "$T/out" 2> "$T/err" ||
  fail "qrs-generate failed: $(tail -n 5 "$T/err")"
# the answer: what follows the prompt, which qrs-generate prints first
answer=$(tr '\n' ' ' < "$T/out" | sed 's/.*<|im_start|>assistant//')
words=$(printf '%s' "$answer" | tr -c 'A-Za-z' ' ' | wc -w)
common=$(printf '%s' "$answer" | tr 'A-Z' 'a-z' | tr -c 'a-z' '\n' |
  grep -cxE 'a|an|the|is|of|in|to|and|that|it|for|are|as|by')
[ "$words" -ge 8 ] && [ "$common" -ge 3 ] ||
  fail "not English text ($words words, $common common ones): $answer"
n=$(wc -l < "$T/records.jsonl")
[ "$n" -ge 8 ] || fail "$n records for $words words"
if grep -v '"entropy_source_used":"mock"' "$T/records.jsonl" | grep -q .; then
  fail "a record not drawn from the mock source"
fi
echo "smollm2: $n tokens through qrsd:$answer"
stop_qrsd
