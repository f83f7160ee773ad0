#!/usr/bin/env bash
# Peer tools, each in its own virtual environment under .cache/peers/NAME, so that their
# dependency pins never move ours (.venv). NAME is a requirements file scripts/peers/NAME.txt.
#   scripts/peers.sh jevcompat        # prints .cache/peers/jevcompat/bin
# Idempotent and safe to run concurrently (tests on xdist workers call it): one lock per
# environment; an environment is rebuilt whole when its requirements file changed or an
# earlier install did not finish. Exit 2 for an unknown NAME, 1 when pip fails.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
root=.cache/peers
[ $# -ge 1 ] || { echo "error: name a peer: $(ls scripts/peers | sed -n 's/\.txt$//p' | tr '\n' ' ')" >&2; exit 2; }
mkdir -p "$root"
for name in "$@"; do
    req=scripts/peers/$name.txt
    case $name in */*|.*|'') req=;; esac
    if [ -z "$req" ] || [ ! -f "$req" ]; then
        echo "error: unknown peer '$name'; known: $(ls scripts/peers | sed -n 's/\.txt$//p' | tr '\n' ' ')" >&2
        exit 2
    fi
    dir=$root/$name
    want=$(sha256sum "$req" | cut -d' ' -f1)
    (
        flock 9
        if [ "$(cat "$dir/.requirements-sha256" 2>/dev/null)" != "$want" ]; then
            echo "peers: installing $name from $req into $dir" >&2
            rm -rf "$dir"
            "$PYTHON" -m venv "$dir"
            if ! "$dir/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" >"$root/$name.pip.log" 2>&1; then
                tail -n 20 "$root/$name.pip.log" >&2
                echo "error: pip could not install $req (log: $root/$name.pip.log)" >&2
                rm -rf "$dir"
                exit 1
            fi
            echo "$want" > "$dir/.requirements-sha256"   # written last: a half-made environment is rebuilt
        fi
    ) 9>"$root/$name.lock"
    echo "$dir/bin"
done
