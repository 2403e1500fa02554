#!/usr/bin/env bash
# The sigil CLI's release archives, as .github/workflows/release.yaml makes
# them and scripts/test-release-cli.sh checks them:
#
#   release-cli.sh pack TAG PLATFORM SIGIL CUE-MODULE OUT-DIR
#       OUT-DIR/sigil-VERSION-PLATFORM.tar.gz (VERSION is TAG without its v):
#       sigil-VERSION-PLATFORM/bin/sigil, lib/sigil/cue.wasm (where sigil
#       looks for its CUE module, beside its binary), README.md, CHANGELOG.md.
#       The binary must say it is VERSION.
#   release-cli.sh manifest TAG DIR
#       DIR/SHA256SUMS of DIR/sigil-*.tar.gz, and DIR/sigil.krew.yaml:
#       deploy/krew/sigil.yaml with TAG and those checksums filled in. Every
#       platform the manifest lists needs its archive.
#
# Signing the archives (cosign sign-blob, keyless) stays in the workflow:
# it needs the workflow's identity.
set -euo pipefail
REPO=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)

die() { printf 'release-cli: error: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '5,14s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2; }

version_of() { # TAG: VERSION, or dies
    case $1 in
        v[0-9]*.[0-9]*.[0-9]*) printf '%s\n' "${1#v}" ;;
        *) die "tag $1 is not vMAJOR.MINOR.PATCH" ;;
    esac
}

pack() {
    (($# == 5)) || usage
    local tag=$1 platform=$2 sigil=$3 cue=$4 out=$5 version name stage said
    version=$(version_of "$tag")
    [[ $platform =~ ^(linux|darwin)-(amd64|arm64)$ ]] || die "platform $platform is not linux|darwin-amd64|arm64"
    [[ -x $sigil ]] || die "no sigil binary at $sigil (make release builds one)"
    [[ -s $cue ]] || die "no CUE module at $cue (scripts/build-cue-wasm.sh)"
    said=$("$sigil" --version 2>&1 | head -n 1) || die "$sigil --version failed: $said"
    [[ $said == "sigil $version" ]] || die "$sigil says '$said', the tag says $version: build the tagged commit"
    name=sigil-$version-$platform
    mkdir -p -- "$out"
    stage=$(mktemp -d "${TMPDIR:-/tmp}/sigil-release-cli.XXXXXX")
    # shellcheck disable=SC2064 # expand now: the trap runs after this function
    trap "rm -rf -- '$stage'" EXIT
    mkdir -p "$stage/$name/bin" "$stage/$name/lib/sigil"
    cp -- "$sigil" "$stage/$name/bin/sigil"
    cp -- "$cue" "$stage/$name/lib/sigil/cue.wasm"
    cp -- "$REPO/README.md" "$REPO/CHANGELOG.md" "$stage/$name/"
    chmod 0755 "$stage/$name/bin/sigil"
    chmod 0644 "$stage/$name/lib/sigil/cue.wasm" "$stage/$name/README.md" "$stage/$name/CHANGELOG.md"
    tar -C "$stage" -czf "$out/$name.tar.gz" "$name"
    printf '%s\n' "$out/$name.tar.gz"
}

manifest() {
    (($# == 2)) || usage
    local tag=$1 dir=$2
    version_of "$tag" >/dev/null
    compgen -G "$dir/sigil-*.tar.gz" >/dev/null || die "no sigil-*.tar.gz in $dir"
    (cd -- "$dir" && sha256sum sigil-*.tar.gz >SHA256SUMS)
    python3 - "$REPO/deploy/krew/sigil.yaml" "$tag" "$dir/SHA256SUMS" >"$dir/sigil.krew.yaml" <<'PY'
import re
import sys

template, tag, sums = sys.argv[1:]
version = tag[1:]
text = open(template).read().replace("@VERSION@", version).replace("@TAG@", tag)
for line in open(sums):
    digest, name = line.split()
    platform = name.removeprefix(f"sigil-{version}-").removesuffix(".tar.gz")
    text = text.replace(f"@SHA256_{platform}@", digest)
left = sorted(set(re.findall(r"@[A-Za-z0-9_-]+@", text)))
if left:
    sys.exit(f"release-cli: error: krew manifest: {left} not filled: no such archive in {sums}")
print(text, end="")
PY
    printf '%s\n' "$dir/SHA256SUMS" "$dir/sigil.krew.yaml"
}

(($# >= 1)) || usage
command=$1
shift
case $command in
    pack) pack "$@" ;;
    manifest) manifest "$@" ;;
    *) usage ;;
esac
