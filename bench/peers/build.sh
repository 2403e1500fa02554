#!/usr/bin/env bash
# Builds the peers sigil is benchmarked against (policy-controller and Kyverno)
# and Kyverno's command line (for bench/kyverno-differential.sh) from the Go
# module proxy, each through its wrapper module in this directory,
# into the peers cache, and prints that cache's bin/ directory on stdout.
# Everything else goes to stderr, so
#   PATH="$(bench/peers/build.sh):$PATH"
# works. Re-running is cheap: a peer is not rebuilt while its stamp (the module
# version, a hash of this script and its wrapper module, and the Go version)
# matches. Each build's wall time and binary sizes go to <cache>/build-report.tsv.
#
# Usage: bench/peers/build.sh [--force] [policy-controller|kyverno|kyverno-cli ...]
#        (without a peer: policy-controller and kyverno)
# Cache: ${SIGIL_PEERS_DIR:-<repo>/.cache/peers}
set -euo pipefail

HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd -- "$HERE/../.." && pwd)
CACHE=${SIGIL_PEERS_DIR:-$REPO/.cache/peers}
BIN=$CACHE/bin
STAMPS=$CACHE/stamps
REPORT=$CACHE/build-report.tsv
WORK=""   # the running build's scratch directory, removed on exit

ALL_PEERS=(policy-controller kyverno)

log() { printf 'peers-build: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    sed -n '12,14s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
}

# The module each peer is, and the packages built from it, as "output=package".
peer_module() {
    case $1 in
        policy-controller) echo github.com/sigstore/policy-controller ;;
        kyverno | kyverno-cli) echo github.com/kyverno/kyverno ;;
        *) return 1 ;;
    esac
}

peer_packages() {
    local m
    m=$(peer_module "$1")
    case $1 in
        # policy-tester is what policy-controller's release calls cmd/tester.
        policy-controller) printf '%s\n' "policy-controller-webhook=$m/cmd/webhook" "policy-tester=$m/cmd/tester" ;;
        kyverno) printf '%s\n' "kyverno=$m/cmd/kyverno" "kyvernopre=$m/cmd/kyverno-init" ;;
        # Released as `kyverno`, a name the admission controller has here.
        kyverno-cli) printf '%s\n' "kyverno-cli=$m/cmd/cli/kubectl-kyverno" ;;
    esac
}

# The version variables each project's own release build sets.
peer_ldflags() {
    local v=$2
    case $1 in
        policy-controller) printf '%s' "-X sigs.k8s.io/release-utils/version.gitVersion=$v -X sigs.k8s.io/release-utils/version.gitTreeState=clean" ;;
        kyverno | kyverno-cli) printf '%s' "-X github.com/kyverno/kyverno/pkg/version.BuildVersion=$v" ;;
    esac
}

# Go as the wrapper module pins it: never fetch another toolchain, never touch go.mod.
gorun() {
    local dir=$1
    shift
    (cd "$dir" && GOTOOLCHAIN=local GOFLAGS="$(go env GOFLAGS) -mod=readonly" "$@")
}

module_version() {
    gorun "$HERE/$1" go list -m -f '{{.Version}}' "$(peer_module "$1")"
}

wanted_stamp() {
    local peer=$1 sources
    sources=$(cd "$HERE" && find build.sh "$peer" -type f -print0 | sort -z |
        xargs -0 sha256sum | sha256sum | cut -c1-16)
    printf '%s@%s inputs=%s %s\n' "$peer" "$(module_version "$peer")" "$sources" "$(go env GOVERSION)"
}

is_current() {
    local peer=$1 want=$2 entry
    [[ -f $STAMPS/$peer && "$(<"$STAMPS/$peer")" == "$want" ]] || return 1
    while IFS= read -r entry; do
        [[ -x $BIN/${entry%%=*} ]] || return 1
    done < <(peer_packages "$peer")
}

build_peer() {
    local peer=$1 want=$2 version start entry out pkgs=() outs=() secs sizes=""
    version=$(module_version "$peer")
    while IFS= read -r entry; do
        outs+=("${entry%%=*}")
        pkgs+=("${entry#*=}")
    done < <(peer_packages "$peer")
    WORK=$(mktemp -d "$CACHE/build-$peer.XXXXXX")
    # Removes the half-built output whatever way the build ends.
    trap 'rm -rf -- "$WORK"' EXIT
    log "building $peer $version (${outs[*]}); a cold build takes tens of minutes on two cores"
    start=$SECONDS
    local i
    for i in "${!pkgs[@]}"; do
        # nice: the machine is shared. CGO_ENABLED=0: static binaries, as both
        # projects release them, so the image needs no libc. -s -w: Kyverno's
        # release strips its binaries; policy-controller's is stripped the same
        # way here so that image sizes compare code, not symbol tables.
        gorun "$HERE/$peer" env CGO_ENABLED=0 nice -n 10 go build -trimpath -buildvcs=false \
            -ldflags "-s -w $(peer_ldflags "$peer" "$version")" \
            -o "$WORK/${outs[$i]}" "${pkgs[$i]}" || die "go build of ${pkgs[$i]}@$version failed"
    done
    secs=$((SECONDS - start))
    for out in "${outs[@]}"; do
        [[ -x $WORK/$out ]] || die "the build produced no $out"
    done
    for out in "${outs[@]}"; do
        mv -f -- "$WORK/$out" "$BIN/$out"
        sizes+=" $out=$(stat -c %s "$BIN/$out")"
    done
    rm -rf -- "$WORK"
    trap - EXIT
    printf '%s\n' "$want" >"$STAMPS/$peer"
    printf '%s\t%s\t%s\t%ss\t%s\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$peer" "$version" "$secs" \
        "$(go env GOVERSION)" "${sizes# }" >>"$REPORT"
    log "built $peer in ${secs}s:$sizes (bytes)"
}

main() {
    local force=0 peers=() p
    while (($#)); do
        case $1 in
            -h | --help) usage; exit 0 ;;
            --force) force=1 ;;
            policy-controller | kyverno | kyverno-cli) peers+=("$1") ;;
            *) usage; die "unknown argument: $1 (peers: ${ALL_PEERS[*]})" ;;
        esac
        shift
    done
    ((${#peers[@]})) || peers=("${ALL_PEERS[@]}")
    command -v go >/dev/null 2>&1 || die "'go' is not on PATH; install Go 1.26 or newer"

    mkdir -p -- "$BIN" "$STAMPS"
    # Two builds at once would race on the same outputs.
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$CACHE/.build.lock"
        flock 9
    fi

    local want
    for p in "${peers[@]}"; do
        want=$(wanted_stamp "$p")
        if ((force == 0)) && is_current "$p" "$want"; then
            log "$p up to date ($want)"
        else
            build_peer "$p" "$want"
        fi
    done
    printf '%s\n' "$BIN"
}

main "$@"
