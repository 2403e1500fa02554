#!/usr/bin/env bash
# The conversion differential with Kyverno: every (policy, image) pair of
# bench/differential/kyverno/corpus.yaml judged by Kyverno's command line
# (`kyverno apply`, Kyverno v1.19.1 built by bench/peers/build.sh) on the
# policy as written, and by `sigil policy test` on what `sigil policy convert`
# made of it, on images in local registries on 127.0.0.1: the cosign fixtures
# of e2e/registry-fixtures.sh, keyless images the testkit signs through its
# test Sigstore, and images this script signs with notation-go (the testkit's
# notation-signer). The table goes to docs/kyverno-differential.md
# (bench/kyverno-differential.py report).
#
# Usage: bench/kyverno-differential.sh [--out FILE] [--report]
#   --report  only render FILE again from the last run's verdicts (kept in
#             .cache/bench/kyverno-differential), e.g. after writing reasons
#   (internally: e2e/registry-fixtures.sh -- bench/kyverno-differential.sh --inner)
# Run by hand or by `make kyverno-differential`; not part of `make test` (it
# needs the Kyverno build). Needs go, cargo, openssl, python3 with PyYAML.
set -euo pipefail
# A failed step inside $(...) (a fixture's push or signature) stops the run.
shopt -s inherit_errexit
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
export PYTHONDONTWRITEBYTECODE=1
HELPER=bench/kyverno-differential.py
CORPUS=bench/differential/kyverno/corpus.yaml
REASONS=bench/differential/kyverno/reasons.yaml
# Anything Kyverno tries to reach off this machine goes to this proxy, where
# nothing listens: it fails at once instead of reaching the public-good TUF
# mirror or Rekor. Go never proxies 127.0.0.1, where the registries are.
NO_NETWORK_PROXY=http://127.0.0.1:9
KEEP=$REPO/.cache/bench/kyverno-differential
# Each tool's verdict on one pair, in seconds.
TOOL_TIMEOUT=120
# Each step that makes a fixture (a push, a signature), in seconds.
STEP_TIMEOUT=60

log() { printf 'kyverno-differential: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

outer() {
    local out=docs/kyverno-differential.md report_only=false
    while (($#)); do
        case $1 in
            --out) out=${2:?--out needs a file}; shift ;;
            --report) report_only=true ;;
            -h | --help) sed -n '11,16s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 0 ;;
            *) die "unknown argument: $1" ;;
        esac
        shift
    done
    if $report_only; then
        [[ -f $KEEP/results.jsonl ]] || die "no earlier run in $KEEP; run bench/kyverno-differential.sh first"
        python3 "$HELPER" report "$CORPUS" "$REASONS" "$KEEP/results.jsonl" "$KEEP/meta.json" >"$out"
        log "wrote $out from the last run's verdicts ($KEEP)"
        exit 0
    fi
    python3 "$HELPER" --check
    local kyv_bin
    kyv_bin=$(nice -n 19 bench/peers/build.sh kyverno-cli)
    # sigil, the testkit's Notary Project PKI and keyless images, from the
    # workspace's selection (the one make test builds, so nothing is rebuilt).
    nice -n 19 cargo build -q --workspace --bin sigil --example notation_pki --example keyless-images
    local target=${CARGO_TARGET_DIR:-$REPO/target}
    export DIFF_KYVERNO=$kyv_bin/kyverno-cli
    export DIFF_SIGIL=$target/debug/sigil
    export DIFF_NOTATION_PKI=$target/debug/examples/notation_pki
    export DIFF_KEYLESS_IMAGES=$target/debug/examples/keyless-images
    export DIFF_OUT=$out
    DIFF_COMMAND=bench/kyverno-differential.sh
    [[ $out == docs/kyverno-differential.md ]] || DIFF_COMMAND+=" --out $out"
    export DIFF_COMMAND
    e2e/registry-fixtures.sh -- bench/kyverno-differential.sh --inner
}

