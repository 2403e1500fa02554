#!/usr/bin/env bash
# make demo / make demo-down: sigil admitting a signed pod and rejecting an
# unsigned one, on this machine, with nothing but the package registries.
#
#   e2e/demo.sh up     build, start a control plane and a registry, push and
#                      sign images, install sigil, apply a policy, try pods
#   e2e/demo.sh down   stop and remove everything `up` started
#
# The control plane is e2e/local-cluster.sh (kube-apiserver, etcd,
# kube-controller-manager built from Go modules); the registry is olareg
# (OCI referrers API); cosign v3 signs; sigil's controller and webhook run
# as host processes registered with the chart's webhook URL override.
#
# As root, the control plane gets the real node `make e2e-node` uses
# (e2e/local-cluster.sh up --node: kubelet, containerd, runc, CNI), the
# images are busybox pushed to the node's registry, and the signed pod runs:
# Running, by digest, its output in `kubectl logs`. Without root, when the
# node cannot start (another node cluster is up, no cgroup v1 memory
# hierarchy, ...), or with SIGIL_DEMO_NODE=0, the demo says why and shows
# admission only: the signed pod stays Pending, as no kubelet runs.
# State: ${SIGIL_DEMO_STATE:-<repo>/.cache/demo}, and the control plane's in
# the same path with -cluster appended.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT=$PWD
# shellcheck source=e2e/lib.sh
. e2e/lib.sh
STATE=${SIGIL_DEMO_STATE:-$REPO_ROOT/.cache/demo}
# The demo's control plane is its own, apart from the e2e suite's.
export SIGIL_E2E_STATE=$STATE-cluster

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
show() { printf '\033[2m$ %s\033[0m\n' "$*"; }

down() {
  if [ -d "$STATE" ]; then
    sigil_down "$STATE/sigil"
    if [ -f "$STATE/olareg.pid" ]; then
      kill "$(<"$STATE/olareg.pid")" 2>/dev/null || true
    fi
    rm -rf "$STATE"
  fi
  e2e/local-cluster.sh down
  echo "demo: everything stopped and removed"
}

