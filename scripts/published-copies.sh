#!/usr/bin/env bash
# Rebuild local copies of system1-omni's public evidence folders from a git mirror, for
# tests/test_import_formats.py::test_real_published_layout_imports_with_auto. The copies are
# other people's data: they go under .cache/published/ (git-ignored) and are never committed.
#   scripts/published-copies.sh MIRROR_GIT_DIR [DEST]     # DEST defaults to .cache/published
# MIRROR_GIT_DIR is a git directory (bare or not) of ThinkFlowLab/system1-omni or of a fork.
# Each folder is taken from the first of its revisions that the mirror holds:
#   gdn-20261003              benchmarks/gdn/artifacts/20261003            HEAD
#   prefill_batching-20261006 benchmarks/prefill_batching/artifacts/20261006 HEAD
#   jev_vl-review-20261006    recipe/jev_vl/evidence/review-20261006       522f2256 (the fork
#                             commit recipe/jev_vl/validation.md links to), else HEAD
# A copy that already exists is never overwritten (remove it first). A folder the mirror lacks
# is reported and skipped. Exit 0 when every folder was copied or already present, 1 when one
# is missing from the mirror, 2 for bad arguments. Files are written with their committed
# bytes; symbolic links and submodules are skipped.
set -euo pipefail
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "error: usage: $0 MIRROR_GIT_DIR [DEST]" >&2; exit 2; }
mirror=$1
dest=${2:-$(cd "$(dirname "$0")/.." && pwd)/.cache/published}
git --git-dir="$mirror" rev-parse --verify -q HEAD^{commit} >/dev/null 2>&1 \
    || { echo "error: $mirror is not a git directory with a HEAD commit" >&2; exit 2; }

# name|path in the repository|revisions to try, in order
folders=(
    "gdn-20261003|benchmarks/gdn/artifacts/20261003|HEAD"
    "prefill_batching-20261006|benchmarks/prefill_batching/artifacts/20261006|HEAD"
    "jev_vl-review-20261006|recipe/jev_vl/evidence/review-20261006|522f2256876a62ddd70873ee9e775055416aea1b HEAD"
)

# The first revision in $2 (space-separated) whose tree holds the folder $1; nothing if none.
first_revision_with() {
    local rev
    for rev in $2; do
        if git --git-dir="$mirror" cat-file -e "$rev^{commit}" 2>/dev/null \
                && [ "$(git --git-dir="$mirror" cat-file -t "$rev:$1" 2>/dev/null)" = tree ]; then
            echo "$rev"
            return
        fi
    done
}

mkdir -p "$dest"
status=0
for entry in "${folders[@]}"; do
    IFS='|' read -r name path revisions <<<"$entry"
    if [ -e "$dest/$name" ]; then
        echo "kept: $dest/$name (already present; remove it to rebuild)"
        continue
    fi
    rev=$(first_revision_with "$path" "$revisions")
    if [ -z "$rev" ]; then
        echo "missing: $path is in none of $revisions of $mirror; skipped" >&2
        status=1
        continue
    fi
    commit=$(git --git-dir="$mirror" rev-parse "$rev^{commit}")
    tmp=$(mktemp -d "$dest/.$name.XXXXXX")
    # Each blob's bytes exactly as committed (git archive would apply export-subst/export-ignore).
    while IFS= read -r -d '' line; do
        meta=${line%%$'\t'*} file=${line#*$'\t'}
        read -r mode type blob <<<"$meta"
        [ "$type" = blob ] && [ "$mode" != 120000 ] || { echo "skipped: $file ($type $mode)" >&2; continue; }
        mkdir -p "$(dirname "$tmp/$file")"
        git --git-dir="$mirror" cat-file blob "$blob" >"$tmp/$file"
    done < <(git --git-dir="$mirror" ls-tree -r -z "$commit" -- "$path/")
    mv "$tmp/$path" "$dest/$name"
    rm -rf "$tmp"
    echo "copied: $path@$commit -> $dest/$name ($(find "$dest/$name" -type f | wc -l) files)"
done
exit $status
