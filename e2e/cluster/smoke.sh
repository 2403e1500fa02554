#!/usr/bin/env bash
# Proves that the local control plane (e2e/local-cluster.sh) does what sigil's
# e2e suite relies on: namespaces get a default ServiceAccount, a Deployment
# creates a ReplicaSet that creates Pods through admission, and a validating
# webhook registered by URL on 127.0.0.1 is called, its deny message reaching
# both kubectl and the ReplicaSet's FailedCreate event. Then it takes the
# cluster down and checks that nothing is left running.
#
# Usage: e2e/cluster/smoke.sh
# State: ${SIGIL_E2E_STATE:-<repo>/.cache/e2e/smoke}, apart from a dev cluster's.
set -euo pipefail

HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd -- "$HERE/../.." && pwd)
export SIGIL_E2E_STATE=${SIGIL_E2E_STATE:-$REPO/.cache/e2e/smoke}
CLUSTER=$REPO/e2e/local-cluster.sh
WAIT_SECONDS=60
DENY='sigil-smoke: denied by the test webhook'

passed=0
failed=0
WORK=$(mktemp -d)
WEBHOOK_PID=""

log() { printf 'smoke: %s\n' "$*" >&2; }
pass() { passed=$((passed + 1)); log "ok: $*"; }
fail() { failed=$((failed + 1)); log "FAILED: $*"; }

cleanup() {
    if [[ -n $WEBHOOK_PID ]]; then
        kill "$WEBHOOK_PID" 2>/dev/null || true
    fi
    "$CLUSTER" down >/dev/null 2>&1 || true
    rm -rf -- "$WORK"
}
trap cleanup EXIT

# check DESCRIPTION COMMAND...: one pass or fail, from COMMAND's exit status.
check() {
    local what=$1
    shift
    if "$@"; then pass "$what"; else fail "$what"; fi
}

# says WORD COMMAND...: COMMAND's output (stdout and stderr) contains WORD.
says() {
    local word=$1 out
    shift
    out=$("$@" 2>&1) || true
    [[ $out == *"$word"* ]]
}

lists_system_namespaces() {
    local ns
    ns=$(kubectl get namespaces -o name) || return 1
    [[ $ns == *namespace/default* && $ns == *namespace/kube-system* ]]
}

# nothing_left PID...: none of the processes lives and the state dir is gone.
nothing_left() {
    local pid ok=0
    for pid in "$@"; do
        if kill -0 "$pid" 2>/dev/null; then
            log "pid $pid is still running"
            ok=1
        fi
    done
    if [[ -e $SIGIL_E2E_STATE ]]; then
        log "$SIGIL_E2E_STATE still exists"
        ok=1
    fi
    return "$ok"
}

# eventually DESCRIPTION COMMAND...: retries COMMAND for up to WAIT_SECONDS.
eventually() {
    local what=$1 deadline=$((SECONDS + WAIT_SECONDS))
    shift
    until "$@"; do
        if ((SECONDS >= deadline)); then
            fail "$what (gave up after ${WAIT_SECONDS}s)"
            return 1
        fi
        sleep 1
    done
    pass "$what"
}

count() {
    kubectl get "$@" -o name 2>/dev/null | grep -c . || true
}

pods_created() { (($(count pods -n sigil-smoke -l app=web) == 2)); }
replicaset_created() { (($(count replicasets -n sigil-smoke -l app=web) == 1)); }
namespace_has_default_sa() { kubectl get serviceaccount default -n "$1" -o name >/dev/null 2>&1; }

# The API server learns about a new webhook configuration asynchronously, so
# the first Pods after registering it may still be admitted: retry with fresh names.
pod_denied() {
    local out
    if out=$(kubectl run "denied-$RANDOM" -n sigil-smoke-deny --image=registry.invalid/denied:1 2>&1); then
        log "admitted before the webhook was active: $out"
        return 1
    fi
    printf '%s\n' "$out" >"$WORK/denied.txt"
    grep -qF -- "$DENY" "$WORK/denied.txt"
}