# Runs one tool with a deadline; writes its exit status, stdout and stderr.
run_tool() { # out-prefix command...
    local prefix=$1 rc=0
    shift
    timeout "$TOOL_TIMEOUT" "$@" </dev/null >"$prefix.stdout" 2>"$prefix.stderr" || rc=$?
    echo "$rc" >"$prefix.rc"
}

# A second Notary Project root and signing certificate, which no policy
# trusts, as the Notary Project's certificate profile asks (critical key
# usages; a leaf for code signing).
other_notary_pki() { # dir
    local d=$1
    openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out "$d/root.key"
    openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out "$d/leaf.key"
    openssl req -x509 -new -key "$d/root.key" -subj "/C=US/ST=WA/O=Other/CN=other root" -days 365 \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" \
        -out "$d/root.crt" 2>/dev/null
    openssl req -new -key "$d/leaf.key" -subj "/C=US/ST=WA/O=Other/CN=other signer" -out "$d/leaf.csr" 2>/dev/null
    printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
        "extendedKeyUsage=codeSigning" >"$d/leaf.ext"
    openssl x509 -req -in "$d/leaf.csr" -CA "$d/root.crt" -CAkey "$d/root.key" -CAcreateserial -days 30 \
        -extfile "$d/leaf.ext" -out "$d/leaf.crt" 2>/dev/null
    cat "$d/leaf.crt" "$d/root.crt" >"$d/chain.pem"
}

# e2e/lib.sh's push_image (a small one-layer image; prints its digest),
# within STEP_TIMEOUT.
push() { # registry repo tag content
    # shellcheck disable=SC2016 # expanded by the inner shell
    timeout "$STEP_TIMEOUT" bash -c '. e2e/lib.sh && push_image "$@"' push "$@"
}

# Pushes a small image to test/notary and signs it with notation-go; prints
# the reference. MOVED signs FROM's digest and hangs the signature on a new
# image, as if it had been copied there.
notary_image() { # name pki-dir format [-expiry D] | name pki-dir format moved-from-ref
    local name=$1 pki=$2 format=$3 digest manifest size media signed
    shift 3
    digest=$(push "$OLAREG" test/notary "$name" "kyverno-differential-$name")
    signed=$digest
    if [[ ${1:-} == *@sha256:* ]]; then
        signed=${1#*@}
        shift
    fi
    [[ $format == none ]] && { echo "$OLAREG/test/notary@$digest"; return; }
    manifest=$WORK/notary-$name.json
    timeout "$STEP_TIMEOUT" crane manifest --insecure "$OLAREG/test/notary@$signed" >"$manifest"
    size=$(stat -c %s "$manifest")
    media=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["mediaType"])' "$manifest")
    timeout "$STEP_TIMEOUT" "$NOTATION_SIGNER" -key "$pki/leaf.key" -chain "$pki/chain.pem" -format "$format" \
        -media-type "$media" -digest "$signed" -size "$size" "$@" >"$WORK/notary-$name.$format"
    timeout "$STEP_TIMEOUT" python3 "$HELPER" push-notation "$OLAREG" test/notary "$digest" \
        "$WORK/notary-$name.$format" "$format" "$pki/chain.pem" >/dev/null
    echo "$OLAREG/test/notary@$digest"
}

