#!/usr/bin/env bash
# Checks the wheel of DIR (default build-pkg/wheel, from build-wheel.sh):
#   - it is tagged manylinux_2_34_x86_64, auditwheel agrees, and it
#     carries libprotobuf-c, libjson-c and libcrypto (qrs.libs/)
#   - in a fresh venv of Debian's python3 holding only pip and the wheel,
#     `import qrs` and token draws through a real qrsd (QRSD_BIN, default
#     build/daemon/qrsd, started outside) succeed in a mount namespace
#     (unshare -m) where the system's libprotobuf-c, libjson-c and
#     libcrypto are hidden (/dev/null bound over each): the extension
#     loads the copies in the wheel, and nothing else
#   - vLLM's loader test (tests/python/test_vllm*.py -k loader) passes
#     with the package imported from the wheel (installed with
#     pip --target for the cached venv's Python, ~/.cache/qrs/venv: it
#     holds vLLM), not from the tree
# Needs root (the mount namespace).
set -euo pipefail
# read whole before it runs (an edit meanwhile does not change a run)
{
cd "$(dirname "$0")/../.."
REPO=$PWD
DIR=$(realpath "${1:-build-pkg/wheel}")
QRSD=$(realpath "${QRSD_BIN:-build/daemon/qrsd}")
VENV=${QRS_VENV:-$HOME/.cache/qrs/venv}
PLAT=${QRS_WHEEL_PLAT:-manylinux_2_34_x86_64}
WHEEL_VENV=${QRS_WHEEL_VENV:-$HOME/.cache/qrs/wheel-venv}
HIDE=(libprotobuf-c.so.1 libjson-c.so.5 libcrypto.so.3)
LIBDIR=/usr/lib/x86_64-linux-gnu
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
fail() { echo "FAILED: $*" >&2; exit 1; }

wheel=$(ls "$DIR"/qrs-*-"$PLAT".whl 2>/dev/null | head -n 1)
[ -n "$wheel" ] || fail "no qrs-*-$PLAT.whl in $DIR"
wheel=$(realpath "$wheel")
[ -x "$QRSD" ] || fail "no qrsd at $QRSD (QRSD_BIN)"
work=$(mktemp -d "${TMPDIR:-/var/tmp}/qrs-wheelcheck.XXXXXX")
qrsd_pid=
cleanup() {
  [ -z "$qrsd_pid" ] || kill "$qrsd_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

say "auditwheel show $(basename "$wheel")"
PATH=$WHEEL_VENV/bin:$PATH auditwheel show "$wheel" | tee "$work/show"
tr -s ' \n' ' ' < "$work/show" |
  grep -qF "constrains the platform tag to \"$PLAT\"" ||
  fail "auditwheel does not find the tag $PLAT"
libs=$(/usr/bin/python3 -c '
import sys, zipfile
print("\n".join(n for n in zipfile.ZipFile(sys.argv[1]).namelist()
                if ".libs/" in n))' "$wheel")
echo "bundled:"
echo "$libs" | sed 's/^/  /'
for l in libprotobuf-c libjson-c libcrypto; do
  grep -q "/$l-" <<< "$libs" || fail "the wheel does not carry $l"
done
# every module of the package's source is in the wheel
missing=$(/usr/bin/python3 -c '
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
print(" ".join(f for f in sys.argv[2:] if "qrs/" + f not in names))' \
  "$wheel" $(cd client/python/qrs && git ls-files))
[ -z "$missing" ] || fail "the wheel lacks qrs/ $missing"

say "Starting qrsd ($QRSD) on a mock source"
cat > "$work/qrsd.yaml" <<'EOF'
allow_test_sources: true
default_source: mock
sources:
  mock: { type: mock, seed: 7 }
EOF
sock=$work/qrsd.sock
"$QRSD" -c "$work/qrsd.yaml" --socket "$sock" -S "$work/status.json" \
  > "$work/qrsd.log" 2>&1 &
qrsd_pid=$!
for _ in $(seq 200); do
  [ -S "$sock" ] && break
  kill -0 "$qrsd_pid" 2>/dev/null || { cat "$work/qrsd.log"; fail "qrsd exited"; }
  sleep 0.05
done
[ -S "$sock" ] || fail "qrsd did not listen"

say "A fresh venv with only the wheel; the draw with the system's libraries hidden"
/usr/bin/python3 -m venv "$work/venv"
env -i PATH=/usr/bin:/bin HOME="$HOME" "$work/venv/bin/pip" install -q \
  --no-index "$wheel"
cat > "$work/draw.py" <<'EOF'
import array, random, sys
import qrs, qrs._qrs
sock, hidden = sys.argv[1], sys.argv[2:]
c = qrs.Client(sock)
s = qrs.Sampler(qrs.make_config({"top_k": 50}, env=False), 2000)
s.set_salt(b"wheel")
toks = []
for t in range(8):
    row = array.array("f", [-(i % 97) / 8 for i in range(2000)])
    random.Random(t).shuffle(row)
    tok, rec = s.sample_token(c, row, record=True)
    assert 0 <= tok < 2000 and 0 <= rec["u_value"] <= 1, (tok, rec)
    toks.append(tok)
c.close()
maps = open("/proc/self/maps").read()
for lib in hidden:
    stem = lib.split(".so")[0]
    paths = {l.split()[-1] for l in maps.splitlines() if "/" + stem in l}
    assert paths and all(".libs/" in p for p in paths), (lib, paths)
    print(f"{stem}: {sorted(paths)[0]}")
print("qrs from", qrs._qrs.__file__)
print("tokens", toks)
EOF
# shellcheck disable=SC2016
unshare --mount --propagation private /bin/bash -ec '
  libdir=$1 py=$2 draw=$3 sock=$4; shift 4
  for lib in "$@"; do
    mount --bind /dev/null "$(realpath "$libdir/$lib")"
  done
  # the system copies are unloadable here
  for lib in "$@"; do
    if /usr/bin/python3 -c "import ctypes, sys; ctypes.CDLL(sys.argv[1])" \
        "$lib" 2>/dev/null; then
      echo "FAILED: $lib still loads" >&2; exit 1
    fi
  done
  echo "hidden: $*"
  cd /
  env -i PATH=/usr/bin:/bin HOME="$HOME" "$py" "$draw" "$sock" "$@"
' sh "$LIBDIR" "$work/venv/bin/python" "$work/draw.py" "$sock" "${HIDE[@]}" ||
  fail "the draw through the wheel's qrs with the system's libraries hidden"

say "vLLM's loader test against the wheel (the cached venv's Python)"
"$VENV/bin/python" -m pip install -q --no-deps --no-index \
  --target "$work/site" "$wheel"
env -u QRS_PYTHON_EXT_DIR PYTHONPATH="$work/site" "$VENV/bin/python" -c '
import sys, qrs._qrs
assert qrs._qrs.__file__.startswith(sys.argv[1]), qrs._qrs.__file__
print("qrs from", qrs._qrs.__file__)' "$work/site"
kill "$qrsd_pid"
wait "$qrsd_pid" 2>/dev/null || true
qrsd_pid=
env -u QRS_PYTHON_EXT_DIR QRSD_BIN="$QRSD" \
  PYTHONPATH="$work/site:$REPO/tests/python" \
  "$VENV/bin/python" -m pytest -q -p no:cacheprovider -k loader \
  "$REPO"/tests/python/test_vllm*.py ||
  fail "vLLM's loader test against the wheel"
say "check-wheel: all passed"
exit
}
