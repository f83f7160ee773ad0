#!/bin/sh
# check-one-sha256.sh DIR PATTERN EXPECTED: DIR must hold exactly one file matching PATTERN, and it
# must have exactly the recipe's SHA256 (the native CUDA library: the published e033315d...).
set -eu
dir=$1; pattern=$2; expected=$3
found=$(find "$dir" -type f -name "$pattern" | sort)
count=$(printf '%s' "$found" | grep -c . || true)
if [ "$count" != 1 ]; then
  echo "check-one-sha256: expected exactly one $pattern in $dir, found $count: $found" >&2; exit 7
fi
exec "$(dirname "$0")/check-sha256.sh" "$found" "$expected"