# Fixtures beyond e2e/registry-fixtures.sh's, appended to the fixture file:
# a tag reference, an unsigned image in a repository a policy skips, SLSA
# provenance from main in the legacy format, keyless images and the test
# Sigstore's roots and keys, and the Notary Project images.
extra_fixtures() { # fixture-file
    local fix=$1 keydir
    keydir=$(dirname "$KEY1")
    local skipped prov pki=$WORK/notary-pki other=$WORK/notary-other
    skipped=$(push "$OLAREG" test/skipped unsigned kyverno-differential-skipped)
    prov=$(push "$OLAREG" test/app prov-main-legacy kyverno-differential-prov-main-legacy)
    (cd "$keydir" && COSIGN_PASSWORD='' COSIGN_YES=true TUF_ROOT=$WORK/tuf HOME=$WORK/home \
        timeout "$STEP_TIMEOUT" cosign attest --key key1.key --use-signing-config=false --tlog-upload=false \
        --allow-insecure-registry --yes --new-bundle-format=false --predicate prov-main.json --type slsaprovenance1 \
        "$OLAREG/test/app@$prov" >/dev/null 2>&1) || die "cosign attest of the legacy provenance failed"
    timeout "$STEP_TIMEOUT" "$DIFF_KEYLESS_IMAGES" "$OLAREG" test/keyless "$WORK" >>"$fix"
    python3 "$HELPER" sigstore "$WORK/trusted_root.json" "$WORK/sigstore" >>"$fix"
    timeout "$STEP_TIMEOUT" "$DIFF_NOTATION_PKI" "$pki" >/dev/null
    mkdir -p "$other"
    other_notary_pki "$other"
    local jws
    jws=$(notary_image jws "$pki" jws)
    {
        echo "KYV_LEGACY_TAG=$OLAREG/test/app:legacy"
        echo "KYV_SKIPPED_UNSIGNED=$OLAREG/test/skipped@$skipped"
        echo "KYV_PROV_MAIN_LEGACY=$OLAREG/test/app@$prov"
        echo "NOTARY_ROOT=$pki/config/truststore/x509/ca/acme/root.crt"
        echo "KYV_NOTARY_JWS=$jws"
        echo "KYV_NOTARY_COSE=$(notary_image cose "$pki" cose)"
        echo "KYV_NOTARY_OTHER_ROOT=$(notary_image other-root "$other" jws)"
        echo "KYV_NOTARY_EXPIRED=$(notary_image expired "$pki" jws -expiry 1s)"
        echo "KYV_NOTARY_UNSIGNED=$(notary_image unsigned "$pki" none)"
        echo "KYV_NOTARY_MOVED=$(notary_image moved "$pki" jws "$jws")"
    } >>"$fix"
    # The expired signature's second passes before anyone judges it.
    sleep 2
}

