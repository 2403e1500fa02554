#!/usr/bin/env bash
# Runs a real Kubernetes control plane (etcd, kube-apiserver,
# kube-controller-manager) as plain host processes on 127.0.0.1, for sigil's
# e2e tests and demo. Without a node, Pods stay Pending, but every object goes
# through the real admission chain, webhooks included. With --node (root):
# kube-scheduler, containerd, kubelet and kube-proxy too, on a bridge network
# of their own, so Pods run (e2e/node/README.md).
#
# Usage: e2e/local-cluster.sh up [--node]|down|env|status|footprint|expose PORT...|apiserver-flags [FLAG...]
#   up         build the binaries if needed (e2e/cluster/build.sh), start, wait until ready
#   down       stop every process (TERM, then KILL), undo the node's changes, remove the state
#   env        print shell exports for the running cluster: eval "$(e2e/local-cluster.sh env)"
#   status     say what runs; exit 0 only when the API server is ready
#   footprint  what a node may leave on this machine (links, routes, iptables, mounts, ...),
#              to compare before `up --node` and after `down`
#   expose PORT...  with a node: 127.0.0.1:PORT reachable from pods at the node address
#   apiserver-flags [FLAG...]  restart the API server with these flags besides its own
#              (for example --enable-aggregator-routing=true); none: its own only
# State: ${SIGIL_E2E_STATE:-<repo>/.cache/e2e/cluster} (certificates, kubeconfig, logs, pids).
# Binaries: $SIGIL_CLUSTER_BIN if set, else whatever e2e/cluster/build.sh prints.
# Ready timeout: ${SIGIL_E2E_TIMEOUT:-120} seconds (the node's first start: pause image, kubelet).
set -euo pipefail

REPO=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${SIGIL_E2E_STATE:-$REPO/.cache/e2e/cluster}
TIMEOUT=${SIGIL_E2E_TIMEOUT:-120}

# Started in this order.
CONTROL_PLANE=(etcd kube-apiserver kube-controller-manager)
COMPONENTS=("${CONTROL_PLANE[@]}")
# With --node, after those.
NODE_COMPONENTS=(kube-scheduler node-registry containerd kubelet kube-proxy)
NODE_CONTROLLERS=(node-lifecycle-controller taint-eviction-controller)
# Virtual addresses only: nothing routes them, the API server just allocates
# Service IPs from the range.
SERVICE_CIDR=10.96.0.0/16
KUBERNETES_SERVICE_IP=10.96.0.1
SA_ISSUER=https://kubernetes.default.svc.cluster.local
# The controllers that work without nodes or a cloud: enough for namespaces to
# get their `default` ServiceAccount, for workloads to create their Pods through
# admission, and for the aggregated admin/edit/view roles to get their rules.
CONTROLLERS=(
    serviceaccount-token-controller serviceaccount-controller namespace-controller
    garbage-collector-controller root-ca-certificate-publisher-controller
    clusterrole-aggregation-controller resourcequota-controller
    deployment-controller replicaset-controller replicationcontroller-controller
    statefulset-controller daemonset-controller job-controller cronjob-controller
    ttl-after-finished-controller disruption-controller pod-garbage-collector-controller
    endpoints-controller endpointslice-controller endpointslice-mirroring-controller
    service-cidr-controller validatingadmissionpolicy-status-controller
)

PKI=$STATE/pki
RUN=$STATE/run
LOGS=$STATE/logs
KUBECONFIG_FILE=$STATE/kubeconfig
# Ports and binary dir of the running cluster, written by `up`, sourced by the rest.
CLUSTER_ENV=$STATE/cluster.env
# Extra flags of the API server, one a line (`apiserver-flags`).
APISERVER_FLAGS=$STATE/apiserver.flags
# Whether this cluster has a node (set by `up --node`, or read from CLUSTER_ENV).
NODE=0
# The API server's address: loopback, or the node's address with a node (pods
# reach it there through the `kubernetes` Service).
API_ADDR=127.0.0.1
# shellcheck source=e2e/node/node.sh
. "$REPO/e2e/node/node.sh"

