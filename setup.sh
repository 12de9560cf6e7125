#!/usr/bin/env bash
# qrs developer entry point (Debian 12).
#
#   ./setup.sh run    install packages, build, start qrsd in the foreground
#                     on the built-in default config (socket ./run/qrsd.sock)
#                     and show a draw; Ctrl-C stops it
#   ./setup.sh test   install packages, build (warnings are errors), run
#                     the whole test suite
#   ./setup.sh deps   only install the Debian packages
#   ./setup.sh build  only install packages and build into ./build
set -euo pipefail

cd "$(dirname "$0")"

PACKAGES=(
  meson ninja-build pkg-config gcc
  protobuf-c-compiler libprotobuf-c-dev
  libuv1-dev libgrpc-dev libyaml-dev libsystemd-dev libcriterion-dev
  libjson-c-dev libssl-dev
  systemd valgrind locales
  clang libclang-rt-14-dev
  python3-grpcio openssl
)

BUILD_DIR=${QRS_BUILD_DIR:-build}
RUN_DIR=$PWD/run
SOCK=$RUN_DIR/qrsd.sock

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

deps() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  say "Installing Debian packages: ${missing[*]}"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup.sh: need root or sudo to install packages" >&2; exit 1; }
    sudo=(sudo)
  fi
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null
}

build() {
  deps
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    say "Configuring $BUILD_DIR (warnings are errors)"
    meson setup "$BUILD_DIR" -Dwerror=true >/dev/null
  fi
  say "Building"
  ninja -C "$BUILD_DIR" >/dev/null
}

run() {
  build
  mkdir -p "$RUN_DIR"
  say "Starting qrsd in the foreground on the built-in default config"
  "$BUILD_DIR/daemon/qrsd" --socket "$SOCK" &
  local pid=$!
  trap 'kill -TERM $pid 2>/dev/null' TERM
  trap 'kill -INT $pid 2>/dev/null' INT
  local i
  for i in $(seq 100); do
    "$BUILD_DIR/tools/qrsctl" --socket "$SOCK" health >/dev/null 2>&1 && break
    kill -0 $pid 2>/dev/null || { wait $pid; exit 1; }
    sleep 0.05
  done
  cat <<EOF

qrsd listens on $SOCK
Query it from another terminal:
  $BUILD_DIR/tools/qrsctl --socket $SOCK draw -n 5
  $BUILD_DIR/tools/qrsctl --socket $SOCK status
  $BUILD_DIR/tools/qrsctl --socket $SOCK --json draw
Clients linking libqrs find it with: export QRS_SOCKET=$SOCK

A draw, right now:
EOF
  "$BUILD_DIR/tools/qrsctl" --socket "$SOCK" draw
  echo
  echo "qrsd is running in the foreground; press Ctrl-C to stop it."
  wait $pid || true
  wait $pid 2>/dev/null || true
}

tests() {
  build
  say "Running the test suite"
  meson test -C "$BUILD_DIR" --print-errorlogs
}

case "${1:-}" in
  run) run ;;
  test) tests ;;
  deps) deps ;;
  build) build ;;
  *)
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
