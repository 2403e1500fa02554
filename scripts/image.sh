#!/usr/bin/env bash
# make image: sigil's container image without a container engine.
#
# The release binaries (sigil-webhook, sigil-controller, sigil) on a runtime
# base made of Debian's libc6, libgcc-s1 and ca-certificates (the distroless/cc
# idea: glibc, the GCC runtime, CA certificates, no shell, no package
# manager; /etc/os-release from base-files so scanners know the distribution),
# user 65532, the entrypoint, paths and labels of the Dockerfile. Written as
# an OCI layout by scripts/oci-image.py; reproducible (see that script).
#
# Usage: scripts/image.sh [--push REPOSITORY[:TAG]] [--insecure] [--out DIR] [--no-build]
#   --push       also push it (crane) and check the registry has the same digest;
#                without a tag, the tag is the chart's appVersion
#   --insecure   plain HTTP to the registry (a local one not on 127.0.0.1)
#   --out        layout directory (default target/oci/sigil)
#   --no-build   use the release binaries already in target/release
# Prints REPOSITORY@DIGEST when pushing, else the manifest digest; writes
# the digest to DIR.digest too.
# Environment: SOURCE_DATE_EPOCH (default: the last commit's time, else 0);
# CARGO_TARGET_DIR.
set -euo pipefail

REPO=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
TARGET=${CARGO_TARGET_DIR:-$REPO/target}

# What the Dockerfile says; scripts/image-check.sh fails when they disagree.
BINARIES=(sigil-webhook sigil-controller sigil)
BIN_DIR=/usr/local/bin
USER_ID=65532:65532
ENTRYPOINT='["/usr/local/bin/sigil"]'
LABELS=(
    "org.opencontainers.image.title=sigil"
    "org.opencontainers.image.description=Kubernetes admission for Sigstore-signed images"
    "org.opencontainers.image.source=https://github.com/sigil-dev/sigil"
    "org.opencontainers.image.licenses=Apache-2.0"
)
# The runtime base: packages whole, and three metadata files of base-files.
BASE_PACKAGES=(libc6 libgcc-s1 ca-certificates)
OS_RELEASE_FILES=/etc/os-release,/usr/lib/os-release,/etc/debian_version

log() { printf 'image: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

push="" insecure=() out=$TARGET/oci/sigil build=1
while (($#)); do
    case $1 in
        --push) push=${2:?--push needs REPOSITORY[:TAG]}; shift ;;
        --insecure) insecure=(--insecure) ;;
        --out) out=${2:?--out needs a directory}; shift ;;
        --no-build) build=0 ;;
        -h | --help) sed -n '11,19s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
    shift
done

start=$SECONDS
if ((build)); then
    log "cargo build --release (${BINARIES[*]})"
    cargo build --release --locked -p sigil-webhook -p sigil-controller -p sigil-cli >&2
fi
files=()
for b in "${BINARIES[@]}"; do
    [[ -x $TARGET/release/$b ]] || die "$TARGET/release/$b is missing; run without --no-build"
    files+=(--file "$TARGET/release/$b:$BIN_DIR/$b:0755")
done

mapfile -t debs < <(scripts/fetch-debs.sh "${BASE_PACKAGES[@]}" base-files)
((${#debs[@]} == ${#BASE_PACKAGES[@]} + 1)) || die "scripts/fetch-debs.sh did not give every package"
deb_args=()
for ((i = 0; i < ${#BASE_PACKAGES[@]}; i++)); do deb_args+=(--deb "${debs[i]}"); done
deb_args+=(--deb "${debs[-1]}=$OS_RELEASE_FILES")

if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
    SOURCE_DATE_EPOCH=$(git -C "$REPO" log -1 --format=%ct 2>/dev/null || echo 0)
fi
export SOURCE_DATE_EPOCH
version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/sigil/Chart.yaml)
[[ -n $version ]] || die "no appVersion in charts/sigil/Chart.yaml"

label_args=()
for l in "${LABELS[@]}"; do label_args+=(--label "$l"); done
mkdir -p -- "$(dirname -- "$out")"
digest=$(python3 scripts/oci-image.py --out "$out" --tag "$version" \
    "${deb_args[@]}" --ca-bundle --users "${files[@]}" \
    --user "$USER_ID" --entrypoint "$ENTRYPOINT" \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    "${label_args[@]}")
printf '%s\n' "$digest" >"$out.digest"
log "built $out ($digest) in $((SECONDS - start)) s"

if [[ -z $push ]]; then
    printf '%s\n' "$digest"
    exit 0
fi
repository=$push
last=${push##*/}
if [[ $last != *:* ]]; then
    push="$push:$version"
else
    repository=${push%:*}
fi
PATH="$(scripts/install-tools.sh crane):$PATH"
crane push "${insecure[@]}" "$out" "$push" >&2 || die "crane push $out $push failed"
remote=$(crane digest "${insecure[@]}" "$push") || die "crane digest $push failed after the push"
[[ $remote == "$digest" ]] || die "the registry has $remote for $push, not the built $digest"
log "pushed $push ($digest)"
printf '%s@%s\n' "$repository" "$digest"
