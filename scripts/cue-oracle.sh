#!/usr/bin/env bash
# The CUE oracle (`make cue-oracle`): installs the `cue` command from the Go
# module proxy at the cuelang.org/go release sigil's evaluator is built from,
# and runs `cue vet -c=false` on every case of crates/sigil-cue/tests/corpus,
# failing when a verdict differs from the one the corpus records (which the
# corpus test in `make test` holds sigil to). So the recorded expectations
# cannot drift from what `cue vet` says.
#
# Usage: scripts/cue-oracle.sh [--write]
#   --write  record what `cue vet` says in the cases' case.json instead of failing
# Cache: the cue binary goes to ${SIGIL_TOOLS_DIR:-<repo>/.cache/tools}/bin.
set -euo pipefail

REPO=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS_DIR=${SIGIL_TOOLS_DIR:-$REPO/.cache/tools}
BIN=$TOOLS_DIR/bin
STAMPS=$TOOLS_DIR/stamps

log() { printf 'cue-oracle: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

write=0
case ${1:-} in
    "") ;;
    --write) write=1 ;;
    *) sed -n '9,10s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
esac

command -v go >/dev/null 2>&1 || die "'go' is not on PATH; the oracle installs cue with Go"
# The release the guest module requires (crates/sigil-cue/guest/go.mod).
version=$(sed -n 's/^require cuelang.org\/go \(v[^ ]*\)$/\1/p' "$REPO/crates/sigil-cue/guest/go.mod")
[[ -n $version ]] || die "no 'require cuelang.org/go vX' line in crates/sigil-cue/guest/go.mod"

mkdir -p "$BIN" "$STAMPS"
want="cuelang.org/go/cmd/cue@$version $(GOTOOLCHAIN=local go env GOVERSION)"
if [[ -x $BIN/cue && -f $STAMPS/cue && "$(<"$STAMPS/cue")" == "$want" ]]; then
    log "cue $version: up to date"
else
    log "cue $version: go install cuelang.org/go/cmd/cue@$version"
    GOBIN=$BIN GOFLAGS="$(go env GOFLAGS) -trimpath" GOTOOLCHAIN=local \
        go install "cuelang.org/go/cmd/cue@$version"
    printf '%s\n' "$want" >"$STAMPS/cue"
fi

cd "$REPO"
SIGIL_CUE_VET=$BIN/cue SIGIL_CUE_ORACLE_WRITE=$write \
    cargo test -p sigil-cue --test corpus -- --ignored --nocapture cue_vet_still_gives_the_recorded_verdicts
