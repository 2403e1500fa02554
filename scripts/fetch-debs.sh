#!/usr/bin/env bash
# Downloads Debian packages (the .deb archives, not installed) into a cache and
# prints each one's path on stdout, in the order given. The image builder
# (scripts/oci-image.py) assembles image bases from them.
#
# Usage: scripts/fetch-debs.sh PACKAGE[=VERSION]...
# Cache: ${SIGIL_DEB_CACHE:-<repo>/.cache/debs}. A package whose candidate (or
# pinned) version is already there is not downloaded again; apt's package
# lists are updated once when apt does not know the package or version.
set -euo pipefail

REPO=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${SIGIL_DEB_CACHE:-$REPO/.cache/debs}

log() { printf 'fetch-debs: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

(($#)) || { sed -n '6,7s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2; }
command -v apt-get >/dev/null 2>&1 || die "apt-get is missing: this needs a Debian system (the image base is made of Debian packages)"

# The version apt would download for NAME (or VERSION, if apt has it).
version_of() {
    local name=$1 want=$2
    if [[ -n $want ]]; then
        apt-cache show "$name=$want" >/dev/null 2>&1 && printf '%s\n' "$want"
    else
        apt-cache policy "$name" 2>/dev/null | awk '/Candidate:/ {print $2}' | grep -v '(none)'
    fi
}

# A file named as apt names it: NAME_VERSION_ARCH.deb, ':' as %3a.
cached() {
    local name=$1 version=$2 f
    for f in "$CACHE/${name}_${version//:/%3a}_"*.deb; do
        [[ -f $f ]] && { printf '%s\n' "$f"; return 0; }
    done
    return 1
}

mkdir -p -- "$CACHE"
# apt drops privileges to _apt for downloads; let it write here.
chmod 0777 -- "$CACHE" 2>/dev/null || true
updated=0
for spec in "$@"; do
    name=${spec%%=*}
    want=""
    [[ $spec == *=* ]] && want=${spec#*=}
    version=$(version_of "$name" "$want" || true)
    if [[ -z $version ]] && ((updated == 0)); then
        log "apt does not know $spec yet; apt-get update"
        apt-get update >&2 || die "apt-get update failed"
        updated=1
        version=$(version_of "$name" "$want" || true)
    fi
    [[ -n $version ]] || die "no version of $spec in apt's package lists (apt-cache policy $name)"
    if ! path=$(cached "$name" "$version"); then
        log "downloading $name=$version"
        (cd "$CACHE" && apt-get download "$name=$version" >&2) ||
            die "apt-get download $name=$version failed"
        path=$(cached "$name" "$version") || die "apt-get download left no ${name}_${version}_*.deb in $CACHE"
    fi
    printf '%s\n' "$path"
done
