#!/usr/bin/env bash
# make e2e-kind: the same end-to-end suite (e2e/suite) on a kind cluster, with
# sigil built into a container image and installed by its Helm chart, as a
# user runs it. For CI with a Docker engine (.github/workflows/e2e-kind.yaml);
# it cannot run on machines without one.
#
# Needs: docker, kind, kubectl, helm, Go (for cosign and crane via
# scripts/install-tools.sh), Rust.
#
# Two registries run as containers on the kind network and are published on
# the host: olareg (referrers API) as sigil-olareg:5000 / 127.0.0.1:5001 and
# registry:2 (no referrers API) as sigil-dockreg:5000 / 127.0.0.1:5002. The
# host pushes and signs through 127.0.0.1; pods and the webhook pull through
# the container names, which SIGIL_E2E_REGISTRY_ALIAS tells the suite.
#
# Environment: SIGIL_KIND_CLUSTER (default sigil-e2e), SIGIL_KIND_IMAGE
# (default sigil:e2e), SIGIL_E2E_KEEP=1 leaves the cluster and registries up.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CLUSTER=${SIGIL_KIND_CLUSTER:-sigil-e2e}
IMAGE=${SIGIL_KIND_IMAGE:-sigil:e2e}
NS=sigil-system
OLAREG_IMAGE=ghcr.io/olareg/olareg:v0.2.2
DOCKREG_IMAGE=registry:2.8.3

log() { printf 'e2e-kind: %s\n' "$*" >&2; }
need() { command -v "$1" >/dev/null 2>&1 || { log "'$1' is not on PATH"; exit 1; }; }
for tool in docker kind kubectl helm cargo go; do need "$tool"; done

cleanup() {
  local status=$?
  if [ "$status" != 0 ]; then
    log "failed; sigil's pods and logs:"
    kubectl -n "$NS" get pods -o wide >&2 || true
    kubectl -n "$NS" logs -l app.kubernetes.io/name=sigil --all-containers --tail=50 >&2 || true
  fi
  if [ "${SIGIL_E2E_KEEP:-}" != 1 ]; then
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
    docker rm -f sigil-olareg sigil-dockreg >/dev/null 2>&1 || true
  fi
  exit "$status"
}
trap cleanup EXIT

start=$SECONDS
if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  kind create cluster --name "$CLUSTER" --wait 120s
fi
KUBECONFIG_FILE=$(mktemp "${TMPDIR:-/tmp}/sigil-kind-kubeconfig.XXXXXX")
kind get kubeconfig --name "$CLUSTER" >"$KUBECONFIG_FILE"
export KUBECONFIG=$KUBECONFIG_FILE

log "registries"
docker rm -f sigil-olareg sigil-dockreg >/dev/null 2>&1 || true
docker run -d --name sigil-olareg --network kind -p 127.0.0.1:5001:5000 \
  "$OLAREG_IMAGE" serve --port 5000 --store-type mem >/dev/null
docker run -d --name sigil-dockreg --network kind -p 127.0.0.1:5002:5000 \
  -e REGISTRY_STORAGE_DELETE_ENABLED=true "$DOCKREG_IMAGE" >/dev/null

log "image $IMAGE"
docker build -t "$IMAGE" .
kind load docker-image "$IMAGE" --name "$CLUSTER"

log "chart"
helm upgrade --install sigil charts/sigil --namespace "$NS" --create-namespace \
  --set image.repository="${IMAGE%%:*}" --set image.tag="${IMAGE##*:}" \
  --set image.pullPolicy=Never \
  --set 'insecureRegistries={sigil-olareg:5000,sigil-dockreg:5000}' \
  --set webhook.timeoutSeconds=5 \
  --wait --timeout 5m

log "suite"
cargo build -q -p sigil-e2e --tests
export SIGIL_FIXTURE_OLAREG=127.0.0.1:5001 SIGIL_FIXTURE_DOCKREG=127.0.0.1:5002
export SIGIL_E2E_REGISTRY_ALIAS=127.0.0.1:5001=sigil-olareg:5000,127.0.0.1:5002=sigil-dockreg:5000
export SIGIL_E2E_NAMESPACE=$NS
e2e/registry-fixtures.sh -- \
  cargo test -q -p sigil-e2e --test e2e -- --ignored --test-threads 1
log "passed in $((SECONDS - start)) s"
rm -f "$KUBECONFIG_FILE"
