#!/usr/bin/env bash
# make bench-cluster: sigil, sigstore/policy-controller and Kyverno side by
# side on the local cluster's real node, one at a time, on the same images,
# the same policy and the same load; writes docs/benchmarks.md.
#
# 1. Builds (cached): the cluster's binaries, the peers from Go modules
#    (bench/peers/build.sh), sigil's image (scripts/image.sh), the peers'
#    images (bench/peers/image.sh).
# 2. `e2e/local-cluster.sh up --node`; a benchmark registry (olareg on
#    127.0.0.1) behind a counting proxy (bench/counting-proxy.py) that pods
#    reach at the node address; N signed images (cosign, key-based, legacy
#    .sig format), N unsigned, a few signed in cosign's bundle format.
# 3. For each of sigil, policy-controller, Kyverno: install it from its own
#    chart or manifests (the images pushed to the node registry), apply the
#    equivalent key policy (bench/policies/), then measure with
#    bench/admission-load.py (server-side dry-run Pod creates):
#      install  time from apply/helm install to every Pod ready
#      policy   time from applying the policy to its first enforced verdicts
#      cold     every image once, one at a time: latency, registry requests
#               per image, CPU
#      warm     the same images twice more, one at a time; latency of the last
#      saturate CONCURRENCY clients for DURATION s: throughput, CPU per 1,000
#      memory   of the peer's Pods (cgroup v1), idle and after the run
#      bundle   whether cosign's bundle-format signatures are admitted
#      outage   the registry answering 503 for 10 s under a paced load
#      storm    N new images (each of SIGIL_BENCH_STORMS) arriving within a
#               few seconds, every registry request 50 ms late (the proxy's
#               latency file): latency, timeouts, registry requests per
#               image, and for sigil where the time went (its metrics)
#      change   the policy changed to another key
#      shares   sigil only, 3 webhook replicas: each replica's share of the
#               reviews under steady and saturating load, with connections
#               kept and ended by sigil, with the API server's default
#               routing and with --enable-aggregator-routing=true
#    Every verdict is judged; then the peer is removed, webhooks included.
# 4. `down`, and the footprint check (nothing left on the machine).
# 5. docs/benchmarks.md from the results (bench/report.py).
#
# Needs root (the node). Only one local cluster can run on a machine: where
# others may start one too, run it under a lock (`flock LOCKFILE make bench-cluster`).
# Environment: SIGIL_BENCH_IMAGES (N, default 100), SIGIL_BENCH_CONCURRENCY
# (default 8), SIGIL_BENCH_DURATION (seconds, default 30), SIGIL_BENCH_PEERS
# (default "sigil policy-controller kyverno kyverno-ivpol"; kyverno-ivpol is
# Kyverno with an ImageValidatingPolicy instead of a ClusterPolicy),
# SIGIL_BENCH_STORMS (storm sizes, default "100 500"), SIGIL_BENCH_NO_BUILD=1
# (use target/release as it is), SIGIL_BENCH_OUT (default docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT=$PWD
# shellcheck source=e2e/lib.sh
. e2e/lib.sh
export SIGIL_E2E_STATE=${SIGIL_E2E_STATE:-$REPO_ROOT/.cache/bench/cluster}
N=${SIGIL_BENCH_IMAGES:-100}
CONCURRENCY=${SIGIL_BENCH_CONCURRENCY:-8}
DURATION=${SIGIL_BENCH_DURATION:-30}
PEERS=${SIGIL_BENCH_PEERS:-sigil policy-controller kyverno kyverno-ivpol}
STORMS=${SIGIL_BENCH_STORMS:-100 500}
# Added to every registry request during a storm, in the proxy.
STORM_LATENCY_MS=50
# Webhook replicas of sigil while the shares are measured.
SHARE_REPLICAS=3
OUT=${SIGIL_BENCH_OUT:-$REPO_ROOT/docs/benchmarks.md}
RESULTS=$REPO_ROOT/.cache/bench/results
BUNDLE_IMAGES=5
# The outage load sends one request every 100 ms for about 22 s.
OUTAGE_PAIRS=110
NS=bench

log() { printf 'bench-cluster: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

in_range() { # VALUE MIN MAX
    [[ $1 =~ ^[0-9]+$ ]] && (($1 >= $2 && $1 <= $3))
}
in_range "$N" 1 5000 || die "SIGIL_BENCH_IMAGES must be 1..5000, not $N"
in_range "$CONCURRENCY" 1 256 || die "SIGIL_BENCH_CONCURRENCY must be 1..256, not $CONCURRENCY"
in_range "$DURATION" 1 3600 || die "SIGIL_BENCH_DURATION must be 1..3600 s, not $DURATION"
for p in $PEERS; do
    case $p in sigil | policy-controller | kyverno | kyverno-ivpol) ;; *) die "unknown peer $p in SIGIL_BENCH_PEERS" ;; esac
done
for n in $STORMS; do
    in_range "$n" 2 2000 || die "SIGIL_BENCH_STORMS sizes must be 2..2000, not $n"
