#!/usr/bin/env bash
# Real registries + real cosign fixtures for `sigil verify`.
#
# Starts olareg (referrers API) and Debian's docker-registry (no referrers API,
# so cosign writes the sha256-<hex> fallback tag) on free 127.0.0.1 ports,
# pushes small images with crane, signs them key-based with cosign v3 in the
# new bundle format and the legacy format (also with a P-384 key, and with
# SHA-224/SHA-512 signatures attached by cosign), attests some (SLSA provenance and
# vulnerability scans that pass or fail the example Rego), signs one with two
# keys, and builds an unsigned image, one signed by another key, and one
# carrying signatures moved from another image. Then runs the given command with SIGIL_REGISTRY_FIXTURES
# naming the fixture file, and stops the registries on exit.
#
#   e2e/registry-fixtures.sh [-- COMMAND...]    default command: the ignored
#                                               registry_real tests + CLI checks
# SIGIL_FIXTURE_OLAREG / SIGIL_FIXTURE_DOCKREG (host:port, both): use these
# running registries instead of starting olareg and docker-registry.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT=$PWD

if [ -n "${SIGIL_FIXTURE_OLAREG:-}" ]; then
  BIN=$(scripts/install-tools.sh cosign crane notation-signer)
else
  BIN=$(scripts/install-tools.sh cosign crane olareg docker-registry notation-signer)
