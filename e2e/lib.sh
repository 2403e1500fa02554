# shellcheck shell=bash
# Shared by e2e/run-local.sh and e2e/demo.sh: sigil installed into the local
# control plane (e2e/local-cluster.sh) with the Helm chart's out-of-cluster
# mode (webhook.url), its controller and webhook running as host processes.
#
# Also sourced by e2e/registry-fixtures.sh, e2e/kms-fixtures.sh and
# bench/policy-differential.sh for free_port, wait_url and push_image, which
# need nothing but crane on PATH. For sigil_up, callers set REPO_ROOT and have the local
# cluster's environment exported (eval "$(e2e/local-cluster.sh env)":
# KUBECONFIG, SIGIL_E2E_APISERVER, SIGIL_E2E_CA, kubectl on PATH).

SIGIL_NS=${SIGIL_NS:-sigil-system}

e2e_log() { printf '%s\n' "$*" >&2; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# wait_url URL SECONDS: until URL answers 2xx, polling every 0.2 s.
wait_url() {
  local url=$1 limit=$2 i
  for ((i = 0; i < limit * 5; i++)); do
    if curl -fsS -o /dev/null "$url" 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  return 1
}

# push_image REGISTRY REPO TAG CONTENT: a one-layer image from scratch (a
# hello.txt holding CONTENT, fixed owner and time, so the same content gives
# the same digest) pushed over plain HTTP with crane; prints its digest.
push_image() {
  local dir rc=0
  dir=$(mktemp -d "${TMPDIR:-/tmp}/sigil-layer.XXXXXX")
  echo "$4" >"$dir/hello.txt"
  tar -C "$dir" --owner=0 --group=0 --mtime=@0 -cf "$dir/layer.tar" hello.txt &&
    crane append --insecure --oci-empty-base -f "$dir/layer.tar" -t "$1/$2:$3" >/dev/null 2>&1 &&
    crane digest --insecure "$1/$2:$3" || rc=$?
  rm -rf -- "$dir"
  return "$rc"
}

# webhook_cert DIR: a CA and a serving certificate for 127.0.0.1 in DIR
# (ca.crt, tls.crt, tls.key), as the API server calls the webhook by URL.
webhook_cert() {
  local dir=$1
  mkdir -p "$dir"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=sigil e2e webhook CA" -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj "/CN=127.0.0.1" -keyout "$dir/tls.key" -out "$dir/tls.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$dir/ext.cnf"
  openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
    -CAcreateserial -days 2 -extfile "$dir/ext.cnf" -out "$dir/tls.crt" 2>/dev/null
}

# sa_kubeconfig SERVICEACCOUNT FILE: a kubeconfig for the local API server
# ($SIGIL_E2E_APISERVER, $SIGIL_E2E_CA) with a 2-hour token of that
# ServiceAccount in sigil's namespace.
sa_kubeconfig() {
  local sa=$1 file=$2 token
  token=$(kubectl create token "$sa" --namespace "$SIGIL_NS" --duration 2h)
  kubectl config --kubeconfig "$file" set-cluster local \
    --server "$SIGIL_E2E_APISERVER" --certificate-authority "$SIGIL_E2E_CA" --embed-certs >/dev/null
  kubectl config --kubeconfig "$file" set-credentials "$sa" --token "$token" >/dev/null
  kubectl config --kubeconfig "$file" set-context "$sa" --cluster local --user "$sa" >/dev/null
  kubectl config --kubeconfig "$file" use-context "$sa" >/dev/null
}

# sigil_up DIR TIMEOUT REGISTRY...: installs the chart (CRDs, RBAC, webhook
# configurations calling https://127.0.0.1:<port>; policy-controller's objects
# served as they are), starts sigil-controller
# and sigil-webhook from the dev build (SIGIL_E2E_PROFILE=release: the
# release one) with DIR for certificates, logs and
# pids, and waits until the webhook has loaded the controller's first policy
# snapshot. Registries are talked to in plain HTTP, and may be on loopback
# (sigil refuses loopback registries unless allowed: here they run on the
# host). Both read the CUE evaluator built by scripts/build-cue-wasm.sh (built
# first if missing; the image has it beside its binaries). Logs at
# ${SIGIL_E2E_RUST_LOG:-info}. Sets WEBHOOK_PORT, WEBHOOK_METRICS and
# CONTROLLER_METRICS.
sigil_up() {
  local dir=$1 timeout=$2
  shift 2
  local bin=${CARGO_TARGET_DIR:-$REPO_ROOT/target}/${SIGIL_E2E_PROFILE:-debug} cue
  mkdir -p "$dir"
  cue=$("$REPO_ROOT/scripts/build-cue-wasm.sh")
  webhook_cert "$dir/tls"
  WEBHOOK_PORT=$(free_port)
  local metrics controller
  metrics=$(free_port)
  controller=$(free_port)
  WEBHOOK_METRICS=http://127.0.0.1:$metrics
  # shellcheck disable=SC2034 # read by the scripts that source this file
  CONTROLLER_METRICS=http://127.0.0.1:$controller
  # The ImagePolicy scenario's namespace exists before the chart binds the
  # controller's read of its Secrets there (imagePolicies.referenceNamespaces).
  kubectl create namespace e2e-image-policy --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  helm upgrade --install sigil "$REPO_ROOT/charts/sigil" \
    --namespace "$SIGIL_NS" --create-namespace \
    --set webhook.deploy=false --set controller.deploy=false \
    --set webhook.url="https://127.0.0.1:$WEBHOOK_PORT" \
    --set-file webhook.caBundle="$dir/tls/ca.crt" \
    --set webhook.timeoutSeconds="$timeout" \
    --set policyController.serve=true \
    --set "imagePolicies.referenceNamespaces={e2e-image-policy}" \
    --set "exceptions.namespaces={e2e-exception}" >"$dir/helm.log" 2>&1 ||
    { cat "$dir/helm.log" >&2; return 1; }
  # Each component talks to the API server as its own ServiceAccount, so the
  # chart's RBAC is what the e2e suite exercises.
  sa_kubeconfig sigil-controller "$dir/controller.kubeconfig"
  sa_kubeconfig sigil-webhook "$dir/webhook.kubeconfig"
  # --tuf-offline: the built-in Sigstore roots stay the embedded ones; the
  # local cluster sends nothing beyond 127.0.0.1 (no TUF mirror).
  KUBECONFIG=$dir/controller.kubeconfig RUST_LOG=${SIGIL_E2E_RUST_LOG:-info} "$bin/sigil-controller" --namespace "$SIGIL_NS" --identity "$(hostname)-local" \
    --listen "127.0.0.1:$controller" --webhook-tls external --tuf-offline --cue-module "$cue" \
    --serve-policy-controller-objects \
    >"$dir/controller.log" 2>&1 &
  echo $! >"$dir/controller.pid"
  local insecure=() r
  for r in "$@"; do insecure+=(--insecure-registry "$r"); done
  KUBECONFIG=$dir/webhook.kubeconfig RUST_LOG=${SIGIL_E2E_RUST_LOG:-info} "$bin/sigil-webhook" --namespace "$SIGIL_NS" \
    --listen "127.0.0.1:$WEBHOOK_PORT" --metrics-listen "127.0.0.1:$metrics" \
    --tls-cert "$dir/tls/tls.crt" --tls-key "$dir/tls/tls.key" \
    --timeout-seconds "$timeout" --cue-module "$cue" \
    --policy-snapshot-secret "$SIGIL_NS/sigil-policy-snapshot" --pull-secrets kube \
    --allow-registry-address 127.0.0.0/8 --exception-namespace e2e-exception \
    "${insecure[@]}" >"$dir/webhook.log" 2>&1 &
  echo $! >"$dir/webhook.pid"
  if ! wait_url "$WEBHOOK_METRICS/readyz" 60; then
    e2e_log "sigil-webhook did not become ready within 60 s; its log:"
    tail -n 30 "$dir/webhook.log" >&2
    e2e_log "sigil-controller's log:"
    tail -n 30 "$dir/controller.log" >&2
    return 1
  fi
}

# sigil_down DIR: stops the processes sigil_up started (TERM, then KILL
# after 20 s) and keeps their logs.
sigil_down() {
  local dir=$1 name pid i
  for name in webhook controller; do
    [ -f "$dir/$name.pid" ] || continue
    pid=$(<"$dir/$name.pid")
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$dir/$name.pid"
  done
}
