#!/usr/bin/env bash
# Lints and renders charts/sigil for every values combination under
# charts/sigil/ci/*-values.yaml, and asserts on each rendering with
# scripts/chart_check.py (hardening, webhook configurations, RBAC, the
# url / cert-manager / opt-out / mutation-off / ServiceMonitor variants).
# Values that must be refused are checked to be refused.
#
# Flags the chart passes are compared with the binaries' --help when
# sigil-webhook, sigil-audit and sigil-controller are built (target/debug or
# target/release, or $SIGIL_BIN_DIR); SIGIL_REQUIRE_BINARIES=1 makes their
# absence an error. Flags another branch is adding can be listed, space
# separated, in SIGIL_PENDING_FLAGS: they are reported, not failed.
#
# Usage: scripts/chart-check.sh        (helm from $HELM or scripts/install-tools.sh)
set -euo pipefail

REPO=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
CHART=$REPO/charts/sigil
NS=sigil-check

log() { printf 'chart-check: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

HELM=${HELM:-}
if [[ -z $HELM ]]; then
    HELM="$("$REPO/scripts/install-tools.sh" helm)/helm"
fi
[[ -x $HELM ]] || die "no helm at $HELM"
# promtool (Prometheus's rule checker) lints the PrometheusRules: from
# $PROMTOOL, or scripts/install-tools.sh promtool; SIGIL_SKIP_PROMTOOL=1 skips it.
PROMTOOL=${PROMTOOL:-}
if [[ -z $PROMTOOL && ${SIGIL_SKIP_PROMTOOL:-0} != 1 ]]; then
    PROMTOOL="$("$REPO/scripts/install-tools.sh" promtool)/promtool"
fi
[[ -z $PROMTOOL || -x $PROMTOOL ]] || die "no promtool at $PROMTOOL"
[[ -n $PROMTOOL ]] || log "warning: SIGIL_SKIP_PROMTOOL=1: PrometheusRules are not checked by promtool"
python3 -c 'import yaml' 2>/dev/null ||
    die "python3 lacks PyYAML: python3 -m pip install pyyaml"

WORK=$(mktemp -d)
trap 'rm -rf -- "$WORK"' EXIT

# --help of the built binaries, newest build first.
help_args=()
bin_dir=${SIGIL_BIN_DIR:-}
if [[ -z $bin_dir ]]; then
    for candidate in "$REPO/target/release" "$REPO/target/debug"; do
        if [[ -x $candidate/sigil-webhook && -x $candidate/sigil-audit && -x $candidate/sigil-controller ]]; then
            if [[ -z $bin_dir || $candidate/sigil-webhook -nt $bin_dir/sigil-webhook ]]; then
                bin_dir=$candidate
            fi
        fi
    done
fi
if [[ -n $bin_dir ]]; then
    "$bin_dir/sigil-webhook" --help >"$WORK/sigil-webhook.help"
    "$bin_dir/sigil-audit" --help >"$WORK/sigil-audit.help"
    "$bin_dir/sigil-controller" --help >"$WORK/sigil-controller.help"
    help_args=(--help-dir "$WORK")
    log "flags checked against $bin_dir/sigil-{webhook,audit,controller} --help"
elif [[ ${SIGIL_REQUIRE_BINARIES:-0} == 1 ]]; then
    die "no built sigil-webhook, sigil-audit and sigil-controller (cargo build --workspace --all-targets)"
else
    log "warning: binaries not built; flags are not checked against --help"
fi

failed=0
shopt -s nullglob
cases=("$CHART"/ci/*-values.yaml)
((${#cases[@]})) || die "no values files in $CHART/ci"
for values in "${cases[@]}"; do
    name=$(basename -- "$values" -values.yaml)
    out=$WORK/$name.yaml
    if ! "$HELM" lint --strict --namespace "$NS" -f "$values" "$CHART" >"$WORK/lint.log" 2>&1; then
        cat "$WORK/lint.log" >&2
        log "FAIL $name: helm lint --strict"
        failed=1
        continue
    fi
    if ! "$HELM" template sigil "$CHART" --namespace "$NS" --include-crds \
            -f "$values" >"$out" 2>"$WORK/template.log"; then
        cat "$WORK/template.log" >&2
        log "FAIL $name: helm template"
        failed=1
        continue
    fi
    if python3 "$REPO/scripts/chart_check.py" check "$out" "$values" "$NS" "${help_args[@]}"; then
        log "ok   $name"
    else
        log "FAIL $name"
        failed=1
    fi
    # Every PrometheusRule's groups, and the Grafana dashboard's queries as
    # recording rules, as a Prometheus rule file, through promtool.
    if [[ -n $PROMTOOL ]] && python3 "$REPO/scripts/chart_check.py" rules "$out" >"$WORK/$name.rules.yaml"; then
        if "$PROMTOOL" check rules "$WORK/$name.rules.yaml" >"$WORK/promtool.log" 2>&1; then
            log "ok   $name: promtool check rules ($(grep -c 'alert:' "$WORK/$name.rules.yaml") alerts, $(grep -c 'record: dashboard:' "$WORK/$name.rules.yaml") dashboard queries)"
        else
            cat "$WORK/promtool.log" >&2
            log "FAIL $name: promtool check rules"
            failed=1
        fi
    fi
done

# promtool's unit tests of the alerts (scripts/alert-tests/*.yaml), each
# against the rules a case renders (the rule file it names, NAME.rules.yaml
# for charts/sigil/ci/NAME-values.yaml): the audit's alerts tell enforcing
# policies from `mode: audit` and `warn` ones; the shared cache's tell an
# unreachable cache from entries failing their MAC; the exceptions' warn
# within exceptions.expiryWarning of an expiry and of refused exceptions.
if [[ -n $PROMTOOL ]]; then
    for tests in "$REPO"/scripts/alert-tests/*.yaml; do
        name=$(basename "$tests" .yaml)
        rules=$(sed -n 's/^  - \(.*\.rules\.yaml\)$/\1/p' "$tests" | head -n 1)
        if [[ -z $rules || ! -s $WORK/$rules ]]; then
            log "FAIL $name: no case rendered the rules it tests (${rules:-none named})"
            failed=1
            continue
        fi
        cp "$tests" "$WORK/$name.yaml"
        if "$PROMTOOL" test rules "$WORK/$name.yaml" >"$WORK/promtool-test.log" 2>&1; then
            log "ok   $name: promtool test rules ($(grep -c '^  - name:' "$tests") cases)"
        else
            cat "$WORK/promtool-test.log" >&2
            log "FAIL $name: promtool test rules"
            failed=1
        fi
    done
fi

# The assertions themselves must be able to fail.
if python3 "$REPO/scripts/chart_check.py" self-test "$WORK/defaults.yaml" \
        "$CHART/ci/defaults-values.yaml" "$NS" "${help_args[@]}"; then
    log "ok   self-test (every deliberate breakage was caught)"
else
    log "FAIL self-test"
    failed=1
fi

if python3 "$REPO/scripts/chart_check.py" self-test "$WORK/audit.yaml" \
        "$CHART/ci/audit-values.yaml" "$NS" "${help_args[@]}"; then
    log "ok   self-test audit (every deliberate breakage was caught)"
else
    log "FAIL self-test audit"
    failed=1
fi

if python3 "$REPO/scripts/chart_check.py" self-test "$WORK/github-trustroot.yaml" \
        "$CHART/ci/github-trustroot-values.yaml" "$NS" "${help_args[@]}"; then
    log "ok   self-test github-trustroot (every deliberate breakage was caught)"
else
    log "FAIL self-test github-trustroot"
    failed=1
fi

if python3 "$REPO/scripts/chart_check.py" self-test "$WORK/policy-controller.yaml" \
        "$CHART/ci/policy-controller-values.yaml" "$NS" "${help_args[@]}"; then
    log "ok   self-test policy-controller (every deliberate breakage was caught)"
else
    log "FAIL self-test policy-controller"
    failed=1
fi

if python3 "$REPO/scripts/chart_check.py" self-test "$WORK/exceptions.yaml" \
        "$CHART/ci/exceptions-values.yaml" "$NS" "${help_args[@]}"; then
    log "ok   self-test exceptions (every deliberate breakage was caught)"
else
    log "FAIL self-test exceptions"
    failed=1
fi

# One tag scheme: what the release workflow pushes for v<appVersion> is what
# the chart and deploy/sigil.yaml run by default; the krew manifest names the
# workflow's archives.
if python3 "$REPO/scripts/chart_check.py" release "$REPO/.github/workflows/release.yaml" \
        "$WORK/defaults.yaml" "$REPO/deploy/sigil.yaml" "$REPO/deploy/krew/sigil.yaml"; then
    log "ok   release: workflow tag, chart image, deploy/sigil.yaml and krew manifest agree"
else
    log "FAIL release"
    failed=1
fi

# The documented CRD upgrade step (docs/installation.md, "Upgrading") pulls
# the new chart and applies its crds/ directory (`helm show crds` is no
# substitute: it joins the files without a document separator, so a YAML
# reader sees one document). The packaged chart must hold exactly sigil's
# CRDs there, one per file.
if "$HELM" package "$CHART" --destination "$WORK/package" >"$WORK/package.log" 2>&1 &&
    mkdir -p "$WORK/pulled" && tar -xzmf "$WORK/package"/sigil-*.tgz -C "$WORK/pulled" &&
    python3 - "$WORK/pulled/sigil/crds" <<'PY'; then
import os, sys, yaml
names = []
for f in sorted(os.listdir(sys.argv[1])):
    docs = [d for d in yaml.safe_load_all(open(os.path.join(sys.argv[1], f))) if d]
    if len(docs) != 1 or docs[0].get("kind") != "CustomResourceDefinition":
        sys.exit(f"  FAIL: crds/{f} is not one CustomResourceDefinition")
    names.append(docs[0]["metadata"]["name"])
want = ["clusterimagepolicies.policy.sigil.dev", "imagepolicies.policy.sigil.dev", "imagepolicyexceptions.policy.sigil.dev", "trustroots.policy.sigil.dev", "workloadkinds.policy.sigil.dev"]
if sorted(names) != want:
    sys.exit(f"  FAIL: the packaged chart's crds/ holds {names}, want {want}")
PY
    log "ok   packaged crds/: the upgrade step applies every CRD"
else
    cat "$WORK/package.log" >&2
    log "FAIL packaged crds/"
    failed=1
fi

# Contradictory or invalid values are refused, not rendered.
refused() {
    local why=$1
    shift
    if "$HELM" template sigil "$CHART" --namespace "$NS" "$@" >/dev/null 2>&1; then
        log "FAIL refuse: $why was rendered"
        failed=1
    else
        log "ok   refuse: $why"
    fi
}
refused "url with the in-cluster webhook" --set webhook.url=https://example.test
refused "no url and no in-cluster webhook" --set webhook.deploy=false
refused "both registry CA sources" --set registryCABundle.existingConfigMap=x \
    --set-string 'registryCABundle.pem=-----BEGIN CERTIFICATE-----'
refused "timeoutSeconds above 30" --set webhook.timeoutSeconds=31
refused "an unknown pin mode" --set webhook.pin=sometimes
refused "an unknown namespace selection" --set namespaceSelection=everything
refused "an unknown top-level key" --set webhok.replicas=3
refused "an http webhook url" --set webhook.deploy=false --set webhook.url=http://example.test
refused "a registry address that is not a CIDR" --set 'registryAccess.allowAddresses={metadata.internal}'
refused "a pull-secret namespace that is not a name" --set 'webhook.pullSecretNamespaces={Shop_1}'
refused "a default TrustRoot without a spec" --set trustRoot.default.name=corp
refused "an unknown Sigstore instance" --set trustRoot.sigstoreInstance=private
refused "an unknown report format" --set audit.enabled=true --set audit.reportFormat=json
refused "an audit interval under a minute" --set audit.enabled=true --set audit.intervalSeconds=5
refused "an unknown failurePolicy" --set webhook.failurePolicy=Warn
refused "a matchCondition without an expression" --set 'webhook.matchConditions[0].name=x'
refused "an unknown key under a component's serviceAccount" --set controller.serviceAccount.name=other
refused "a connection jitter above 50%" --set webhook.connections.jitterPercent=60
refused "the Gatekeeper provider without Gatekeeper's CA" --set gatekeeper.enabled=true
refused "autoscaling with minReplicas above maxReplicas" --set webhook.autoscaling.enabled=true \
    --set webhook.autoscaling.minReplicas=6 --set webhook.autoscaling.maxReplicas=3
refused "a shared cache URL that is not redis:// or rediss://" --set sharedCache.url=http://cache.example:6379
refused "the in-chart shared cache with a Secret but no password key" --set sharedCache.deploy=true \
    --set sharedCache.existingSecret=mine
refused "both an external and the in-chart shared cache" --set sharedCache.deploy=true \
    --set sharedCache.url=redis://cache.example:6379
refused "exceptions running longer than 366 days" --set 'exceptions.namespaces={team-a}' \
    --set exceptions.maxDuration=367d
refused "an exception duration not written in d, h, m and s" --set exceptions.maxDuration=1.5h
refused "an exception namespace that is not a name" --set 'exceptions.namespaces={Team_A}'

exit "$failed"
