#!/usr/bin/env bash
# A release rehearsed on the e2e node (a phase of e2e/run-node.sh): the
# release workflow's own steps (scripts/release.sh, the commands
# .github/workflows/release.yaml runs) against the node's registry, then
# sigil installed from that OCI chart with the commands of
# docs/installation.md ("With Helm", the same as README.md's), and sigil
# judging its own image with the policy docs/installation.md gives
# (deploy/examples/sigil-releases.yaml). Last, docs/installation.md's
# "Verifying a release" commands, run with the CLI from the release archive.
#
# What differs from a release, and why (docs/installation.md, "Rehearsing a
# release"):
# - the registry: the node's (plain HTTP) instead of ghcr.io; hence
#   --plain-http for helm, and insecureRegistries for sigil;
# - the signatures: made with a cosign key pair generated here, without a
#   transparency log, instead of keyless with the workflow's GitHub identity
#   (this machine reaches neither GitHub's OIDC issuer, Fulcio nor Rekor).
#   The policy's keyless identity becomes that key (`key` and `ctlog: {}`);
#   the verification commands' identity flags become `--key`;
# - the GitHub Actions environment the provenance reads is set as a tag push
#   sets it (repository sigil-dev/sigil, the release workflow, refs/tags/vX);
# - the CLI archives: linux-amd64 is this machine's release build; the other
#   platforms' archives hold the same binary under their names, so that the
#   checksums and the krew manifest cover every platform the workflow builds.
#
# Needs: KUBECONFIG and SIGIL_E2E_NODE_REGISTRY of the node cluster, helm,
# cosign, crane and kubectl on PATH, the release build (target/release),
# SIGIL_NS. Arguments: WORK (a scratch directory) and UNSIGNED (an image
# reference that no release key signed, copied into the release repository
# to be denied). Prints its findings as "release-rehearsal: ..." lines.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT=$PWD
# shellcheck source=e2e/lib.sh
. e2e/lib.sh

WORK=${1:?usage: e2e/release-rehearsal.sh WORK UNSIGNED-IMAGE}
UNSIGNED=${2:?usage: e2e/release-rehearsal.sh WORK UNSIGNED-IMAGE}
REG=${SIGIL_E2E_NODE_REGISTRY:?needs the environment of the node cluster}
log() { e2e_log "release-rehearsal: $*"; }
fail() { log "FAIL: $*"; exit 1; }

VERSION=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/sigil/Chart.yaml)
export TAG=v$VERSION
export IMAGE=$REG/sigil-dev/sigil
export CHARTS=oci://$REG/sigil-dev/charts
mkdir -p "$WORK/release" "$WORK/home"
# cosign keeps to this directory: no TUF root, no signing config from outside.
# The toolchains the steps run (cargo, go) keep their own homes.
export RUSTUP_HOME=${RUSTUP_HOME:-$HOME/.rustup} CARGO_HOME=${CARGO_HOME:-$HOME/.cargo}
if command -v go >/dev/null; then
  GOPATH=$(go env GOPATH) GOCACHE=$(go env GOCACHE) GOMODCACHE=$(go env GOMODCACHE)
  export GOPATH GOCACHE GOMODCACHE
fi
export HOME=$WORK/home TUF_ROOT=$WORK/home/tuf COSIGN_PASSWORD=''
(cd "$WORK" && cosign generate-key-pair --output-key-prefix release >/dev/null 2>&1) ||
  fail "cosign generate-key-pair failed"
export SIGIL_RELEASE_KEY=$WORK/release.key SIGIL_RELEASE_INSECURE=1
# What a push of tag $TAG gives the workflow.
export GITHUB_SERVER_URL=https://github.com GITHUB_REPOSITORY=sigil-dev/sigil
export GITHUB_SHA GITHUB_REF=refs/tags/$TAG GITHUB_EVENT_NAME=push
GITHUB_SHA=$(git rev-parse HEAD)
export GITHUB_WORKFLOW_REF=sigil-dev/sigil/.github/workflows/release.yaml@refs/tags/$TAG
export GITHUB_RUN_ID=0 GITHUB_RUN_ATTEMPT=1 RUNNER_ENVIRONMENT=self-hosted

