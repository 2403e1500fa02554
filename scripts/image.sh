#!/usr/bin/env bash
# make image: sigil's container image without a container engine.
#
# The release binaries (sigil-webhook, sigil-audit, sigil-controller, sigil) and the CUE
# module (/usr/local/lib/sigil/cue.wasm, scripts/build-cue-wasm.sh) on a
# runtime base made of Debian's libc6, libgcc-s1 and ca-certificates (the
# distroless/cc idea: glibc, the GCC runtime, CA certificates, no shell, no
# package manager; /etc/os-release from base-files so scanners know the
# distribution), user 65532, the entrypoint, paths and labels of the
# Dockerfile. Written as an OCI layout by scripts/oci-image.py; reproducible
# (see that script).
#
# Usage: scripts/image.sh [--fips] [--push REPOSITORY[:TAG]] [--insecure] [--out DIR] [--no-build]
#   --fips       the FIPS variant: binaries of `make release-fips` (AWS-LC's
#                FIPS 140-3 module; target/fips/release), layout
#                target/oci/sigil-fips, tag <appVersion>-fips
#   --push       also push it (crane) and check the registry has the same digest;
#                without a tag, the tag is the chart's appVersion
#   --insecure   plain HTTP to the registry (a local one not on 127.0.0.1)
#   --out        layout directory (default target/oci/sigil)
#   --no-build   use the release binaries already built
# Prints REPOSITORY@DIGEST when pushing, else the manifest digest; writes
# the digest to DIR.digest too, the size to DIR.size (scripts/oci-size.py),
# and the binaries' symbols to DIR.debug/BINARY.debug (the image's binaries
# are stripped; OBJCOPY names binutils' objcopy).
# Environment: SOURCE_DATE_EPOCH (default: the last commit's time, else 0);
# CARGO_TARGET_DIR; FIPS_TARGET_DIR (default $CARGO_TARGET_DIR/fips);
# SIGIL_CUE_MODULE (a built cue.wasm; default: scripts/build-cue-wasm.sh's).
set -euo pipefail

REPO=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
TARGET=${CARGO_TARGET_DIR:-$REPO/target}

# What the Dockerfile says; scripts/image-check.sh fails when they disagree.
BINARIES=(sigil-webhook sigil-audit sigil-controller sigil)
BIN_DIR=/usr/local/bin
# Where the binaries look for the CUE module (sigil-cue's MODULE_RELATIVE_TO_BINARY).
CUE_MODULE_PATH=/usr/local/lib/sigil/cue.wasm
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

push="" insecure=() out="" build=1 fips=0
while (($#)); do
    case $1 in
        --fips) fips=1 ;;
        --push) push=${2:?--push needs REPOSITORY[:TAG]}; shift ;;
        --insecure) insecure=(--insecure) ;;
        --out) out=${2:?--out needs a directory}; shift ;;
        --no-build) build=0 ;;
        -h | --help) sed -n '13,27s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
    shift
done

# The FIPS variant differs only in its binaries (and tag, layout and one
# label saying so); the base and every path are the same.
bin_dir=$TARGET/release name=sigil tag_suffix="" extra_labels=()
if ((fips)); then
    bin_dir=${FIPS_TARGET_DIR:-$TARGET/fips}/release name=sigil-fips tag_suffix=-fips
    extra_labels=(--label "dev.sigil.crypto-module=AWS-LC FIPS 140-3")
fi
[[ -n $out ]] || out=$TARGET/oci/$name

start=$SECONDS
if ((build)); then
    if ((fips)); then
        log "make release-fips (${BINARIES[*]} with AWS-LC's FIPS module)"
        make --no-print-directory release-fips FIPS_TARGET_DIR="${bin_dir%/release}" >&2
    else
        log "cargo build --release (${BINARIES[*]})"
        cargo build --release --locked -p sigil-webhook -p sigil-audit -p sigil-controller -p sigil-cli >&2
    fi
fi
# The image carries the binaries stripped of their symbol tables; the
# symbols go to $out.debug/BINARY.debug, which the release publishes beside
# the image, and each stripped binary names its file and checksum
# (.gnu_debuglink), so gdb or a symbolizer finds them for a backtrace.
OBJCOPY=${OBJCOPY:-objcopy}
command -v "$OBJCOPY" >/dev/null || die "no $OBJCOPY (binutils) to strip the binaries with"
debug_dir=$out.debug
rm -rf -- "$debug_dir"
mkdir -p -- "$debug_dir/stripped"
files=()
for b in "${BINARIES[@]}"; do
    [[ -x $bin_dir/$b ]] || die "$bin_dir/$b is missing; run without --no-build"
    "$OBJCOPY" --only-keep-debug "$bin_dir/$b" "$debug_dir/$b.debug" ||
        die "$OBJCOPY --only-keep-debug $bin_dir/$b failed"
    # --add-gnu-debuglink reads the file by the path given and records only
    # its name, so the link is the same wherever the image is built.
    (cd -- "$debug_dir" && "$OBJCOPY" --strip-all --add-gnu-debuglink="$b.debug" \
        "$bin_dir/$b" "stripped/$b") || die "$OBJCOPY --strip-all $bin_dir/$b failed"
    files+=(--file "$debug_dir/stripped/$b:$BIN_DIR/$b:0755")
done
if ((fips)); then
    # A FIPS image whose binaries are not FIPS builds would be a lie on the label.
    module=$("$bin_dir/sigil" --version 2>&1 | sed -n 's/^crypto: //p')
    [[ $module == *"(FIPS 140-3 module, FIPS mode)" ]] ||
        die "$bin_dir/sigil does not report FIPS mode (crypto: ${module:-none}); rebuild with make release-fips"
fi
# CUE policies are evaluated by a WebAssembly module the binaries find
# beside them; without it every `type: cue` policy would deny.
cue=${SIGIL_CUE_MODULE:-}
if [[ -z $cue ]]; then
    cue=$(scripts/build-cue-wasm.sh) || die "scripts/build-cue-wasm.sh could not build the CUE module"
fi
[[ -f $cue ]] || die "the CUE module $cue does not exist (SIGIL_CUE_MODULE, or scripts/build-cue-wasm.sh)"
files+=(--file "$cue:$CUE_MODULE_PATH:0644")

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
label_args+=("${extra_labels[@]}")
mkdir -p -- "$(dirname -- "$out")"
digest=$(python3 scripts/oci-image.py --out "$out" --tag "$version$tag_suffix" \
    "${deb_args[@]}" --ca-bundle --users "${files[@]}" \
    --user "$USER_ID" --entrypoint "$ENTRYPOINT" \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    "${label_args[@]}")
printf '%s\n' "$digest" >"$out.digest"
python3 scripts/oci-size.py "$out" >"$out.size" || die "measuring $out failed"
log "built $out ($digest) in $((SECONDS - start)) s"

if [[ -z $push ]]; then
    printf '%s\n' "$digest"
    exit 0
fi
repository=$push
last=${push##*/}
if [[ $last != *:* ]]; then
    push="$push:$version$tag_suffix"
else
    repository=${push%:*}
fi
PATH="$(scripts/install-tools.sh crane):$PATH"
crane push "${insecure[@]}" "$out" "$push" >&2 || die "crane push $out $push failed"
remote=$(crane digest "${insecure[@]}" "$push") || die "crane digest $push failed after the push"
[[ $remote == "$digest" ]] || die "the registry has $remote for $push, not the built $digest"
log "pushed $push ($digest)"
printf '%s@%s\n' "$repository" "$digest"
