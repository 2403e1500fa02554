# shellcheck shell=bash
# The node of the local cluster (`e2e/local-cluster.sh up --node`), sourced by
# e2e/local-cluster.sh: kube-scheduler, containerd + runc + CNI (Debian's
# packages), kubelet and kube-proxy on this machine, and a registry the node
# pulls from. See e2e/node/README.md for the layout and the reasons.
#
# Uses from local-cluster.sh: STATE, RUN, LOGS, PKI, BIN, log, die, start,
# stop, is_running, sign, write_kubeconfig, SERVICE_CIDR.

NODE_NAME=sigil-node
# The node's network: a bridge this script makes, the node's address on it
# (the pods' gateway, and where the API server and the registry listen), and
# the pods' addresses. Nothing is routed off the machine: ipMasq is off and a
# FORWARD rule drops anything crossing between the bridge and another interface.
BRIDGE=sigil0
NODE_IP=10.244.0.1
POD_CIDR=10.244.0.0/24
FIREWALL_CHAIN=SIGIL-NODE-FORWARD
# DNAT from the node address to services on 127.0.0.1 (`expose`).
EXPOSE_CHAIN=SIGIL-NODE-EXPOSE
# One node cluster per machine: bridge, addresses, iptables and cgroup names
# are machine-wide. This file names the state directory of the one that is up.
NODE_OWNER=/run/sigil-e2e-node.owner
# What kubelet, the bridge plugin and this script may change, restored by down.
NODE_SYSCTLS=(
    net.ipv4.ip_forward
    net.bridge.bridge-nf-call-iptables
    vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
    kernel.keys.root_maxkeys kernel.keys.root_maxbytes
)
# openssl: the node scenarios (e2e/suite/tests/node.rs) mint a short-lived
# serving certificate and read the one each webhook pod serves with it.
NODE_PACKAGES=(containerd runc containernetworking-plugins iptables openssl)
CNI_BIN=/usr/lib/cni
CONTAINERD_SOCK=$RUN/containerd.sock
NODE_DIR=$STATE/node
# Directories outside the state dir that containerd and kubelet insist on
# creating; removed by down when they did not exist before up.
NODE_HOST_DIRS=(/var/log/containers /run/containerd)

node_pid_alive() { [[ -n $1 ]] && kill -0 "$1" 2>/dev/null; }

# --- preflight ------------------------------------------------------------------------

node_packages() {
    local missing=() p
    for p in "${NODE_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    [[ $(id -u) == 0 ]] || die "the node needs Debian packages ${missing[*]}: run as root (apt-get install)"
    log "apt-get install ${missing[*]}"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2; then
        apt-get update >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2 ||
            die "apt-get install ${missing[*]} failed"
    fi
}

node_preflight() {
    [[ $(id -u) == 0 ]] || die "the node needs root (network, mounts, cgroups, containers)"
    [[ -d /sys/fs/cgroup/memory ]] || die "the node expects cgroup v1 with a memory hierarchy at /sys/fs/cgroup/memory"
    node_packages
    local b
    for b in containerd containerd-shim-runc-v2 ctr runc iptables iptables-save ip6tables-save openssl; do
        command -v "$b" >/dev/null 2>&1 || die "'$b' is missing after installing ${NODE_PACKAGES[*]}"
    done
    for b in bridge host-local loopback portmap; do
        [[ -x $CNI_BIN/$b ]] || die "CNI plugin $CNI_BIN/$b is missing (Debian: containernetworking-plugins)"
    done
    command -v go >/dev/null 2>&1 || die "'go' is needed to build the pause program"
    if [[ -f $NODE_OWNER ]]; then
        local owner
        owner=$(<"$NODE_OWNER")
        if [[ $owner != "$STATE" && -d $owner ]]; then
            die "another node cluster is up (state $owner); stop it first: SIGIL_E2E_STATE=$owner e2e/local-cluster.sh down"
        fi
    fi
    if ip link show "$BRIDGE" >/dev/null 2>&1; then
        die "interface $BRIDGE exists already (a node cluster whose state was lost?); remove it: ip link delete $BRIDGE"
    fi
    if ip -4 route show to match "$NODE_IP" | grep -qv '^default'; then
        die "$POD_CIDR overlaps a route of this machine: $(ip -4 route show to match "$NODE_IP" | grep -v '^default')"
    fi
}

