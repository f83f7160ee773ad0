#!/usr/bin/env bash
# Issue 39 item 4 / issue 42 item 4: the fast study with its kernel caches pinned, in as few device calls as
# possible. Run from the repository root of the copy on the H200 (the device tool's checkout), with the wheels
# the host lacks in $WHEELS (default .whl: cryptography, pydantic(-core), msgspec, invoke, fla-core,
# flash-linear-attention; see docs/rerun-h200.md "Pinned kernel caches") and, for a signed study, the private
# key at $KEY. Parts (the first argument):
#
#   host-a   produce + study, one call on host A (~8 min: produce ~2.5, pack ~0.3, study ~5)
#   produce  recipes/h200-fast-27b-shape-caches.yaml (fast eager and best, fresh Triton and Inductor caches,
#            one pass), then `invoke kernel-cache` packs each backend's caches into
#            results/h200-fast-27b-shape/kernel-caches/<backend>.tar.xz and writes their sha256 into
#            recipes/h200-fast-27b-shape.yaml (--pin); archives and recipe come back in $OUT
#   study    the signed study of recipes/h200-fast-27b-shape.yaml with those caches pinned -> $OUT/run.tar.gz
#   rerun    the same on a fresh host B, from the committed archives and recipe -> $OUT/rerun.tar.gz
#
# Back in $OUT (at most 8 files, each under 16 MiB; an archive over 15 MiB comes back in .partNN pieces:
# `cat NAME.tar.xz.part* > NAME.tar.xz`): identity-call.log (with nvidia-smi after), and per part
# produce: reference-fast-eager.tar.xz, reference-fast-best.tar.xz, h200-fast-27b-shape.yaml, produce-run.tar.gz;
# study: run.tar.gz; rerun: rerun.tar.gz. The caches themselves stay on the host (beside each run).
# Everything is overridable for a CPU check (tests/test_h200_identity_call.py runs every part on the demo):
# PYTHON, RECIPE, CACHES_RECIPE, ARCHIVES, BACKENDS, WORK, FIXTURE, PRODUCE_LIMIT, STUDY_LIMIT.
# STUDY_ARGS adds options to the study and rerun parts (e.g. --allow-environment-drift: a rewritten pinned
# cache is then recorded, with the files that changed, instead of stopping the study).
set -u -o pipefail
PART=${1:?usage: h200-identity-call.sh host-a|produce|study|rerun}
case "$PART" in host-a|produce|study|rerun) ;; *) echo "error: part $PART: give host-a, produce, study or rerun" >&2; exit 2 ;; esac
OUT=${OUT:?OUT: the folder whose files come back}
PYTHON=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
RECIPE=${RECIPE:-recipes/h200-fast-27b-shape.yaml}
CACHES_RECIPE=${CACHES_RECIPE:-recipes/h200-fast-27b-shape-caches.yaml}
ARCHIVES=${ARCHIVES:-results/h200-fast-27b-shape/kernel-caches}
BACKENDS=${BACKENDS:-reference-fast-eager reference-fast-best}
WORK=${WORK:-/tmp/identity-call}
FIXTURE=${FIXTURE:-.cache/demo}  # the recipes' tokenizer and requests (`invoke fixture`, ~10 s)
LOG=$OUT/identity-call.log
SPLIT_BYTES=${SPLIT_BYTES:-$((15 * 1024 * 1024))}  # one returned file stays under the device's 16 MiB

say() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$LOG"; }
run() { "$@" 2>&1 | tee -a "$LOG"; return "${PIPESTATUS[0]}"; }

setup() {
  mkdir -p "$OUT" "$WORK"
  if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      "$WHEELS"/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
  else
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
  fi
  export PYTHONUNBUFFERED=1
  GPU_ARGS=()
  if command -v nvidia-smi >/dev/null 2>&1; then
    GPU_ARGS=(--gpu-uuid "$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)")
  fi
  say "part $PART; ${GPU_ARGS[*]:-no GPU}; $(git rev-parse --short HEAD 2>/dev/null || echo 'no git')"
  if [ ! -f "$FIXTURE/requests/h200-74-lengths-upstream.jsonl" ]; then
    say "fixture (tokenizer and requests) into $FIXTURE"
    run "$PYTHON" -m invoke fixture --out "$FIXTURE" >/dev/null || exit 1
  fi
}

# The one run directory a study wrote under $1 (its caches lie beside it, in <run>.kernel-caches).
run_dir() { find "$1" -mindepth 1 -maxdepth 1 -type d ! -name '*.kernel-caches' | head -1; }

bring_back() {  # bring_back FILE: copy into $OUT, in pieces when over the limit of one returned file
  local size; size=$(stat -c %s "$1")
  if [ "$size" -gt "$SPLIT_BYTES" ]; then
    split -b "$SPLIT_BYTES" -d "$1" "$OUT/$(basename "$1").part"
  else
    cp "$1" "$OUT/"
  fi
}

produce() {
  say "produce: $CACHES_RECIPE (fresh caches, one pass)"
  rm -rf "$WORK/produce"
  run timeout "${PRODUCE_LIMIT:-230}" "$PYTHON" -m invoke study --recipe "$CACHES_RECIPE" --out "$WORK/produce" \
    "${GPU_ARGS[@]}"
  local rc=$? dir; dir=$(run_dir "$WORK/produce")
  [ -n "$dir" ] && tar -czf "$OUT/produce-run.tar.gz" -C "$WORK/produce" "$(basename "$dir")"
  [ "$rc" -eq 0 ] || { say "produce: study rc=$rc; nothing packed"; return 1; }
  mkdir -p "$ARCHIVES"
  for backend in $BACKENDS; do
    rm -f "$ARCHIVES/$backend.tar.xz"
    run "$PYTHON" -m invoke kernel-cache --run "$dir" --backend "$backend" --out "$ARCHIVES/$backend.tar.xz" \
      --pin "$RECIPE" || return 1
    bring_back "$ARCHIVES/$backend.tar.xz"
  done
  cp "$RECIPE" "$OUT/"
  git diff --stat -- "$RECIPE" >>"$LOG" 2>&1 || true
}

study() {  # study NAME: the signed study (unsigned without $KEY) of $RECIPE, its run as $OUT/NAME.tar.gz
  say "$1: $RECIPE with the pinned caches"
  local key=(); [ -n "${KEY:-}" ] && key=(--key "$KEY")
  rm -rf "$WORK/$1"
  # shellcheck disable=SC2086  # STUDY_ARGS is a list of options
  run timeout "${STUDY_LIMIT:-340}" "$PYTHON" -m invoke study --recipe "$RECIPE" --out "$WORK/$1" "${key[@]}" \
    "${GPU_ARGS[@]}" ${STUDY_ARGS:-}
  local rc=$? dir; dir=$(run_dir "$WORK/$1")
  if [ -n "$dir" ]; then
    tar -czf "$OUT/$1.tar.gz" -C "$WORK/$1" "$(basename "$dir")"
    [ -f "$dir/kernel_caches.json" ] && run cat "$dir/kernel_caches.json"
  fi
  say "$1: study rc=$rc"
  return "$rc"
}

setup
case "$PART" in
  host-a) produce && study run ;;
  produce) produce ;;
  study) study run ;;
  rerun) study rerun ;;
esac
rc=$?
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >>"$LOG" 2>&1
say "done rc=$rc"; ls -la "$OUT" | tee -a "$LOG"
exit "$rc"
