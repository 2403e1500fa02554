#!/usr/bin/env bash
# Builds the local Kubernetes cluster that sigil's e2e suite runs against
# (etcd, kube-apiserver, kube-controller-manager, kubectl, and for the node
# kube-scheduler, kubelet, kube-proxy and cri-reset) from the Go module proxy
# into the tool cache, and prints that cache's bin/ directory on stdout.
# Everything else goes to stderr, so
#   PATH="$(e2e/cluster/build.sh):$PATH"
# works. Re-running is cheap: nothing is rebuilt while the version stamp (a hash
# of this script, go.mod, go.sum and cmd/, plus the Go version) matches.
#
# Usage: e2e/cluster/build.sh [--force]
# Cache: ${SIGIL_TOOLS_DIR:-<repo>/.cache/tools}, as scripts/install-tools.sh.
set -euo pipefail

HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd -- "$HERE/../.." && pwd)
TOOLS_DIR=${SIGIL_TOOLS_DIR:-$REPO/.cache/tools}
BIN=$TOOLS_DIR/bin
STAMPS=$TOOLS_DIR/stamps
STAMP_NAME=k8s-cluster
WORK=""   # the build's scratch directory, removed on exit

BINARIES=(etcd cri-reset kube-apiserver kube-controller-manager kubectl kube-scheduler kubelet kube-proxy)
# Built from the dependency graph of this module; etcd and cri-reset are local.
PACKAGES=(
    ./cmd/etcd
    ./cmd/cri-reset
    k8s.io/kubernetes/cmd/kube-apiserver
    k8s.io/kubernetes/cmd/kube-controller-manager
    k8s.io/kubernetes/cmd/kubectl
    k8s.io/kubernetes/cmd/kube-scheduler
    k8s.io/kubernetes/cmd/kubelet
    k8s.io/kubernetes/cmd/kube-proxy
)

log() { printf 'cluster-build: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    sed -n '11,12s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
}

# Go as the repository pins it: never fetch another toolchain, never touch go.mod.
gorun() {
    (cd "$HERE" && GOTOOLCHAIN=local GOFLAGS="$(go env GOFLAGS) -mod=readonly" "$@")
}

module_version() {
    gorun go list -m -f '{{.Version}}' "$1"
}

# What a build is made of. Any change to these inputs must rebuild.
wanted_stamp() {
    local sources
    sources=$(cd "$HERE" && find build.sh go.mod go.sum cmd -type f -print0 | sort -z |
        xargs -0 sha256sum | sha256sum | cut -c1-16)
    printf 'kubernetes@%s etcd@%s inputs=%s %s\n' \
        "$(module_version k8s.io/kubernetes)" \
        "$(module_version go.etcd.io/etcd/server/v3)" \
        "$sources" "$(go env GOVERSION)"
}

is_current() {
    local want=$1 b
    [[ -f $STAMPS/$STAMP_NAME && "$(<"$STAMPS/$STAMP_NAME")" == "$want" ]] || return 1
    for b in "${BINARIES[@]}"; do
        [[ -x $BIN/$b ]] || return 1
    done
}

# kubectl and the servers report this version (kubectl version, /version);
# without it they say v0.0.0-master, and kubectl warns about version skew.
version_ldflags() {
    local v=$1 major minor pkg key val flags=()
    major=${v#v}; major=${major%%.*}
    minor=${v#v"$major".}; minor=${minor%%.*}
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        for key in gitVersion gitMajor gitMinor gitTreeState; do
            case $key in
                gitVersion) val=$v ;;
                gitMajor) val=$major ;;
                gitMinor) val=$minor ;;
                gitTreeState) val=clean ;;
            esac
            flags+=("-X $pkg.$key=$val")
        done
    done
    printf '%s ' "${flags[@]}"
}

build() {
    local want=$1 k8s_version start
    k8s_version=$(module_version k8s.io/kubernetes)
    WORK=$(mktemp -d "$TOOLS_DIR/cluster-build.XXXXXX")
    # Removes the half-built output whatever way the build ends.
    trap 'rm -rf -- "$WORK"' EXIT
    log "building ${BINARIES[*]} (kubernetes $k8s_version); a cold build takes tens of minutes"
    start=$SECONDS
    # nice: the machine is shared with the other builds of the project.
    # -buildvcs=false: the binaries say which Kubernetes they are (ldflags), not
    # which sigil commit built them, and a checkout without git still builds.
    gorun nice -n 10 go build -trimpath -buildvcs=false \
        -ldflags "-s -w $(version_ldflags "$k8s_version")" \
        -o "$WORK/" "${PACKAGES[@]}" || die "go build failed"
    local b
    for b in "${BINARIES[@]}"; do
        [[ -x $WORK/$b ]] || die "the build produced no $b"
    done
    for b in "${BINARIES[@]}"; do
        mv -f -- "$WORK/$b" "$BIN/$b"
    done
    printf '%s\n' "$want" >"$STAMPS/$STAMP_NAME"
    log "built in $((SECONDS - start))s"
}

main() {
    local force=0
    while (($#)); do
        case $1 in
            -h | --help) usage; exit 0 ;;
            --force) force=1 ;;
            *) usage; die "unknown argument: $1" ;;
        esac
        shift
    done
    command -v go >/dev/null 2>&1 || die "'go' is not on PATH; install Go 1.26 or newer"

    mkdir -p -- "$BIN" "$STAMPS"
    # Two builds at once (parallel test jobs) would race on the same outputs.
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$TOOLS_DIR/.cluster-build.lock"
        flock 9
    fi

    local want
    want=$(wanted_stamp)
    if ((force == 0)) && is_current "$want"; then
        log "up to date ($want)"
    else
        build "$want"
    fi
    printf '%s\n' "$BIN"
}

main "$@"