inner() {
    [[ -n ${SIGIL_REGISTRY_FIXTURES:-} ]] || die "run as e2e/registry-fixtures.sh -- $0 --inner"
    local tool
    for tool in "$DIFF_KYVERNO" "$DIFF_SIGIL" "$DIFF_NOTATION_PKI" "$DIFF_KEYLESS_IMAGES"; do
        [[ -x $tool ]] || die "$tool is missing; run bench/kyverno-differential.sh without --inner"
    done
    NOTATION_SIGNER=$(command -v notation-signer) ||
        die "notation-signer is not on PATH (e2e/registry-fixtures.sh puts it there)"
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/sigil-kyverno-diff.XXXXXX")
    trap 'rm -rf -- "$WORK"' EXIT
    local fix=$WORK/fixtures.env
    cp -- "$SIGIL_REGISTRY_FIXTURES" "$fix"
    # shellcheck disable=SC1090
    . "$fix"
    mkdir -p "$WORK/tuf" "$WORK/home" "$WORK/docker" "$WORK/policies" "$WORK/pods"
    echo '{}' >"$WORK/docker/config.json"
    extra_fixtures "$fix"

    local results=$WORK/results.jsonl n=0
    : >"$results"
    local id source name ref setup kyv_policy sigil_input sigil_policy pod run rc sigil_args
    while IFS=$'\t' read -r id source name ref setup; do
        kyv_policy=$WORK/policies/$id.yaml
        sigil_input=$WORK/policies/$id.for-sigil.yaml
        sigil_policy=$WORK/policies/$id.sigil.yaml
        if [[ ! -f $kyv_policy ]]; then
            python3 "$HELPER" render "$CORPUS" "$id" "$fix" >"$kyv_policy"
            python3 "$HELPER" render-sigil "$CORPUS" "$id" "$fix" >"$sigil_input"
            # convert exits 3 when it warns and 1 when it leaves something
            # out; both are part of the result (the report quotes them, and
            # for a rewritten policy what convert said of the original).
            : >"$WORK/policies/$id.convert"
            [[ $setup != trust-root ]] ||
                "$DIFF_SIGIL" policy convert "$kyv_policy" 2>"$WORK/policies/$id.convert" >/dev/null || true
            rc=0
            "$DIFF_SIGIL" policy convert "$sigil_input" >"$sigil_policy" 2>>"$WORK/policies/$id.convert" || rc=$?
            ((rc == 0 || rc == 1 || rc == 3)) ||
                die "sigil policy convert of $id ($source) failed: $(cat "$WORK/policies/$id.convert")"
        fi
        n=$((n + 1))
        run=$WORK/run-$n
        pod=$WORK/pods/$n.yaml
        python3 "$HELPER" pod "$ref" >"$pod"
        run_tool "$run.kyverno" env HTTPS_PROXY="$NO_NETWORK_PROXY" HTTP_PROXY="$NO_NETWORK_PROXY" \
            NO_PROXY=127.0.0.1,localhost TUF_ROOT="$WORK/tuf" HOME="$WORK/home" DOCKER_CONFIG="$WORK/docker" \
            KUBECONFIG="$WORK/no-kubeconfig" \
            "$DIFF_KYVERNO" apply "$kyv_policy" --resource "$pod" --registry --audit-warn --remove-color
        # --no-match allow: Kyverno admits an image no rule selects, or only
        # Audit rules select; a migrant keeps that with noMatchPolicy: allow.
        sigil_args=(--no-match allow --policy "$sigil_policy" --insecure-registry "$OLAREG"
            --insecure-registry "$DOCKREG")
        # The test Sigstore as the cluster's default TrustRoot.
        [[ $setup != trust-root ]] ||
            sigil_args+=(--trust-root "difftest=$WORK/trusted_root.json" --default-trust-root difftest)
        run_tool "$run.sigil" env DOCKER_CONFIG="$WORK/docker" "$DIFF_SIGIL" policy test "${sigil_args[@]}" "$ref"
        python3 "$HELPER" record "$run" "$id" "$source" "$name" "$ref" "$WORK/policies/$id.convert" >>"$results"
        log "$n: $id × $name: kyverno exit $(<"$run.kyverno.rc"), sigil exit $(<"$run.sigil.rc")"
    done < <(python3 "$HELPER" pairs "$CORPUS" "$fix")

    local proxy_hits dirty=""
    proxy_hits=$(grep -c -e "proxyconnect" -e "${NO_NETWORK_PROXY#http://}" "$results" || true)
    git diff --quiet HEAD -- crates bench || dirty="+changes"
    python3 "$HELPER" meta "$DIFF_COMMAND" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
        "$(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)" \
        "$("$DIFF_SIGIL" --version | head -n1)" "$(git rev-parse --short HEAD)$dirty" \
        "$("$DIFF_KYVERNO" version 2>/dev/null | sed -n 's/^Version: *//p' | head -n1)" \
        "$NO_NETWORK_PROXY" "$proxy_hits" >"$WORK/meta.json"
    # Kept so that the report can be rendered again (--report) after the
    # reasons are written, from this run's verdicts.
    mkdir -p -- "$KEEP"
    rm -rf -- "$KEEP/policies"
    cp -r -- "$results" "$WORK/meta.json" "$WORK/policies" "$KEEP/"
    python3 "$HELPER" report "$CORPUS" "$REASONS" "$results" "$WORK/meta.json" >"$DIFF_OUT"
    log "$n pairs; wrote $DIFF_OUT"
}

if [[ ${1:-} == --inner ]]; then
    inner
else
    outer "$@"
fi
