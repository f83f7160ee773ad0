#!/bin/sh
# CI part for docker (called from .ci/run): install docker.io + debootstrap, start dockerd, build the
# offline reference image (cached wheelhouse and debootstrap base under .cache/images), run the docker
# tests and, when the demo study task exists, the demo study with --runtime docker. Prints timings.
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
step "docker tests"
.venv/bin/pytest -q tests/test_docker_runtime.py
if .venv/bin/invoke --list 2>/dev/null | grep -q '^  study '; then
  step "demo study with --runtime docker"
  .venv/bin/invoke study --recipe recipes/demo.yaml --runtime docker
else
  step "demo study task not present yet: skipped"
fi
step "done in $(( $(date +%s) - start )) s"
