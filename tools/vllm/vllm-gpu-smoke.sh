#!/usr/bin/env bash
# tools/vllm/vllm-gpu-smoke.sh: vLLM on a GPU sampling through qrs.
#
# Usage: tools/vllm/vllm-gpu-smoke.sh [--model NAME] [--port N] [--build DIR]
#                                [--socket PATH] [--timeout S]
#
# Serves a small model with `vllm serve MODEL --logits-processors
# qrs.vllm:QRSLogitsProcessor`, waits until it answers /health, sends one
# completion request with qr_* extra_args (vllm_xargs), and checks that
#   - the reply is HTTP 200 with a non-empty completion,
#   - qrsd served at least one draw per generated token (the draws counter
#     of `qrsctl --json status` before and after),
#   - a request with a bad qr_* value is refused (HTTP 400) naming the key
#     (validate_params in vLLM's frontend).
# Then it stops vllm (and the qrsd it started).  The CI machine has no GPU:
# there this script only proves it parses (bash -n) and that it says so.
#
#   --model NAME    a model vLLM can load (default Qwen/Qwen2.5-0.5B-Instruct;
#                   needs the Hugging Face hub or a local path)
#   --port N        vllm's port on 127.0.0.1 (default 8765)
#   --build DIR     the meson build with qrsd and qrsctl (default ./build)
#   --socket PATH   use this qrsd (default: start the build's qrsd on a
#                   mock source in a temporary directory)
#   --timeout S     how long vllm may take to start (default 900)
# Python: $QRS_PYTHON, else ~/.cache/qrs/venv/bin/python (vllm and the qrs
# package importable there: ./setup.sh python, then pip install .).
#
# Exit status: 0 all checks passed; 1 a check failed; 2 usage, or no GPU
# here (nothing was started).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=Qwen/Qwen2.5-0.5B-Instruct
PORT=8765
BUILD=$ROOT/build
SOCK=
TIMEOUT=900
PY=${QRS_PYTHON:-$HOME/.cache/qrs/venv/bin/python}

usage() { sed -n '4,5p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "vllm-gpu-smoke: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case $1 in
    --model) MODEL=${2:?}; shift 2 ;;
    --port) PORT=${2:?}; shift 2 ;;
    --build) BUILD=${2:?}; shift 2 ;;
    --socket) SOCK=${2:?}; shift 2 ;;
    --timeout) TIMEOUT=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage ;;
  esac
done

# A GPU first: nothing is started without one.
gpu=
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q .
then
  gpu=$(nvidia-smi -L | head -1)
elif [ -x "$PY" ] && "$PY" -c 'import sys, torch
sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  gpu="CUDA device (torch)"
fi
if [ -z "$gpu" ]; then
  echo "vllm-gpu-smoke: no GPU here (nvidia-smi lists none and torch sees" \
       "no CUDA device): this smoke test needs one; nothing was run" >&2
  exit 2
fi
echo "vllm-gpu-smoke: GPU: $gpu"

[ -x "$PY" ] || die "no Python at $PY (set QRS_PYTHON, or ./setup.sh python)"
"$PY" -c 'import vllm, qrs.vllm' 2>/dev/null ||
  die "$PY cannot import vllm and qrs.vllm (pip install . in that venv)"
