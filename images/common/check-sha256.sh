#!/bin/sh
# check-sha256.sh FILE EXPECTED: the built artifact must have exactly the recipe's SHA256.
set -eu
actual=$(sha256sum "$1" | cut -d' ' -f1)
if [ "$actual" != "$2" ]; then
  echo "check-sha256: $1 has sha256 $actual, the recipe pins $2; the build is not the published one" >&2; exit 5
fi
echo "check-sha256: $1 $actual ok"
