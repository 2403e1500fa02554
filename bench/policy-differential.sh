#!/usr/bin/env bash
# The verdict differential with policy-controller's own tester (issue 12 §3):
# every (policy, image) pair of bench/differential/corpus.yaml judged by
# policy-tester (policy-controller v0.15.1, built by bench/peers/build.sh) and
# by `sigil policy test`, on images in local registries on 127.0.0.1 (cosign v3
# fixtures from e2e/registry-fixtures.sh, custom attestations among them, and
# keyless images minted by the testkit), with the table written to
# docs/policy-differential.md (bench/policy-differential.py report).
#
# Usage: bench/policy-differential.sh [--out FILE] [--report]
#   --report  only render FILE again from the last run's verdicts (kept in
#             .cache/bench/policy-differential), e.g. after writing reasons
#   (internally: e2e/registry-fixtures.sh -- bench/policy-differential.sh --inner)
# Run by hand or by `make policy-differential`; not part of `make test` (it
# needs the policy-controller build). Needs go, cargo, python3 with PyYAML.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
export PYTHONDONTWRITEBYTECODE=1
HELPER=bench/policy-differential.py
CORPUS=bench/differential/corpus.yaml
REASONS=bench/differential/reasons.yaml
TRUST_ROOT_NAME=difftest
# Anything policy-tester tries to reach off this machine goes to this proxy,
# where nothing listens: it fails at once instead of reaching the public-good
# TUF mirror or a Rekor by its in-cluster name. Go never proxies 127.0.0.1.
NO_NETWORK_PROXY=http://127.0.0.1:9
KEEP=$REPO/.cache/bench/policy-differential

log() { printf 'policy-differential: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

outer() {
    local out=docs/policy-differential.md report_only=false
    while (($#)); do
        case $1 in
            --out) out=${2:?--out needs a file}; shift ;;
            --report) report_only=true ;;
            -h | --help) sed -n '10,15s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 0 ;;
            *) die "unknown argument: $1" ;;
        esac
        shift
    done
    if $report_only; then
        [[ -f $KEEP/results.jsonl ]] || die "no earlier run in $KEEP; run bench/policy-differential.sh first"
        python3 "$HELPER" report "$CORPUS" "$REASONS" "$KEEP/results.jsonl" "$KEEP/meta.json" >"$out"
        log "wrote $out from the last run's verdicts ($KEEP)"
        exit 0
    fi
    python3 "$HELPER" --check
    local pc_bin
    pc_bin=$(nice -n 19 bench/peers/build.sh policy-controller)
    # The workspace build (sigil and the testkit's examples among its
    # targets): what make test has already built, so nothing is rebuilt.
    nice -n 19 cargo build -q --workspace --all-targets
    local target=${CARGO_TARGET_DIR:-$REPO/target}
    SIGIL_CUE_MODULE=$(scripts/build-cue-wasm.sh)
    export SIGIL_CUE_MODULE
    export DIFF_POLICY_TESTER=$pc_bin/policy-tester
    export DIFF_SIGIL=$target/debug/sigil
    export DIFF_KEYLESS_IMAGES=$target/debug/examples/keyless-images
    export DIFF_OUT=$out
    DIFF_COMMAND=bench/policy-differential.sh
    [[ $out == docs/policy-differential.md ]] || DIFF_COMMAND+=" --out $out"
    export DIFF_COMMAND
    e2e/registry-fixtures.sh -- bench/policy-differential.sh --inner
}

# Runs one tool with a deadline; writes its exit status, stdout and stderr.
run_tool() { # out-prefix command...
    local prefix=$1 rc=0
    shift
    timeout 120 "$@" </dev/null >"$prefix.stdout" 2>"$prefix.stderr" || rc=$?
    echo "$rc" >"$prefix.rc"
}