# ---- The workflow's steps ----------------------------------------------------
cd "$WORK/release"
t=$SECONDS
REF=$("$REPO_ROOT/scripts/release.sh" image 2>"$WORK/release-image.log") ||
  { tail -n 20 "$WORK/release-image.log" >&2; fail "release.sh image"; }
[[ $(crane digest --insecure "$IMAGE:$VERSION") == "${REF#*@}" ]] ||
  fail "$IMAGE:$VERSION is not the pushed $REF"
"$REPO_ROOT/scripts/release.sh" sign "$REF" >"$WORK/release-sign.log" 2>&1 ||
  { cat "$WORK/release-sign.log" >&2; fail "release.sh sign"; }
"$REPO_ROOT/scripts/release.sh" attest "$REF" >"$WORK/release-attest.log" 2>&1 ||
  { tail -n 20 "$WORK/release-attest.log" >&2; fail "release.sh attest"; }
CHART_REF=$("$REPO_ROOT/scripts/release.sh" chart "$REF" 2>"$WORK/release-chart.log") ||
  { cat "$WORK/release-chart.log" >&2; fail "release.sh chart"; }
# The CLI job, for the platform this machine builds; the workflow's matrix
# builds each platform on its own runner.
cue=$("$REPO_ROOT/scripts/build-cue-wasm.sh")
mkdir -p dist
for platform in linux-amd64 linux-arm64 darwin-amd64 darwin-arm64; do
  "$REPO_ROOT/scripts/release-cli.sh" pack "$TAG" "$platform" "$REPO_ROOT/target/release/sigil" "$cue" dist >/dev/null ||
    fail "release-cli.sh pack $platform"
done
"$REPO_ROOT/scripts/release.sh" cli dist >"$WORK/release-cli.log" 2>&1 ||
  { cat "$WORK/release-cli.log" >&2; fail "release.sh cli"; }
log "the workflow's steps (scripts/release.sh image, sign, attest, chart, cli) took $((SECONDS - t)) s"
log "image $IMAGE:$VERSION = $REF, signed, with SBOM (spdxjson) and SLSA v1 provenance attestations"
log "chart $CHARTS/sigil:$VERSION = $CHART_REF, signed; $(cd dist && printf '%s ' *)"

# ---- Installed as docs/installation.md says ----------------------------------
cd "$REPO_ROOT"
steps=$(awk '/^## With Helm/ { s = 1 } s && /^```sh$/ { b = 1; next } b && /^```$/ { exit } b' docs/installation.md)
want="helm install sigil oci://ghcr.io/sigil-dev/charts/sigil --version $VERSION \\
  --namespace sigil-system --create-namespace
kubectl -n sigil-system rollout status deployment/sigil-controller deployment/sigil-webhook
sigil doctor      # checks what usually breaks, see docs/troubleshooting.md"
[[ $steps == "$want" ]] || fail "docs/installation.md's install commands changed; follow them here too: $steps"
grep -qF "helm install sigil oci://ghcr.io/sigil-dev/charts/sigil --version $VERSION \\" README.md ||
  fail "README.md's install command is not docs/installation.md's"
