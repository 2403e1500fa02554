#!/usr/bin/env bash
# make bench-policy-scale (run by hand, not in make test or
# .ci/run): policies by the thousand against the local control plane.
#
# Starts the control plane of e2e/local-cluster.sh (etcd, kube-apiserver,
# kube-controller-manager; no node), installs the chart with
# sigil-controller and sigil-webhook as host processes (e2e/lib.sh
# sigil_up, each as its own ServiceAccount), then bench/policy-scale.py
# applies 10, 100, 1,000 and 10,000 ClusterImagePolicies (SIGIL_SCALE_COUNTS)
# (or, with SIGIL_SCALE_NAMESPACED=1, as many ImagePolicies, one in each of
# as many namespaces) and writes .cache/bench/policy-scale.json. Binaries: the workspace's debug
# build, as e2e-local uses (SIGIL_SCALE_PROFILE=release for release ones).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT=$PWD
# shellcheck source=e2e/lib.sh
. e2e/lib.sh

OUT=${SIGIL_SCALE_OUT:-$REPO_ROOT/.cache/bench/policy-scale.json}
if [ "${1:-}" != "--inner" ]; then
  HELM_BIN=$(scripts/install-tools.sh helm)
  export PATH="$HELM_BIN:$PATH"
  if [ "${SIGIL_SCALE_PROFILE:-debug}" = release ]; then
    cargo build -q --release -p sigil-webhook -p sigil-audit -p sigil-controller -p sigil-cli
  else
    cargo build -q --workspace --all-targets
  fi
  e2e/local-cluster.sh up
  if [ "${SIGIL_E2E_KEEP:-}" != 1 ]; then
    trap 'e2e/local-cluster.sh down' EXIT
  fi
  "$0" --inner
  exit 0
fi

eval "$(e2e/local-cluster.sh env)"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sigil-scale.XXXXXX")
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
  sigil_down "$WORK"
  mkdir -p "$(dirname "$OUT")"
  cp "$WORK/controller.log" "$WORK/webhook.log" "$(dirname "$OUT")/" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
export SIGIL_E2E_PROFILE=${SIGIL_SCALE_PROFILE:-debug}
sigil_up "$WORK" 10
mkdir -p "$(dirname "$OUT")"
python3 bench/policy-scale.py --work "$WORK" --webhook "https://127.0.0.1:$WEBHOOK_PORT" \
  --metrics "$WEBHOOK_METRICS" --counts "${SIGIL_SCALE_COUNTS:-10,100,1000,10000}" \
  --step-timeout "${SIGIL_SCALE_STEP_TIMEOUT:-900}" --out "$OUT" \
  ${SIGIL_SCALE_NAMESPACED:+--namespaced}