log() { printf 'local-cluster: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    sed -n '9,20s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
}

need() {
    command -v "$1" >/dev/null 2>&1 || die "'$1' is not on PATH; $2"
}

bin_dir() {
    if [[ -n ${SIGIL_CLUSTER_BIN:-} ]]; then
        printf '%s\n' "$SIGIL_CLUSTER_BIN"
    else
        "$REPO/e2e/cluster/build.sh"
    fi
}

# --- processes ---------------------------------------------------------------

pid_of() {
    local f=$RUN/$1.pid
    [[ -f $f ]] && cat -- "$f"
}

# True when the pidfile names a live process that is ours: a recycled pid
# belongs to a process whose command line does not mention this state dir.
is_running() {
    local pid cmdline
    pid=$(pid_of "$1") || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    cmdline=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
    [[ $cmdline == *"$STATE"* ]]
}

# Starts a component detached from our stdin/stdout, so a caller that reads our
# output (a pipe, $(...)) is not held open by the servers, and without our lock
# (fd 9), which a server would otherwise hold for its whole life.
start() {
    local name=$1
    shift
    log "starting $name"
    "$@" </dev/null >>"$LOGS/$name.log" 2>&1 9>&- &
    printf '%s\n' "$!" >"$RUN/$name.pid"
}

tail_log() {
    local name=$1
    log "last lines of $LOGS/$name.log:"
    tail -n 30 -- "$LOGS/$name.log" >&2 2>/dev/null || true
}

# The Kubernetes components drain at the same time; etcd goes last, because
# the API server's shutdown waits on it. A node goes first (node_down).
stop_all() {
    if ((NODE)); then node_down; fi
    stop kube-controller-manager kube-apiserver
    stop etcd
}