fi
export PATH="$BIN:$PATH"
command -v openssl >/dev/null || { echo "registry-fixtures: openssl is needed (apt-get install openssl)" >&2; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sigil-registry.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

# shellcheck source=e2e/lib.sh
. e2e/lib.sh   # free_port, wait_url, push_image
wait_port() { # host:port, bounded to 10 s
  wait_url "http://$1/v2/" 10 || { echo "registry at $1 did not come up" >&2; return 1; }
}

if [ -n "${SIGIL_FIXTURE_OLAREG:-}" ] && [ -n "${SIGIL_FIXTURE_DOCKREG:-}" ]; then
  # Registries someone else runs (e2e/kind.sh: containers on the kind network).
  OLAREG=$SIGIL_FIXTURE_OLAREG
  DOCKREG=$SIGIL_FIXTURE_DOCKREG
else
  P1=$(free_port); P2=$(free_port)
  OLAREG=127.0.0.1:$P1
  DOCKREG=127.0.0.1:$P2
  olareg serve --addr 127.0.0.1 --port "$P1" --store-type mem >"$WORK/olareg.log" 2>&1 &
  PIDS+=($!)
  printf '%s\n' 'version: 0.1' 'log:' '  level: warn' 'storage:' '  filesystem:' \
    "    rootdirectory: $WORK/dr-store" '  delete:' '    enabled: true' 'http:' \
    "  addr: $DOCKREG" >"$WORK/docker-registry.yml"
  docker-registry serve "$WORK/docker-registry.yml" >"$WORK/docker-registry.log" 2>&1 &
  PIDS+=($!)
fi
wait_port "$OLAREG"
wait_port "$DOCKREG"

cd "$WORK"
export COSIGN_PASSWORD=
export COSIGN_YES=true
# cosign must not reach the network: no TUF, no tlog, no signing config.
ORIG_HOME=$HOME
export TUF_ROOT=$WORK/tuf HOME=$WORK
cosign generate-key-pair --output-key-prefix key1 >/dev/null 2>&1
cosign generate-key-pair --output-key-prefix key2 >/dev/null 2>&1
# key.hashAlgorithm: cosign v3 signs with the digest its key type implies
# (there is no flag for it): a P-384 key signs over SHA-384. SHA-224 and
# SHA-512 signatures (P-256 and RSA keys) are made with openssl over cosign's
# own payload (`cosign generate`) and attached with `cosign attach
# signature`; `cosign verify --signature-digest-algorithm` checks each one.
openssl ecparam -name secp384r1 -genkey -noout 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out p384.pem
cosign import-key-pair --key p384.pem --output-key-prefix p384 >/dev/null 2>&1
openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out hk.pem
openssl pkey -in hk.pem -pubout -out hk.pub 2>/dev/null
openssl genrsa 3072 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out rsa.pem
openssl pkey -in rsa.pem -pubout -out rsa.pub 2>/dev/null
echo '{"buildType":"https://example.com/sigil-test","builder":{"id":"sigil-test"}}' >predicate.json
# SLSA v1 provenance and vulnerability-scan predicates for the attestation
# policies of deploy/examples/attestation-rego.yaml: one that satisfies its
# Rego, one built from a feature branch, one scan with a CRITICAL finding.
slsa1() { # workflow ref
  printf '{"buildDefinition":{"buildType":"https://actions.github.io/buildtypes/workflow/v1","externalParameters":{"workflow":{"ref":"%s","repository":"https://github.com/sigil-dev/app","path":".github/workflows/release.yml"}}},"runDetails":{"builder":{"id":"https://github.com/actions/runner/github-hosted"}}}\n' "$1"
}
slsa1 refs/heads/main >prov-main.json
slsa1 refs/heads/feature >prov-feature.json
vuln() { # severity
  printf '{"scanner":{"uri":"pkg:github/aquasecurity/trivy","version":"0.50.0","result":{"Results":[{"Target":"app","Vulnerabilities":[{"VulnerabilityID":"CVE-2024-0001","Severity":"%s"}]}]}}}\n' "$1"
}
vuln LOW >vuln-low.json
vuln CRITICAL >vuln-critical.json
SIGN=(--use-signing-config=false --tlog-upload=false --allow-insecure-registry --yes)

# An image for one platform running as one user (its config file says so).
platform_image() { # registry repo tag content platform user -> digest
  push_image "$1" "$2" "$3-base" "$4" >/dev/null
  crane mutate --insecure --set-platform "$5" --user "$6" -t "$1/$2:$3" "$1/$2:$3-base" >/dev/null 2>&1
  crane digest --insecure "$1/$2:$3"
}

# A multi-platform image: an index of linux/amd64 and linux/arm/v7 images
# running as the given users, signed with key1.
platform_index() { # registry repo tag amd64-user arm-user -> digest
  local amd arm
  amd=$(platform_image "$1" "$2" "$3-amd64" "$3-amd64" linux/amd64 "$4")
  arm=$(platform_image "$1" "$2" "$3-arm" "$3-arm" linux/arm/v7 "$5")
  crane index append --insecure -m "$1/$2@$amd" -m "$1/$2@$arm" -t "$1/$2:$3" >/dev/null 2>&1
  local index
  index=$(crane digest --insecure "$1/$2:$3")
  cosign sign --key key1.key "${SIGN[@]}" "$1/$2@$index" >/dev/null 2>&1
  echo "$index"
}

# Multi-platform images for `platforms` (every platform image of an index,
# or the index): an index of linux/amd64 and linux/arm/v7 images signed
# with key1 at the index only, at its platform images only, recursively
# (cosign sign --recursive: the index and each platform image), or at the
# index and one platform image.
multiarch() { # registry repo tag how -> digest
  local amd arm index
  amd=$(platform_image "$1" "$2" "$3-amd64" "$3-amd64" linux/amd64 65532)
  arm=$(platform_image "$1" "$2" "$3-arm" "$3-arm" linux/arm/v7 65532)
  crane index append --insecure -m "$1/$2@$amd" -m "$1/$2@$arm" -t "$1/$2:$3" >/dev/null 2>&1
  index=$(crane digest --insecure "$1/$2:$3")
  local targets
  case $4 in
    index) targets=("$index") ;;
    platforms) targets=("$amd" "$arm") ;;
    one-platform) targets=("$index" "$amd") ;;
    recursive)
      cosign sign --recursive --key key1.key "${SIGN[@]}" "$1/$2@$index" >/dev/null 2>&1
      targets=() ;;
  esac
  for t in "${targets[@]}"; do
    cosign sign --key key1.key "${SIGN[@]}" "$1/$2@$t" >/dev/null 2>&1
  done
  echo "$index $amd $arm"
}

