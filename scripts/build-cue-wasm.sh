#!/usr/bin/env bash
# Builds sigil's CUE evaluator, crates/sigil-cue/guest (cuelang.org/go compiled
# by standard Go for GOOS=wasip1 GOARCH=wasm), into a cache directory and
# prints the module's path on stdout; everything else goes to stderr, so
#   SIGIL_CUE_MODULE="$(scripts/build-cue-wasm.sh)"
# works. Re-running is cheap: when the stamp (guest sources and Go version)
# matches, nothing is built.
#
# Usage: scripts/build-cue-wasm.sh [--check | --modules]
#   --check    only report; exit 1 when the module is missing or stale
#   --modules  print the Go modules linked into it, `MODULE VERSION` per line
#              (for the image's SBOM, scripts/sbom.py --go-modules)
# Output: ${SIGIL_CUE_DIR:-<repo>/.cache/cue}/sigil-cue.wasm, its .sha256 and a stamp.
# The container image ships the same file as /usr/local/lib/sigil/cue.wasm.
set -euo pipefail

REPO=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
GUEST=$REPO/crates/sigil-cue/guest
OUT_DIR=${SIGIL_CUE_DIR:-$REPO/.cache/cue}
MODULE=$OUT_DIR/sigil-cue.wasm
STAMP=$OUT_DIR/stamp

log() { printf 'build-cue-wasm: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

check_only=false
case ${1:-} in
    "") ;;
    --check) check_only=true ;;
    --modules)
        # What the linker takes, not the whole module graph: the packages of
        # the wasip1 build and the modules they come from.
        cd "$GUEST"
        GOOS=wasip1 GOARCH=wasm GOTOOLCHAIN=local GOFLAGS=-mod=readonly \
            go list -deps -f '{{with .Module}}{{if .Version}}{{.Path}} {{.Version}}{{end}}{{end}}' . | sort -u
        exit 0
        ;;
    *) sed -n '9,13s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
esac

command -v go >/dev/null 2>&1 ||
    die "'go' is not on PATH; sigil's CUE evaluator is built with Go 1.25 or newer (https://go.dev/dl)"

# What the module is built from: every guest source and the toolchain.
want_stamp() {
    (
        cd "$GUEST"
        sha256sum go.mod go.sum ./*.go
        printf 'go %s\n' "$(GOTOOLCHAIN=local go env GOVERSION)"
    )
}

is_current() {
    [[ -f $MODULE && -f $STAMP ]] && [[ "$(<"$STAMP")" == "$(want_stamp)" ]]
}

if $check_only; then
    if is_current; then
        printf '%s\n' "$MODULE"
        exit 0
    fi
    log "$MODULE is missing or older than $GUEST; run scripts/build-cue-wasm.sh"
    exit 1
fi

mkdir -p "$OUT_DIR"
# Tests of several crates may ask for the module at once.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$OUT_DIR/.lock"
    flock 9
fi

if is_current; then
    log "$MODULE: up to date"
    printf '%s\n' "$MODULE"
    exit 0
fi

log "building $MODULE with $(GOTOOLCHAIN=local go env GOVERSION) (cuelang.org/go from $GUEST/go.mod)"
tmp=$(mktemp "$OUT_DIR/sigil-cue.wasm.XXXXXX")
# shellcheck disable=SC2064  # expand now: $tmp is set
trap "rm -f -- '$tmp'" EXIT
# -trimpath and an empty build ID make the module depend on the sources and
# the Go version only (two builds give the same sha256). GOTOOLCHAIN=local:
# never fetch another Go; GOFLAGS=-mod=readonly: go.sum must already list
# every module.
(
    cd "$GUEST"
    GOOS=wasip1 GOARCH=wasm GOTOOLCHAIN=local GOFLAGS=-mod=readonly \
        go build -trimpath -buildmode=c-shared -ldflags='-s -w -buildid=' -o "$tmp" .
)
mv -f -- "$tmp" "$MODULE"
trap - EXIT
(cd "$OUT_DIR" && sha256sum sigil-cue.wasm >sigil-cue.wasm.sha256)
want_stamp >"$STAMP"
log "built $MODULE ($(wc -c <"$MODULE") bytes, sha256 $(cut -d' ' -f1 "$MODULE.sha256"))"
printf '%s\n' "$MODULE"
