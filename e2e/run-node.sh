#!/usr/bin/env bash
# make e2e-node: sigil as it ships, on a real node of this machine.
#
# 1. sigil's image (scripts/image.sh: release binaries on a Debian base, no
#    container engine), the e2e suite's test binaries, and a snapshot of what
#    this machine looks like (e2e/local-cluster.sh footprint).
# 2. The local cluster with a node (e2e/local-cluster.sh up --node: control
#    plane, kube-scheduler, containerd + runc + CNI, kubelet, kube-proxy, a
#    registry on the node's address), the image pushed there, and the
#    registry fixtures (olareg, docker-registry, cosign signatures) on
#    127.0.0.1, exposed to pods at the node's address (the suite names them
#    there through SIGIL_E2E_REGISTRY_ALIAS, as on kind).
# 3. A busybox-static workload image, signed by cosign and not signed.
# 4. `helm install` of charts/sigil with the image pinned by digest, as a
#    user installs it, waiting for every Pod to be ready.
# 5. The e2e suite (e2e/suite/tests/e2e.rs) against the in-cluster sigil,
#    then the node's own scenarios (e2e/suite/tests/node.rs): the chart's
#    Pods as the runtime runs them, a signed workload running, an unsigned
#    one never getting a Pod, and failure and change under load.
#    Then `helm upgrade --set audit.enabled=true` and the audit's scenarios
#    (e2e/suite/tests/node_audit.rs): reports of running pods, a key rotated
#    out of a TrustRoot, a pod deleted, a workload registry frozen.
#    Then the cloud registries (e2e/suite/tests/node_cloud.rs): the cloud
#    endpoints faked on 127.0.0.1 (sigil-fakecloud, checking the API
#    server's own ServiceAccount tokens), `helm upgrade` with the chart's
#    values for each cloud (tokens mounted as each cloud's webhook mounts
#    them) and a mirror setting, then a scenario per cloud, refresh under
#    load, a provider down, and the mirror.
#    Then sigil's namespace enforces the Pod Security Standard `restricted`
#    and `helm upgrade` drops the chart's fixed user and group IDs for ones
#    assigned from outside, as on OpenShift (e2e/suite/tests/node_restricted.rs).
#    Last, a release rehearsed (e2e/release-rehearsal.sh): the release
#    workflow's steps (scripts/release.sh) against the node's registry, sigil
#    installed from that OCI chart as docs/installation.md says, and judging
#    its own image with the documented policy.
#    With the phase `upgrade` (make e2e-upgrade), an earlier version instead
#    (e2e/previous-release.sh, built once per commit), upgraded to the
#    rehearsed release and rolled back under load (e2e/upgrade.sh).
# 6. `down`, and the footprint again: anything left on the machine fails.
#
# Needs root. Arguments go to the test binaries (a test name filters).
# SIGIL_E2E_PHASES: the phases of step 5 to run, in their order, from
# "suite node audit cloud restricted release upgrade" (default: all but
# upgrade); for example SIGIL_E2E_PHASES=release while working on it.
# SIGIL_UPGRADE_FROM: the git ref the upgrade starts from (default:
# e2e/previous-release.sh's).
# SIGIL_E2E_KEEP=1 leaves the cluster up (e2e/local-cluster.sh down with
# SIGIL_E2E_STATE=.cache/e2e/node removes it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT=$PWD
# shellcheck source=e2e/lib.sh
. e2e/lib.sh
export SIGIL_E2E_STATE=${SIGIL_E2E_STATE:-$REPO_ROOT/.cache/e2e/node}
ALL_PHASES="suite node audit cloud restricted release upgrade"
export SIGIL_E2E_PHASES=${SIGIL_E2E_PHASES:-suite node audit cloud restricted release}
for p in $SIGIL_E2E_PHASES; do
  [[ " $ALL_PHASES " == *" $p "* ]] || { e2e_log "e2e-node: unknown phase $p (phases: $ALL_PHASES)"; exit 2; }
done
phase() { [[ " $SIGIL_E2E_PHASES " == *" $1 "* ]]; }

timed() { # NAME COMMAND...: runs COMMAND, says how long it took
  local name=$1 t=$SECONDS
  shift
  "$@"
  e2e_log "e2e-node: $name took $((SECONDS - t)) s"
}

