#!/bin/sh
# check-pins.sh VALUE...: refuse the all-zero placeholder digests and hashes that `invoke lock` fills.
# The Python build refuses them first; this guards a direct `docker build` as well.
set -eu
zeros=0000000000000000000000000000000000000000000000000000000000000000
for value in "$@"; do
  case "$value" in
    *"$zeros"*|"") echo "check-pins: unresolved pin '$value': run \`invoke lock\` on a host with registry access (docs/images.md)" >&2; exit 4 ;;
  esac
done
