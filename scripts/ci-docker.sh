#!/bin/sh
# CI part for docker (called from .ci/run before `make test`): install docker.io + debootstrap, start
# dockerd, build the offline reference image and the GPU images' environment layers (hf, fast: the
# Debian base + the CUDA 13 wheelhouse from PyPI) and the native toolchain stage (cached wheels and
# debootstrap base under .cache/images). The docker tests then run inside `make test`, and .ci/run
# runs the demo study with --runtime docker in both the reference and the hf image. Prints timings.
# CI_SKIP_GPU_IMAGES=1 builds only the reference image.
set -eu
cd "$(dirname "$0")/.."
start=$(date +%s)
step() { echo "== ci-docker [$(( $(date +%s) - start ))s] $*"; }

if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
  step "installing docker.io and debootstrap"
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io debootstrap >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  step "starting dockerd"
  mkdir -p .cache
  nohup dockerd >.cache/dockerd.log 2>&1 &
  i=0
  until docker info >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -le 60 ] || { echo "dockerd did not start; see .cache/dockerd.log" >&2; tail -20 .cache/dockerd.log >&2; exit 1; }
    sleep 1
  done
fi
step "building the offline reference image"
.venv/bin/invoke build --backend reference --offline
if [ "${CI_SKIP_GPU_IMAGES:-0}" != 1 ]; then
  step "building the hf environment layer (torch 2.13.0 CUDA 13 from PyPI, ~2.7 GB of wheels)"
  .venv/bin/invoke build --backend hf --offline
  step "building the fast environment layer (same wheels + FLA 0.5.2)"
  .venv/bin/invoke build --backend fast --offline
  step "building the native toolchain stage (Debian g++/Rust, nvcc 13.0.88 from PyPI)"
  .venv/bin/invoke build --backend native --target toolchain
  step "torch inside the hf image"
  docker run --rm --network none openjev-repro/hf:env python -c 'import torch; print(torch.__version__, torch.version.cuda)'
fi
step "done in $(( $(date +%s) - start )) s"
