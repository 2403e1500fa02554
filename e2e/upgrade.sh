#!/usr/bin/env bash
# Upgrade from an earlier sigil under load, then roll back (a phase of
# e2e/run-node.sh, after the release rehearsal, whose release it upgrades to).
#
# 1. The earlier version (e2e/previous-release.sh: built once per commit) is
#    published to the node's registry as a release would be: its image, and
#    its own chart pinned to that image, as chart version
#    <its appVersion>-prev.g<commit>.
# 2. The sigil of the earlier phases and every policy.sigil.dev CRD go; the
#    earlier version is installed with docs/installation.md's install command
#    (the registry changed, as in the rehearsal), so its CRDs are its own.
# 3. Policies in force, one of each kind: a TrustRoot and the keyless
#    ClusterImagePolicy naming it (deploy/examples/keyless-custom-trustroot.yaml),
#    a ClusterImagePolicy and an ImagePolicy requiring the fixtures' key1 for the
#    workload images, and a WorkloadKind (Argo Rollouts, its CRD stood in for).
# 4. Steady admissions (e2e/upgrade-load.py: dry-run creates of Pods and
#    Rollouts, signed and unsigned, every 100 ms) while the release is upgraded
#    with docs/installation.md's "Upgrading" commands (the new CRDs first), and
#    again while `helm rollback` returns to the earlier version. Each
#    admission must get its right verdict: 0 failed and 0 wrong.
#
# Usage: e2e/upgrade.sh WORK PREVIOUS-DIR SIGNED UNSIGNED KEY1.pub
# Needs the node cluster's environment (KUBECONFIG, SIGIL_E2E_NODE_REGISTRY),
# SIGIL_NS, helm, crane and kubectl on PATH, and the rehearsal's release
# (chart oci://REGISTRY/sigil-dev/charts/sigil at the chart's appVersion).
# Every wait is bounded.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=e2e/lib.sh
. e2e/lib.sh