# --- what the machine looks like (the leftovers check compares two of these) --------

# Everything `up --node` may add to the machine outside its state directory,
# one item a line, sorted: interfaces, routes, addresses, iptables rules (no
# counters), mounts, network namespaces, top-level cgroups, sysctls, the
# directories containerd and kubelet make, and the processes of a node.
footprint() {
    # Each part may find nothing (grep then fails): the list is what it is.
    {
        ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); print "link " $2}' || true
        ip -4 route show | sed 's/^/route4 /' || true
        ip -o addr show | awk '{print "addr " $2 " " $4}' || true
        # Rules, chains other than the built-in ones, and built-in chains'
        # policies other than ACCEPT. (An empty table that iptables once made
        # is no rule; without nft it cannot be removed either.)
        local t
        for t in iptables-save ip6tables-save; do
            command -v "$t" >/dev/null 2>&1 || continue
            { "$t" 2>/dev/null || true; } | awk -v t="$t" '
                /^\*/ {table = substr($0, 2)}
                /^-A / {print t " " table " " $0}
                /^:/ {
                    builtin = $1 ~ /^:(PREROUTING|INPUT|FORWARD|OUTPUT|POSTROUTING)$/
                    if (!builtin || $2 != "ACCEPT") print t " " table " " $1 " " $2
                }'
        done
        awk '{print "mount " $5 " " $(NF-2)}' /proc/self/mountinfo || true
        find /run/netns -mindepth 1 -maxdepth 1 -printf 'netns %f\n' 2>/dev/null || true
        # Top-level cgroups a node makes (kubelet's kubepods, containerd's);
        # this machine's own agents make others as they please.
        local h
        for h in /sys/fs/cgroup/*/; do
            find "$h" -mindepth 1 -maxdepth 1 -type d \( -name '*kubepods*' -o -name '*containerd*' -o -name '*sigil*' \) \
                -printf "cgroup $(basename "$h")/%f\n" 2>/dev/null || true
        done
        local s
        for s in "${NODE_SYSCTLS[@]}"; do
            printf 'sysctl %s=%s\n' "$s" "$(sysctl -n "$s" 2>/dev/null || echo absent)"
        done
        local d
        for d in "${NODE_HOST_DIRS[@]}"; do
            [[ -e $d ]] && printf 'dir %s\n' "$d"
        done
        local p exe
        for p in /proc/[0-9]*; do
            exe=$(readlink "$p/exe" 2>/dev/null) || continue
            case ${exe##*/} in
                containerd | containerd-shim* | runc | kubelet | kube-proxy | kube-scheduler | pause)
                    printf 'process %s\n' "${exe##*/}" ;;
            esac
            if grep -q kubepods "$p/cgroup" 2>/dev/null; then printf 'process in kubepods: %s\n' "${exe##*/}"; fi
        done
    } | sort
}

# --- network ----------------------------------------------------------------------------

node_network_up() {
    mkdir -p -- "$NODE_DIR"
    printf '%s\n' "$STATE" >"$NODE_OWNER"
    local s
    for s in "${NODE_SYSCTLS[@]}"; do
        printf '%s=%s\n' "$s" "$(sysctl -n "$s" 2>/dev/null || echo absent)"
    done >"$NODE_DIR/sysctl.before"
    for s in "${NODE_HOST_DIRS[@]}"; do
        [[ -e $s ]] && printf '%s\n' "$s"
    done >"$NODE_DIR/dirs.before"
    node_chains >"$NODE_DIR/chains.before"
    node_cgroups >"$NODE_DIR/cgroups.before"
    ip link add "$BRIDGE" type bridge
    ip addr add "$NODE_IP/${POD_CIDR#*/}" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    # The API server reaches Service IPs (the webhook's) through kube-proxy's
    # DNAT in OUTPUT; this route makes it pick the node address as source and
    # keeps a Service IP without rules on the bridge instead of the default route.
    ip route add "$SERVICE_CIDR" dev "$BRIDGE" src "$NODE_IP"
    iptables -N "$FIREWALL_CHAIN"
    iptables -A "$FIREWALL_CHAIN" -i "$BRIDGE" ! -o "$BRIDGE" -j DROP
    iptables -A "$FIREWALL_CHAIN" ! -i "$BRIDGE" -o "$BRIDGE" -j DROP
    iptables -I FORWARD 1 -j "$FIREWALL_CHAIN"
    iptables -t nat -N "$EXPOSE_CHAIN"
    iptables -t nat -I PREROUTING 1 -i "$BRIDGE" -d "$NODE_IP" -j "$EXPOSE_CHAIN"
    iptables -t nat -I OUTPUT 1 -d "$NODE_IP" -j "$EXPOSE_CHAIN"
    log "node network: bridge $BRIDGE $NODE_IP, pods $POD_CIDR, nothing forwarded off the bridge"
}