inner() {
    [[ -n ${SIGIL_REGISTRY_FIXTURES:-} ]] || die "run as e2e/registry-fixtures.sh -- $0 --inner"
    local tool
    for tool in "$DIFF_POLICY_TESTER" "$DIFF_SIGIL" "$DIFF_KEYLESS_IMAGES"; do
        [[ -x $tool ]] || die "$tool is missing; run bench/policy-differential.sh without --inner"
    done
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/sigil-policy-diff.XXXXXX")
    trap 'rm -rf -- "$WORK"' EXIT
    local fix=$WORK/fixtures.env
    cp -- "$SIGIL_REGISTRY_FIXTURES" "$fix"
    # shellcheck disable=SC1090
    . "$fix"
    "$DIFF_KEYLESS_IMAGES" "$OLAREG" test/keyless "$WORK" >>"$fix"
    python3 "$HELPER" trustroot "$WORK/trusted_root.json" "$TRUST_ROOT_NAME" >"$WORK/trustroot.yaml"
    mkdir -p "$WORK/tuf-empty" "$WORK/docker" "$WORK/policies"
    echo '{}' >"$WORK/docker/config.json"

    local results=$WORK/results.jsonl n=0
    : >"$results"
    local id source name ref pc_policy sigil_policy run
    while IFS=$'\t' read -r id source name ref; do
        pc_policy=$WORK/policies/$id.yaml
        sigil_policy=$WORK/policies/$id.sigil.yaml
        if [[ ! -f $pc_policy ]]; then
            python3 "$HELPER" render "$CORPUS" "$id" "$fix" "$TRUST_ROOT_NAME" >"$pc_policy"
            # convert exits 3 when it warns (docs/migration.md's remaining differences).
            local rc=0
            "$DIFF_SIGIL" policy convert "$pc_policy" >"$sigil_policy" 2>"$WORK/policies/$id.convert" || rc=$?
            ((rc == 0 || rc == 3)) || die "sigil policy convert of $id ($source) failed: $(cat "$WORK/policies/$id.convert")"
        fi
        n=$((n + 1))
        run=$WORK/run-$n
        run_tool "$run.pc" env HTTPS_PROXY="$NO_NETWORK_PROXY" HTTP_PROXY="$NO_NETWORK_PROXY" \
            NO_PROXY=127.0.0.1,localhost TUF_ROOT="$WORK/tuf-empty" DOCKER_CONFIG="$WORK/docker" \
            "$DIFF_POLICY_TESTER" --log-level error --policy "$pc_policy" --image "$ref" \
            --trustroot "$WORK/trustroot.yaml"
        run_tool "$run.sigil" env DOCKER_CONFIG="$WORK/docker" "$DIFF_SIGIL" policy test \
            --policy "$sigil_policy" --trust-root "$TRUST_ROOT_NAME=$WORK/trusted_root.json" \
            --insecure-registry "$OLAREG" --insecure-registry "$DOCKREG" "$ref"
        python3 "$HELPER" record "$run" "$id" "$source" "$name" "$ref" "$WORK/policies/$id.convert" >>"$results"
        log "$n: $id × $name: policy-tester exit $(<"$run.pc.rc"), sigil exit $(<"$run.sigil.rc")"
    done < <(python3 "$HELPER" pairs "$CORPUS" "$fix")

    local proxy_hits
    proxy_hits=$(grep -c proxyconnect "$results" || true)
    local dirty=""
    git diff --quiet HEAD -- crates bench || dirty="+changes"
    python3 "$HELPER" meta "$DIFF_COMMAND" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
        "$("$DIFF_SIGIL" --version | head -n1)" "$(git rev-parse --short HEAD)$dirty" \
        "$("$DIFF_POLICY_TESTER" --version | sed -n 's/^GitVersion: *//p')" \
        "$(cosign version 2>/dev/null | sed -n 's/^GitVersion: *//p')" "$NO_NETWORK_PROXY" "$proxy_hits" \
        >"$WORK/meta.json"
    # Kept so that the report can be rendered again (--report) after the
    # reasons are written, from this run's verdicts.
    mkdir -p -- "$KEEP"
    rm -rf -- "$KEEP/policies"
    cp -r -- "$results" "$WORK/meta.json" "$WORK/policies" "$WORK/trustroot.yaml" "$KEEP/"
    python3 "$HELPER" report "$CORPUS" "$REASONS" "$results" "$WORK/meta.json" >"$DIFF_OUT"
    log "$n pairs; wrote $DIFF_OUT"
}

if [[ ${1:-} == --inner ]]; then
    inner
else
    outer "$@"
fi