# Rewrites the new-format signature referrer of image FROM so its subject is
# image TO, and publishes it (by digest; plus the fallback tag where the
# registry has no referrers API): a signature "moved" onto another image.
move_referrer() { # registry repo from-digest to-digest
  python3 - "$@" <<'PY'
import hashlib, json, sys, urllib.request, urllib.error
reg, repo, src, dst = sys.argv[1:5]
base = f"http://{reg}/v2/{repo}"
IDX = "application/vnd.oci.image.index.v1+json"
MAN = "application/vnd.oci.image.manifest.v1+json"
def get(path, accept=MAN + ", " + IDX):
    req = urllib.request.Request(base + path, headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read()
def put(path, body, ctype):
    req = urllib.request.Request(base + path, data=body, method="PUT", headers={"Content-Type": ctype})
    urllib.request.urlopen(req, timeout=10).read()
try:
    index = json.loads(get(f"/referrers/{src}", IDX)); api = True
except urllib.error.HTTPError:
    index = json.loads(get(f"/manifests/sha256-{src[7:]}")); api = False
for d in index["manifests"]:
    m = json.loads(get(f"/manifests/{d['digest']}"))
    if m.get("annotations", {}).get("dev.sigstore.bundle.predicateType") == "https://sigstore.dev/cosign/sign/v1":
        break
else:
    sys.exit("no signature referrer found to move")
target = get(f"/manifests/{dst}")
m["subject"] = {"mediaType": MAN, "digest": dst, "size": len(target)}
body = json.dumps(m, separators=(",", ":")).encode()
digest = "sha256:" + hashlib.sha256(body).hexdigest()
put(f"/manifests/{digest}", body, MAN)
if not api:
    idx = {"schemaVersion": 2, "mediaType": IDX, "manifests": [
        {"mediaType": MAN, "digest": digest, "size": len(body), "artifactType": m.get("artifactType", "")}]}
    put(f"/manifests/sha256-{dst[7:]}", json.dumps(idx).encode(), IDX)
PY
}

# Attaches a legacy signature made by openssl: key pem, digest, image ref.
attach_openssl() {
  local payload sig
  payload=$(mktemp "$WORK/payload.XXXXXX"); sig=$(mktemp "$WORK/sig.XXXXXX")
  cosign generate "$3" >"$payload" 2>/dev/null
  openssl dgst "-$2" -sign "$1" "$payload" | base64 -w0 >"$sig"
  cosign attach signature --allow-insecure-registry --payload "$payload" --signature "$sig" "$3" >/dev/null 2>&1
}
# cosign itself must accept a key fixture with that digest algorithm, and
# refuse it with another (so the fixture is what its name says).
cosign_accepts() { # pub digest wrong-digest image
  cosign verify --key "$1" --signature-digest-algorithm "$2" --insecure-ignore-tlog --allow-insecure-registry "$4" >/dev/null 2>&1 \
    || { echo "fixture: cosign does not accept $4 with $1 over $2" >&2; return 1; }
  if cosign verify --key "$1" --signature-digest-algorithm "$3" --insecure-ignore-tlog --allow-insecure-registry "$4" >/dev/null 2>&1; then
    echo "fixture: cosign accepts $4 with $1 over $3 too" >&2; return 1
  fi
}

FIX=$WORK/fixtures.env
{
  echo "KEY1=$WORK/key1.pub"
  echo "KEY2=$WORK/key2.pub"
  echo "P384KEY=$WORK/p384.pub"
  echo "HASHKEY=$WORK/hk.pub"
  echo "RSAKEY=$WORK/rsa.pub"
} >"$FIX"
for pair in "olareg:$OLAREG" "dockreg:$DOCKREG"; do
  name=${pair%%:*}; R=${pair#*:}
  A=$(push_image "$R" test/app new "$name-new")
  L=$(push_image "$R" test/app legacy "$name-legacy")
  T=$(push_image "$R" test/app att "$name-att")
  U=$(push_image "$R" test/app unsigned "$name-unsigned")
  O=$(push_image "$R" test/app other "$name-other")
  M=$(push_image "$R" test/app moved "$name-moved")
  cosign sign --key key1.key "${SIGN[@]}" "$R/test/app@$A" >/dev/null 2>&1
  cosign sign --key key1.key "${SIGN[@]}" --new-bundle-format=false "$R/test/app@$L" >/dev/null 2>&1
  cosign attest --key key1.key "${SIGN[@]}" --predicate predicate.json --type slsaprovenance "$R/test/app@$T" >/dev/null 2>&1
  cosign attest --key key1.key "${SIGN[@]}" --new-bundle-format=false --predicate predicate.json --type slsaprovenance "$R/test/app@$T" >/dev/null 2>&1
  cosign sign --key key2.key "${SIGN[@]}" "$R/test/app@$O" >/dev/null 2>&1
  cosign sign --key key2.key "${SIGN[@]}" --new-bundle-format=false "$R/test/app@$O" >/dev/null 2>&1
  # One image signed by both keys, in each format (CIP-level two-signature policy).
  W=$(push_image "$R" test/app twice "$name-twice")
  WL=$(push_image "$R" test/app twice-legacy "$name-twice-legacy")
  for k in key1 key2; do
    cosign sign --key $k.key "${SIGN[@]}" "$R/test/app@$W" >/dev/null 2>&1
    cosign sign --key $k.key "${SIGN[@]}" --new-bundle-format=false "$R/test/app@$WL" >/dev/null 2>&1
  done
  # Attestations for the Rego policies: provenance from main (new format)
  # and a clean scan (legacy format); provenance from a feature branch (both
  # formats); main provenance with a CRITICAL finding.
  PG=$(push_image "$R" test/app prov-good "$name-prov-good")
  PB=$(push_image "$R" test/app prov-bad "$name-prov-bad")
  PV=$(push_image "$R" test/app prov-vuln "$name-prov-vuln")
  attest() { cosign attest --key key1.key "${SIGN[@]}" --predicate "$1" --type "$2" "${@:4}" "$R/test/app@$3" >/dev/null 2>&1; }
  attest prov-main.json slsaprovenance1 "$PG"
  attest vuln-low.json vuln "$PG" --new-bundle-format=false
  attest prov-feature.json slsaprovenance1 "$PB"
  attest prov-feature.json slsaprovenance1 "$PB" --new-bundle-format=false
  attest vuln-low.json vuln "$PB"
  attest prov-main.json slsaprovenance1 "$PV"
  attest vuln-critical.json vuln "$PV"
  # key.hashAlgorithm: cosign's own P-384 signatures (SHA-384) in both
  # formats, and openssl's SHA-224 / SHA-512 legacy signatures.
  H384=$(push_image "$R" test/app sha384 "$name-sha384")
  H384L=$(push_image "$R" test/app sha384-legacy "$name-sha384-legacy")
  H224L=$(push_image "$R" test/app sha224-legacy "$name-sha224-legacy")
  H512L=$(push_image "$R" test/app sha512-legacy "$name-sha512-legacy")
  R512L=$(push_image "$R" test/app rsa-sha512-legacy "$name-rsa-sha512-legacy")
  cosign sign --key p384.key "${SIGN[@]}" "$R/test/app@$H384" >/dev/null 2>&1
  cosign sign --key p384.key "${SIGN[@]}" --new-bundle-format=false "$R/test/app@$H384L" >/dev/null 2>&1
  attach_openssl hk.pem sha224 "$R/test/app@$H224L"
  attach_openssl hk.pem sha512 "$R/test/app@$H512L"
  attach_openssl rsa.pem sha512 "$R/test/app@$R512L"
  cosign_accepts p384.pub sha384 sha256 "$R/test/app@$H384L"
  cosign_accepts hk.pub sha224 sha256 "$R/test/app@$H224L"
  cosign_accepts hk.pub sha512 sha256 "$R/test/app@$H512L"
  cosign_accepts rsa.pub sha512 sha256 "$R/test/app@$R512L"
  # fetchConfigFile: multi-platform images whose platforms run as 65532, or
  # one of them as root.
  CN=$(platform_index "$R" test/app config-nonroot 65532 65532)
  CM=$(platform_index "$R" test/app config-mixed 65532 0)
  # platforms: the four ways a publisher signs an index.
  multi_index=$(multiarch "$R" test/multi index index)
  multi_platforms=$(multiarch "$R" test/multi platforms platforms)
  multi_recursive=$(multiarch "$R" test/multi recursive recursive)
  multi_one=$(multiarch "$R" test/multi one-platform one-platform)
  read -r MI MI_AMD MI_ARM <<<"$multi_index"
  read -r MP _ _ <<<"$multi_platforms"
  read -r MR _ _ <<<"$multi_recursive"
  read -r MO _ MO_ARM <<<"$multi_one"
  move_referrer "$R" test/app "$A" "$M"
  crane copy --insecure "$R/test/app:sha256-${L#sha256:}.sig" "$R/test/app:sha256-${M#sha256:}.sig" >/dev/null 2>&1
  {
    echo "${name^^}=$R"
    echo "${name^^}_NEW=$R/test/app@$A"
    echo "${name^^}_LEGACY=$R/test/app@$L"
    echo "${name^^}_ATT=$R/test/app@$T"
    echo "${name^^}_UNSIGNED=$R/test/app@$U"
    echo "${name^^}_OTHER=$R/test/app@$O"
    echo "${name^^}_MOVED=$R/test/app@$M"
    echo "${name^^}_TWICE=$R/test/app@$W"
    echo "${name^^}_TWICE_LEGACY=$R/test/app@$WL"
    echo "${name^^}_PROV_GOOD=$R/test/app@$PG"
    echo "${name^^}_PROV_BAD=$R/test/app@$PB"
    echo "${name^^}_PROV_VULN=$R/test/app@$PV"
    echo "${name^^}_SHA384=$R/test/app@$H384"
    echo "${name^^}_SHA384_LEGACY=$R/test/app@$H384L"
    echo "${name^^}_SHA224_LEGACY=$R/test/app@$H224L"
    echo "${name^^}_SHA512_LEGACY=$R/test/app@$H512L"
    echo "${name^^}_RSA_SHA512_LEGACY=$R/test/app@$R512L"
    echo "${name^^}_CONFIG_NONROOT=$R/test/app@$CN"
    echo "${name^^}_CONFIG_MIXED=$R/test/app@$CM"
    echo "${name^^}_MULTI_INDEX=$R/test/multi@$MI"
    echo "${name^^}_MULTI_INDEX_AMD64=$MI_AMD"
    echo "${name^^}_MULTI_INDEX_ARM=$MI_ARM"
    echo "${name^^}_MULTI_PLATFORMS=$R/test/multi@$MP"
    echo "${name^^}_MULTI_RECURSIVE=$R/test/multi@$MR"
    echo "${name^^}_MULTI_ONE_PLATFORM=$R/test/multi@$MO"
    echo "${name^^}_MULTI_ONE_PLATFORM_ARM=$MO_ARM"
  } >>"$FIX"
done
# The custom attestations of policy-controller's key examples ("foobar key
# e2e test", as its e2e tests attest) and one with other data, in the legacy
# format its tester reads, by key1: the policy differential judges them, and
# the e2e suite serves those examples as they are.
printf 'foobar key e2e test' >custom-good.txt
printf 'something else' >custom-other.txt
CG=$(push_image "$OLAREG" test/custom att-good custom-good)
CO=$(push_image "$OLAREG" test/custom att-other custom-other)
cosign attest --key key1.key "${SIGN[@]}" --new-bundle-format=false --type custom \
  --predicate custom-good.txt "$OLAREG/test/custom@$CG" >/dev/null 2>&1
cosign attest --key key1.key "${SIGN[@]}" --new-bundle-format=false --type custom \
  --predicate custom-other.txt "$OLAREG/test/custom@$CO" >/dev/null 2>&1
{
  echo "CUSTOM_ATT=$OLAREG/test/custom@$CG"
  echo "CUSTOM_ATT_OTHER=$OLAREG/test/custom@$CO"
} >>"$FIX"
echo "fixtures: $FIX" >&2
export SIGIL_REGISTRY_FIXTURES=$FIX
export HOME=$ORIG_HOME
cd "$REPO_ROOT"

if [ "${1:-}" = "--" ]; then
  shift
  "$@"
  exit $?
fi

# Default: the library tests against the fixtures, the policy scenarios
# (deploy/examples through `sigil policy test` / `sigil verify --policy`),
# then the CLI itself.
cargo test -q --workspace --test registry_real -- --ignored --test-threads 2
# The shared cache between replicas, against redis-server processes the
# tests start themselves (and a mock registry): the client (sigil-registry),
# and judges built from the webhook's and the audit's flags (sigil-judge).
REDIS_BIN=$(scripts/install-tools.sh redis-server)
PATH="$REDIS_BIN:$PATH" cargo test -q --workspace --test shared_cache -- --ignored --test-threads 2
cargo test -q --workspace --test registry_policy -- --ignored --test-threads 4
# Envelopes notation-go (the Notary Project's reference library) made.
SIGIL_NOTATION_SIGNER=$BIN/notation-signer cargo test -q --workspace --test notation_go -- --ignored
cargo build -q --workspace --all-targets
SIGIL=${CARGO_TARGET_DIR:-target}/debug/sigil
# shellcheck disable=SC1090
. "$FIX"
pass=0; fail=0
expect() { # want-exit description args...
  local want=$1 what=$2; shift 2
  local got=0
  timeout 60 "$SIGIL" verify --allow-insecure-registry --insecure-ignore-tlog "$@" >"$WORK/out" 2>&1 || got=$?
  if { [ "$want" = 0 ] && [ "$got" = 0 ]; } || { [ "$want" != 0 ] && [ "$got" != 0 ]; }; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1)); echo "FAIL: $what (exit $got)"; cat "$WORK/out"
  fi
}
for n in OLAREG DOCKREG; do
  v() { eval echo "\$${n}_$1"; }
  expect 0 "$n new-format signature" --key "$KEY1" "$(v NEW)"
  expect 0 "$n legacy signature" --key "$KEY1" "$(v LEGACY)"
  expect 0 "$n attestation" --key "$KEY1" --type slsaprovenance "$(v ATT)"
  expect 1 "$n attestation only, no signature" --key "$KEY1" "$(v ATT)"
  expect 1 "$n unsigned" --key "$KEY1" "$(v UNSIGNED)"
  expect 1 "$n other key" --key "$KEY1" "$(v OTHER)"
  expect 0 "$n other key with that key" --key "$KEY2" "$(v OTHER)"
  expect 1 "$n moved signature" --key "$KEY1" "$(v MOVED)"
  expect 0 "$n by tag" --key "$KEY1" "$(eval echo "\$${n}")/test/app:new"
  expect 0 "$n P-384 key, cosign's SHA-384, new format" --key "$P384KEY" "$(v SHA384)"
  expect 0 "$n P-384 key, cosign's SHA-384, legacy" --key "$P384KEY" "$(v SHA384_LEGACY)"
done
echo "cli: $pass passed, $fail failed"
[ "$fail" = 0 ]
