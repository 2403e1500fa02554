#!/usr/bin/env bash
# A peer's container image, built like sigil's (scripts/oci-image.py, no
# container engine) from the binaries bench/peers/build.sh made.
#
# The layout follows ko, which both projects release with: the binary at
# /ko-app/NAME as the entrypoint, the command's kodata (Kyverno's LICENSE and
# NOTICE) at /var/run/ko with KO_DATA_PATH pointing there. The base is the
# Debian equivalent of their static bases: CA certificates, /etc/passwd with
# nonroot, os-release; no libc (the binaries are static), no shell. User 65532.
#
# Usage: bench/peers/image.sh IMAGE LAYOUT-DIR [--push REPOSITORY:TAG]
#   IMAGE: policy-controller (cmd/webhook), kyverno, kyvernopre (cmd/kyverno-init)
# Prints REPOSITORY@DIGEST when pushing (plain HTTP: a local registry), else
# the digest. Writes LAYOUT-DIR.size: "<compressed bytes> <unpacked bytes>"
# (the layers' blobs, and the files in them; scripts/oci-size.py), as for sigil's image.
set -euo pipefail
HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd -- "$HERE/../.." && pwd)
PEERS_BIN=${SIGIL_PEERS_DIR:-$REPO/.cache/peers}/bin

log() { printf 'peer-image: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

(($# >= 2)) || { sed -n '11,12s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2; }
image=$1 out=$2
shift 2
push=""
while (($#)); do
    case $1 in
        --push) push=${2:?--push needs REPOSITORY:TAG}; shift ;;
        *) die "unknown argument: $1" ;;
    esac
    shift
done

case $image in
    policy-controller) bin=policy-controller-webhook app=webhook kodata="" version_of=policy-controller ;;
    kyverno) bin=kyverno app=kyverno kodata=cmd/kyverno/kodata version_of=kyverno ;;
    kyvernopre) bin=kyvernopre app=kyverno-init kodata=cmd/kyverno-init/kodata version_of=kyverno ;;
    *) die "unknown image $image (policy-controller, kyverno or kyvernopre)" ;;
esac
[[ -x $PEERS_BIN/$bin ]] || die "$PEERS_BIN/$bin is missing: run bench/peers/build.sh first"

# The module's source (for kodata and the version label), from the wrapper module.
module_dir() {
    (cd "$HERE/$version_of" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' "$1")
}
case $version_of in
    policy-controller) module=github.com/sigstore/policy-controller ;;
    kyverno) module=github.com/kyverno/kyverno ;;
esac
version=$(cd "$HERE/$version_of" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly go list -m -f '{{.Version}}' "$module") ||
    die "the wrapper module $HERE/$version_of does not resolve $module (go mod download)"

files=(--file "$PEERS_BIN/$bin:/ko-app/$app:0755")
if [[ -n $kodata ]]; then
    src=$(module_dir "$module") || die "cannot locate $module's source"
    for f in "$src/$kodata"/*; do
        [[ -f $f ]] && files+=(--file "$f:/var/run/ko/$(basename -- "$f"):0644")
    done
fi

mapfile -t debs < <("$REPO/scripts/fetch-debs.sh" ca-certificates base-files)
((${#debs[@]} == 2)) || die "scripts/fetch-debs.sh did not give ca-certificates and base-files"

export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-0}
mkdir -p -- "$(dirname -- "$out")"
# ca-certificates whole, as sigil's base has it (--ca-bundle is made from its
# certificates); base-files only for os-release.
digest=$(python3 "$REPO/scripts/oci-image.py" --out "$out" --tag "$version" \
    --deb "${debs[0]}" \
    --deb "${debs[1]}=/etc/os-release,/usr/lib/os-release,/etc/debian_version" \
    --ca-bundle --users "${files[@]}" \
    --user 65532:65532 --entrypoint "[\"/ko-app/$app\"]" \
    --env KO_DATA_PATH=/var/run/ko \
    --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    --label "org.opencontainers.image.title=$image" \
    --label "org.opencontainers.image.version=$version" \
    --label "org.opencontainers.image.source=https://$module") || die "building the $image image failed"

python3 "$REPO/scripts/oci-size.py" "$out" >"$out.size" || die "measuring $out failed"
read -r compressed unpacked <"$out.size"
log "$image $version: $digest, $compressed bytes compressed, $unpacked bytes unpacked"

if [[ -z $push ]]; then
    printf '%s\n' "$digest"
    exit 0
fi
crane=$("$REPO/scripts/install-tools.sh" crane)/crane
"$crane" push --insecure "$out" "$push" >/dev/null 2>&1 || die "crane push $out $push failed"
remote=$("$crane" digest --insecure "$push") || die "crane digest $push failed after the push"
[[ $remote == "$digest" ]] || die "the registry has $remote for $push, not the built $digest"
printf '%s@%s\n' "${push%:*}" "$digest"