# The earlier phases' sigil (installed from the checkout's chart) goes; its
# CRDs stay, as `helm uninstall` keeps them.
helm uninstall sigil -n "$SIGIL_NS" --wait --timeout 3m >/dev/null 2>&1 || true
# The released CLI, from its archive, is the `sigil` of the commands.
mkdir -p "$WORK/cli"
tar -xzf "$WORK/release/dist/sigil-$VERSION-linux-amd64.tar.gz" -C "$WORK/cli"
PATH=$WORK/cli/sigil-$VERSION-linux-amd64/bin:$PATH
install=${steps//"oci://ghcr.io/sigil-dev/charts/sigil"/"oci://$REG/sigil-dev/charts/sigil"}
# The registry speaks plain HTTP: helm and sigil are told so.
install=${install//"--create-namespace"/"--create-namespace --plain-http --set insecureRegistries={$REG}"}
install=${install//"rollout status"/"rollout status --timeout 5m"}
install=${install//"sigil-system"/"$SIGIL_NS"}
log "installing as docs/installation.md says, the registry changed:"
printf '  %s\n' "${install//$'\n'/$'\n  '}" >&2
t=$SECONDS
doctor=$(tail -n 1 <<<"$install")
(cd "$WORK" && bash -euo pipefail -c "$(sed '$d' <<<"$install")") >"$WORK/install.log" 2>&1 ||
  { cat "$WORK/install.log" >&2; fail "the documented install failed"; }
tail -n 2 "$WORK/install.log" | sed 's/^/  /' >&2
log "helm install and rollout status took $((SECONDS - t)) s"
# sigil doctor right after the rollout can find the webhooks without their
# caBundle: the controller writes it once it leads, and a controller of an
# earlier installation may still hold the Lease. Asked again, bounded.
passed=0
for ((i = 1; i <= 24; i++)); do
  if (cd "$WORK" && bash -euo pipefail -c "$doctor") >"$WORK/doctor.log" 2>&1; then
    passed=1
    break
  fi
  if ((i == 1)); then grep '^\[FAIL\]' "$WORK/doctor.log" | sed 's/^/  first sigil doctor: /' >&2 || true; fi
  sleep 5
done
((passed)) || { cat "$WORK/doctor.log" >&2; fail "sigil doctor still fails 2 minutes after the install"; }
log "sigil doctor (the released CLI) passed after $i attempt(s): $(tail -n 1 "$WORK/doctor.log")"
running=$(kubectl -n "$SIGIL_NS" get deployment sigil-webhook -o jsonpath='{.spec.template.spec.containers[0].image}')
[[ $running == "$REF" ]] || fail "the installed webhook runs $running, not the released $REF"
log "installed from $CHARTS/sigil --version $VERSION in $((SECONDS - t)) s; the webhook runs $running"

# ---- sigil judges its own image with the documented policy -------------------
pub=$WORK/release.pub
python3 - deploy/examples/sigil-releases.yaml "$REG" "$pub" >"$WORK/sigil-releases.yaml" <<'PY'
import sys, yaml
path, reg, pub = sys.argv[1:]
# Multi-line strings (the key) as literal blocks, as a person writes them.
yaml.add_representer(str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None),
                     Dumper=yaml.SafeDumper)
doc = yaml.safe_load(open(path))
spec = doc["spec"]
# The registry: ghcr.io becomes the node's.
for image in spec["images"]:
    assert image["glob"].startswith("ghcr.io/"), image
    image["glob"] = reg + image["glob"][len("ghcr.io"):]
# The signer: the workflow's keyless identity becomes the rehearsal's key,
# whose signatures have no transparency log entry.
(authority,) = spec["authorities"]
assert "keyless" in authority, authority
del authority["keyless"]
authority["key"] = {"data": open(pub).read()}
authority["ctlog"] = {}
print(yaml.safe_dump(doc, sort_keys=False), end="")
PY
log "deploy/examples/sigil-releases.yaml, with the registry and the signer substituted:"
diff <(python3 -c 'import sys, yaml; print(yaml.safe_dump(yaml.safe_load(open(sys.argv[1])), sort_keys=False), end="")' \
  deploy/examples/sigil-releases.yaml) "$WORK/sigil-releases.yaml" | sed 's/^/  /' >&2 || true
kubectl apply -f "$WORK/sigil-releases.yaml" >/dev/null
kubectl wait --for=condition=Ready clusterimagepolicy/sigil-releases --timeout 60s >/dev/null ||
  fail "ClusterImagePolicy sigil-releases did not become Ready"
NS=e2e-release
kubectl create namespace "$NS" >/dev/null
kubectl label namespace "$NS" policy.sigil.dev/include=true >/dev/null
cleanup_policy() {
  kubectl delete namespace "$NS" --wait=false >/dev/null 2>&1 || true
  kubectl delete clusterimagepolicy sigil-releases >/dev/null 2>&1 || true
}
trap cleanup_policy EXIT
# By tag, as a user names it: sigil pins it to the digest it verified.
kubectl -n "$NS" run sigil-itself --image "$IMAGE:$VERSION" --restart=Never --command -- sigil --version \
  >"$WORK/run.log" 2>&1 || { cat "$WORK/run.log" >&2; fail "sigil denied its own released image"; }
pinned=$(kubectl -n "$NS" get pod sigil-itself -o jsonpath='{.spec.containers[0].image}')
[[ $pinned == "$IMAGE"*"@${REF#*@}" ]] || fail "the pod runs $pinned, not the verified digest ${REF#*@}"
for _ in $(seq 120); do
  phase=$(kubectl -n "$NS" get pod sigil-itself -o jsonpath='{.status.phase}')
  [[ $phase == Succeeded || $phase == Failed ]] && break
  sleep 1
done
[[ $phase == Succeeded ]] || fail "the pod of sigil's own image ended $phase"
said=$(kubectl -n "$NS" logs sigil-itself | head -n 1)
log "sigil admitted its own image $IMAGE:$VERSION (pinned to ${REF#*@}); the pod ran and said: $said"
# The same repository, an image no release key signed: denied.
crane copy --insecure "$UNSIGNED" "$IMAGE:unsigned" >/dev/null 2>&1 || fail "crane copy $UNSIGNED"
if kubectl -n "$NS" run sigil-unsigned --image "$IMAGE:unsigned" --restart=Never --dry-run=server \
  >"$WORK/denied.log" 2>&1; then
  fail "sigil admitted $IMAGE:unsigned, which no release key signed"
fi
grep -q 'denied the request' "$WORK/denied.log" || { cat "$WORK/denied.log" >&2; fail "no denial for $IMAGE:unsigned"; }
log "sigil denied $IMAGE:unsigned: $(grep -o 'policy sigil-releases failed.*' "$WORK/denied.log" | head -n 1 | cut -c1-200)"

# ---- docs/installation.md's "Verifying a release" ------------------------------
verify=$(awk '/^## Verifying a release/ { s = 1 } s && /^```sh$/ { b = 1; next } b && /^```$/ { exit } b' docs/installation.md)
# shellcheck disable=SC2016 # the commands' own variables, expanded when they run
grep -qF -- '--certificate-identity-regexp "$ID" --certificate-oidc-issuer "$ISSUER"' <<<"$verify" ||
  fail "docs/installation.md's verification commands changed; follow them here too"
verify=${verify//"ghcr.io/sigil-dev/"/"$REG/sigil-dev/"}
verify=${verify//":0.1.0"/":$VERSION"}
verify=${verify//"sigil-0.1.0-"/"sigil-$VERSION-"}
# The identity flags become the key (no log entry), and a plain-HTTP registry.
# shellcheck disable=SC2016 # as above
verify=$(sed -e '/^cosign verify-blob/,/ISSUER"$/ s|--certificate-identity-regexp "$ID" --certificate-oidc-issuer "$ISSUER"|--key "$PUB" --insecure-ignore-tlog|' \
  -e 's|--certificate-identity-regexp "$ID" --certificate-oidc-issuer "$ISSUER"|--key "$PUB" --insecure-ignore-tlog --allow-insecure-registry|' <<<"$verify")
log "docs/installation.md's verification commands, the registry and the signer substituted:"
printf '  %s\n' "${verify//$'\n'/$'\n  '}" >&2
(cd "$WORK/release/dist" && sha256sum -c --quiet SHA256SUMS && PUB=$pub bash -euo pipefail -c "$verify") \
  >"$WORK/verify.log" 2>&1 || { cat "$WORK/verify.log" >&2; fail "the documented verification failed"; }
log "every documented verification passed (image, provenance, SBOM, chart, CLI archive; SHA256SUMS)"