done

# --- what each peer is ---------------------------------------------------------

peer_namespace() {
    case $1 in sigil) echo "$SIGIL_NS" ;; policy-controller) echo cosign-system ;; kyverno | kyverno-ivpol) echo kyverno ;; esac
}

# The webhook names the API server quotes when the peer denies (a regex).
peer_denied_by() {
    case $1 in
        sigil) echo '(mutate|validate)\.policy\.sigil\.dev' ;;
        policy-controller) echo 'policy\.sigstore\.dev' ;;
        kyverno | kyverno-ivpol) echo '[a-z.-]*kyverno[a-z.-]*' ;;
    esac
}

# --- measurements ----------------------------------------------------------------

now() { date +%s.%N; }
elapsed() { python3 -c 'import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 2))' "$1" "$2"; }

# The cgroup v1 directories of the Pods in namespace $2, hierarchy $1.
pod_cgroups() {
    local hierarchy=$1 ns=$2 uid dir
    for uid in $(kubectl -n "$ns" get pods -o jsonpath='{range .items[*]}{.metadata.uid}{"\n"}{end}'); do
        dir=$(find "/sys/fs/cgroup/$hierarchy/kubepods" -maxdepth 3 -type d -name "pod$uid" -print -quit 2>/dev/null)
        [[ -n $dir ]] || die "no $hierarchy cgroup for pod $uid in $ns (is the kubelet's cgroup driver cgroupfs?)"
        printf '%s\n' "$dir"
    done
}

# CPU nanoseconds used so far by the namespace's Pods.
cpu_ns() {
    local total=0 dir
    for dir in $(pod_cgroups cpuacct "$1"); do
        total=$((total + $(<"$dir/cpuacct.usage")))
    done
    echo "$total"
}

# Memory of the namespace's Pods as JSON: per Pod usage and rss, and the sums.
memory_json() {
    pod_cgroups memory "$1" | python3 -c '
import json, os, sys
pods = []
for d in sys.stdin.read().split():
    usage = int(open(os.path.join(d, "memory.usage_in_bytes")).read())
    stat = dict(l.split() for l in open(os.path.join(d, "memory.stat")))
    pods.append({"usage": usage, "rss": int(stat["total_rss"])})
print(json.dumps({"pods": len(pods), "usage": sum(p["usage"] for p in pods),
                  "rss": sum(p["rss"] for p in pods), "per_pod": pods}))'
}

registry_count() { curl -fsS "http://127.0.0.1:$PROXY_PORT/_count"; }

load() { # MODE TARGETS PEER [args]
    local mode=$1 targets=$2 peer=$3
    shift 3
    python3 bench/admission-load.py "$mode" --kubeconfig "$KUBECONFIG" --namespace "$NS" \
        --targets "$targets" --denied-by "$(peer_denied_by "$peer")" "$@"
}

# Seconds from START until both probes of TARGETS are judged as they say
# (polling); fails after 180 s.
wait_probes() { # PEER TARGETS START
    local peer=$1 targets=$2 start=$3 out
    while true; do
        out=$(load sequence "$targets" "$peer") || die "the load generator failed"
        if [[ $(jq -r '.correct' <<<"$out") == 2 ]]; then
            elapsed "$start" "$(now)"
            return 0
        fi
        if (($(printf '%.0f' "$(elapsed "$start" "$(now)")") > 180)); then
            log "$peer: the probes of $targets were not judged as expected within 180 s; last answers: $(jq -c '.examples' <<<"$out")"
            return 1
        fi
        sleep 0.5
    done
}

render_policy() { # PEER [KEY] -> YAML
    python3 bench/render-policy.py "bench/policies/$1.yaml" "$PROXY_REGISTRY" "${2:-$WORK/cosign.pub}"
}

# --- installing and removing the peers -------------------------------------------

install_peer() {
    local peer=$1
    case $peer in
        sigil)
            helm upgrade --install sigil charts/sigil --namespace "$SIGIL_NS" --create-namespace \
                --set image.repository="${SIGIL_IMAGE%@*}" --set image.digest="${SIGIL_IMAGE#*@}" \
                --set "insecureRegistries={$PROXY_REGISTRY,$SIGIL_E2E_NODE_REGISTRY}" \
                --set trustRoot.offline=true --wait --timeout 5m >"$WORK/helm-sigil.log" 2>&1 ||
                { cat "$WORK/helm-sigil.log" >&2; return 1; }
            ;;
        policy-controller)
            bench/peers/manifests.sh policy-controller "$PC_IMAGE" >"$WORK/policy-controller.yaml"
            kubectl apply --server-side -f "$WORK/policy-controller.yaml" >/dev/null
            kubectl -n cosign-system rollout status deployment/webhook --timeout 5m >&2
            ;;
        kyverno | kyverno-ivpol)
            bench/peers/manifests.sh kyverno "$KYVERNO_IMAGE" "$KYVERNOPRE_IMAGE" >"$WORK/kyverno.yaml"
            kubectl apply --server-side -f "$WORK/kyverno.yaml" >/dev/null
            kubectl -n kyverno rollout status deployment/kyverno-admission-controller --timeout 5m >&2
            ;;
    esac
}