# The failing tests' panics (test name, place, first lines of the message)
# and the pod and event lines the inner part recorded, each line cut short.
# shellcheck disable=SC2317 # run by the EXIT trap
summarize_outcome() {
  awk '
    /^thread .* panicked at / { n = 3 }
    n > 0 { print "  " substr($0, 1, 400); n--; next }
    /^(pod|event) / { print "  " substr($0, 1, 300) }
  ' "$1" | head -n 60
}

if [ "${1:-}" != "--inner" ]; then
  [ "$(id -u)" = 0 ] || { e2e_log "e2e-node: needs root (the node runs containers)"; exit 1; }
  start=$SECONDS
  TOOLS=$(scripts/install-tools.sh helm cosign crane)
  export PATH="$TOOLS:$PATH"
  timed "the cluster's binaries" e2e/cluster/build.sh >/dev/null
  timed "sigil's image" scripts/image.sh >/dev/null
  if phase suite || phase node || phase audit || phase cloud || phase restricted; then
    timed "the test binaries" cargo build -q --workspace --all-targets
  fi
  if phase upgrade; then
    phase release || { e2e_log "e2e-node: the phase upgrade needs the phase release (its target version)"; exit 2; }
    # The earlier version: built once per commit into .cache/upgrade.
    t=$SECONDS
    SIGIL_UPGRADE_PREVIOUS=$(e2e/previous-release.sh ${SIGIL_UPGRADE_FROM:+"$SIGIL_UPGRADE_FROM"})
    export SIGIL_UPGRADE_PREVIOUS
    e2e_log "e2e-node: the earlier version for the upgrade took $((SECONDS - t)) s: $SIGIL_UPGRADE_PREVIOUS"
  fi
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/sigil-e2e-node.XXXXXX")
  # A cluster of an interrupted run goes first, so the snapshot is of a clean machine.
  e2e/local-cluster.sh down
  e2e/local-cluster.sh footprint >"$WORK/footprint.before"
  # shellcheck disable=SC2317 # run by the EXIT trap
  finish() {
    local status=$?
    if [ "${SIGIL_E2E_KEEP:-}" = 1 ]; then
      e2e_log "e2e-node: SIGIL_E2E_KEEP=1: the cluster stays up (state $SIGIL_E2E_STATE)"
      exit "$status"
    fi
    local t=$SECONDS
    e2e/local-cluster.sh down || status=1
    e2e_log "e2e-node: down took $((SECONDS - t)) s"
    e2e/local-cluster.sh footprint >"$WORK/footprint.after"
    if diff -u "$WORK/footprint.before" "$WORK/footprint.after" >"$WORK/footprint.diff"; then
      e2e_log "e2e-node: down left nothing behind (processes, mounts, interfaces, routes, iptables rules, netns, cgroups, sysctls: $(wc -l <"$WORK/footprint.after") items compared)"
    else
      e2e_log "e2e-node: FAIL: down left this behind (- before up, + after down):"
      grep '^[-+][^-+]' "$WORK/footprint.diff" >&2 || true
      status=1
    fi
    if [ "$status" != 0 ] && [ -s "$WORK/outcome" ]; then
      e2e_log "e2e-node: what failed (details above):"
      summarize_outcome "$WORK/outcome" >&2 || true
    fi
    rm -rf "$WORK"
    e2e_log "e2e-node: finished in $((SECONDS - start)) s (status $status)"
    exit "$status"
  }
  trap finish EXIT
  # What the inner part saw when it failed (test panics, sigil's pods and
  # events), summed up last, after `down`: a CI log's tail shows it.
  export SIGIL_E2E_NODE_OUTCOME=$WORK/outcome
  : >"$SIGIL_E2E_NODE_OUTCOME"
  timed "up --node" e2e/local-cluster.sh up --node
  eval "$(e2e/local-cluster.sh env)"
  SIGIL_IMAGE=$(scripts/image.sh --no-build --insecure --push "$SIGIL_E2E_NODE_REGISTRY/sigil")
  # The same binaries built a second later: another digest, for `helm upgrade`.
  epoch=$(git log -1 --format=%ct 2>/dev/null || echo 0)
  SIGIL_IMAGE_NEXT=$(SOURCE_DATE_EPOCH=$((epoch + 1)) scripts/image.sh --no-build --insecure \
    --out target/oci/sigil-next --push "$SIGIL_E2E_NODE_REGISTRY/sigil:next")
  export SIGIL_IMAGE SIGIL_IMAGE_NEXT
  e2e_log "e2e-node: cluster and image ready after $((SECONDS - start)) s: $SIGIL_IMAGE"
  e2e/registry-fixtures.sh -- "$0" --inner "$@"
  exit 0
