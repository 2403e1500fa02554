#!/usr/bin/env bash
# make e2e-kind: the same end-to-end suite (e2e/suite) on a kind cluster, with
# sigil's image built by the same builder as `make image` (scripts/image.sh),
# pushed to a registry on the kind network and installed by its Helm chart
# pinned by digest, as a user runs it. For CI with a Docker engine
# (.github/workflows/e2e-kind.yaml); it cannot run on machines without one.
#
# Needs: docker, kind, kubectl, helm, Go (for cosign and crane via
# scripts/install-tools.sh), Rust, Python, apt-get (the image's base packages).
#
# Two registries run as containers on the kind network and are published on
# the host: olareg (referrers API) as sigil-olareg:5000 / 127.0.0.1:5001 and
# registry:2 (no referrers API) as sigil-dockreg:5000 / 127.0.0.1:5002. The
# host pushes and signs through 127.0.0.1; pods and the webhook pull through
# the container names, which SIGIL_E2E_REGISTRY_ALIAS tells the suite.
#
# sigil's image goes to olareg too: pushed as 127.0.0.1:5001/sigil, pulled by
# the node as sigil-olareg:5000/sigil@<digest> (containerd hosts.toml: plain HTTP).
#
# Environment: SIGIL_KIND_CLUSTER (default sigil-e2e), SIGIL_E2E_KEEP=1 leaves
# the cluster and registries up.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CLUSTER=${SIGIL_KIND_CLUSTER:-sigil-e2e}
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
  # containerd reads registry hosts from certs.d (written below, per node).
  printf '%s\n' 'kind: Cluster' 'apiVersion: kind.x-k8s.io/v1alpha4' 'containerdConfigPatches:' \
    '- |-' '  [plugins."io.containerd.grpc.v1.cri".registry]' \
    '    config_path = "/etc/containerd/certs.d"' >"${TMPDIR:-/tmp}/sigil-kind.yaml"
  kind create cluster --name "$CLUSTER" --config "${TMPDIR:-/tmp}/sigil-kind.yaml" --wait 120s
fi
for node in $(kind get nodes --name "$CLUSTER"); do
  docker exec "$node" mkdir -p /etc/containerd/certs.d/sigil-olareg:5000
  printf '%s\n' 'server = "http://sigil-olareg:5000"' '[host."http://sigil-olareg:5000"]' \
    '  capabilities = ["pull", "resolve"]' |
    docker exec -i "$node" tee /etc/containerd/certs.d/sigil-olareg:5000/hosts.toml >/dev/null
done
KUBECONFIG_FILE=$(mktemp "${TMPDIR:-/tmp}/sigil-kind-kubeconfig.XXXXXX")
kind get kubeconfig --name "$CLUSTER" >"$KUBECONFIG_FILE"
export KUBECONFIG=$KUBECONFIG_FILE

log "registries"
docker rm -f sigil-olareg sigil-dockreg >/dev/null 2>&1 || true
docker run -d --name sigil-olareg --network kind -p 127.0.0.1:5001:5000 \
  "$OLAREG_IMAGE" serve --port 5000 --store-type mem >/dev/null
docker run -d --name sigil-dockreg --network kind -p 127.0.0.1:5002:5000 \
  -e REGISTRY_STORAGE_DELETE_ENABLED=true "$DOCKREG_IMAGE" >/dev/null

log "image (scripts/image.sh, as make image)"
for ((i = 0; i < 50; i++)); do
  curl -fsS -o /dev/null http://127.0.0.1:5001/v2/ && break
  sleep 0.2
done
pushed=$(scripts/image.sh --push 127.0.0.1:5001/sigil:e2e)
digest=${pushed#*@}

log "chart"
# The ImagePolicy scenario's namespace exists before the chart binds the
# controller's read of its Secrets there (imagePolicies.referenceNamespaces).
kubectl create namespace e2e-image-policy --dry-run=client -o yaml | kubectl apply -f - >/dev/null
helm upgrade --install sigil charts/sigil --namespace "$NS" --create-namespace \
  --set image.repository=sigil-olareg:5000/sigil --set image.digest="$digest" \
  --set 'insecureRegistries={sigil-olareg:5000,sigil-dockreg:5000}' \
  --set webhook.timeoutSeconds=5 --set policyController.serve=true \
  --set "imagePolicies.referenceNamespaces={e2e-image-policy}" \
  --wait --timeout 5m

log "suite"
cargo build -q --workspace --all-targets
export SIGIL_FIXTURE_OLAREG=127.0.0.1:5001 SIGIL_FIXTURE_DOCKREG=127.0.0.1:5002
export SIGIL_E2E_REGISTRY_ALIAS=127.0.0.1:5001=sigil-olareg:5000,127.0.0.1:5002=sigil-dockreg:5000
export SIGIL_E2E_NAMESPACE=$NS
# The GitHub chart scenario's TUF mirror, where kind's nodes reach this host.
gateway=$(docker network inspect kind -f '{{range .IPAM.Config}}{{if .Gateway}}{{.Gateway}} {{end}}{{end}}' | awk '{print $1}')
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export SIGIL_E2E_TUF_MIRROR_ADDR=$gateway:$port
e2e/registry-fixtures.sh -- \
  cargo test -q --workspace --test e2e -- --ignored --test-threads 1
log "passed in $((SECONDS - start)) s"
rm -f "$KUBECONFIG_FILE"
