#!/bin/sh
# CI part for docker (called from .ci/run before `make test`): install docker.io + debootstrap, start
# dockerd, build the offline reference image (cached wheelhouse and debootstrap base under
# .cache/images). The docker tests then run inside `make test`, and .ci/run runs the demo study
# with --runtime docker. Prints timings.
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
step "done in $(( $(date +%s) - start )) s"