fi

# Inside e2e/registry-fixtures.sh: registries on 127.0.0.1, fixture file
# SIGIL_REGISTRY_FIXTURES.
shift
eval "$(e2e/local-cluster.sh env)"
# shellcheck disable=SC1090
. "$SIGIL_REGISTRY_FIXTURES"
e2e/local-cluster.sh expose "${OLAREG##*:}" "${DOCKREG##*:}"
POD_OLAREG=$SIGIL_E2E_NODE_IP:${OLAREG##*:}
POD_DOCKREG=$SIGIL_E2E_NODE_IP:${DOCKREG##*:}
export SIGIL_E2E_REGISTRY_ALIAS=$OLAREG=$POD_OLAREG,$DOCKREG=$POD_DOCKREG
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sigil-e2e-node-inner.XXXXXX")
status=1
# shellcheck disable=SC2317 # run by the EXIT trap
inner_cleanup() {
  if [ "$status" != 0 ]; then
    e2e_log "---- sigil's pods ----"
    kubectl -n "$SIGIL_NS" get pods -o wide >&2 || true
    if [ -n "${SIGIL_E2E_NODE_OUTCOME:-}" ]; then
      kubectl -n "$SIGIL_NS" get pods --no-headers \
        -o custom-columns='N:.metadata.name,READY:.status.containerStatuses[*].ready,RESTARTS:.status.containerStatuses[*].restartCount,PHASE:.status.phase,REASON:.status.containerStatuses[*].lastState.terminated.reason' \
        2>&1 | sed 's/^/pod /' >>"$SIGIL_E2E_NODE_OUTCOME" || true
      kubectl get events -A --sort-by=.lastTimestamp --field-selector type=Warning --no-headers \
        -o custom-columns='NS:.metadata.namespace,OBJ:.involvedObject.name,REASON:.reason,MSG:.message' \
        2>&1 | tail -n 15 | sed 's/^/event /' >>"$SIGIL_E2E_NODE_OUTCOME" || true
    fi
    kubectl -n "$SIGIL_NS" logs -l app.kubernetes.io/name=sigil --all-containers --prefix --tail=40 >&2 || true
  fi
  if [ -n "${FAKECLOUD_PID:-}" ]; then
    kill "$FAKECLOUD_PID" 2>/dev/null || true
    wait "$FAKECLOUD_PID" 2>/dev/null || true
  fi
  if [ -n "${AUDITREG_PID:-}" ]; then
    # A frozen registry (the outage scenario) takes no TERM until continued.
    kill -CONT "$AUDITREG_PID" 2>/dev/null || true
    kill "$AUDITREG_PID" 2>/dev/null || true
    wait "$AUDITREG_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap inner_cleanup EXIT

# The workload: busybox-static, one image signed with the fixtures' key1,
# one (another digest) unsigned.
KEY1_PRIVATE=${KEY1%.pub}.key
[ -f "$KEY1_PRIVATE" ] || { e2e_log "e2e-node: no private key beside $KEY1"; exit 1; }
workload() { # tag label
  e2e/node/image.sh busybox "$WORK/busybox-$1" "$SIGIL_E2E_NODE_REGISTRY/sigil-e2e/busybox:$1" \
    --label "dev.sigil.e2e.variant=$1"
}
SIGNED=$(workload signed)
UNSIGNED=$(workload unsigned)
# README's quick start (node.rs): an image in a repository of its own, which
# no other scenario's policy covers and nobody has signed yet.
QUICKSTART_TAG=$SIGIL_E2E_NODE_REGISTRY/team/app:dev
QUICKSTART=$(e2e/node/image.sh busybox "$WORK/busybox-quickstart" "$QUICKSTART_TAG" \
  --label "dev.sigil.e2e.variant=quickstart")
(cd "$WORK" && HOME=$WORK TUF_ROOT=$WORK/tuf COSIGN_PASSWORD='' cosign sign --key "$KEY1_PRIVATE" \
  --use-signing-config=false --tlog-upload=false --allow-insecure-registry --yes "$SIGNED" >/dev/null 2>&1) ||
  { e2e_log "e2e-node: cosign sign $SIGNED failed"; exit 1; }
# The audit scenarios (e2e/suite/tests/node_audit.rs) run images from a
# registry of their own (not the node registry, which sigil's own pods
# restart from), which the outage scenario freezes: one signed with key1,
# and one that the test signs keyless with the testkit's Sigstore, so that
# rotating a key out of a TrustRoot turns its pods to fail. containerd pulls
# over plain HTTP only from the node registry (its one mirror entry), so
# both are put into the node's image store here with ctr, as on a node that
# already has them: the kubelet runs a digest reference it has without
# pulling. The fixtures name them host side (127.0.0.1, where the test
# pushes); SIGIL_E2E_REGISTRY_ALIAS gives their name in the cluster.
AUDITREG_PORT=$(free_port)
olareg serve --addr 127.0.0.1 --port "$AUDITREG_PORT" --store-type mem >"$WORK/auditreg.log" 2>&1 &
AUDITREG_PID=$!
wait_url "http://127.0.0.1:$AUDITREG_PORT/v2/" 10 || { e2e_log "e2e-node: the audit's registry did not come up"; exit 1; }
e2e/local-cluster.sh expose "$AUDITREG_PORT"
POD_AUDITREG=$SIGIL_E2E_NODE_IP:$AUDITREG_PORT
SIGIL_E2E_REGISTRY_ALIAS=$SIGIL_E2E_REGISTRY_ALIAS,127.0.0.1:$AUDITREG_PORT=$POD_AUDITREG
# The GitHub chart's scenario serves a TUF mirror on this port while it runs;
# sigil's controller, in a pod, fetches from it at the node's address.
TUF_MIRROR_PORT=$(free_port)
e2e/local-cluster.sh expose "$TUF_MIRROR_PORT"
SIGIL_E2E_REGISTRY_ALIAS=$SIGIL_E2E_REGISTRY_ALIAS,127.0.0.1:$TUF_MIRROR_PORT=$SIGIL_E2E_NODE_IP:$TUF_MIRROR_PORT
echo "TUF_MIRROR_PORT=$TUF_MIRROR_PORT" >>"$SIGIL_REGISTRY_FIXTURES"
audit_image() { # repo tag: pushed host side, pulled into the node by its name in the cluster
  local ref
  ref=$(e2e/node/image.sh busybox "$WORK/busybox-audit-$1" "127.0.0.1:$AUDITREG_PORT/sigil-audit/$1:$2" \
    --label "dev.sigil.e2e.variant=audit-$1") || return 1
  ctr --address "$SIGIL_E2E_STATE/run/containerd.sock" --namespace k8s.io images pull --plain-http \
    "$POD_AUDITREG/${ref#*/}" >"$WORK/ctr-pull.log" 2>&1 ||
    { cat "$WORK/ctr-pull.log" >&2; e2e_log "e2e-node: ctr pull $POD_AUDITREG/${ref#*/} failed"; return 1; }
  printf '%s\n' "$ref"
}
AUDIT_OUTAGE=$(audit_image outage signed)
AUDIT_KEYLESS=$(audit_image keyless old)
(cd "$WORK" && HOME=$WORK TUF_ROOT=$WORK/tuf COSIGN_PASSWORD='' cosign sign --key "$KEY1_PRIVATE" \
  --use-signing-config=false --tlog-upload=false --allow-insecure-registry --yes "$AUDIT_OUTAGE" >/dev/null 2>&1) ||
  { e2e_log "e2e-node: cosign sign $AUDIT_OUTAGE failed"; exit 1; }
{
  echo "NODE_AUDIT_REGISTRY=127.0.0.1:$AUDITREG_PORT"
  echo "NODE_AUDIT_REGISTRY_PID=$AUDITREG_PID"
  echo "NODE_AUDIT_OUTAGE=$AUDIT_OUTAGE"
  echo "NODE_AUDIT_KEYLESS=$AUDIT_KEYLESS"
} >>"$SIGIL_REGISTRY_FIXTURES"
{
  echo "NODE_REGISTRY=$SIGIL_E2E_NODE_REGISTRY"
  echo "NODE_WORKLOAD_SIGNED=$SIGNED"
  echo "NODE_WORKLOAD_UNSIGNED=$UNSIGNED"
  echo "NODE_WORKLOAD_TAG_SIGNED=$SIGIL_E2E_NODE_REGISTRY/sigil-e2e/busybox:signed"
  echo "NODE_WORKLOAD_TAG_UNSIGNED=$SIGIL_E2E_NODE_REGISTRY/sigil-e2e/busybox:unsigned"
  echo "NODE_QUICKSTART_TAG=$QUICKSTART_TAG"
  echo "NODE_QUICKSTART_IMAGE=$QUICKSTART"
  echo "SIGIL_IMAGE=$SIGIL_IMAGE"
  echo "SIGIL_IMAGE_NEXT=$SIGIL_IMAGE_NEXT"
} >>"$SIGIL_REGISTRY_FIXTURES"

# The chart as a user installs it: image pinned by digest, in-cluster webhook
# and controller (two, for the leader scenario), plain HTTP to the test
# registries, a short webhook timeout (the hanging-registry scenario),
# policy-controller's objects served (their scenarios), and the built-in
# trust root used as embedded (trustRoot.offline): nothing may leave this
# machine, so the controller must not try the public TUF mirror.
t=$SECONDS
# The ImagePolicy scenario's namespace exists before the chart binds the
# controller's read of its Secrets there (imagePolicies.referenceNamespaces).
kubectl create namespace e2e-image-policy --dry-run=client -o yaml | kubectl apply -f - >/dev/null
if ! helm upgrade --install sigil charts/sigil --namespace "$SIGIL_NS" --create-namespace \
  --set image.repository="${SIGIL_IMAGE%@*}" --set image.digest="${SIGIL_IMAGE#*@}" \
  --set "insecureRegistries={$POD_OLAREG,$POD_DOCKREG,$POD_AUDITREG,$SIGIL_E2E_NODE_REGISTRY}" \
  --set trustRoot.offline=true \
  --set webhook.timeoutSeconds=5 --set controller.replicas=2 \
  --set policyController.serve=true --set "imagePolicies.referenceNamespaces={e2e-image-policy}" \
  --set "exceptions.namespaces={e2e-exception,e2e-audit-exception}" \
  --wait --timeout 5m >"$WORK/helm.log" 2>&1; then
  cat "$WORK/helm.log" >&2
  e2e_log "e2e-node: helm install did not get every sigil Pod ready within 5 min"
  exit 1
fi
e2e_log "e2e-node: helm install (pods ready) took $((SECONDS - t)) s"
kubectl -n "$SIGIL_NS" get pods -o wide >&2

status=0
# One test binary of the suite; its output also goes to the outcome file.
run_suite() {
  local name=$1
  shift
  cargo test -q --workspace --test "$name" -- --ignored --test-threads 1 --show-output "$@" 2>&1 |
    tee -a "${SIGIL_E2E_NODE_OUTCOME:-/dev/null}"
}
export SIGIL_E2E_NAMESPACE=$SIGIL_NS
export SIGIL_E2E_CONTAINERD_SOCK=$SIGIL_E2E_STATE/run/containerd.sock
if phase suite; then
  t=$SECONDS
  run_suite e2e "$@" || status=$?
  e2e_log "e2e-node: the e2e suite against in-cluster sigil took $((SECONDS - t)) s"
fi
if phase node; then
  t=$SECONDS
  run_suite node "$@" || status=$?
  e2e_log "e2e-node: the node scenarios took $((SECONDS - t)) s"
fi
# The audit, switched on as a user switches it on, by an upgrade that
# follows docs/installation.md's "Upgrading" steps as written but for where
# the chart comes from (this checkout's chart, packaged, for the OCI
# registry): the new version's CRDs applied first, as Helm never changes
# them after the first install. The packaged CRDs carry a change a new
# version could bring (an annotation), which must reach the cluster. A short
# audit interval, and a verdict TTL below it: the audit judges through
# admission's verdict cache, so a re-verification within the TTL would be
# answered by the cached verdict and the outage scenario would wait for the
# default 600 s.
upgrade_as_documented() {
  local steps pull apply upgrade dir=$WORK/upgrade crd
  steps=$(awk '/^## Upgrading/ { s = 1 } s && /^```sh$/ { b = 1; next } b && /^```$/ { exit } b' docs/installation.md)
  pull=$(sed -n 1p <<<"$steps") apply=$(sed -n 2p <<<"$steps") upgrade=$(sed -n 3p <<<"$steps")
  [[ $pull == "helm pull oci://ghcr.io/sigil-dev/charts/sigil --version NEW --untar --untardir sigil-NEW" &&
    $apply == "kubectl apply --server-side --force-conflicts -f sigil-NEW/sigil/crds/" &&
    $upgrade == "helm upgrade sigil oci://ghcr.io/sigil-dev/charts/sigil --version NEW -n sigil-system --reset-then-reuse-values" ]] ||
    { e2e_log "e2e-node: docs/installation.md's upgrade steps changed; follow them here too: $steps"; return 1; }
  mkdir -p "$dir/pkg" "$dir/sigil-NEW"
  # helm pull --untar, from this checkout.
  helm package charts/sigil --destination "$dir/pkg" >/dev/null
  tar -xzf "$dir"/pkg/sigil-*.tgz -C "$dir/sigil-NEW"
  for crd in "$dir"/sigil-NEW/sigil/crds/*.yaml; do
    python3 - "$crd" <<'PY'
import sys, yaml
path = sys.argv[1]
doc = yaml.safe_load(open(path))
doc["metadata"].setdefault("annotations", {})["e2e.sigil.dev/upgraded"] = "true"
open(path, "w").write(yaml.safe_dump(doc, sort_keys=False))
PY
  done
  (cd "$dir" && bash -euo pipefail -c "$apply") || return 1
  for crd in clusterimagepolicies.policy.sigil.dev imagepolicies.policy.sigil.dev imagepolicyexceptions.policy.sigil.dev trustroots.policy.sigil.dev workloadkinds.policy.sigil.dev; do
    [[ $(kubectl get crd "$crd" -o jsonpath='{.metadata.annotations.e2e\.sigil\.dev/upgraded}') == true ]] ||
      { e2e_log "e2e-node: the documented CRD step did not update $crd"; return 1; }
  done
  upgrade=${upgrade/"oci://ghcr.io/sigil-dev/charts/sigil --version NEW"/sigil-NEW/sigil}
  upgrade=${upgrade/"-n sigil-system"/-n $SIGIL_NS}
  (cd "$dir" && bash -euo pipefail -c "$upgrade --set audit.enabled=true --set audit.intervalSeconds=60 \
    --set webhook.cache.verdictTTLSeconds=20 --wait --timeout 5m")
}
t=$SECONDS
if ! phase audit; then
  :
elif upgrade_as_documented >"$WORK/helm-audit.log" 2>&1; then
  e2e_log "e2e-node: CRDs applied and helm upgrade as docs/installation.md says, CRD change in force"
  e2e_log "e2e-node: helm upgrade --set audit.enabled=true (pods ready) took $((SECONDS - t)) s"
  t=$SECONDS
  run_suite node_audit "$@" || status=$?
  e2e_log "e2e-node: the audit scenarios took $((SECONDS - t)) s"
else
  cat "$WORK/helm-audit.log" >&2
  e2e_log "e2e-node: the documented upgrade (CRDs, then helm upgrade --set audit.enabled=true, every Pod ready within 5 min) failed (above)"
  status=1
fi
# Cloud registries: the fakes of STS, ECR, the Pod Identity agent, the GKE
# metadata server, Entra ID and ACR's exchange, with registry fronts before
# olareg that accept only the tokens the fakes issued, and a counting proxy
# standing for the internet. Short token lifetimes, so that refreshes happen
# while the scenarios run. The fakes check the API server's real projected
# ServiceAccount tokens against its key (pki/sa.pub).
cloud_phase() {
  local state=$WORK/fakecloud.env port ip=$SIGIL_E2E_NODE_IP
  target/debug/sigil-fakecloud --sa-key "$SIGIL_E2E_STATE/pki/sa.pub" \
    --issuer https://kubernetes.default.svc.cluster.local \
    --subject "system:serviceaccount:$SIGIL_NS:sigil-webhook" \
    --subject "system:serviceaccount:$SIGIL_NS:sigil-audit" \
    --upstream "http://$OLAREG" --tls-name "$ip" --tls-name 127.0.0.1 \
    --lifetime aws_credentials=120 --lifetime ecr_token=60 --lifetime google_token=60 \
    --lifetime entra_token=60 --lifetime acr_refresh=60 --lifetime registry_token=30 \
    --state "$state" >"$WORK/fakecloud.log" 2>&1 &
  FAKECLOUD_PID=$!
  for _ in $(seq 50); do [ -s "$state" ] && break; sleep 0.2; done
  [ -s "$state" ] || { cat "$WORK/fakecloud.log" >&2; e2e_log "e2e-node: sigil-fakecloud did not start"; return 1; }
  # shellcheck disable=SC1090
  . "$state"
  # shellcheck disable=SC2153 # FAKECLOUD_* come from the state file.
  for port in "${FAKECLOUD_API##*:}" "${FAKECLOUD_METADATA##*:}" "${FAKECLOUD_ECR##*:}" \
    "${FAKECLOUD_GCP##*:}" "${FAKECLOUD_ACR##*:}" "${FAKECLOUD_PROXY##*:}"; do
    e2e/local-cluster.sh expose "$port"
  done
  local api=$ip:${FAKECLOUD_API##*:} mirror=$POD_OLAREG
  # The mirror scenario: images and signatures only in the mirror
  # (Harbor's proxy-cache form, project dockerhub-proxy), named by pods and
  # policies as docker.io/sigil-e2e/...; one repository whose rule lets sigil
  # read the upstream, where the counting proxy answers.
  local signed=${OLAREG_NEW#*@} unsigned=${OLAREG_UNSIGNED#*@} repo
  for repo in mirrored fallback; do
    if ! crane copy --insecure "$OLAREG/test/app@$signed" "$OLAREG/dockerhub-proxy/sigil-e2e/$repo/app:signed" >/dev/null 2>&1 ||
      ! crane copy --insecure "$OLAREG/test/app@$unsigned" "$OLAREG/dockerhub-proxy/sigil-e2e/$repo/app:unsigned" >/dev/null 2>&1; then
      e2e_log "e2e-node: crane copy into the mirror failed"
      return 1
    fi
  done
  (cd "$WORK" && HOME=$WORK TUF_ROOT=$WORK/tuf COSIGN_PASSWORD='' cosign sign --key "$KEY1_PRIVATE" \
    --use-signing-config=false --tlog-upload=false --allow-insecure-registry --yes \
    "$OLAREG/dockerhub-proxy/sigil-e2e/mirrored/app@$signed" >/dev/null 2>&1) ||
    { e2e_log "e2e-node: cosign sign in the mirror failed"; return 1; }
  {
    echo "FAKECLOUD_ADMIN=$FAKECLOUD_ADMIN"
    echo "CLOUD_ECR=$ip:${FAKECLOUD_ECR##*:}"
    echo "CLOUD_GCP=$ip:${FAKECLOUD_GCP##*:}"
    echo "CLOUD_ACR=$ip:${FAKECLOUD_ACR##*:}"
    echo "CLOUD_API=$api"
    echo "CLOUD_SIGNED_DIGEST=$signed"
    echo "CLOUD_UNSIGNED_DIGEST=$unsigned"
  } >>"$SIGIL_REGISTRY_FIXTURES"
  cat >"$WORK/cloud-values.yaml" <<EOF
registryCABundle:
  pem: |
$(sed 's/^/    /' "$FAKECLOUD_CA")
registryCredentials:
  providers: [ecr, gcp, acr]
  extraHosts:
    ecr: ["$ip:${FAKECLOUD_ECR##*:}"]
    gcp: ["$ip:${FAKECLOUD_GCP##*:}"]
    acr: ["$ip:${FAKECLOUD_ACR##*:}"]
  aws:
    roleArn: arn:aws:iam::123456789012:role/sigil
    region: us-east-1
  azure:
    clientId: 00000000-0000-0000-0000-0000000c11e7
    tenantId: 00000000-0000-0000-0000-00000000a1a1
    authorityHost: https://$api/
  env:
    - {name: AWS_ENDPOINT_URL_STS, value: "https://$api"}
    - {name: AWS_ENDPOINT_URL_ECR, value: "https://$api"}
    - {name: AWS_EC2_METADATA_DISABLED, value: "true"}
    - {name: GCE_METADATA_HOST, value: "$ip:${FAKECLOUD_METADATA##*:}"}
    - {name: HTTPS_PROXY, value: "http://$ip:${FAKECLOUD_PROXY##*:}"}
    - {name: NO_PROXY, value: "10.0.0.0/8,127.0.0.0/8,localhost"}
registryMirrors:
  rules:
    - "docker.io=http://$mirror/dockerhub-proxy"
    - "docker.io/sigil-e2e/fallback=http://$mirror/dockerhub-proxy/sigil-e2e/fallback,docker.io/sigil-e2e/fallback"
webhook:
  cache:
    verdictTTLSeconds: 2
    negativeTTLSeconds: 2
  extraArgs: ["--signature-ttl-seconds=0"]
EOF
  helm upgrade sigil charts/sigil --namespace "$SIGIL_NS" --reuse-values -f "$WORK/cloud-values.yaml" \
    --wait --timeout 5m >"$WORK/helm-cloud.log" 2>&1 ||
    { cat "$WORK/helm-cloud.log" >&2; e2e_log "e2e-node: helm upgrade with the cloud values failed"; return 1; }
}
t=$SECONDS
if ! phase cloud; then
  :
elif cloud_phase; then
  e2e_log "e2e-node: the cloud fakes and helm upgrade with each cloud's values took $((SECONDS - t)) s"
  t=$SECONDS
  export SIGIL_E2E_CLOUD_VALUES=$WORK/cloud-values.yaml
  run_suite node_cloud "$@" || status=$?
  e2e_log "e2e-node: the cloud registry scenarios took $((SECONDS - t)) s"
else
  status=1
fi
# Restricted clusters: sigil's namespace enforces the Pod Security Standard
# `restricted`, and the chart fixes no user or group ID
# (securityContext.fixedIds=false). The pods get theirs from outside the
# chart, as OpenShift's restricted-v2 SCC assigns one from the namespace's
# range; here the pod-level context carries it, as the SCC would write it.
# Labelling the namespace warns of running pods that would violate it.
RESTRICTED_UID=1000680000
restricted_phase() {
  kubectl label namespace "$SIGIL_NS" --overwrite \
    pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/enforce-version=latest \
    >"$WORK/label.log" 2>&1 || { cat "$WORK/label.log" >&2; return 1; }
  if grep -i "violate" "$WORK/label.log" >&2; then
    e2e_log "e2e-node: sigil's running pods violate the restricted standard (above)"
    return 1
  fi
  helm upgrade sigil charts/sigil --namespace "$SIGIL_NS" --reuse-values \
    --set securityContext.fixedIds=false \
    --set "securityContext.pod.runAsUser=$RESTRICTED_UID" \
    --set "securityContext.pod.runAsGroup=$RESTRICTED_UID" \
    --set "securityContext.pod.fsGroup=$RESTRICTED_UID" \
    --wait --timeout 5m >"$WORK/helm-restricted.log" 2>&1 ||
    { cat "$WORK/helm-restricted.log" >&2; e2e_log "e2e-node: helm upgrade into the restricted namespace failed"; return 1; }
}
t=$SECONDS
if ! phase restricted; then
  :
elif restricted_phase; then
  e2e_log "e2e-node: restricted namespace and helm upgrade without fixed IDs (pods ready) took $((SECONDS - t)) s"
  t=$SECONDS
  export SIGIL_E2E_RESTRICTED_UID=$RESTRICTED_UID
  run_suite node_restricted "$@" || status=$?
  e2e_log "e2e-node: the restricted namespace scenario took $((SECONDS - t)) s"
else
  kubectl -n "$SIGIL_NS" get pods,replicasets -o wide >&2 || true
  kubectl -n "$SIGIL_NS" get events --sort-by=.lastTimestamp 2>/dev/null | tail -n 20 >&2 || true
  status=1
fi
# sigil ran as its ServiceAccounts: an RBAC refusal in its logs means the
# chart grants too little, even if no scenario noticed. Read before the
# rehearsal replaces this installation.
kubectl -n "$SIGIL_NS" logs -l app.kubernetes.io/name=sigil --all-containers --prefix --tail=-1 >"$WORK/sigil.log" 2>&1 || true
# A release rehearsed: the workflow's steps against the node's registry, and
# sigil installed from that chart as docs/installation.md says.
if phase release; then
  t=$SECONDS
  if e2e/release-rehearsal.sh "$WORK/rehearsal" "$UNSIGNED"; then
    e2e_log "e2e-node: the release rehearsal took $((SECONDS - t)) s"
  else
    e2e_log "e2e-node: the release rehearsal failed (above)"
    status=1
  fi
fi
# The earlier version upgraded to the rehearsed release, and rolled back,
# under load.
if phase upgrade; then
  t=$SECONDS
  if e2e/upgrade.sh "$WORK/upgrade" "$SIGIL_UPGRADE_PREVIOUS" "$SIGNED" "$UNSIGNED" "$KEY1"; then
    e2e_log "e2e-node: the upgrade and rollback under load took $((SECONDS - t)) s"
  else
    e2e_log "e2e-node: the upgrade and rollback under load failed (above)"
    status=1
  fi
fi
kubectl -n "$SIGIL_NS" logs -l app.kubernetes.io/name=sigil --all-containers --prefix --tail=-1 >>"$WORK/sigil.log" 2>&1 || true
if grep -i "forbidden" "$WORK/sigil.log" | head -n 5 >&2; then
  e2e_log "e2e-node: sigil was refused by RBAC (above)"
  status=1
fi
exit "$status"
