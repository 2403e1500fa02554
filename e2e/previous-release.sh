#!/usr/bin/env bash
# An earlier sigil, built once for the upgrade scenario (e2e/upgrade.sh):
# its image, by its own `make image`, and its chart, cached by commit in
# .cache/upgrade/<commit> (SIGIL_UPGRADE_CACHE), so later runs reuse them.
#
#   e2e/previous-release.sh [REF]    prints the cache directory:
#                                    oci/ (the image's OCI layout), digest,
#                                    chart/sigil/ (its chart), commit
#   e2e/previous-release.sh --default-ref    prints the default REF's commit
#
# REF defaults to the parent of the last commit that changed a CRD
# (charts/sigil/crds) or the policy snapshot's format (sigil-api's snapshot
# module): the newest version that the upgrade to HEAD takes across such a
# change, which is where an upgrade can break.
#
# The build: `git archive` of REF into the cache, then its own `make image`
# with a target directory of its own. That directory starts as a copy of
# this checkout's target/release when there is one (the dependencies are
# mostly the same, so only what changed is compiled), and is removed once
# the image is built. Runs under `nice`: it is a long build on a shared machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT=$PWD
CACHE_ROOT=${SIGIL_UPGRADE_CACHE:-$REPO_ROOT/.cache/upgrade}
# What the default looks for: the CRDs and the snapshot format.
FORMAT_PATHS=(charts/sigil/crds crates/sigil-api/src/snapshot.rs crates/sigil-api/src/snapshot)

log() { printf 'previous-release: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

default_ref() {
  local last
  last=$(git log -1 --format=%H -- "${FORMAT_PATHS[@]}")
  [[ -n $last ]] || die "no commit changed ${FORMAT_PATHS[*]}"
  git rev-parse --verify "$last^"
}

if [[ ${1:-} == --default-ref ]]; then
  default_ref
  exit 0
fi
ref=${1:-$(default_ref)}
commit=$(git rev-parse --verify "$ref^{commit}") || die "$ref is not a commit of this repository"
dir=$CACHE_ROOT/$commit
if [[ -f $dir/digest && -d $dir/oci && -f $dir/chart/sigil/Chart.yaml ]]; then
  log "cached: $dir ($(git log -1 --format='%h %cs %s' "$commit" | cut -c1-100))"
  printf '%s\n' "$dir"
  exit 0
fi
log "building $commit ($(git log -1 --format='%h %cs %s' "$commit" | cut -c1-100)) into $dir"
rm -rf -- "$dir"
mkdir -p "$dir/src" "$dir/chart"
git archive "$commit" | tar -x -C "$dir/src"
target=$dir/target
if [[ -d $REPO_ROOT/target/release ]]; then
  mkdir -p "$target"
  cp -a --reflink=auto "$REPO_ROOT/target/release" "$target/release"
fi
start=$SECONDS
# Its own scripts, its own chart's appVersion; the commit's time for a
# reproducible image (the archive has no git history to read it from).
(cd "$dir/src" && CARGO_TARGET_DIR=$target SOURCE_DATE_EPOCH=$(git -C "$REPO_ROOT" log -1 --format=%ct "$commit") \
  SIGIL_DEB_CACHE=${SIGIL_DEB_CACHE:-$REPO_ROOT/.cache/debs} \
  nice make --no-print-directory image) >"$dir/build.log" 2>&1 ||
  { tail -n 30 "$dir/build.log" >&2; die "make image of $commit failed (log: $dir/build.log)"; }
cp -R "$target/oci/sigil" "$dir/oci"
cp "$target/oci/sigil.digest" "$dir/digest"
cp -R "$dir/src/charts/sigil" "$dir/chart/sigil"
printf '%s\n' "$commit" >"$dir/commit"
rm -rf -- "$target" "$dir/src"
log "built $commit in $((SECONDS - start)) s: image $(cat "$dir/digest")"
printf '%s\n' "$dir"