# A policy is applied as soon as its CRD and validating webhook take it.
apply_policy() { # PEER [KEY]
    local peer=$1 i
    render_policy "$peer" "${2:-}" >"$WORK/policy-$peer.yaml"
    for ((i = 0; i < 60; i++)); do
        kubectl apply -f "$WORK/policy-$peer.yaml" >/dev/null 2>"$WORK/apply.err" && return 0
        sleep 1
    done
    cat "$WORK/apply.err" >&2
    return 1
}

remove_peer() {
    local peer=$1
    case $peer in
        sigil)
            kubectl delete clusterimagepolicies.policy.sigil.dev bench-key --ignore-not-found >/dev/null 2>&1 || true
            helm uninstall sigil --namespace "$SIGIL_NS" --wait >/dev/null 2>&1 || true
            kubectl delete namespace "$SIGIL_NS" --ignore-not-found --wait >/dev/null 2>&1 || true
            ;;
        policy-controller)
            kubectl delete -f "$WORK/policy-$peer.yaml" --ignore-not-found >/dev/null 2>&1 || true
            kubectl delete -f "$WORK/policy-controller.yaml" --ignore-not-found --wait >/dev/null 2>&1 || true
            ;;
        kyverno | kyverno-ivpol)
            kubectl delete -f "$WORK/policy-$peer.yaml" --ignore-not-found >/dev/null 2>&1 || true
            kubectl delete -f "$WORK/kyverno.yaml" --ignore-not-found --wait >/dev/null 2>&1 || true
            # Kyverno makes its webhook configurations itself, at run time.
            kubectl delete validatingwebhookconfigurations,mutatingwebhookconfigurations \
                -l webhook.kyverno.io/managed-by=kyverno --ignore-not-found >/dev/null 2>&1 || true
            ;;
    esac
    local left
    left=$(kubectl get validatingwebhookconfigurations,mutatingwebhookconfigurations -o name | grep -iE "$peer|sigstore|kyverno" || true)
    [[ -z $left ]] || die "webhook configurations of $peer are still there after removing it: $left"
}

# --- sigil's replicas ---------------------------------------------------------------

# The running, not terminating, webhook Pods of sigil, one name a line.
webhook_pods() {
    kubectl -n "$SIGIL_NS" get pods -l app.kubernetes.io/component=webhook -o json |
        jq -r '.items[] | select(.metadata.deletionTimestamp == null and .status.phase == "Running") | .metadata.name'
}

# Waits until exactly COUNT webhook Pods run (a rollout's old ones gone); 180 s at most.
wait_webhook_pods() { # COUNT
    local i
    for ((i = 0; i < 360; i++)); do
        if [[ $(webhook_pods | wc -l) == "$1" ]] &&
            [[ -z $(kubectl -n "$SIGIL_NS" get pods -l app.kubernetes.io/component=webhook -o json |
                jq -r '.items[] | select(.metadata.deletionTimestamp != null) | .metadata.name') ]]; then
            return 0
        fi
        sleep 0.5
    done
    log "sigil: $1 webhook Pods were not running alone within 180 s: $(webhook_pods | tr '\n' ' ')"
    return 1
}

# Every webhook Pod's /metrics (through the API server's Pod proxy) into DIR.
scrape_webhooks() { # DIR
    local pod
    rm -rf -- "$1"
    mkdir -p -- "$1"
    for pod in $(webhook_pods); do
        kubectl get --raw "/api/v1/namespaces/$SIGIL_NS/pods/$pod:9090/proxy/metrics" >"$1/$pod" ||
            die "could not read the metrics of $SIGIL_NS/$pod"
    done
}

# --- one peer, measured -------------------------------------------------------------