up() {
  if [ -d "$STATE" ]; then
    echo "demo: already up (state in $STATE); run 'make demo-down' first" >&2
    exit 1
  fi
  mkdir -p "$STATE"
  local start=$SECONDS

  step "Building sigil and installing the tools (first run: several minutes)"
  local tools
  tools=$(scripts/install-tools.sh helm cosign crane olareg)
  export PATH="$tools:$PATH"
  cargo build -q -p sigil-cli -p sigil-webhook -p sigil-controller
  local sigil=${CARGO_TARGET_DIR:-$REPO_ROOT/target}/debug/sigil

  # A real node where the machine allows it, so that the signed pod runs.
  local node=0 why=""
  if [ "${SIGIL_DEMO_NODE:-1}" = 0 ]; then
    why="SIGIL_DEMO_NODE=0 asks for admission only"
  elif [ "$(id -u)" != 0 ]; then
    why="the node needs root, as 'make e2e-node' does (run 'sudo make demo' to see the pod run)"
  else
    step "Starting a local Kubernetes control plane with a node (kubelet, containerd, runc, CNI)"
    if e2e/local-cluster.sh up --node 2>&1 | tee "$STATE/node-up.log"; then
      node=1
    else
      why="the node did not start: $(grep -m1 'error:' "$STATE/node-up.log" || tail -n 1 "$STATE/node-up.log") (log: $STATE/node-up.log)"
      e2e/local-cluster.sh down >/dev/null 2>&1 || true
    fi
  fi
  if ((node == 0)); then
    step "Starting a local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager)"
    echo "No node: $why. This demo shows admission; pods stay Pending."
    e2e/local-cluster.sh up
  fi
  eval "$(e2e/local-cluster.sh env)"
  show "kubectl get --raw /version"
  kubectl get --raw /version | python3 -c 'import json,sys; v=json.load(sys.stdin); print("Kubernetes", v["gitVersion"])'

  local reg img
  if ((node)); then
    show "kubectl get nodes"
    kubectl get nodes
    # The node's registry: containerd pulls from it over plain HTTP.
    reg=$SIGIL_E2E_NODE_REGISTRY
    step "Pushing two busybox images to the node's registry ($reg) and signing one with cosign (v3 bundle, an OCI referrer)"
    for img in signed unsigned; do
      e2e/node/image.sh busybox "$STATE/image-$img" "$reg/demo/hello:$img" \
        --label "dev.sigil.demo.variant=$img" >/dev/null
    done
  else
    step "Starting an OCI registry (olareg, with the referrers API)"
    local port
    port=$(free_port)
    reg=127.0.0.1:$port
    olareg serve --addr 127.0.0.1 --port "$port" --store-type mem >"$STATE/olareg.log" 2>&1 &
    echo $! >"$STATE/olareg.pid"
    wait_url "http://$reg/v2/" 10 || { cat "$STATE/olareg.log" >&2; exit 1; }
    echo "registry at $reg"

    step "Pushing two images and signing one of them with cosign (v3 bundle, stored as an OCI referrer)"
    for img in signed unsigned; do
      mkdir -p "$STATE/layer-$img"
      echo "hello from the $img image" >"$STATE/layer-$img/hello.txt"
      tar -C "$STATE/layer-$img" --owner=0 --group=0 --mtime=@0 -cf "$STATE/$img.tar" hello.txt
      crane append --insecure --oci-empty-base -f "$STATE/$img.tar" -t "$reg/demo/hello:$img" >/dev/null 2>&1
    done
  fi
  (
    cd "$STATE"
    export COSIGN_PASSWORD='' COSIGN_YES=true HOME=$STATE TUF_ROOT=$STATE/tuf
    cosign generate-key-pair --output-key-prefix cosign >/dev/null 2>&1
    show "cosign sign --key cosign.key $reg/demo/hello@<digest of :signed>"
    cosign sign --key cosign.key --use-signing-config=false --tlog-upload=false \
      --allow-insecure-registry --yes \
      "$reg/demo/hello@$(crane digest --insecure "$reg/demo/hello:signed")" >"$STATE/cosign.log" 2>&1
  )
  echo "pushed $reg/demo/hello:signed (signed) and $reg/demo/hello:unsigned"

  step "Installing sigil with Helm; its controller and webhook run on this machine"
  sigil_up "$STATE/sigil" 10 "$reg"
  show "helm list -n $SIGIL_NS"
  helm list -n "$SIGIL_NS"

  step "Applying a ClusterImagePolicy: images under $reg/demo/ must be signed by the demo key"
  cat >"$STATE/policy.yaml" <<YAML
apiVersion: policy.sigil.dev/v1alpha1
kind: ClusterImagePolicy
metadata:
  name: demo-signed
spec:
  images:
  - glob: "$reg/demo/**"
  authorities:
  - name: demo-key
    key:
      data: |
$(sed 's/^/        /' "$STATE/cosign.pub")
    # cosign signed offline (no Rekor entry); accept key signatures without one.
    ctlog: {}
YAML
  show "kubectl apply -f policy.yaml"
  kubectl apply -f "$STATE/policy.yaml"
  kubectl wait --for=condition=Ready clusterimagepolicy/demo-signed --timeout=30s >/dev/null
  show "kubectl get clusterimagepolicies"
  kubectl get clusterimagepolicies

  step "Opting the namespace 'demo' in"
  kubectl create namespace demo >/dev/null
  show "kubectl label namespace demo policy.sigil.dev/include=true"
  kubectl label namespace demo policy.sigil.dev/include=true
  # The webhook enforces the policy once the controller's snapshot reaches it.
  local i
  for ((i = 0; i < 50; i++)); do
    kubectl run probe -n demo --image "$reg/demo/hello:signed" --dry-run=server >/dev/null 2>&1 && break
    sleep 0.2
  done

  step "A pod with the signed image is admitted, pinned to the digest sigil verified"
  if ((node)); then
    show "kubectl run signed -n demo --image $reg/demo/hello:signed -- sh -c 'echo ...; exec sleep 3600'"
    kubectl run signed -n demo --image "$reg/demo/hello:signed" -- \
      sh -c 'echo "hello from the signed image, verified by sigil"; exec sleep 3600'
  else
    show "kubectl run signed -n demo --image $reg/demo/hello:signed"
    kubectl run signed -n demo --image "$reg/demo/hello:signed"
  fi
  show "kubectl get pod signed -n demo -o jsonpath='{.spec.containers[0].image}'"
  kubectl get pod signed -n demo -o jsonpath='{.spec.containers[0].image}'
  echo
  if ((node)); then
    step "The kubelet pulls it by that digest and runs it"
    show "kubectl wait -n demo --for=condition=Ready pod/signed"
    if ! kubectl wait -n demo --for=condition=Ready pod/signed --timeout=120s; then
      kubectl describe pod signed -n demo >&2 || true
      echo "demo: the signed pod did not become Ready on the node" >&2
      exit 1
    fi
    show "kubectl get pod signed -n demo -o wide"
    kubectl get pod signed -n demo -o wide
    show "kubectl get pod signed -n demo -o jsonpath='{.status.containerStatuses[0].imageID}'"
    kubectl get pod signed -n demo -o jsonpath='{.status.containerStatuses[0].imageID}'
    echo
    show "kubectl logs signed -n demo"
    for ((i = 0; i < 25; i++)); do
      kubectl logs signed -n demo 2>/dev/null | grep -q . && break
      sleep 0.2
    done
    kubectl logs signed -n demo
  else
    echo "(no node: $why; the pod stays Pending, and admission is what this demo shows)"
  fi

  step "A pod with the unsigned image is rejected, and sigil says why"
  show "kubectl run unsigned -n demo --image $reg/demo/hello:unsigned"
  if kubectl run unsigned -n demo --image "$reg/demo/hello:unsigned"; then
    echo "demo: the unsigned pod was admitted; that is a bug" >&2
    exit 1
  fi

  step "The same verdict on your laptop, without a cluster"
  show "sigil policy test --policy policy.yaml --insecure-registry $reg $reg/demo/hello:unsigned"
  "$sigil" policy test --policy "$STATE/policy.yaml" --insecure-registry "$reg" \
    "$reg/demo/hello:unsigned" || true

  if ((node)); then
    step "Done in $((SECONDS - start)) s: the signed image runs, the unsigned one was refused"
  else
    step "Done in $((SECONDS - start)) s: admission only ($why)"
  fi
  cat <<EOF
The cluster keeps running. Try it yourself:
  eval "\$(SIGIL_E2E_STATE=$SIGIL_E2E_STATE e2e/local-cluster.sh env)"
  kubectl run again -n demo --image $reg/demo/hello:unsigned
Logs: $STATE/sigil/{controller,webhook}.log
Stop everything with: make demo-down
EOF
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) sed -n '5,6s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
esac
