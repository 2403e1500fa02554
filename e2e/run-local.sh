#!/usr/bin/env bash
# make e2e-local: sigil's end-to-end suite (e2e/suite) on this machine.
#
# A real control plane (etcd, kube-apiserver, kube-controller-manager built
# from Go modules by e2e/local-cluster.sh), real registries with real cosign
# signatures (e2e/registry-fixtures.sh: olareg with the referrers API,
# docker-registry without), the Helm chart installed with the webhook URL
# override, and sigil-controller + sigil-webhook as host processes. Then
#   cargo test -p sigil-e2e -- --ignored --test-threads 1
# Arguments are passed to the test binary (e.g. a scenario name to run only
# that one). Everything stops on exit; SIGIL_E2E_KEEP=1 leaves the cluster
# up (e2e/local-cluster.sh down removes it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT=$PWD
# shellcheck source=e2e/lib.sh
. e2e/lib.sh

if [ "${1:-}" != "--inner" ]; then
  start=$SECONDS
  HELM_BIN=$(scripts/install-tools.sh helm)
  export PATH="$HELM_BIN:$PATH"
  # The workspace build (`make unit`'s): no rebuild in make test.
  cargo build -q --workspace --all-targets
  e2e/local-cluster.sh up
  if [ "${SIGIL_E2E_KEEP:-}" != 1 ]; then
    trap 'e2e/local-cluster.sh down' EXIT
  fi
  e2e_log "e2e-local: cluster and binaries ready after $((SECONDS - start)) s"
  e2e/registry-fixtures.sh -- "$0" --inner "$@"
  e2e_log "e2e-local: done in $((SECONDS - start)) s"
  exit 0
fi

# Inside e2e/registry-fixtures.sh: the registries are up, the fixture file
# is SIGIL_REGISTRY_FIXTURES.
shift
eval "$(e2e/local-cluster.sh env)"
# shellcheck disable=SC1090
. "$SIGIL_REGISTRY_FIXTURES"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sigil-e2e.XXXXXX")
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
  sigil_down "$WORK"
  if [ "${status:-1}" != 0 ]; then
    for f in controller webhook; do
      e2e_log "---- last lines of sigil-$f's log ----"
      tail -n 40 "$WORK/$f.log" >&2 || true
    done
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
# A short webhook timeout keeps the hanging-registry scenario short. Debug
# logs of sigil's own crates: the credentials scenario searches them.
export SIGIL_E2E_RUST_LOG=info,sigil_webhook=debug,sigil_registry=debug,sigil_policy=debug,sigil_controller=debug,sigil_api=debug
sigil_up "$WORK" 5 "$OLAREG" "$DOCKREG"
e2e_log "e2e-local: sigil is up (webhook https://127.0.0.1:$WEBHOOK_PORT)"
status=0
SIGIL_E2E_WEBHOOK_BIN=${CARGO_TARGET_DIR:-$REPO_ROOT/target}/debug/sigil-webhook \
  SIGIL_E2E_NAMESPACE=$SIGIL_NS \
  SIGIL_E2E_LOG_DIR=$WORK SIGIL_E2E_METRICS="$WEBHOOK_METRICS $CONTROLLER_METRICS" \
  cargo test -q --workspace --test e2e --test doctor --test gitops -- --ignored --test-threads 1 --show-output "$@" || status=$?
# The components ran as their ServiceAccounts: any RBAC refusal in their logs
# means the chart grants too little, even if no scenario noticed.
if grep -il "forbidden" "$WORK/controller.log" "$WORK/webhook.log" >&2; then
  grep -ih "forbidden" "$WORK/controller.log" "$WORK/webhook.log" | head -n 5 >&2
  e2e_log "e2e-local: sigil was refused by RBAC (above)"
  status=1
fi
exit "$status"