bench_peer() {
    local peer=$1 ns dir start ready enforced changed cpu0 cpu1 reg0 reg1 mem_idle mem_after
    ns=$(peer_namespace "$peer")
    dir=$RESULTS/$peer
    rm -rf -- "$dir"
    mkdir -p -- "$dir"
    log "$peer: installing"
    start=$(now)
    install_peer "$peer" || die "$peer did not install (above)"
    ready=$(elapsed "$start" "$(now)")
    log "$peer: every Pod ready ${ready} s after the apply"
    start=$(now)
    apply_policy "$peer" || die "$peer did not take its policy (above)"
    enforced=$(wait_probes "$peer" "$WORK/probe.targets" "$start") || die "$peer never enforced its policy"
    log "$peer: policy enforced ${enforced} s after the apply"
    jq -n --argjson ready "$ready" --argjson enforced "$enforced" --argjson pods \
        "$(kubectl -n "$ns" get pods -o json | jq '[.items[] | {name: .metadata.name, image: .spec.containers[0].image}]')" \
        '{ready_s: $ready, policy_enforced_s: $enforced, pods: $pods}' >"$dir/install.json"
    sleep 5
    mem_idle=$(memory_json "$ns")

    log "$peer: cold ($((2 * N)) images, one at a time)"
    cpu0=$(cpu_ns "$ns")
    reg0=$(registry_count)
    load sequence "$WORK/cold.targets" "$peer" >"$dir/cold.json"
    reg1=$(registry_count)
    cpu1=$(cpu_ns "$ns")
    jq --argjson reg $((reg1 - reg0)) --argjson cpu $((cpu1 - cpu0)) \
        '. + {registry_requests: $reg, cpu_ns: $cpu}' "$dir/cold.json" >"$dir/cold.json.tmp"
    mv -f -- "$dir/cold.json.tmp" "$dir/cold.json"

    log "$peer: warm (the same images, twice)"
    load sequence "$WORK/cold.targets" "$peer" >"$dir/warm1.json"
    reg0=$(registry_count)
    load sequence "$WORK/cold.targets" "$peer" >"$dir/warm.json"
    reg1=$(registry_count)
    jq --argjson reg $((reg1 - reg0)) '. + {registry_requests: $reg}' "$dir/warm.json" >"$dir/warm.json.tmp"
    mv -f -- "$dir/warm.json.tmp" "$dir/warm.json"

    log "$peer: saturation ($CONCURRENCY clients, $DURATION s)"
    cpu0=$(cpu_ns "$ns")
    load saturate "$WORK/cold.targets" "$peer" --concurrency "$CONCURRENCY" --duration "$DURATION" >"$dir/saturate.json"
    cpu1=$(cpu_ns "$ns")
    jq --argjson cpu $((cpu1 - cpu0)) '. + {cpu_ns: $cpu}' "$dir/saturate.json" >"$dir/saturate.json.tmp"
    mv -f -- "$dir/saturate.json.tmp" "$dir/saturate.json"

    log "$peer: cosign bundle-format signatures"
    load sequence "$WORK/bundle.targets" "$peer" >"$dir/bundle.json"
    mem_after=$(memory_json "$ns")
    jq -n --argjson idle "$mem_idle" --argjson after "$mem_after" '{idle: $idle, after: $after}' >"$dir/memory.json"

    # New digests, one request every 100 ms, the registry answering 503 for
    # 10 s in the middle: what the peer says meanwhile, and when it admits again.
    log "$peer: registry outage (10 s) under a paced load of new images"
    local lp o0 o1
    rm -f -- "$WORK/registry-outage"
    load sequence "$WORK/outage.targets" "$peer" --pace 100 --trace "$dir/outage.trace" >"$dir/outage-load.json" &
    lp=$!
    sleep 4
    o0=$(now)
    touch -- "$WORK/registry-outage"
    sleep 10
    rm -f -- "$WORK/registry-outage"
    o1=$(now)
    wait "$lp" || die "the outage load failed"
    python3 bench/outage.py "$dir/outage.trace" "$o0" "$o1" >"$dir/outage.json"
    log "$peer: outage: $(jq -c '{requests_during, signed_admitted, signed_denied, signed_failed, unsigned_admitted, unsigned_denied, unsigned_failed, recovery_s}' "$dir/outage.json")"

    # New images by the hundred within seconds, the registry 50 ms away.
    local size window
    for size in $STORMS; do
        window=$(((size + 99) / 100))
        ((window >= 2)) || window=2
        log "$peer: cold storm of $size new images within $window s, registry requests ${STORM_LATENCY_MS} ms late"
        if [[ $peer == sigil ]]; then scrape_webhooks "$WORK/metrics-before"; fi
        cpu0=$(cpu_ns "$ns")
        reg0=$(registry_count)
        printf '%s\n' "$STORM_LATENCY_MS" >"$WORK/registry-latency"
        load storm "$WORK/storm-$size.targets" "$peer" --window "$window" >"$dir/storm-$size.json" ||
            { rm -f -- "$WORK/registry-latency"; die "the storm load failed"; }
        rm -f -- "$WORK/registry-latency"
        reg1=$(registry_count)
        cpu1=$(cpu_ns "$ns")
        jq --argjson reg $((reg1 - reg0)) --argjson cpu $((cpu1 - cpu0)) --argjson size "$size" \
            --argjson latency "$STORM_LATENCY_MS" \
            '. + {images: $size, registry_requests: $reg, cpu_ns: $cpu, registry_latency_ms: $latency}' \
            "$dir/storm-$size.json" >"$dir/storm.tmp"
        mv -f -- "$dir/storm.tmp" "$dir/storm-$size.json"
        if [[ $peer == sigil ]]; then
            scrape_webhooks "$WORK/metrics-after"
            python3 bench/webhook-metrics.py "$WORK/metrics-before" "$WORK/metrics-after" >"$dir/storm.tmp"
            jq --slurpfile w "$dir/storm.tmp" '. + {webhook: $w[0]}' "$dir/storm-$size.json" >"$dir/storm.tmp2"
            mv -f -- "$dir/storm.tmp2" "$dir/storm-$size.json"
            rm -f -- "$dir/storm.tmp"
        fi
        log "$peer: storm $size: $(jq -c '{p50: .latency_ms_all.p50, p99: .latency_ms_all.p99, max: .latency_ms_all.max, timeouts, failed, wrong, registry_requests, start_late_ms_max}' "$dir/storm-$size.json")"
    done

    # The policy changes to another key: the (cached) probe images must now both be denied.
    log "$peer: policy change (another key)"
    start=$(now)
    apply_policy "$peer" "$WORK/other/cosign.pub" || die "$peer did not take the changed policy"
    changed=$(wait_probes "$peer" "$WORK/changed.targets" "$start") || changed=null
    jq --argjson changed "$changed" '. + {policy_change_enforced_s: $changed}' "$dir/install.json" >"$dir/install.json.tmp"
    mv -f -- "$dir/install.json.tmp" "$dir/install.json"
    log "$peer: changed policy enforced ${changed} s after the apply"
    local pod
    for pod in $(kubectl -n "$ns" get pods -o name); do
        kubectl -n "$ns" logs "$pod" --all-containers --prefix --tail=200 || true
    done >"$dir/logs.txt" 2>&1

    if [[ $peer == sigil ]]; then
        # Back to the benchmark's key, then the replicas' shares.
        apply_policy sigil || die "sigil did not take its policy back"
        wait_probes sigil "$WORK/probe.targets" "$(now)" >/dev/null || die "sigil did not enforce its policy again"
        measure_shares "$dir"
    fi

    log "$peer: $(jq -r '"cold p50 \(.latency_ms_all.p50) ms p99 \(.latency_ms_all.p99) ms, \(.wrong) wrong, \(.failed) failed"' "$dir/cold.json")"
    log "$peer: $(jq -r '"warm p50 \(.latency_ms_all.p50) ms p99 \(.latency_ms_all.p99) ms, \(.wrong) wrong, \(.failed) failed"' "$dir/warm.json")"
    log "$peer: $(jq -r '"saturation \(.per_second)/s, \(.wrong) wrong, \(.failed) failed"' "$dir/saturate.json")"
    remove_peer "$peer"
}

