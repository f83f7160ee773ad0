#!/usr/bin/env bash
# CI: the embedded demo study as a 2-replicate Slurm job array on the local cluster
# (scripts/slurm-local.sh start must have run), its status, and the cross-host collect with the
# demo's tolerances. Fails when a replicate is incomplete or a tolerance fails.
set -euo pipefail
cd "$(dirname "$0")/.."
INVOKE=.venv/bin/invoke
OUT=${1:-.cache/ci-slurm}

# The fixture and signing key of the demo (built once; .cache/ is not committed).
.venv/bin/python -c 'import openjev_repro.cli.demo as d; d.ensure_fixture(d.DEMO_INPUTS)'
[ -f .cache/demo-key/openjev-repro.key ] || $INVOKE keygen --out .cache/demo-key

sub=$($INVOKE submit --recipe recipes/demo.yaml --replicates 2 --key .cache/demo-key/openjev-repro.key \
      --time 15m --out "$OUT" | tail -n 1)
echo "submission: $sub"
timeout 900 $INVOKE status --submission "$sub" --wait
$INVOKE status --submission "$sub" --json | .venv/bin/python -c '
import json, sys
rows = json.load(sys.stdin)["replicates"]
bad = [r["replicate"] for r in rows if r["evidence"] != "complete"]
sys.exit(f"error: replicates {bad} are not complete" if bad else 0)'
$INVOKE collect --submission "$sub" --pubkey .cache/demo-key/openjev-repro.pub --tolerances manifests/tolerances/demo-cross-host.yaml | tail -n 25