# stop NAME...: SIGTERM to each running one, up to 10 s for all of them to exit
# (the API server drains for a few), then SIGKILL for the rest.
stop() {
    local name pid waited=0 names=() pids=()
    for name in "$@"; do
        if is_running "$name"; then
            pid=$(pid_of "$name")
            kill -TERM "$pid" 2>/dev/null || true
            names+=("$name")
            pids+=("$pid")
        fi
        rm -f -- "$RUN/$name.pid"
    done
    ((${#pids[@]})) || return 0
    while any_alive "${pids[@]}" && ((waited < 100)); do
        sleep 0.1
        waited=$((waited + 1))
    done
    local i
    for i in "${!pids[@]}"; do
        if kill -0 "${pids[i]}" 2>/dev/null; then
            log "${names[i]} (pid ${pids[i]}) ignored SIGTERM for 10s; sending SIGKILL"
            kill -KILL "${pids[i]}" 2>/dev/null || true
        fi
    done
    log "stopped ${names[*]} in $((waited / 10)).$((waited % 10))s"
}

any_alive() {
    local pid
    for pid in "$@"; do
        kill -0 "$pid" 2>/dev/null && return 0
    done
    return 1
}

# --- certificates --------------------------------------------------------------

# P-256 keys: instant to generate, and every component accepts them.
new_key() {
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null
    chmod 600 -- "$1"
}

# sign NAME SUBJECT EXTENSIONS: a leaf key and certificate signed by the CA.
sign() {
    local name=$1 subject=$2 ext=$3
    new_key "$PKI/$name.key"
    openssl req -new -key "$PKI/$name.key" -subj "$subject" -out "$PKI/$name.csr" 2>/dev/null
    openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
        -CAcreateserial -days 30 -sha256 -extfile <(printf '%s\n' "$ext") \
        -out "$PKI/$name.crt" 2>/dev/null
    rm -f -- "$PKI/$name.csr"
}

make_pki() {
    mkdir -p -- "$PKI"
    new_key "$PKI/ca.key"
    openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=sigil-e2e-ca" -days 30 -sha256 \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out "$PKI/ca.crt" 2>/dev/null
    local client="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
    sign apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:$NODE_IP,IP:$KUBERNETES_SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    # system:masters bypasses RBAC: the e2e suite installs CRDs, RBAC and webhooks.
    sign admin "/O=system:masters/CN=sigil-e2e-admin" "$client"
    # The identity the bootstrap RBAC policy grants the controller manager.
    sign controller-manager "/CN=system:kube-controller-manager" "$client"
    new_key "$PKI/sa.key"
    openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
}

write_kubeconfig() {
    local file=$1 user=$2 server=$3
    cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sigil-e2e
  cluster:
    server: $server
    certificate-authority: $PKI/ca.crt
users:
- name: $user
  user:
    client-certificate: $PKI/$user.crt
    client-key: $PKI/$user.key
contexts:
- name: sigil-e2e
  context:
    cluster: sigil-e2e
    user: $user
current-context: sigil-e2e
EOF
    chmod 600 -- "$file"
}

# --- up ----------------------------------------------------------------------------

# N distinct ports the kernel has just said are free on 127.0.0.1.
free_ports() {
    python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

all_running() {
    local name
    for name in "${COMPONENTS[@]}"; do
        is_running "$name" || return 1
    done
}

default_sa_exists() {
    "$BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" --request-timeout=3s \
        get serviceaccount default --namespace default -o name >/dev/null 2>&1
}

apiserver_ready() {
    "$BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" --request-timeout=3s \
        get --raw /readyz >/dev/null 2>&1
}

started() {
    [[ -f $RUN/$1.pid ]]
}

# wait_for WHAT COMMAND...: polls COMMAND until it succeeds, a started component
# dies, or the deadline passes; either failure prints the relevant log and stops all.
wait_for() {
    local what=$1 name
    shift
    while ! "$@"; do
        for name in "${COMPONENTS[@]}"; do
            if started "$name" && ! is_running "$name"; then
                tail_log "$name"
                stop_all
                die "$name exited while waiting for $what (state kept in $STATE; 'down' removes it)"
            fi
        done
        if ((SECONDS >= DEADLINE)); then
            for name in "${COMPONENTS[@]}"; do
                if started "$name"; then tail_log "$name"; fi
            done
            stop_all
            die "timed out after ${TIMEOUT}s waiting for $what (state kept in $STATE; 'down' removes it)"
        fi
        sleep 0.5
    done
}

# A state dir left by an earlier run: its mode decides how to stop it.
load_mode() {
    if [[ -f $CLUSTER_ENV ]]; then
        # shellcheck source=/dev/null
        source "$CLUSTER_ENV"
    elif [[ -f $NODE_OWNER && $(<"$NODE_OWNER") == "$STATE" ]]; then
        NODE=1
    fi
}

cmd_up() {
    local want_node=$1
    need openssl "install OpenSSL (Debian: openssl)"
    need python3 "install Python 3 (used to find free ports)"
    BIN=$(bin_dir)
    local c
    for c in "${COMPONENTS[@]}" kubectl; do
        [[ -x $BIN/$c ]] || die "$BIN/$c is missing; run e2e/cluster/build.sh"
    done

    if [[ -d $STATE ]]; then
        load_mode
        if ((NODE)); then COMPONENTS+=("${NODE_COMPONENTS[@]}"); fi
        if ((NODE == want_node)) && all_running && apiserver_ready; then
            log "already up; KUBECONFIG=$KUBECONFIG_FILE"
            return
        fi
        log "removing the state of a cluster that is not running or of the other mode: $STATE"
        stop_all
        rm -rf -- "$STATE"
        COMPONENTS=("${CONTROL_PLANE[@]}")
    fi
    NODE=$want_node
    if ((NODE)); then
        node_preflight
        COMPONENTS+=("${NODE_COMPONENTS[@]}")
        API_ADDR=$NODE_IP
        for c in kube-scheduler kubelet kube-proxy cri-reset; do
            [[ -x $BIN/$c ]] || die "$BIN/$c is missing; run e2e/cluster/build.sh"
        done
    fi

    local t0=$SECONDS
    DEADLINE=$((SECONDS + TIMEOUT))
    mkdir -p -- "$RUN" "$LOGS" "$STATE/etcd" "$STATE/apiserver" "$STATE/controller-manager"
    chmod 700 -- "$STATE" "$STATE/etcd"
    make_pki

    local ports etcd_port peer_port api_port kcm_port sched_port kubelet_port kubelet_healthz
    local proxy_healthz proxy_metrics registry_port
    ports=$(free_ports 10)
    read -r etcd_port peer_port api_port kcm_port sched_port kubelet_port kubelet_healthz \
        proxy_healthz proxy_metrics registry_port <<<"$ports"
    local server=https://$API_ADDR:$api_port
    cat >"$CLUSTER_ENV" <<EOF
BIN=$(printf '%q' "$BIN")
NODE=$NODE
API_ADDR=$API_ADDR
ETCD_PORT=$etcd_port
ETCD_PEER_PORT=$peer_port
APISERVER_PORT=$api_port
CONTROLLER_MANAGER_PORT=$kcm_port
NODE_REGISTRY=$NODE_IP:$registry_port
KUBE_PROXY_HEALTHZ=$proxy_healthz
EOF
    KUBE_PROXY_HEALTHZ=$proxy_healthz
    write_kubeconfig "$KUBECONFIG_FILE" admin "$server"
    write_kubeconfig "$STATE/controller-manager.kubeconfig" controller-manager "$server"
    if ((NODE)); then
        node_kubeconfigs "$server"
        node_network_up
    fi
    local controllers=("${CONTROLLERS[@]}")
    if ((NODE)); then
        # The node lifecycle controller lifts the not-ready taint kubelet
        # registers with.
        controllers+=("${NODE_CONTROLLERS[@]}")
    fi

    # Plain HTTP, but only on loopback; the data is throwaway, so skipping
    # fsync costs nothing and makes a slow disk bearable.
    start etcd "$BIN/etcd" \
        --name=sigil-e2e \
        --data-dir="$STATE/etcd" \
        --listen-client-urls="http://127.0.0.1:$etcd_port" \
        --advertise-client-urls="http://127.0.0.1:$etcd_port" \
        --listen-peer-urls="http://127.0.0.1:$peer_port" \
        --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
        --initial-cluster="sigil-e2e=http://127.0.0.1:$peer_port" \
        --unsafe-no-fsync \
        --log-level=warn

    ETCD_PORT=$etcd_port APISERVER_PORT=$api_port start_apiserver

    # Only once the API server has bootstrapped its RBAC policy: before that the
    # controller manager may not read what it needs at startup, and exits.
    # --authentication-skip-lookup: the API server has no front proxy, so the
    # request-header CA the controller manager would look up does not exist.
    start kube-controller-manager "$BIN/kube-controller-manager" \
        --kubeconfig="$STATE/controller-manager.kubeconfig" \
        --authentication-kubeconfig="$STATE/controller-manager.kubeconfig" \
        --authorization-kubeconfig="$STATE/controller-manager.kubeconfig" \
        --authentication-skip-lookup=true \
        --client-ca-file="$PKI/ca.crt" \
        --bind-address=127.0.0.1 \
        --secure-port="$kcm_port" \
        --cert-dir="$STATE/controller-manager" \
        --leader-elect=false \
        --use-service-account-credentials=true \
        --service-account-private-key-file="$PKI/sa.key" \
        --root-ca-file="$PKI/ca.crt" \
        --controllers="$(IFS=,; printf '%s' "${controllers[*]}")" \
        --profiling=false
    wait_for "the default ServiceAccount in namespace default" default_sa_exists
    if ((NODE)); then
        node_scheduler_up "$sched_port"
        node_registry_up "$registry_port"
        local pause
        pause=$(node_push_pause "$NODE_IP:$registry_port")
        log "pause image $pause"
        node_containerd_up "$NODE_IP:$registry_port" "$pause"
        node_kubelet_up "$kubelet_port" "$kubelet_healthz"
        node_proxy_up "$proxy_healthz" "$proxy_metrics"
        wait_for "node $NODE_NAME to be Ready" node_ready
        wait_for "kube-proxy to sync its rules" proxy_ready
    fi
    log "up in $((SECONDS - t0))s: $server; KUBECONFIG=$KUBECONFIG_FILE"
}

# Starts the API server on the ports of CLUSTER_ENV (ETCD_PORT, APISERVER_PORT),
# with the extra flags `apiserver-flags` last set, and waits until it is ready.
# shellcheck disable=SC2153 # ETCD_PORT and APISERVER_PORT come from CLUSTER_ENV or the caller
start_apiserver() {
    local node_flags=() extra=()
    if ((NODE)); then
        # The API server publishes itself as the `kubernetes` Service's
        # endpoint (the node address; loopback is refused) and calls kubelets
        # with the admin identity (logs, exec). It reaches the kubelet by the
        # node's InternalIP: its hostname would be looked up with this
        # machine's resolver, which is off limits.
        node_flags=(--endpoint-reconciler-type=lease
            --kubelet-client-certificate="$PKI/admin.crt" --kubelet-client-key="$PKI/admin.key"
            --kubelet-preferred-address-types=InternalIP)
    else
        # --endpoint-reconciler-type=none: the reconciler would publish 127.0.0.1
        # as the `kubernetes` Service's endpoint, which validation refuses (loopback).
        node_flags=(--endpoint-reconciler-type=none)
    fi
    if [[ -s $APISERVER_FLAGS ]]; then mapfile -t extra <"$APISERVER_FLAGS"; fi
    start kube-apiserver "$BIN/kube-apiserver" \
        --bind-address="$API_ADDR" \
        --advertise-address="$API_ADDR" \
        --secure-port="$APISERVER_PORT" \
        --cert-dir="$STATE/apiserver" \
        --tls-cert-file="$PKI/apiserver.crt" \
        --tls-private-key-file="$PKI/apiserver.key" \
        --client-ca-file="$PKI/ca.crt" \
        --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
        --authorization-mode=Node,RBAC \
        --enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultStorageClass,ResourceQuota,NodeRestriction,MutatingAdmissionWebhook,ValidatingAdmissionWebhook \
        --service-cluster-ip-range="$SERVICE_CIDR" \
        --service-account-issuer="$SA_ISSUER" \
        --service-account-key-file="$PKI/sa.pub" \
        --service-account-signing-key-file="$PKI/sa.key" \
        "${node_flags[@]}" \
        --profiling=false \
        "${extra[@]}"
    wait_for "the API server's /readyz" apiserver_ready
}

# apiserver-flags FLAG...: restarts the running cluster's API server with
# these flags besides its own (none: only its own); they stay for later
# restarts of it until set again. Clients reconnect by themselves.
cmd_apiserver_flags() {
    load_state
    is_running kube-apiserver || die "the API server is not running; run 'e2e/local-cluster.sh up'"
    local flag
    for flag in "$@"; do
        [[ $flag == --[a-z]*=* ]] || die "apiserver-flags takes --name=value flags, not '$flag'"
    done
    printf '%s\n' "$@" >"$APISERVER_FLAGS"
    stop kube-apiserver
    DEADLINE=$((SECONDS + TIMEOUT))
    start_apiserver
    log "the API server runs with ${*:-its own flags only}"
}

# --- down, env, status -----------------------------------------------------------------

cmd_down() {
    if [[ ! -d $STATE ]]; then
        log "already down (no $STATE)"
        return
    fi
    load_mode
    BIN=${BIN:-$(bin_dir)}
    if ((NODE)); then COMPONENTS+=("${NODE_COMPONENTS[@]}"); fi
    stop_all
    rm -rf -- "$STATE"
    log "down; removed $STATE"
}

load_state() {
    [[ -f $CLUSTER_ENV ]] || die "no cluster state in $STATE; run 'e2e/local-cluster.sh up'"
    # shellcheck source=/dev/null
    source "$CLUSTER_ENV"
}

cmd_env() {
    load_state
    is_running kube-apiserver || die "the API server is not running; run 'e2e/local-cluster.sh up'"
    printf 'export KUBECONFIG=%q\n' "$KUBECONFIG_FILE"
    printf 'export SIGIL_E2E_APISERVER=%q\n' "https://$API_ADDR:$APISERVER_PORT"
    printf 'export SIGIL_E2E_CA=%q\n' "$PKI/ca.crt"
    # For tests that want a serving certificate the API server already trusts.
    printf 'export SIGIL_E2E_CA_KEY=%q\n' "$PKI/ca.key"
    printf 'export SIGIL_CLUSTER_BIN=%q\n' "$BIN"
    if ((NODE)); then
        # Where pods and the host both reach the node's registry and API server.
        printf 'export SIGIL_E2E_NODE_IP=%q\n' "$NODE_IP"
        printf 'export SIGIL_E2E_NODE_REGISTRY=%q\n' "$NODE_REGISTRY"
    fi
    # shellcheck disable=SC2016 # $PATH is for the shell that evals this.
    printf 'export PATH=%q:"$PATH"\n' "$BIN"
}

cmd_status() {
    if [[ ! -d $STATE ]]; then
        printf 'down (no %s)\n' "$STATE"
        return 1
    fi
    load_state
    if ((NODE)); then COMPONENTS+=("${NODE_COMPONENTS[@]}"); fi
    local name ok=0
    for name in "${COMPONENTS[@]}"; do
        if is_running "$name"; then
            printf '%-24s running (pid %s)\n' "$name" "$(pid_of "$name")"
        else
            printf '%-24s NOT running (log: %s)\n' "$name" "$LOGS/$name.log"
            ok=1
        fi
    done
    if is_running kube-apiserver && apiserver_ready; then
        printf '%-24s https://%s:%s/readyz ok\n' "api" "$API_ADDR" "$APISERVER_PORT"
    else
        printf '%-24s https://%s:%s/readyz NOT ready\n' "api" "$API_ADDR" "$APISERVER_PORT"
        ok=1
    fi
    printf '%-24s %s\n' "kubeconfig" "$KUBECONFIG_FILE"
    return "$ok"
}

# One up or down at a time. The lock file sits beside the state dir, which
# `down` removes.
lock() {
    if command -v flock >/dev/null 2>&1; then
        mkdir -p -- "$(dirname -- "$STATE")"
        exec 9>"$STATE.lock"
        flock 9
    fi
}

main() {
    local node=${SIGIL_E2E_NODE:-0}
    if (($# == 2)) && [[ $1 == up && $2 == --node ]]; then
        node=1
    elif [[ ${1:-} == apiserver-flags ]]; then
        shift
        lock
        cmd_apiserver_flags "$@"
        return
    elif [[ ${1:-} == expose ]] && (($# >= 2)); then
        load_state
        ((NODE)) || die "expose needs a cluster with a node (up --node)"
        shift
        node_expose "$@"
        return
    elif (($# != 1)); then
        usage
        exit 2
    fi
    case $1 in
        up) lock; cmd_up "$node" ;;
        down) lock; cmd_down ;;
        env) cmd_env ;;
        status) cmd_status ;;
        footprint) footprint ;;
        -h | --help | help) usage ;;
        *) usage; die "unknown command: $1" ;;
    esac
}

main "$@"