# Each of sigil's SHARE_REPLICAS webhook replicas' share of the reviews, per
# API server routing and connection setting, under a steady load (one client,
# a request every 25 ms, each image twice) and a saturating one (CONCURRENCY
# clients, 20 s).
# Writes DIR/shares.json; leaves the API server with its own flags.
measure_shares() { # DIR
    local dir=$1 routing connections max_requests max_age out=() load_kind
    # The steady load: every image twice, a request every 25 ms.
    cat "$WORK/cold.targets" "$WORK/cold.targets" >"$WORK/steady.targets"
    for routing in default aggregator; do
        if [[ $routing == aggregator ]]; then
            e2e/local-cluster.sh apiserver-flags --enable-aggregator-routing=true
        fi
        for connections in ended kept; do
            if [[ $connections == ended ]]; then max_requests=100 max_age=30; else max_requests=0 max_age=0; fi
            log "sigil: shares over $SHARE_REPLICAS replicas, $routing routing, connections $connections"
            helm upgrade sigil charts/sigil --namespace "$SIGIL_NS" --reuse-values \
                --set webhook.replicas="$SHARE_REPLICAS" \
                --set webhook.connections.maxRequests="$max_requests" \
                --set webhook.connections.maxAgeSeconds="$max_age" \
                --wait --timeout 5m >"$WORK/helm-shares.log" 2>&1 ||
                { cat "$WORK/helm-shares.log" >&2; return 1; }
            wait_webhook_pods "$SHARE_REPLICAS" || return 1
            # New replicas start cold: one pass over the images first.
            load sequence "$WORK/cold.targets" sigil >/dev/null
            for load_kind in steady saturated; do
                scrape_webhooks "$WORK/metrics-before"
                if [[ $load_kind == steady ]]; then
                    load sequence "$WORK/steady.targets" sigil --pace 25 >"$WORK/shares-load.json"
                else
                    load saturate "$WORK/cold.targets" sigil --concurrency "$CONCURRENCY" --duration 20 >"$WORK/shares-load.json"
                fi
                scrape_webhooks "$WORK/metrics-after"
                python3 bench/webhook-metrics.py "$WORK/metrics-before" "$WORK/metrics-after" >"$WORK/shares-metrics.json"
                out+=("$(jq -c -n --arg routing "$routing" --arg connections "$connections" --arg load "$load_kind" \
                    --argjson max_requests "$max_requests" --argjson max_age "$max_age" \
                    --slurpfile l "$WORK/shares-load.json" --slurpfile w "$WORK/shares-metrics.json" \
                    '{routing: $routing, connections: $connections, max_requests: $max_requests, max_age_s: $max_age,
                      load: $load, admissions: $l[0].admissions, failed: $l[0].failed, wrong: $l[0].wrong,
                      per_second: $l[0].per_second, p99_ms: $l[0].latency_ms_all.p99, webhook: $w[0]}')")
                log "sigil: $routing routing, connections $connections, $load_kind: $(jq -c '{smallest_share: .webhook.smallest_share, shares: .webhook.shares, failed, connections: .webhook.total.connections}' <<<"${out[-1]}")"
            done
        done
    done
    e2e/local-cluster.sh apiserver-flags
    printf '%s\n' "${out[@]}" | jq -s '{replicas: '"$SHARE_REPLICAS"', runs: .}' >"$dir/shares.json"
}

