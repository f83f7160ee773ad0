#!/usr/bin/env bash
# Issue 28, 2026-12-02 third session: which change moved the best configuration's probabilities in the signed
# study of upstream's contract (max |dp| 0.02195 against raw, over the 0.0204 rule). Four configurations on one
# host, one process each, through the profile script's own HTTP server (not the runner), each against the
# signed run's raw rows (same requests, same prompts). Run from a copy of the repository (git archive) with the
# fixture tokenizer and requests in .cache/demo, the signed run in $RAW_RUN and FLA wheels in ../whl.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site ../whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
BASE=conv-silu,concat-in-proj,add-norm,grouped-qk,beta-g
{
  nvidia-smi --query-gpu=name,uuid,clocks.sm,temperature.gpu,power.draw --format=csv
  for pair in "previous:$BASE,gated-norm" "silu-mul:$BASE,gated-norm,silu-mul" \
              "triton-norm:$BASE,triton-gated-norm" "new:$BASE,triton-gated-norm,silu-mul"; do
    name=${pair%%:*}; fuse=${pair#*:}; date -u
    timeout 150 python3 scripts/h200-fast-profile.py --out "$OUT/p/$name" --compile --fuse "$fuse" --prompt-ids cached \
        --prompt-format upstream --requests .cache/demo/requests/h200-74-lengths-upstream.jsonl --raw-run "$RAW_RUN" \
        --skip-hardware --skip-profile
    echo "$name rc=$?"
  done
  date -u
} 2>&1 | tee "$OUT/device-call.log"
tar -czf "$OUT/profiles.tar.gz" -C "$OUT/p" . && rm -rf "$OUT/p"
