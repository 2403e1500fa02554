#!/usr/bin/env bash
# The steps of a sigil release, as .github/workflows/release.yaml runs them
# for a tag and as the e2e node suite rehearses them against its local
# registry (e2e/release-rehearsal.sh): one script, so the rehearsal runs the
# workflow's own steps rather than a copy of them.
#
#   release.sh image              make image, pushed as $IMAGE:VERSION; prints IMAGE@DIGEST
#   release.sh sign REF           cosign sign the image REF (IMAGE@DIGEST)
#   release.sh attest REF         the SPDX SBOM and the SLSA v1 provenance of REF, each
#                                 a signed attestation (sbom.spdx.json, provenance.json,
#                                 crates.txt in the current directory), then cosign verify
#   release.sh chart REF          charts/sigil with REF's digest (and repository) in its
#                                 values, packaged as VERSION into dist/, pushed to
#                                 $CHARTS and signed; prints CHART@DIGEST
#   release.sh cli DIR            DIR/SHA256SUMS and DIR/sigil.krew.yaml of the
#                                 archives in DIR (scripts/release-cli.sh manifest),
#                                 each archive and SHA256SUMS signed into FILE.sigstore.json
#
# Environment: TAG (vMAJOR.MINOR.PATCH; VERSION is TAG without its v), IMAGE
# (the image repository), CHARTS (oci://HOST/PATH, for `chart`).
# How to sign: keyless by default, with the workflow's identity (GitHub's
# OIDC token for Fulcio, the bundle logged in Rekor). With
# SIGIL_RELEASE_KEY=FILE (a cosign key pair, FILE and FILE's .pub beside it;
# COSIGN_PASSWORD as cosign reads it) every signature is made with that key
# instead, and nothing is sent to a transparency log: what a machine that
# cannot reach Fulcio and Rekor does (the rehearsal). SIGIL_RELEASE_INSECURE=1:
# the registry speaks plain HTTP (cosign, crane and helm told so).
set -euo pipefail
REPO=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)

die() { printf 'release: error: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '7,18s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2; }

version() {
    case ${TAG:-} in
        v[0-9]*.[0-9]*.[0-9]*) printf '%s\n' "${TAG#v}" ;;
        *) die "TAG '${TAG:-}' is not vMAJOR.MINOR.PATCH" ;;
    esac
}

# The flags of each signing command, for the chosen way of signing.
KEY=${SIGIL_RELEASE_KEY:-}
sign_flags=(--yes)
verify_flags=()
if [[ -n $KEY ]]; then
    [[ -f $KEY && -f ${KEY%.key}.pub ]] || die "SIGIL_RELEASE_KEY=$KEY: need the key and ${KEY%.key}.pub beside it"
    sign_flags+=(--key "$KEY" --tlog-upload=false --use-signing-config=false)
    verify_flags+=(--key "${KEY%.key}.pub" --insecure-ignore-tlog)