# --- the run ------------------------------------------------------------------------

if [[ ${1:-} != --inner ]]; then
    [[ $(id -u) == 0 ]] || die "needs root (the node runs containers)"
    command -v jq >/dev/null || die "jq is needed (apt-get install jq)"
    start=$SECONDS
    TOOLS=$(scripts/install-tools.sh helm cosign crane olareg)
    export PATH="$TOOLS:$PATH"
    e2e/cluster/build.sh >/dev/null
    # Only the peers this run measures (Kyverno once for both of its policy types).
    go_peers=()
    [[ " $PEERS " != *" policy-controller "* ]] || go_peers+=(policy-controller)
    [[ " $PEERS " != *" kyverno"* ]] || go_peers+=(kyverno)
    PEERS_BIN=none
    if ((${#go_peers[@]})); then PEERS_BIN=$(bench/peers/build.sh "${go_peers[@]}"); fi
    if [[ " $PEERS " != *" sigil "* ]]; then
        log "sigil is not among SIGIL_BENCH_PEERS: its image is not built"
    elif [[ ${SIGIL_BENCH_NO_BUILD:-} == 1 ]]; then
        scripts/image.sh --no-build >/dev/null
    else
        scripts/image.sh >/dev/null
    fi
    log "builds ready after $((SECONDS - start)) s ($PEERS_BIN)"
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/sigil-bench.XXXXXX")
    export WORK
    e2e/local-cluster.sh down
    e2e/local-cluster.sh footprint >"$WORK/footprint.before"
    # shellcheck disable=SC2317 # run by the EXIT trap
    finish() {
        local status=$?
        e2e/local-cluster.sh down || status=1
        e2e/local-cluster.sh footprint >"$WORK/footprint.after"
        if diff -u "$WORK/footprint.before" "$WORK/footprint.after" >"$WORK/footprint.diff"; then
            log "down left nothing behind ($(wc -l <"$WORK/footprint.after") items compared)"
        else
            log "FAIL: down left this behind (- before up, + after down):"
            grep '^[-+][^-+]' "$WORK/footprint.diff" >&2 || true
            status=1
        fi
        rm -rf -- "$WORK"
        log "finished in $((SECONDS - start)) s (status $status)"
        exit "$status"
    }
    trap finish EXIT
    e2e/local-cluster.sh up --node
    "$0" --inner
    exit 0
fi

# --inner: the cluster is up.
eval "$(e2e/local-cluster.sh env)"
PIDS=()
# shellcheck disable=SC2317 # run by the EXIT trap
inner_cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap inner_cleanup EXIT

# The benchmark registry, and the counting proxy pods reach it through.
OLAREG_PORT=$(free_port)
PROXY_PORT=$(free_port)
olareg serve --addr 127.0.0.1 --port "$OLAREG_PORT" --store-type mem >"$WORK/olareg.log" 2>&1 &
PIDS+=($!)
python3 bench/counting-proxy.py --listen "$PROXY_PORT" --upstream "127.0.0.1:$OLAREG_PORT" \
    --log "$WORK/registry-requests.log" --outage-file "$WORK/registry-outage" \
    --latency-file "$WORK/registry-latency" 2>"$WORK/proxy.log" &
PIDS+=($!)
wait_url "http://127.0.0.1:$OLAREG_PORT/v2/" 10 || die "olareg did not come up ($WORK/olareg.log)"
wait_url "http://127.0.0.1:$PROXY_PORT/v2/" 10 || die "the counting proxy did not come up ($WORK/proxy.log)"
e2e/local-cluster.sh expose "$PROXY_PORT"
PROXY_REGISTRY=$SIGIL_E2E_NODE_IP:$PROXY_PORT
LOCAL=127.0.0.1:$OLAREG_PORT

# The images: N + 1 signed (the first is the policy probe), N + 1 unsigned,
# and a few signed in cosign's bundle format; distinct digests from one base
# by a label each.
log "images: $((N + 1)) signed, $((N + 1)) unsigned, $BUNDLE_IMAGES bundle-signed, $OUTAGE_PAIRS + $OUTAGE_PAIRS for the outage, storms of ${STORMS// /, }"
t=$SECONDS
printf 'sigil benchmark image\n' >"$WORK/payload"
python3 scripts/oci-image.py --out "$WORK/base" --file "$WORK/payload:/payload:0644" >/dev/null
crane push --insecure "$WORK/base" "$LOCAL/bench/base:0" >/dev/null 2>&1 || die "crane push of the base image failed"
make_images() { # REPO COUNT -> digests, one a line
    local repo=$1 count=$2 i
    for ((i = 0; i < count; i++)); do
        crane mutate --insecure --label "dev.sigil.bench=$repo-$i" "$LOCAL/bench/base:0" -t "$LOCAL/bench/$repo:$i" 2>/dev/null |
            sed 's/.*@//' || die "crane mutate for $repo:$i failed"
    done
}
mapfile -t SIGNED < <(make_images signed $((N + 1)))
mapfile -t UNSIGNED < <(make_images unsigned $((N + 1)))
mapfile -t BUNDLED < <(make_images bundled "$BUNDLE_IMAGES")
mapfile -t OSIGNED < <(make_images outage-signed "$OUTAGE_PAIRS")
mapfile -t OUNSIGNED < <(make_images outage-unsigned "$OUTAGE_PAIRS")
declare -A STORM_SIGNED STORM_UNSIGNED
for size in $STORMS; do
    mapfile -t digests < <(make_images "storm$size-signed" $((size / 2)))
    ((${#digests[@]} == size / 2)) || die "making the storm images failed"
    STORM_SIGNED[$size]="${digests[*]}"
    mapfile -t digests < <(make_images "storm$size-unsigned" $((size - size / 2)))
    ((${#digests[@]} == size - size / 2)) || die "making the storm images failed"
    STORM_UNSIGNED[$size]="${digests[*]}"
done
((${#SIGNED[@]} == N + 1 && ${#UNSIGNED[@]} == N + 1 && ${#BUNDLED[@]} == BUNDLE_IMAGES &&
    ${#OSIGNED[@]} == OUTAGE_PAIRS && ${#OUNSIGNED[@]} == OUTAGE_PAIRS)) || die "making the images failed"
(cd "$WORK" && COSIGN_PASSWORD='' cosign generate-key-pair >/dev/null 2>&1) || die "cosign generate-key-pair failed"
# The key the changed policy names; nothing is signed with it.
mkdir -p -- "$WORK/other"
(cd "$WORK/other" && COSIGN_PASSWORD='' cosign generate-key-pair >/dev/null 2>&1) || die "cosign generate-key-pair failed"
SIGN=(--key "$WORK/cosign.key" --use-signing-config=false --tlog-upload=false --allow-insecure-registry --yes)
refs=()
for d in "${SIGNED[@]}"; do refs+=("$LOCAL/bench/signed@$d"); done
for d in "${OSIGNED[@]}"; do refs+=("$LOCAL/bench/outage-signed@$d"); done
for size in $STORMS; do
    for d in ${STORM_SIGNED[$size]}; do refs+=("$LOCAL/bench/storm$size-signed@$d"); done
done
(cd "$WORK" && HOME=$WORK COSIGN_PASSWORD='' cosign sign "${SIGN[@]}" --new-bundle-format=false "${refs[@]}" >/dev/null 2>"$WORK/cosign.log") ||
    { tail -5 "$WORK/cosign.log" >&2; die "cosign sign (legacy format) failed"; }
refs=()
for d in "${BUNDLED[@]}"; do refs+=("$LOCAL/bench/bundled@$d"); done
(cd "$WORK" && HOME=$WORK COSIGN_PASSWORD='' cosign sign "${SIGN[@]}" "${refs[@]}" >/dev/null 2>"$WORK/cosign.log") ||
    { tail -5 "$WORK/cosign.log" >&2; die "cosign sign (bundle format) failed"; }
{
    echo "signed $PROXY_REGISTRY/bench/signed@${SIGNED[0]}"
    echo "unsigned $PROXY_REGISTRY/bench/unsigned@${UNSIGNED[0]}"
} >"$WORK/probe.targets"
for ((i = 1; i <= N; i++)); do
    echo "signed $PROXY_REGISTRY/bench/signed@${SIGNED[i]}"
    echo "unsigned $PROXY_REGISTRY/bench/unsigned@${UNSIGNED[i]}"
done >"$WORK/cold.targets"
for d in "${BUNDLED[@]}"; do echo "signed $PROXY_REGISTRY/bench/bundled@$d"; done >"$WORK/bundle.targets"
for ((i = 0; i < OUTAGE_PAIRS; i++)); do
    echo "signed $PROXY_REGISTRY/bench/outage-signed@${OSIGNED[i]}"
    echo "unsigned $PROXY_REGISTRY/bench/outage-unsigned@${OUNSIGNED[i]}"
done >"$WORK/outage.targets"
# A storm's images interleaved, signed and unsigned.
for size in $STORMS; do
    read -r -a ss <<<"${STORM_SIGNED[$size]}"
    read -r -a su <<<"${STORM_UNSIGNED[$size]}"
    for ((i = 0; i < ${#su[@]}; i++)); do
        ((i < ${#ss[@]})) && echo "signed $PROXY_REGISTRY/bench/storm$size-signed@${ss[i]}"
        echo "unsigned $PROXY_REGISTRY/bench/storm$size-unsigned@${su[i]}"
    done >"$WORK/storm-$size.targets"
done
{
    echo "unsigned $PROXY_REGISTRY/bench/signed@${SIGNED[0]}"
    echo "unsigned $PROXY_REGISTRY/bench/unsigned@${UNSIGNED[0]}"
} >"$WORK/changed.targets"
log "images signed and pushed in $((SECONDS - t)) s"

# The peers' images on the node registry, where the kubelet pulls them.
SIGIL_IMAGE=""
if [[ " $PEERS " == *" sigil "* ]]; then
    SIGIL_IMAGE=$(scripts/image.sh --no-build --insecure --push "$SIGIL_E2E_NODE_REGISTRY/sigil")
fi
PC_IMAGE="" KYVERNO_IMAGE="" KYVERNOPRE_IMAGE=""
if [[ " $PEERS " == *" policy-controller "* ]]; then
    PC_IMAGE=$(bench/peers/image.sh policy-controller "$WORK/oci/policy-controller" --push "$SIGIL_E2E_NODE_REGISTRY/peers/policy-controller:bench")
fi
if [[ " $PEERS " == *" kyverno"* ]]; then
    KYVERNO_IMAGE=$(bench/peers/image.sh kyverno "$WORK/oci/kyverno" --push "$SIGIL_E2E_NODE_REGISTRY/peers/kyverno:bench")
    KYVERNOPRE_IMAGE=$(bench/peers/image.sh kyvernopre "$WORK/oci/kyvernopre" --push "$SIGIL_E2E_NODE_REGISTRY/peers/kyvernopre:bench")
fi
mkdir -p -- "$RESULTS"
# sigil's size only when this run built its image (scripts/image.sh writes
# LAYOUT.size as bench/peers/image.sh does).
python3 - "$WORK/oci" "${SIGIL_IMAGE:+$REPO_ROOT/target/oci/sigil}" >"$RESULTS/images.json" <<'PY'
import json, os, sys
oci, sigil = sys.argv[1:3]
sizes = {}
for name, layout in [("sigil", sigil)] * bool(sigil) + [(n, os.path.join(oci, n)) for n in ("policy-controller", "kyverno", "kyvernopre")]:
    if os.path.exists(layout + ".size"):
        c, u = open(layout + ".size").read().split()
        sizes[name] = {"compressed": int(c), "unpacked": int(u)}
print(json.dumps(sizes))
PY

kubectl create namespace "$NS" >/dev/null
kubectl label namespace "$NS" policy.sigil.dev/include=true policy.sigstore.dev/include=true >/dev/null
# Dry-run Pods still need the namespace's ServiceAccount.
for ((i = 0; i < 100; i++)); do
    kubectl -n "$NS" get serviceaccount default >/dev/null 2>&1 && break
    sleep 0.2
done

# A peer that fails leaves its measures missing (the report says so) and
# the run goes on with the next; the run's status says it failed.
failed_peers=()
for peer in $PEERS; do
    # Not `if ! (...)`: errexit would be off inside the subshell.
    set +e
    (
        set -e
        bench_peer "$peer"
    )
    rc=$?
    set -e
    if [[ -s $SIGIL_E2E_STATE/apiserver.flags ]]; then
        e2e/local-cluster.sh apiserver-flags || die "the API server did not come back with its own flags"
    fi
    if ((rc != 0)); then
        log "$peer: FAILED; its missing measures stay missing in the report"
        (remove_peer "$peer") || log "$peer: could not be removed completely"
        failed_peers+=("$peer")
    fi
done

jq -n --arg n "$N" --arg c "$CONCURRENCY" --arg d "$DURATION" --arg peers "$PEERS" \
    --arg storms "$STORMS" --arg storm_latency "$STORM_LATENCY_MS" \
    --arg kernel "$(uname -r)" --arg cpus "$(nproc)" \
    --arg cpu_model "$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)" \
    --arg mem "$(awk '/MemTotal/ {print $2 * 1024}' /proc/meminfo)" \
    --arg load "$(cut -d' ' -f1-3 /proc/loadavg)" \
    --arg commit "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    --arg k8s "$(kubectl version -o json | jq -r .serverVersion.gitVersion)" \
    --arg date "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    '{images: ($n|tonumber), concurrency: ($c|tonumber), duration_s: ($d|tonumber), peers: ($peers|split(" ")),
      kernel: $kernel, cpus: ($cpus|tonumber), cpu_model: $cpu_model, memory_bytes: ($mem|tonumber),
      loadavg_at_end: $load, sigil_commit: $commit, kubernetes: $k8s, date: $date,
      storms: ($storms|split(" ")|map(tonumber)), storm_latency_ms: ($storm_latency|tonumber)}' >"$RESULTS/run.json"
cp -f -- "$WORK/registry-requests.log" "$RESULTS/registry-requests.log"
python3 bench/report.py "$RESULTS" >"$OUT"
log "wrote $OUT"
((${#failed_peers[@]} == 0)) || die "failed: ${failed_peers[*]}"
