#!/usr/bin/env bash
# tools/gpu-check.sh: selection on the device (qrs.device) on a GPU.
#
# Usage: tools/gpu-check.sh [--prepare | --dry-run] [gpu_check.py options]
#
# On the GPU machine (one H100 / H200; torch, triton, transformers and
# meson there, none of our -dev packages, nothing to fetch) it runs
# tools/gpu-check/gpu_check.py: (a) the Triton kernels on 256 rows of
# 151,936 logits, every token compared with libqrs's on the same row and
# u; (b) CUDA-event timings of the device path, today's host path (row
# copy + libqrs + scatter), torch's softmax + multinomial, a Gumbel-max
# pass and one read of the rows (amax: the floor), with their ratios and
# the device's name; (c) transformers generate with a random-weight
# Qwen2 against do_sample=True.  It must finish within 8 minutes.
#
#   --prepare   on the build machine: build the qrs extension for the GPU
#               machine's Python (3.12: $QRS_GPU_PYTHON, default
#               pyenv's 3.12.1; $MESON >= 1.2) with libqrs linked in,
#               and put it with the three shared libraries it needs in
#               build-gpu/bundle (an ignored folder: bring it along,
#               about 9 MiB; $QRS_GPU_BUNDLE names another)
#   --dry-run   here, without a GPU: the same code on CPU tensors with the
#               kernels under TRITON_INTERPRET=1, on a few rows (the
#               build's extension: ./build, or $QRS_PYTHON_EXT_DIR)
#
# Exit status: 0 every token matched; 1 a token differed or a step
# failed; 2 usage, or no GPU (without --dry-run).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODE=gpu
case "${1:-}" in
  --prepare) MODE=prepare; shift ;;
  --dry-run) MODE=dry; shift ;;
  -h|--help) sed -n '4,5p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac

if [ "$MODE" = prepare ]; then
  PY312=${QRS_GPU_PYTHON:-/root/.pyenv/versions/3.12.1/bin/python3.12}
  B=$ROOT/build-gpu
  # meson >= 1.2 (the venv's): older ones need distutils, gone in 3.12
  MESON=${MESON:-$HOME/.cache/qrs/venv/bin/meson}
  [ -x "$MESON" ] || MESON=meson
  if [ ! -f "$B/build.ninja" ]; then
    "$MESON" setup "$B" "$ROOT" -Dpython_exe="$PY312" -Dpython_static=true \
      -Dpython=enabled -Dtests=disabled -Dllama=disabled -Dsystemd=disabled \
      >/dev/null
  fi
  ninja -C "$B" client/python/_qrs"$("$PY312" -c \
    'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
  rm -rf "$B/bundle"
  mkdir -p "$B/bundle"
  cp "$B"/client/python/_qrs*.so "$B/bundle/"
  for lib in libprotobuf-c.so.1 libjson-c.so.5 libcrypto.so.3; do
    cp -L "$(ldconfig -p | awk -v l="$lib" '$1 == l { print $NF; exit }')" \
      "$B/bundle/"
  done
  du -sh "$B/bundle"
  exit 0
fi

if [ "$MODE" = dry ]; then
  export TRITON_INTERPRET=1
  export QRS_PYTHON_EXT_DIR=${QRS_PYTHON_EXT_DIR:-$ROOT/build/client/python}
  export PYTHONPATH=$ROOT/client/python${PYTHONPATH:+:$PYTHONPATH}
  PY=${QRS_PYTHON:-$HOME/.cache/qrs/venv/bin/python}
  exec "$PY" "$ROOT/tools/gpu-check/gpu_check.py" --dry-run "$@"
fi

PY=${QRS_PYTHON:-python3}
if ! "$PY" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'
then
  echo "gpu-check: no CUDA device here (use --dry-run on a CPU)" >&2
  exit 2
fi
BUNDLE=${QRS_GPU_BUNDLE:-$ROOT/build-gpu/bundle}
if ! ls "$BUNDLE"/_qrs*.so >/dev/null 2>&1; then
  echo "gpu-check: no $BUNDLE (run tools/gpu-check.sh --prepare where" \
    "libqrs builds, and bring build-gpu/bundle along)" >&2
  exit 1
fi
export QRS_PYTHON_EXT_DIR=$BUNDLE
export LD_LIBRARY_PATH=$BUNDLE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=$ROOT/client/python${PYTHONPATH:+:$PYTHONPATH}
unset TRITON_INTERPRET
exec timeout 470 "$PY" "$ROOT/tools/gpu-check/gpu_check.py" "$@"