VLLM=$(dirname "$PY")/vllm
[ -x "$VLLM" ] || die "no vllm command beside $PY"
QRSCTL=$BUILD/tools/qrsctl/qrsctl
[ -x "$QRSCTL" ] || die "no qrsctl at $QRSCTL (--build DIR; ninja -C DIR)"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/qrs-vllm-smoke.XXXXXX")
qrsd_pid=
vllm_pid=
cleanup() {
  [ -n "$vllm_pid" ] && kill "$vllm_pid" 2>/dev/null && wait "$vllm_pid" 2>/dev/null
  [ -n "$qrsd_pid" ] && kill "$qrsd_pid" 2>/dev/null && wait "$qrsd_pid" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT

if [ -z "$SOCK" ]; then
  [ -x "$BUILD/daemon/qrsd" ] || die "no qrsd at $BUILD/daemon/qrsd"
  SOCK=$TMP/qrsd.sock
  cat > "$TMP/qrsd.yaml" <<EOF
allow_test_sources: true
default_source: mock
status_file: ""
state_dir: $TMP
sources:
  mock: { type: mock, seed: 7 }
EOF
  "$BUILD/daemon/qrsd" --socket "$SOCK" -c "$TMP/qrsd.yaml" \
    > "$TMP/qrsd.log" 2>&1 &
  qrsd_pid=$!
  for _ in $(seq 100); do
    "$QRSCTL" --socket "$SOCK" health >/dev/null 2>&1 && break
    kill -0 "$qrsd_pid" 2>/dev/null || die "qrsd exited: $(cat "$TMP/qrsd.log")"
    sleep 0.1
  done
fi
"$QRSCTL" --socket "$SOCK" health >/dev/null ||
  die "qrsd at $SOCK is not healthy ($QRSCTL --socket $SOCK health)"

draws() {
  "$QRSCTL" --socket "$SOCK" --json status |
    "$PY" -c 'import json, sys; print(json.load(sys.stdin)["draws"])'
}

echo "vllm-gpu-smoke: vllm serve $MODEL on 127.0.0.1:$PORT (log: $TMP/vllm.log)"
QRS_SOCKET=$SOCK "$VLLM" serve "$MODEL" \
  --logits-processors qrs.vllm:QRSLogitsProcessor \
  --host 127.0.0.1 --port "$PORT" --max-model-len 1024 \
  > "$TMP/vllm.log" 2>&1 &
vllm_pid=$!
deadline=$((SECONDS + TIMEOUT))
until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; do
  if ! kill -0 "$vllm_pid" 2>/dev/null; then
    tail -40 "$TMP/vllm.log" >&2
    vllm_pid=
    die "vllm serve exited before it answered /health (its log above)"
  fi
  if [ "$SECONDS" -ge "$deadline" ]; then
    tail -40 "$TMP/vllm.log" >&2
    die "vllm serve did not answer /health within $TIMEOUT s (its log above)"
  fi
  sleep 2
done

# the mock source is named only on the qrsd started here (yours may not
# serve it)
xargs='"qr_top_k": 40, "qr_temperature_strategy": "edt"'
[ -z "$qrsd_pid" ] || xargs="$xargs"', "qr_entropy_source_type": "mock"'
body='{"model": "'"$MODEL"'", "prompt": "Entropy is", "max_tokens": 16,
 "vllm_xargs": {'"$xargs"'}}'
before=$(draws)
code=$(curl -s -o "$TMP/reply.json" -w '%{http_code}' \
  "http://127.0.0.1:$PORT/v1/completions" \
  -H 'Content-Type: application/json' -d "$body")
after=$(draws)
[ "$code" = 200 ] || die "the completion request got HTTP $code: $(cat "$TMP/reply.json")"
tokens=$("$PY" - "$TMP/reply.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
text = r["choices"][0]["text"]
n = r["usage"]["completion_tokens"]
if not text or n < 1:
    sys.exit(f"empty completion: {r}")
print(n)
PY
) || die "bad completion reply: $(cat "$TMP/reply.json")"
echo "vllm-gpu-smoke: $tokens tokens; qrsd draws $before -> $after"
[ $((after - before)) -ge "$tokens" ] ||
  die "qrsd served $((after - before)) draws for $tokens tokens: the" \
      "processor did not sample them through qrsd"

bad='{"model": "'"$MODEL"'", "prompt": "x", "max_tokens": 4,
 "vllm_xargs": {"qr_top_k": "many"}}'
code=$(curl -s -o "$TMP/bad.json" -w '%{http_code}' \
  "http://127.0.0.1:$PORT/v1/completions" \
  -H 'Content-Type: application/json' -d "$bad")
[ "$code" = 400 ] && grep -q qr_top_k "$TMP/bad.json" ||
  die "a bad qr_top_k got HTTP $code, not 400 naming the key: $(cat "$TMP/bad.json")"
echo "vllm-gpu-smoke: ok (completion sampled through qrsd; bad qr_* refused)"
