#!/usr/bin/env bash
# make image-check: sigil's image (scripts/image.sh) is reproducible, agrees
# with the Dockerfile, and its binaries run on its base.
#
# 1. Builds the image, then again from copies of the binaries and packages
#    in other directories, with another layout path: the digests must match.
# 2. Reads the Dockerfile (USER, ENTRYPOINT, LABEL, the binaries its build
#    stage installs and where COPY puts them) and the chart's `command:`
#    paths, and compares them with the image's config and files.
# 3. The SBOM the release workflow attaches (scripts/sbom.py): the same
#    twice, listing the base packages, the linked crates and the CUE
#    module's Go modules, no host paths.
# 4. Unpacks the image and runs each binary in it (chroot, as 65532):
#    `--version` must answer, so the base has every library they link; and
#    `sigil policy lint` must compile CUE policies with the image's own
#    CUE module (a broken one refused, a good one accepted).
# 5. The CLI's release archives (scripts/test-release-cli.sh): packed as the
#    release workflow packs them, with their checksums and krew manifest,
#    and installed by README's own lines.
# 6. The binaries in the image are stripped, each linking to its symbol
#    file beside the image (target/oci/sigil.debug/BINARY.debug).
# Prints the image's size. Needs root (chroot) and the release binaries,
# which it builds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
TARGET=${CARGO_TARGET_DIR:-$REPO/target}