replicaset_failed_create() {
    kubectl get events -n sigil-smoke-deny --field-selector reason=FailedCreate \
        -o jsonpath='{range .items[*]}{.involvedObject.kind}: {.message}{"\n"}{end}' \
        >"$WORK/events.txt" 2>&1 || return 1
    grep -F -- "ReplicaSet: " "$WORK/events.txt" | grep -qF -- "$DENY"
}

start_webhook() {
    # Its own CA, so the caBundle in the registration is what makes TLS work.
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
        -subj /CN=smoke-webhook-ca -keyout "$WORK/ca.key" -out "$WORK/ca.crt" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign 2>/dev/null
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -subj /CN=127.0.0.1 -keyout "$WORK/tls.key" -out "$WORK/tls.csr" 2>/dev/null
    openssl x509 -req -in "$WORK/tls.csr" -CA "$WORK/ca.crt" -CAkey "$WORK/ca.key" \
        -CAcreateserial -days 1 -out "$WORK/tls.crt" 2>/dev/null \
        -extfile <(printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n')
    python3 "$HERE/deny-webhook.py" "$WORK/tls.crt" "$WORK/tls.key" "$WORK/port" \
        </dev/null 2>"$WORK/webhook.log" &
    WEBHOOK_PID=$!
    local i
    for ((i = 0; i < 100; i++)); do
        [[ -s $WORK/port ]] && return
        kill -0 "$WEBHOOK_PID" 2>/dev/null || break
        sleep 0.1
    done
    cat "$WORK/webhook.log" >&2
    log "the test webhook did not start"
    exit 1
}

register_webhook() {
    local port ca
    port=$(<"$WORK/port")
    ca=$(base64 -w0 <"$WORK/ca.crt")
    kubectl apply -f - >&2 <<EOF
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: sigil-smoke-deny
webhooks:
- name: deny.smoke.sigil.dev
  clientConfig:
    url: https://127.0.0.1:$port/validate
    caBundle: $ca
  rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    resources: ["pods"]
    operations: ["CREATE"]
  namespaceSelector:
    matchLabels:
      sigil-smoke: deny
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: ["v1"]
  timeoutSeconds: 5
EOF
}

main() {
    local t0 pids
    t0=$SECONDS
    "$CLUSTER" up
    log "up took $((SECONDS - t0))s"
    local exports
    exports=$("$CLUSTER" env)
    eval "$exports"
    check "a second 'up' is a no-op that says so" says 'already up' "$CLUSTER" up
    check "status reports the cluster ready" "$CLUSTER" status
    check "kubectl get namespaces lists default and kube-system" lists_system_namespaces

    kubectl create namespace sigil-smoke >&2
    eventually "namespace sigil-smoke gets a default ServiceAccount" namespace_has_default_sa sigil-smoke || true
    kubectl create deployment web -n sigil-smoke --image=registry.invalid/web:1 --replicas=2 >&2
    eventually "the Deployment creates a ReplicaSet" replicaset_created || true
    eventually "the ReplicaSet creates 2 Pods" pods_created || true

    start_webhook
    kubectl create namespace sigil-smoke-deny >&2
    kubectl label namespace sigil-smoke-deny sigil-smoke=deny >&2
    register_webhook
    eventually "kubectl run is denied with the webhook's message" pod_denied || true
    [[ -f $WORK/denied.txt ]] && log "kubectl said: $(<"$WORK/denied.txt")"
    kubectl create deployment blocked -n sigil-smoke-deny --image=registry.invalid/blocked:1 >&2
    eventually "the ReplicaSet records FailedCreate with the webhook's message" replicaset_failed_create || true
    [[ -f $WORK/events.txt ]] && log "events: $(head -n 1 "$WORK/events.txt")"

    pids=$(cat "$SIGIL_E2E_STATE"/run/*.pid)
    t0=$SECONDS
    "$CLUSTER" down
    log "down took $((SECONDS - t0))s"
    # shellcheck disable=SC2086 # one pid a word
    check "down stops every process and removes the state" nothing_left $pids
    check "a second 'down' is a no-op that says so" says 'already down' "$CLUSTER" down

    printf 'smoke: %d passed, %d failed\n' "$passed" "$failed"
    ((failed == 0))
}

main "$@"