# node_expose PORT...: pods (and the host) reach 127.0.0.1:PORT at
# $NODE_IP:PORT. The registries of the tests listen on loopback only; this is
# how kube-proxy serves NodePorts on localhost (DNAT, route_localnet on the
# bridge alone).
node_expose() {
    local port
    sysctl -q -w "net.ipv4.conf.$BRIDGE.route_localnet=1" >/dev/null
    for port in "$@"; do
        [[ $port =~ ^[0-9]+$ ]] || die "expose: $port is not a port"
        iptables -t nat -A "$EXPOSE_CHAIN" -p tcp --dport "$port" -j DNAT --to-destination "127.0.0.1:$port"
        log "127.0.0.1:$port is reachable from pods at $NODE_IP:$port"
    done
}

# "TOOL TABLE CHAIN" for every chain of the tables kubelet and kube-proxy touch.
node_chains() {
    local tool table
    for tool in iptables ip6tables; do
        for table in filter nat mangle raw; do
            "$tool" -t "$table" -S 2>/dev/null | awk -v t="$tool $table" '$1 == "-N" {print t " " $2}'
        done
    done | sort
}

node_cgroups() {
    local h
    for h in /sys/fs/cgroup/*/; do
        find "$h" -mindepth 1 -maxdepth 1 -type d 2>/dev/null
    done | sort
}

# Removes the chains made since up (KUBE-*, CNI-*, ours) and the rules that
# jump to them, in iptables and ip6tables.
node_iptables_cleanup() {
    local before=$NODE_DIR/chains.before now tool table chain rule args
    [[ -f $before ]] || before=/dev/null
    now=$(node_chains | comm -13 "$before" - | awk '$3 ~ /^(KUBE-|CNI-|SIGIL-)/')
    [[ -n $now ]] || return 0
    while read -r tool table chain; do
        # Rules elsewhere that jump to this chain.
        { "$tool" -t "$table" -S 2>/dev/null || true; } | awk -v c="$chain" '$2 != c && $0 ~ ("-j " c "( |$)")' |
            while read -r rule; do
                # iptables -S quotes what needs quoting (comments): split as the shell would.
                eval "args=($rule)"
                "$tool" -t "$table" -D "${args[@]:1}" 2>/dev/null || true
            done
    done <<<"$now"
    while read -r tool table chain; do "$tool" -t "$table" -F "$chain" 2>/dev/null || true; done <<<"$now"
    while read -r tool table chain; do "$tool" -t "$table" -X "$chain" 2>/dev/null || true; done <<<"$now"
}

# cgroups made since up (kubelet's kubepods trees), deepest first.
node_cgroup_cleanup() {
    local before=$NODE_DIR/cgroups.before dir
    [[ -f $before ]] || return 0
    node_cgroups | comm -13 "$before" - | while read -r dir; do
        find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
}

node_network_down() {
    node_iptables_cleanup
    ip link delete "$BRIDGE" 2>/dev/null || true
    # A veth whose pod namespace is gone is gone with it; one left over is not ours to guess.
    if [[ -f $NODE_DIR/sysctl.before ]]; then
        local line
        while IFS= read -r line; do
            [[ $line == *=absent ]] && continue
            sysctl -q -w "$line" >/dev/null 2>&1 || log "could not restore sysctl $line"
        done <"$NODE_DIR/sysctl.before"
    fi
}

# --- images -------------------------------------------------------------------------------

# node_registry_up PORT: olareg on the node address, its store in the state dir.
node_registry_up() {
    local port=$1 tools
    tools=$("$REPO/scripts/install-tools.sh" olareg)
    mkdir -p -- "$NODE_DIR/registry"
    start node-registry "$tools/olareg" serve --addr "$NODE_IP" --port "$port" \
        --store-type dir --dir "$NODE_DIR/registry"
    local i
    for ((i = 0; i < 50; i++)); do
        curl -fsS -o /dev/null "http://$NODE_IP:$port/v2/" 2>/dev/null && return 0
        is_running node-registry || break
        sleep 0.2
    done
    tail_log node-registry
    die "the node registry did not answer on http://$NODE_IP:$port/v2/"
}

# node_push_pause REGISTRY: builds and pushes the pause image; prints its reference by digest.
node_push_pause() {
    local registry=$1 ref
    ref=$("$REPO/e2e/node/image.sh" pause "$NODE_DIR/pause" "$registry/sigil-e2e/pause:1") ||
        die "building or pushing the pause image failed"
    printf '%s\n' "$ref"
}

# --- containerd ---------------------------------------------------------------------------

node_containerd_up() {
    local registry=$1 pause=$2 d=$NODE_DIR/containerd
    mkdir -p -- "$d" "$NODE_DIR/cni/net.d" "$NODE_DIR/cni/ipam"
    cat >"$NODE_DIR/cni/net.d/10-sigil-e2e.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "sigil-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$NODE_DIR/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
    # restrict_oom_score_adj: this sandbox lacks CAP_SYS_RESOURCE, and runc
    # fails ("can't get final child's PID from pipe: EOF") when it may not
    # lower a container's oom_score_adj below its own.
    cat >"$d/config.toml" <<EOF
version = 2
root = "$d/root"
state = "$d/state"
[grpc]
  address = "$CONTAINERD_SOCK"
[plugins."io.containerd.internal.v1.opt"]
  path = "$d/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$NODE_DIR/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."$registry"]
    endpoint = ["http://$registry"]
EOF
    start containerd containerd --config "$d/config.toml"
    local i
    for ((i = 0; i < 100; i++)); do
        ctr --address "$CONTAINERD_SOCK" version >/dev/null 2>&1 && return 0
        is_running containerd || break
        sleep 0.2
    done
    tail_log containerd
    die "containerd did not answer on $CONTAINERD_SOCK"
}

# --- kubelet, kube-proxy, scheduler ------------------------------------------------------------

node_kubeconfigs() {
    local server=$1 client="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
    sign kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" "$client"
    sign kube-scheduler "/CN=system:kube-scheduler" "$client"
    sign kube-proxy "/CN=system:kube-proxy" "$client"
    write_kubeconfig "$STATE/kubelet.kubeconfig" kubelet "$server"
    write_kubeconfig "$STATE/kube-scheduler.kubeconfig" kube-scheduler "$server"
    write_kubeconfig "$STATE/kube-proxy.kubeconfig" kube-proxy "$server"
}

node_scheduler_up() {
    local port=$1
    start kube-scheduler "$BIN/kube-scheduler" \
        --kubeconfig="$STATE/kube-scheduler.kubeconfig" \
        --authentication-kubeconfig="$STATE/kube-scheduler.kubeconfig" \
        --authorization-kubeconfig="$STATE/kube-scheduler.kubeconfig" \
        --authentication-skip-lookup=true \
        --bind-address=127.0.0.1 --secure-port="$port" \
        --leader-elect=false --profiling=false
}

node_kubelet_up() {
    local port=$1 healthz=$2 d=$NODE_DIR/kubelet
    mkdir -p -- "$d/root" "$d/pod-logs" "$d/volume-plugins"
    # failCgroupV1 / cgroupDriver: this machine has cgroup v1 only and no systemd.
    # resolvConf "": pods get no resolver of the machine (they need no DNS).
    # syncFrequency 10s: mounted Secrets (the webhook certificate) follow
    # changes within seconds instead of a minute.
    cat >"$d/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
imageServiceEndpoint: unix://$CONTAINERD_SOCK
address: $NODE_IP
port: $port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: AlwaysAllow
clusterDomain: cluster.local
resolvConf: ""
podLogsDir: $d/pod-logs
volumePluginDir: $d/volume-plugins
syncFrequency: 10s
serializeImagePulls: false
failSwapOn: false
protectKernelDefaults: false
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
maxPods: 110
EOF
    start kubelet "$BIN/kubelet" \
        --config="$d/config.yaml" \
        --kubeconfig="$STATE/kubelet.kubeconfig" \
        --root-dir="$d/root" \
        --cert-dir="$d/pki" \
        --hostname-override="$NODE_NAME" \
        --node-ip="$NODE_IP" \
        --v=1
}

node_proxy_up() {
    local healthz=$1 metrics=$2 d=$NODE_DIR/kube-proxy
    mkdir -p -- "$d"
    # iptables mode; NodePorts only on the node address; conntrack sysctls
    # left alone (maxPerCore 0, timeouts 0).
    cat >"$d/config.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: $STATE/kube-proxy.kubeconfig
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:$healthz
metricsBindAddress: 127.0.0.1:$metrics
clusterCIDR: $POD_CIDR
nodePortAddresses: ["$NODE_IP/32"]
iptables:
  localhostNodePorts: false
  minSyncPeriod: 0s
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
    start kube-proxy "$BIN/kube-proxy" --config="$d/config.yaml" --v=1
}

node_ready() {
    "$BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" --request-timeout=3s get node "$NODE_NAME" \
        -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -qx True
}

proxy_ready() {
    # kube-proxy's healthz answers 200 once it has synced its rules.
    curl -fsS -o /dev/null "http://127.0.0.1:$KUBE_PROXY_HEALTHZ/healthz" 2>/dev/null
}

# --- teardown ------------------------------------------------------------------------------

# Stops the node in the order that leaves nothing behind: kubelet (no new
# pods), every sandbox through the CRI (CNI DEL: addresses, veths, netns),
# kube-proxy and its rules, containerd and any shim, then mounts, iptables,
# the bridge, cgroups, sysctls and directories made since up.
node_down() {
    stop kubelet kube-scheduler
    if is_running containerd; then
        "$BIN/cri-reset" -endpoint "unix://$CONTAINERD_SOCK" -timeout 90s >&2 ||
            log "cri-reset did not remove every sandbox; killing what is left"
    fi
    stop kube-proxy
    if [[ -f $NODE_DIR/kube-proxy/config.yaml ]]; then
        "$BIN/kube-proxy" --config="$NODE_DIR/kube-proxy/config.yaml" --cleanup >>"$LOGS/kube-proxy.log" 2>&1 || true
    fi
    stop containerd
    node_kill_leftovers
    node_unmount
    stop node-registry
    node_network_down
    node_cgroup_cleanup
    if [[ -f $NODE_DIR/dirs.before ]]; then
        local d
        for d in "${NODE_HOST_DIRS[@]}"; do
            grep -qx -- "$d" "$NODE_DIR/dirs.before" || rm -rf -- "$d"
        done
    fi
    if [[ -f $NODE_OWNER && $(<"$NODE_OWNER") == "$STATE" ]]; then rm -f -- "$NODE_OWNER"; fi
}

# Shims and container processes that outlived containerd: anything whose
# command line names our containerd socket, and every process in a cgroup
# under the kubepods tree kubelet made.
node_kill_leftovers() {
    local pids=() p
    for p in /proc/[0-9]*; do
        if { tr '\0' ' ' <"$p/cmdline" 2>/dev/null || true; } | grep -qF -- "$CONTAINERD_SOCK" ||
            grep -q ':/kubepods' "$p/cgroup" 2>/dev/null; then
            pids+=("${p#/proc/}")
        fi
    done
    ((${#pids[@]})) || return 0
    log "killing ${#pids[@]} process(es) left by containers: ${pids[*]}"
    kill -KILL "${pids[@]}" 2>/dev/null || true
    local i
    for ((i = 0; i < 50; i++)); do
        local alive=0
        for p in "${pids[@]}"; do node_pid_alive "$p" && alive=1; done
        ((alive)) || return 0
        sleep 0.1
    done
}

# Every mount under the state directory (overlay roots, shm, Secret tmpfs,
# network namespaces), deepest first.
node_unmount() {
    local m
    awk -v s="$STATE/" 'index($5, s) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
    done
}
