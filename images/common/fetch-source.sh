#!/bin/sh
# fetch-source.sh URL COMMIT DEST: fetch exactly one commit, check it out, prove HEAD is it.
set -eu
url=$1; commit=$2; dest=$3
case "$commit" in
  *[!0-9a-f]*|"") echo "fetch-source: '$commit' is not a full 40-hex commit" >&2; exit 2 ;;
esac
[ ${#commit} -eq 40 ] || { echo "fetch-source: '$commit' is not a full 40-hex commit" >&2; exit 2; }
git init -q "$dest"
git -C "$dest" fetch -q --depth 1 "$url" "$commit"
git -C "$dest" -c advice.detachedHead=false checkout -q FETCH_HEAD
head=$(git -C "$dest" rev-parse HEAD)
if [ "$head" != "$commit" ]; then
  echo "fetch-source: $url gave $head, the recipe pins $commit" >&2; exit 3
fi
echo "fetch-source: $url at $head"
