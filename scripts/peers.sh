#!/usr/bin/env bash
# Virtual environments of the foreign servers and tools we measure and test against, each in its
# own venv under .cache/peers/<name>/ so that their dependency pins never move ours (.venv).
#
#   scripts/peers.sh                 # every peer below (idempotent: a venv whose stamp matches is kept)
#   scripts/peers.sh jevcompat       # one peer
#
# Peers (exact versions from PyPI):
#   jevcompat              jevcompat 0.1.1: `jevcompat test URL` (conformance suite) and `jevcompat mock`
#   jev-compatible-server  jev-compatible-server 0.1.1 with its transformers extra (an independent
#                          Open-Jev readout); torch 2.13.0 first (the CPU build on this machine),
#                          transformers 5.10.2 (the study's pin; the extra allows it; PEFT stays at
#                          the extra's >=0.21, ours is 0.19.1)
# .ci/run calls this script before the tests; tests that need a peer find it at .cache/peers/<name>/bin/.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
ROOT=.cache/peers

requirements() {
    case "$1" in
        jevcompat) echo "jevcompat==0.1.1" ;;
        # transformers at the study's pin (5.10.2, within the server's >=5.3.0): with 5.24.0 its float32
        # probabilities differ from our raw backend's in the 6th decimal; with 5.10.2 they are bit-identical
        jev-compatible-server) echo "torch==2.13.0|jev-compatible-server[transformers]==0.1.1 transformers==5.10.2" ;;
        *) echo "error: unknown peer '$1'; known: jevcompat jev-compatible-server" >&2; return 1 ;;
    esac
}

install_peer() {
    local name=$1 reqs venv stamp
    reqs=$(requirements "$name")
    venv=$ROOT/$name
    stamp=$venv/.peer-stamp
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$reqs" ]; then
        echo "peer $name: up to date ($venv)"
        return 0
    fi
    echo "peer $name: installing ${reqs//|/, } into $venv"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    local step
    local -a steps
    IFS='|' read -r -a steps <<< "$reqs"
    for step in "${steps[@]}"; do  # in order: torch first, so that a package's torch range takes that build
        # shellcheck disable=SC2086  # a step is several requirements, split on spaces
        "$venv/bin/python" -m pip install --quiet $step
    done
    echo "$reqs" > "$stamp"
    echo "peer $name: ready"
}

mkdir -p "$ROOT"
peers=("$@")
[ ${#peers[@]} -gt 0 ] || peers=(jevcompat jev-compatible-server)
for peer in "${peers[@]}"; do
    install_peer "$peer"
done
