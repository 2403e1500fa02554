#!/usr/bin/env bash
# The CLI archives as the release workflow makes them (scripts/release-cli.sh),
# installed the way README.md's "The sigil CLI" says (run by make image-check,
# which has the release build and the CUE module):
# 1. `pack` the release build of sigil with the CUE module; it refuses a tag
#    that is not the binary's version.
# 2. `manifest` over archives for every platform the krew manifest lists:
#    SHA256SUMS verifies, and sigil.krew.yaml names each archive with its
#    checksum. The archives are this machine's build packed under each
#    platform's name: what is checked is the packing and the manifest, not
#    the cross builds, which only the workflow's runners make. Without one
#    platform's archive, `manifest` fails and names it.
# 3. README's download-and-install lines, run as written except for where
#    they download from (the archives' directory, file://) and the prefix
#    (a scratch directory instead of /usr/local, so no sudo): the installed
#    sigil answers --version and compiles a CUE policy with the module it
#    came with, found beside its binary.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
TARGET=${CARGO_TARGET_DIR:-$REPO/target}

log() { printf 'test-release-cli: %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

SIGIL=${SIGIL_BIN:-$TARGET/release/sigil}
[[ -x $SIGIL ]] || die "no release build at $SIGIL (make release)"
CUE=$(scripts/build-cue-wasm.sh 2>/dev/null) || die "scripts/build-cue-wasm.sh failed"
VERSION=$("$SIGIL" --version | head -n 1)
VERSION=${VERSION#sigil }
TAG=v$VERSION
case $(uname -m) in
    x86_64) HOST=linux-amd64 ;;
    aarch64) HOST=linux-arm64 ;;
    *) die "no release platform for $(uname -m)" ;;
esac
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sigil-test-release-cli.XXXXXX")
trap 'rm -rf -- "$WORK"' EXIT

# 1. pack, and its refusal of another version.
if out=$(scripts/release-cli.sh pack "v$VERSION.1" "$HOST" "$SIGIL" "$CUE" "$WORK/wrong" 2>&1); then
    die "pack accepted tag v$VERSION.1 for a binary of version $VERSION: $out"
fi
[[ $out == *"the tag says"* ]] || die "pack refused another tag, but not for its version: $out"
archive=$(scripts/release-cli.sh pack "$TAG" "$HOST" "$SIGIL" "$CUE" "$WORK/dist")
listing=$(tar -tzf "$archive" | sort | tr '\n' ' ')
want="sigil-$VERSION-$HOST/ sigil-$VERSION-$HOST/CHANGELOG.md sigil-$VERSION-$HOST/README.md sigil-$VERSION-$HOST/bin/ sigil-$VERSION-$HOST/bin/sigil sigil-$VERSION-$HOST/lib/ sigil-$VERSION-$HOST/lib/sigil/ sigil-$VERSION-$HOST/lib/sigil/cue.wasm "
[[ $listing == "$want" ]] || die "$archive holds: $listing; want: $want"
log "pack: $(basename -- "$archive") ($(du -k "$archive" | cut -f1) KiB): bin/sigil, lib/sigil/cue.wasm, README.md, CHANGELOG.md"