(($# == 5)) || { e2e_log "usage: e2e/upgrade.sh WORK PREVIOUS-DIR SIGNED UNSIGNED KEY1.pub"; exit 2; }
WORK=$1 PREV=$2 SIGNED=$3 UNSIGNED=$4 KEY1=$5
REG=${SIGIL_E2E_NODE_REGISTRY:?needs the environment of the node cluster}
log() { e2e_log "upgrade: $*"; }
fail() { log "FAIL: $*"; exit 1; }
mkdir -p "$WORK"

VERSION=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/sigil/Chart.yaml)
IMAGE=$REG/sigil-dev/sigil
CHARTS=oci://$REG/sigil-dev/charts
NS=e2e-upgrade
REF=$IMAGE@$(crane digest --insecure "$IMAGE:$VERSION") ||
  fail "no released $IMAGE:$VERSION: the release rehearsal runs first"

# ---- 1. The earlier version, published ------------------------------------------
commit=$(cat "$PREV/commit")
prev_app=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$PREV/chart/sigil/Chart.yaml")
PREV_VERSION=$prev_app-prev.g${commit:0:7}
crane push --insecure "$PREV/oci" "$IMAGE:$PREV_VERSION" >/dev/null 2>&1 || fail "crane push $PREV/oci"
PREV_REF=$IMAGE@$(cat "$PREV/digest")
[[ $(crane digest --insecure "$IMAGE:$PREV_VERSION") == "${PREV_REF#*@}" ]] || fail "$IMAGE:$PREV_VERSION is not $PREV_REF"
rm -rf "$WORK/prev-chart" && mkdir -p "$WORK/prev-chart"
cp -R "$PREV/chart/sigil" "$WORK/prev-chart/sigil"
sed -i -e "s|^  repository: .*|  repository: $IMAGE|" -e "s|^  digest: \"\"|  digest: \"${PREV_REF#*@}\"|" \
  "$WORK/prev-chart/sigil/values.yaml"
grep -q "^  digest: \"${PREV_REF#*@}\"" "$WORK/prev-chart/sigil/values.yaml" || fail "could not pin the earlier chart's image"
helm package "$WORK/prev-chart/sigil" --version "$PREV_VERSION" --app-version "$PREV_VERSION" \
  --destination "$WORK/prev-chart" >/dev/null
helm push --plain-http "$WORK/prev-chart/sigil-$PREV_VERSION.tgz" "$CHARTS" >/dev/null 2>&1 || fail "helm push of the earlier chart"
log "earlier version $PREV_VERSION: commit $(git log -1 --format='%h %cs' "$commit"), image $PREV_REF"

# ---- 2. Installed as docs/installation.md says ----------------------------------
helm uninstall sigil -n "$SIGIL_NS" --wait --timeout 3m >/dev/null 2>&1 || true
mapfile -t crds < <(kubectl get crd -o name | grep '\.policy\.sigil\.dev$' || true)
if ((${#crds[@]})); then kubectl delete "${crds[@]}" --timeout 120s >/dev/null; fi
steps=$(awk '/^## With Helm/ { s = 1 } s && /^```sh$/ { b = 1; next } b && /^```$/ { exit } b' docs/installation.md)
install=$(sed -n 1,3p <<<"$steps")
[[ $install == "helm install sigil oci://ghcr.io/sigil-dev/charts/sigil --version $VERSION \\
  --namespace sigil-system --create-namespace
kubectl -n sigil-system rollout status deployment/sigil-controller deployment/sigil-webhook" ]] ||
  fail "docs/installation.md's install commands changed; follow them here too: $install"
install=${install//"oci://ghcr.io/sigil-dev/charts/sigil --version $VERSION"/"oci://$REG/sigil-dev/charts/sigil --version $PREV_VERSION"}
install=${install//"--create-namespace"/"--create-namespace --plain-http --set insecureRegistries={$REG}"}
install=${install//"rollout status"/"rollout status --timeout 5m"}
install=${install//"sigil-system"/"$SIGIL_NS"}
t=$SECONDS
(cd "$WORK" && bash -euo pipefail -c "$install") >"$WORK/install-prev.log" 2>&1 ||
  { cat "$WORK/install-prev.log" >&2; fail "installing $PREV_VERSION failed"; }
webhook_image() { kubectl -n "$SIGIL_NS" get deployment sigil-webhook -o jsonpath='{.spec.template.spec.containers[0].image}'; }
[[ $(webhook_image) == "$PREV_REF" ]] || fail "the webhook runs $(webhook_image), not $PREV_REF"
log "installed $PREV_VERSION from $CHARTS/sigil in $((SECONDS - t)) s"

# ---- 3. Policies of every kind in force -------------------------------------------
kubectl create namespace "$NS" >/dev/null
kubectl label namespace "$NS" policy.sigil.dev/include=true >/dev/null
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
  kubectl delete namespace "$NS" --wait=false >/dev/null 2>&1 || true
}
trap cleanup EXIT
kubectl apply -f - >/dev/null <<'EOF'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: rollouts.argoproj.io
spec:
  group: argoproj.io
  names: {kind: Rollout, plural: rollouts, singular: rollout, listKind: RolloutList}
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
EOF
kubectl wait --for=condition=Established crd/rollouts.argoproj.io --timeout 60s >/dev/null
key=$(sed 's/^/        /' "$KEY1")
kubectl apply -f deploy/examples/keyless-custom-trustroot.yaml >/dev/null
kubectl apply -f - >/dev/null <<EOF
apiVersion: policy.sigil.dev/v1alpha1
kind: ClusterImagePolicy
metadata:
  name: upgrade-workloads
spec:
  images:
  - glob: "$REG/sigil-e2e/**"
  authorities:
  - name: key1
    key:
      data: |
$key
    ctlog: {}
  - name: corp-ci
    keyless:
      url: https://fulcio.corp.example.com
      trustRootRef: corp-sigstore
      identities:
      - issuer: https://gitlab.corp.example.com
        subjectRegExp: '^https://gitlab\.corp\.example\.com/'
---
apiVersion: policy.sigil.dev/v1alpha1
kind: WorkloadKind
metadata:
  name: upgrade-rollouts
spec:
  builtin: ArgoRollout
EOF
# An ImagePolicy may name only registries a ClusterImagePolicy names: it
# comes once they are Ready.
kubectl wait --for=condition=Ready --timeout 120s clusterimagepolicy/upgrade-workloads >/dev/null ||
  fail "ClusterImagePolicy upgrade-workloads did not become Ready under $PREV_VERSION"
kubectl apply -f - >/dev/null <<EOF
apiVersion: policy.sigil.dev/v1alpha1
kind: ImagePolicy
metadata:
  name: upgrade-namespace
  namespace: $NS
spec:
  images:
  - glob: "$REG/sigil-e2e/**"
  authorities:
  - name: key1
    key:
      data: |
$key
    ctlog: {}
EOF
ready() { # when
  kubectl wait --for=condition=Ready --timeout 120s trustroot/corp-sigstore clusterimagepolicy/corp-keyless \
    clusterimagepolicy/upgrade-workloads workloadkind/upgrade-rollouts >/dev/null ||
    fail "the policies are not all Ready $1"
  kubectl -n "$NS" wait --for=condition=Ready --timeout 60s imagepolicy/upgrade-namespace >/dev/null ||
    fail "the ImagePolicy is not Ready $1"
}
ready "under $PREV_VERSION"
pods=/api/v1/namespaces/$NS/pods
rollouts=/apis/argoproj.io/v1alpha1/namespaces/$NS/rollouts
cat >"$WORK/targets" <<EOF
signed $pods pod $SIGNED
unsigned $pods pod $UNSIGNED
signed $rollouts rollout $SIGNED
unsigned $rollouts rollout $UNSIGNED
EOF
# The API server sends Rollouts to sigil once it has read the rule the
# controller added for the WorkloadKind: a short probe until every target
# gets its verdict, before the measured traffic.
probe_ok=0
for _ in $(seq 30); do
  out=$(timeout 60 python3 e2e/upgrade-load.py --kubeconfig "$KUBECONFIG" --targets "$WORK/targets" \
    --stop-file "$WORK/probe.never" --max-seconds 1 --pace-ms 100 2>&1 || true)
  if [[ $(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["admissions"] >= 4 and d["correct"] == d["admissions"])' "$out" 2>/dev/null) == True ]]; then
    probe_ok=1
    break
  fi
  sleep 2
done
((probe_ok)) || fail "the policies in force did not give every target its verdict within a minute: $out"
log "in force under $PREV_VERSION: TrustRoot corp-sigstore, ClusterImagePolicies corp-keyless and upgrade-workloads, ImagePolicy $NS/upgrade-namespace, WorkloadKind upgrade-rollouts (all Ready)"

# ---- 4. Upgrade and rollback under load -------------------------------------------
# watch_rules FILE: watches the validating webhook configuration (at most
# 900 s) and writes each version of it to FILE with the time it arrived and
# whether the rule for the WorkloadKind's Rollouts was in it: the
# controller adds that rule to the chart's rules, which a Helm upgrade
# rewrites. Prints the watch's pid.
watch_rules() {
  timeout 900 kubectl get validatingwebhookconfiguration sigil-webhook --watch \
    -o jsonpath='{.metadata.resourceVersion}{" "}{.webhooks[*].rules[*].resources}{"\n"}' 2>/dev/null \
    > >(python3 -u -c '
import sys
from datetime import datetime, timezone
for line in sys.stdin:
    at = datetime.now(timezone.utc).strftime("%H:%M:%S.%f")[:-3]
    version = line.split(" ", 1)[0]
    state = "with" if "rollouts" in line else "WITHOUT"
    print(f"{at} validating webhook configuration version {version}: {state} the Rollouts rule")
' >"$1") &
  echo $!
}
# under_load NAME COMMAND...: the load runs from 10 s before COMMAND until
# 15 s after both Deployments have rolled out; prints the load's summary line.
under_load() {
  local name=$1 pid rc=0 summary
  shift
  rm -f "$WORK/$name.stop"
  python3 e2e/upgrade-load.py --kubeconfig "$KUBECONFIG" --targets "$WORK/targets" \
    --stop-file "$WORK/$name.stop" --max-seconds 900 --pace-ms 100 >"$WORK/$name.json" 2>"$WORK/$name.err" &
  pid=$!
  local watcher
  watcher=$(watch_rules "$WORK/$name.rules")
  sleep 10
  local t=$SECONDS from
  from=$(date -u +%H:%M:%S.%3N)
  "$@" >"$WORK/$name.log" 2>&1 || rc=$?
  if ((rc == 0)); then
    timeout 330 kubectl -n "$SIGIL_NS" rollout status --timeout 5m \
      deployment/sigil-controller deployment/sigil-webhook >>"$WORK/$name.log" 2>&1 || rc=$?
  fi
  log "$name (and both rollouts) from $from to $(date -u +%H:%M:%S.%3N), $((SECONDS - t)) s (exit $rc)"
  sleep 15
  touch "$WORK/$name.stop"
  wait "$pid" || true
  kill "$watcher" 2>/dev/null || true
  sleep 0.5
  if ((rc != 0)); then
    cat "$WORK/$name.log" >&2
    fail "$name failed"
  fi
  summary=$(python3 - "$WORK/$name.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
def count(v):
    bad = f" of which {v['wrong']} wrong, {v['failed']} failed" if v["wrong"] or v["failed"] else ""
    return f"{v['correct'] + v['wrong'] + v['failed']}{bad}"
by = ", ".join(f"{k} {count(v)}" for k, v in sorted(d["by_target"].items()))
print(f"{d['admissions']} admissions in {d['seconds']} s ({by}): {d['failed']} failed, {d['wrong']} wrong")
for e in d["examples"]:
    print("  " + e)
PY
) || { cat "$WORK/$name.err" "$WORK/$name.json" >&2; fail "no summary of the load during $name"; }
  printf '%s\n' "$summary"
  sed 's/^/  /' "$WORK/$name.rules"
}

steps=$(awk '/^## Upgrading/ { s = 1 } s && /^```sh$/ { b = 1; next } b && /^```$/ { exit } b' docs/installation.md)
[[ $steps == "helm pull oci://ghcr.io/sigil-dev/charts/sigil --version NEW --untar --untardir sigil-NEW
kubectl apply --server-side --force-conflicts -f sigil-NEW/sigil/crds/
helm upgrade sigil oci://ghcr.io/sigil-dev/charts/sigil --version NEW -n sigil-system --reset-then-reuse-values" ]] ||
  fail "docs/installation.md's upgrade steps changed; follow them here too: $steps"
upgrade=${steps//"oci://ghcr.io/sigil-dev/charts/sigil"/"oci://$REG/sigil-dev/charts/sigil --plain-http"}
upgrade=${upgrade//NEW/$VERSION}
upgrade=${upgrade//"-n sigil-system"/"-n $SIGIL_NS"}
log "upgrading as docs/installation.md says, the registry changed:"
printf '  %s\n' "${upgrade//$'\n'/$'\n  '}" >&2
mkdir -p "$WORK/upgrade"
result=$(under_load "helm-upgrade" bash -euo pipefail -c "cd '$WORK/upgrade' && $upgrade")
[[ $(webhook_image) == "$REF" ]] || fail "after the upgrade the webhook runs $(webhook_image), not the release $REF"
# The CRDs in the cluster are the new chart's.
for crd in "$WORK/upgrade/sigil-$VERSION/sigil/crds/"*.yaml; do
  kubectl diff --server-side --force-conflicts -f "$crd" >"$WORK/crd.diff" 2>&1 ||
    { cat "$WORK/crd.diff" >&2; fail "the cluster's CRD is not $crd after the upgrade"; }
done
ready "after the upgrade to $VERSION"
log "helm upgrade $PREV_VERSION -> $VERSION (CRDs first) under load: $result"
failed_or_wrong() { [[ $1 != *": 0 failed, 0 wrong"* ]]; }
status=0
failed_or_wrong "${result%%$'\n'*}" && status=1

result=$(under_load "helm-rollback" helm rollback sigil -n "$SIGIL_NS" --wait --timeout 5m)
[[ $(webhook_image) == "$PREV_REF" ]] || fail "after the rollback the webhook runs $(webhook_image), not $PREV_REF"
ready "after the rollback to $PREV_VERSION"
log "helm rollback $VERSION -> $PREV_VERSION under load: $result"
failed_or_wrong "${result%%$'\n'*}" && status=1
exit "$status"