log() { printf 'image-check: %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

[[ $(id -u) == 0 ]] || die "needs root, to run the image's binaries in a chroot"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sigil-image-check.XXXXXX")
trap 'rm -rf -- "$WORK"' EXIT

start=$SECONDS
first=$(scripts/image.sh)
log "first build: $first ($((SECONDS - start)) s)"

# The same inputs from elsewhere: binaries, packages and output all moved.
mkdir -p "$WORK/target/release" "$WORK/debs" "$WORK/cue"
cp -- "$TARGET"/release/{sigil-webhook,sigil-audit,sigil-controller,sigil} "$WORK/target/release/"
cp -- "${SIGIL_DEB_CACHE:-$REPO/.cache/debs}"/*.deb "$WORK/debs/"
cp -- "$(scripts/build-cue-wasm.sh 2>/dev/null)" "$WORK/cue/cue.wasm"
second=$(CARGO_TARGET_DIR=$WORK/target SIGIL_DEB_CACHE=$WORK/debs SIGIL_CUE_MODULE=$WORK/cue/cue.wasm \
    scripts/image.sh --no-build --out "$WORK/elsewhere/layout")
[[ $first == "$second" ]] || die "two builds of the same inputs differ: $first vs $second (diff the layouts target/oci/sigil and a rebuild)"
log "reproducible: both builds are $first"

python3 - "$TARGET/oci/sigil" Dockerfile charts/sigil/templates "$WORK/rootfs" <<'PY'
import gzip, io, json, os, re, shlex, sys, tarfile
layout, dockerfile, templates, rootfs = sys.argv[1:5]

def blob(digest):
    with open(os.path.join(layout, "blobs", *digest.split(":")), "rb") as f:
        return f.read()

index = json.load(open(os.path.join(layout, "index.json")))
manifest = json.loads(blob(index["manifests"][0]["digest"]))
config = json.loads(blob(manifest["config"]["digest"]))["config"]
files = {}
os.makedirs(rootfs)
for layer in manifest["layers"]:
    data = blob(layer["digest"])
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as tar:
        for m in tar.getmembers():
            files["/" + m.name] = m
        tar.extractall(rootfs, filter="tar")

# The Dockerfile, instruction by instruction (continuation lines joined).
text = re.sub(r"\\\n", " ", open(dockerfile).read())
instructions = [l.strip() for l in text.splitlines() if l.strip() and not l.lstrip().startswith("#")]
def final_stage(keyword):
    found = [l for l in instructions if l.split(None, 1)[0].upper() == keyword]
    return found
problems = []
user = final_stage("USER")[-1].split(None, 1)[1]
if config.get("User") != user:
    problems.append(f"user: Dockerfile {user!r}, image {config.get('User')!r}")
entrypoint = json.loads(final_stage("ENTRYPOINT")[-1].split(None, 1)[1])
if config.get("Entrypoint") != entrypoint:
    problems.append(f"entrypoint: Dockerfile {entrypoint}, image {config.get('Entrypoint')}")
labels = {}
for line in final_stage("LABEL"):
    for pair in shlex.split(line.split(None, 1)[1]):
        k, v = pair.split("=", 1)
        labels[k] = v
if config.get("Labels") != labels:
    problems.append(f"labels: Dockerfile {labels}, image {config.get('Labels')}")
# Binaries: what the build stage installs into /out, and where COPY puts /out.
run = next(l for l in instructions if "install -D" in l)
binaries = sorted(os.path.basename(w) for w in run.split() if w.startswith("target/release/"))
copy = next(l for l in final_stage("COPY") if "--from=build" in l).split()
dest = copy[-1].rstrip("/")
want = {f"{dest}/{b}" for b in binaries}
have = {p for p, m in files.items() if m.isfile() and p.startswith(dest + "/")}
if not binaries or want != have:
    problems.append(f"binaries: Dockerfile puts {sorted(want)}, image has {sorted(have)}")
# The CUE module: where the Dockerfile's cue stage puts it, and where the
# binaries look (../lib/sigil/cue.wasm beside them).
cue_copies = [l.split()[-1] for l in final_stage("COPY") if "--from=cue" in l]
beside = os.path.normpath(os.path.join(dest, "../lib/sigil/cue.wasm"))
if cue_copies != [beside]:
    problems.append(f"CUE module: Dockerfile copies it to {cue_copies}, the binaries look in {beside}")
elif beside not in files or not files[beside].isfile():
    problems.append(f"CUE module: the image has no {beside}")
elif files[beside].mode & 0o444 != 0o444:
    problems.append(f"{beside} is not readable for everyone (mode {oct(files[beside].mode)})")
for p in sorted(want & have):
    if files[p].mode & 0o111 != 0o111:
        problems.append(f"{p} is not executable for everyone (mode {oct(files[p].mode)})")
# The chart starts the binaries by path.
for name in sorted(os.listdir(templates)):
    for cmd in re.findall(r'command:\s*\["([^"]+)"', open(os.path.join(templates, name)).read()):
        if cmd not in have:
            problems.append(f"chart {name} runs {cmd}, which the image does not have")
# Debian 12, as the Dockerfile's build and runtime stages.
os_release = open(os.path.join(rootfs, "usr/lib/os-release")).read()
if 'VERSION_ID="12"' not in os_release:
    problems.append("the base is not Debian 12 (usr/lib/os-release)")
if any(p in files for p in ("/bin/sh", "/usr/bin/sh", "/bin/bash")):
    problems.append("the image has a shell")
if problems:
    print("image-check: FAIL: the image and the Dockerfile disagree:", *problems, sep="\n  ", file=sys.stderr)
    sys.exit(1)
print(f"image-check: agrees with the Dockerfile: user {user}, entrypoint {entrypoint}, "
      f"{', '.join(sorted(want))}, {beside}, {len(labels)} labels", file=sys.stderr)
PY
# The size scripts/image.sh measured (scripts/oci-size.py), as for the peers' images.
read -r compressed unpacked <"$TARGET/oci/sigil.size" || die "no $TARGET/oci/sigil.size beside the image"
log "$(awk -v c="$compressed" -v u="$unpacked" \
  'BEGIN { printf "image size %d bytes compressed (%.1f MiB), %.1f MiB unpacked", c, c / 1048576, u / 1048576 }')"

# The release workflow's SBOM of this image: deterministic, exact (every
# base package and the crates cargo links), naming the image's digest.
cargo tree --locked -e normal,no-proc-macro --prefix none -f '{p}' \
    -p sigil-webhook -p sigil-audit -p sigil-controller -p sigil-cli >"$WORK/crates.txt"
scripts/build-cue-wasm.sh --modules >"$WORK/go-modules.txt"
python3 scripts/sbom.py --layout "$TARGET/oci/sigil" --crates "$WORK/crates.txt" \
    --go-modules "$WORK/go-modules.txt" >"$WORK/sbom1.json"
python3 scripts/sbom.py --layout "$TARGET/oci/sigil" --crates "$WORK/crates.txt" \
    --go-modules "$WORK/go-modules.txt" >"$WORK/sbom2.json"
cmp -s "$WORK/sbom1.json" "$WORK/sbom2.json" || die "two SBOMs of the same image differ"
python3 - "$WORK/sbom1.json" "$first" <<'PY' || die "the SBOM (scripts/sbom.py) misses what the image holds"
import json, sys
doc = json.load(open(sys.argv[1]))
names = {p["name"] for p in doc["packages"]}
missing = {"libc6", "libgcc-s1", "ca-certificates", "tokio", "rustls", "sigil-webhook", "cuelang.org/go"} - names
image = doc["packages"][0]
assert not missing, f"missing packages: {missing}"
assert image["checksums"][0]["checksumValue"] == sys.argv[2].split(":")[1], "the SBOM names another image digest"
assert not any("/work/" in json.dumps(p) or "/root/" in json.dumps(p) for p in doc["packages"]), "a host path"
print(f"image-check: SBOM: {len(doc['packages'])} packages (Debian, crates, the CUE module's Go modules), deterministic", file=sys.stderr)
PY

# Stripped binaries (the Dockerfile's `install -s` too), each naming its
# symbol file beside the image by name and CRC-32 (.gnu_debuglink), and
# that file holding the symbol table the binary lost.
grep -Eq '^[^#]*install -D -s ' Dockerfile || die "the Dockerfile's build stage does not strip the binaries (install -D -s)"
for b in sigil-webhook sigil-audit sigil-controller sigil; do
    bin=$WORK/rootfs/usr/local/bin/$b debug=$TARGET/oci/sigil.debug/$b.debug
    if readelf -S --wide "$bin" 2>/dev/null | grep -Eq ' \.symtab | \.debug_'; then
        die "/usr/local/bin/$b in the image is not stripped"
    fi
    readelf -S --wide "$debug" 2>/dev/null | grep -q ' \.symtab ' || die "$debug holds no symbol table"
    objcopy --dump-section .gnu_debuglink="$WORK/$b.link" "$bin" ||
        die "/usr/local/bin/$b has no .gnu_debuglink"
    python3 - "$WORK/$b.link" "$debug" <<'PY' || die "/usr/local/bin/$b does not link to $debug"
import sys, zlib
link, debug = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
name, _, rest = link.partition(b"\0")
crc = int.from_bytes(link[-4:], "little")
assert name.decode() == sys.argv[2].rsplit("/", 1)[1], f"it names {name!r}"
assert crc == zlib.crc32(debug), f"CRC {crc:08x}, the file's is {zlib.crc32(debug):08x}"
PY
    log "in the image: $b stripped ($(stat -c %s "$bin") bytes), symbols in $(basename -- "$debug") ($(stat -c %s "$debug") bytes)"
done

for b in sigil-webhook sigil-audit sigil-controller sigil; do
    out=$(chroot --userspec=65532:65532 "$WORK/rootfs" "/usr/local/bin/$b" --version 2>&1) ||
        die "/usr/local/bin/$b --version failed inside the image: $out"
    log "in the image, as 65532: $b --version: $out"
done

# CUE policies in the image: its module compiles them (no --cue-module, no
# SIGIL_CUE_MODULE: the path the binaries find on their own).
cip() { # NAME CUE-SOURCE
    printf 'apiVersion: policy.sigil.dev/v1alpha1\nkind: ClusterImagePolicy\nmetadata:\n  name: %s\n' "$1"
    printf 'spec:\n  images:\n  - glob: "registry.example/**"\n  authorities:\n  - static:\n      action: pass\n'
    printf '  policy:\n    type: cue\n    data: |\n      %s\n' "$2"
}
mkdir -p "$WORK/rootfs/tmp/cue"
cip cue-good 'predicateType: "https://cosign.sigstore.dev/attestation/v1"' >"$WORK/rootfs/tmp/cue/good.yaml"
cip cue-broken 'predicateType: "https://cosign.sigstore.dev/attestation/v1" &' >"$WORK/rootfs/tmp/cue/broken.yaml"
out=$(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin chroot --userspec=65532:65532 "$WORK/rootfs" /usr/local/bin/sigil policy lint /tmp/cue/good.yaml 2>&1) ||
    die "sigil policy lint of a valid CUE policy failed inside the image: $out"
[[ $out == *"cue-good: ok"* && $out != *"no CUE module"* ]] ||
    die "inside the image, a valid CUE policy was not checked by the CUE module: $out"
if out=$(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin chroot --userspec=65532:65532 "$WORK/rootfs" /usr/local/bin/sigil policy lint /tmp/cue/broken.yaml 2>&1); then
    die "inside the image, sigil policy lint accepted a CUE policy that does not compile: $out"
fi
[[ $out == *"failed to compile the cue policy"* ]] ||
    die "inside the image, a broken CUE policy was refused for another reason than CUE's: $out"
log "in the image, as 65532: the CUE module compiles policies (a valid one ok, a broken one refused by CUE)"
# The CLI's release archives, installed as README says.
scripts/test-release-cli.sh
log "passed in $((SECONDS - start)) s"
