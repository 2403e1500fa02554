#!/usr/bin/env bash
# Makes the public test data that sigil's tests read at run time available,
# without copying it into the repository:
#   sigstore-conformance/bundle-verify   the sigstore-conformance bundle cases
#   policy-controller-testdata           policy-controller's example policies
#   github-trust-policies/charts/trust-policies
#                                        GitHub's chart for its attestations
#   notation-core-go-testdata            notation-core-go's repository (its
#                                        testdata folders: envelopes, CRLs,
#                                        timestamps, X.509 files)
# A data set already present in $SIGIL_SHARED_DIR or in a `shared/` directory
# beside the checkout (or above it) is used as it is. Otherwise it is fetched
# from its upstream repository at the pinned commit into
# <repo>/.cache/testdata/shared, where the tests (crates/sigil-testdata) look.
#
# Usage: scripts/fetch-testdata.sh [--check]
#   --check  only report; exit 1 if a data set is missing
# Environment: SIGIL_TESTDATA_GIT_BASE replaces https://github.com/ in the
# upstream URLs (a mirror, or a local directory of bare repositories).
set -euo pipefail

REPO=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=$REPO/.cache/testdata/shared
GIT_BASE=${SIGIL_TESTDATA_GIT_BASE:-https://github.com/}
FETCH_TIMEOUT=${SIGIL_TESTDATA_TIMEOUT:-300}

# name | upstream repository | commit | folder in that repository
# crates/sigil-testdata/src/lib.rs pins the same values (a test checks).
DATASETS=(
    "sigstore-conformance/bundle-verify|sigstore/sigstore-conformance|a73de4970176d258e0154c530b89d20b89444e4d|test/assets/bundle-verify"
    "policy-controller-testdata|sigstore/policy-controller|f925c0c1a412910787a7f045581fa9d5ed09a20a|test/testdata/policy-controller"
    "github-trust-policies/charts/trust-policies|github/artifact-attestations-helm-charts|d437a7baac41a048fd3da4f841ca2cb0020748cb|charts/trust-policies"
    "notation-core-go-testdata|notaryproject/notation-core-go|ef8789627fc3c764e1563a2999b33381e7992963|."
)

log() { printf 'fetch-testdata: %s\n' "$*" >&2; }

# Prints where NAME already is, if anywhere; same order as sigil-testdata.
present() {
    local name=$1 dir
    if [[ -n ${SIGIL_SHARED_DIR:-} && -d $SIGIL_SHARED_DIR/$name ]]; then
        printf '%s\n' "$SIGIL_SHARED_DIR/$name"
        return 0
    fi
    dir=$REPO
    while :; do
        if [[ -d $dir/shared/$name ]]; then
            printf '%s\n' "$dir/shared/$name"
            return 0
        fi
        [[ $dir == / ]] && break
        dir=$(dirname -- "$dir")
    done
    if [[ -d $CACHE/$name ]]; then
        printf '%s\n' "$CACHE/$name"
        return 0
    fi
    return 1
}

# Fetches one commit's FOLDER of UPSTREAM into $CACHE/NAME, atomically.
fetch() {
    local name=$1 upstream=$2 commit=$3 folder=$4 work url
    url=$GIT_BASE$upstream
    work=$(mktemp -d "${TMPDIR:-/tmp}/sigil-testdata.XXXXXX")
    # shellcheck disable=SC2064  # expand now: $work is local
    trap "rm -rf -- '$work'" RETURN
    log "$name: fetching $url at $commit ($folder)"
    if ! (cd "$work" &&
        git init -q repo &&
        cd repo &&
        timeout "$FETCH_TIMEOUT" git fetch -q --depth 1 "$url" "$commit" &&
        git -c advice.detachedHead=false checkout -q FETCH_HEAD -- "$folder"); then
        log "error: could not fetch $name from $url at commit $commit."
        log "  Fetch it by hand (git clone $url; git checkout $commit; copy $folder to $CACHE/$name),"
        log "  or set SIGIL_SHARED_DIR to a directory holding $name."
        return 1
    fi
    [[ -d $work/repo/$folder ]] || { log "error: $url at $commit has no folder $folder"; return 1; }
    mkdir -p -- "$(dirname -- "$CACHE/$name")"
    rm -rf -- "$CACHE/$name.tmp"
    # A folder of `.` is the whole tree, without git's own directory.
    rm -rf -- "$work/repo/.git"
    mv -- "$work/repo/$folder" "$CACHE/$name.tmp"
    mv -- "$CACHE/$name.tmp" "$CACHE/$name"
    log "$name: $CACHE/$name"
}

main() {
    local check=0 entry name upstream commit folder where missing=0
    case ${1:-} in
        "") ;;
        --check) check=1 ;;
        *) log "usage: scripts/fetch-testdata.sh [--check]"; exit 2 ;;
    esac
    for entry in "${DATASETS[@]}"; do
        IFS='|' read -r name upstream commit folder <<<"$entry"
        if where=$(present "$name"); then
            log "$name: $where"
            continue
        fi
        if ((check)); then
            log "$name: missing (run scripts/fetch-testdata.sh)"
            missing=1
            continue
        fi
        fetch "$name" "$upstream" "$commit" "$folder" || missing=1
    done
    exit "$missing"
}

# Sourced by scripts/test-fetch-testdata.sh for its functions; run otherwise.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    main "$@"
fi