else
    # The identity a tag push gives this workflow.
    verify_flags+=(--certificate-identity "https://github.com/${GITHUB_WORKFLOW_REF:?keyless signing runs in GitHub Actions}"
        --certificate-oidc-issuer https://token.actions.githubusercontent.com)
fi
# sign-blob signs a file: no registry flags.
blob_flags=("${sign_flags[@]}")
insecure_make=() insecure_helm=()
if [[ ${SIGIL_RELEASE_INSECURE:-} == 1 ]]; then
    sign_flags+=(--allow-insecure-registry)
    verify_flags+=(--allow-insecure-registry)
    insecure_make=(INSECURE=1)
    insecure_helm=(--plain-http)
fi

image() {
    (($# == 0)) || usage
    local digest
    : "${IMAGE:?IMAGE names the image repository}"
    version >/dev/null
    cd "$REPO"
    mkdir -p target && date -u +%Y-%m-%dT%H:%M:%SZ >target/release-started
    # One tag scheme: the git tag without its `v`, as the chart's appVersion.
    make image PUSH="$IMAGE:${TAG#v}" "${insecure_make[@]}" >&2
    digest=$(cat target/oci/sigil.digest)
    printf '%s@%s\n' "$IMAGE" "$digest"
}

sign() {
    (($# == 1)) || usage
    [[ $1 == *@sha256:* ]] || die "sign takes IMAGE@DIGEST, not $1"
    cosign sign "${sign_flags[@]}" "$1"
}

attest() {
    (($# == 1)) || usage
    local ref=$1 debs started
    [[ $ref == *@sha256:* ]] || die "attest takes IMAGE@DIGEST, not $ref"
    : "${IMAGE:?IMAGE names the image repository}"
    started=$(cat "$REPO/target/release-started" 2>/dev/null) || die "no target/release-started: run release.sh image first"
    (cd "$REPO" && cargo tree --locked -e normal,no-proc-macro --prefix none -f '{p}' \
        -p sigil-webhook -p sigil-audit -p sigil-controller -p sigil-cli) >crates.txt
    "$REPO/scripts/build-cue-wasm.sh" --modules >go-modules.txt
    SOURCE_DATE_EPOCH=$(git -C "$REPO" log -1 --format=%ct) python3 "$REPO/scripts/sbom.py" \
        --layout "$REPO/target/oci/sigil" --crates crates.txt --go-modules go-modules.txt \
        --name "$IMAGE" --version "$(version)" >sbom.spdx.json
    debs=$("$REPO/scripts/fetch-debs.sh" libc6 libgcc-s1 ca-certificates base-files)
    python3 "$REPO/scripts/provenance.py" --debs "$debs" --started "$started" \
        --finished "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >provenance.json
    cosign attest "${sign_flags[@]}" --type spdxjson --predicate sbom.spdx.json "$ref"
    cosign attest "${sign_flags[@]}" --type slsaprovenance1 --predicate provenance.json "$ref"
    cosign verify "${verify_flags[@]}" "$ref" >/dev/null
}

chart() {
    (($# == 1)) || usage
    local ref=$1 v repository digest stage chart_digest
    [[ $ref == *@sha256:* ]] || die "chart takes IMAGE@DIGEST, not $ref"
    : "${CHARTS:?CHARTS names the chart repository (oci://HOST/PATH)}"
    v=$(version)
    repository=${ref%@*} digest=${ref#*@}
    # The chart is edited in a copy: a checkout (the rehearsal's) stays as it is.
    stage=$(mktemp -d "${TMPDIR:-/tmp}/sigil-release-chart.XXXXXX")
    # shellcheck disable=SC2064 # expand now: the trap runs after this function
    trap "rm -rf -- '$stage'" EXIT
    cp -R "$REPO/charts/sigil" "$stage/sigil"
    sed -i -e "s|^  repository: .*|  repository: $repository|" \
        -e "s|^  digest: \"\"|  digest: \"$digest\"|" "$stage/sigil/values.yaml"
    if ! grep -q "^  repository: $repository\$" "$stage/sigil/values.yaml" ||
        ! grep -q "^  digest: \"$digest\"\$" "$stage/sigil/values.yaml"; then
        die "could not pin $ref in the chart's values.yaml"
    fi
    mkdir -p dist
    helm package "$stage/sigil" --version "$v" --app-version "$v" --destination dist >&2
    helm push "${insecure_helm[@]}" "dist/sigil-$v.tgz" "$CHARTS" >push.log 2>&1 ||
        { cat push.log >&2; die "helm push dist/sigil-$v.tgz $CHARTS failed"; }
    cat push.log >&2
    chart_digest=$(sed -n 's/^Digest: //p' push.log)
    [[ -n $chart_digest ]] || die "helm push named no digest"
    cosign sign "${sign_flags[@]}" "${CHARTS#oci://}/sigil@$chart_digest"
    printf '%s/sigil@%s\n' "${CHARTS#oci://}" "$chart_digest"
}

cli() {
    (($# == 1)) || usage
    local dir=$1 f
    "$REPO/scripts/release-cli.sh" manifest "$TAG" "$dir" >/dev/null
    for f in "$dir"/sigil-*.tar.gz "$dir/SHA256SUMS"; do
        cosign sign-blob "${blob_flags[@]}" --bundle "$f.sigstore.json" "$f" >/dev/null
    done
}

(($# >= 1)) || usage
command=$1
shift
case $command in
    image | sign | attest | chart | cli) "$command" "$@" ;;
    *) usage ;;
esac