# 2. manifest over every platform the krew manifest lists.
platforms=$(python3 -c '
import sys, yaml
for p in yaml.safe_load(open(sys.argv[1]))["spec"]["platforms"]:
    m = p["selector"]["matchLabels"]
    print(m["os"] + "-" + m["arch"])' deploy/krew/sigil.yaml)
for p in $platforms; do
    [[ $p == "$HOST" ]] || scripts/release-cli.sh pack "$TAG" "$p" "$SIGIL" "$CUE" "$WORK/dist" >/dev/null
done
scripts/release-cli.sh manifest "$TAG" "$WORK/dist" >/dev/null
(cd "$WORK/dist" && sha256sum --quiet -c SHA256SUMS) || die "SHA256SUMS does not verify"
python3 - "$WORK/dist" "$TAG" <<'PY' || die "sigil.krew.yaml does not name the archives"
import hashlib, os, sys, yaml
dist, tag = sys.argv[1:]
plugin = yaml.safe_load(open(os.path.join(dist, "sigil.krew.yaml")))
assert plugin["spec"]["version"] == tag, plugin["spec"]["version"]
for p in plugin["spec"]["platforms"]:
    name = p["uri"].rsplit("/", 1)[1]
    assert p["uri"] == f"https://github.com/sigil-dev/sigil/releases/download/{tag}/{name}", p["uri"]
    digest = hashlib.sha256(open(os.path.join(dist, name), "rb").read()).hexdigest()
    assert p["sha256"] == digest, (name, p["sha256"], digest)
    assert p["files"][0]["from"] == name.removesuffix(".tar.gz") + "/*", p["files"]
PY
log "manifest: SHA256SUMS verifies; sigil.krew.yaml names $(wc -w <<<"$platforms") archives with their checksums"
mkdir -p "$WORK/short"
cp -- "$archive" "$WORK/short/"
if out=$(scripts/release-cli.sh manifest "$TAG" "$WORK/short" 2>&1); then
    die "manifest passed with only the $HOST archive: $out"
fi
[[ $out == *"not filled"* ]] || die "manifest refused a missing archive without saying which: $out"

# 3. README's install lines, as a user runs them.
block=$(awk '/^## The sigil CLI/ { in_section = 1 } in_section && /^```sh$/ { getline; print; getline; print; getline; print; exit }' README.md)
[[ $block == V=*curl\ -LO*tar\ -xzf* ]] || die "README's CLI install block has moved or changed: $block"
readme_version=$(sed -n '1s/^V=\([^;]*\);.*/\1/p' <<<"$block")
[[ $readme_version == "$VERSION" ]] || die "README installs sigil $readme_version, this is $VERSION"
adapt() { # FROM TO: replaces FROM in $block, which must hold it
    [[ $block == *"$1"* ]] || die "README's CLI install lines no longer say: $1"
    block=${block//"$1"/"$2"}
}
adapt "https://github.com/sigil-dev/sigil/releases/download/v\$V/" "file://$WORK/dist/"
adapt "sudo cp -r" "cp -r"
adapt " /usr/local/" " $WORK/prefix/"
adapt "P=linux-amd64" "P=$HOST"
mkdir -p "$WORK/prefix" "$WORK/download"
(cd "$WORK/download" && bash -euo pipefail -c "$block") >"$WORK/install.log" 2>&1 ||
    { cat "$WORK/install.log" >&2; die "README's install lines failed: $block"; }
installed=$WORK/prefix/bin/sigil
out=$(env -i PATH=/usr/bin:/bin "$installed" --version 2>&1) || die "$installed --version: $out"
[[ $out == "sigil $VERSION"* ]] || die "$installed --version says $out"
printf '%s\n' 'apiVersion: policy.sigil.dev/v1alpha1' 'kind: ClusterImagePolicy' 'metadata:' \
    '  name: cue-good' 'spec:' '  images:' '  - glob: "registry.example/**"' '  authorities:' \
    '  - static:' '      action: pass' '  policy:' '    type: cue' '    data: |' \
    '      predicateType: "https://cosign.sigstore.dev/attestation/v1"' >"$WORK/cue.yaml"
out=$(env -i PATH=/usr/bin:/bin HOME="$WORK" "$installed" policy lint "$WORK/cue.yaml" 2>&1) ||
    die "the installed sigil could not lint a CUE policy: $out"
[[ $out == *"cue-good: ok"* && $out != *"no CUE module"* ]] ||
    die "the installed sigil did not compile the CUE policy with its own module: $out"
log "README's install lines: sigil $VERSION installed from the archive; it compiles CUE with the module beside it"
